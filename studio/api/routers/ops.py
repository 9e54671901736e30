"""Operations: ``GET /v1/health`` (liveness and the queue at a glance)."""

from __future__ import annotations

import time

from fastapi import APIRouter

from studio import __version__
from studio.api.models import Health, errors
from studio.api.state import State

router = APIRouter(tags=["server"])


@router.get(
    "/v1/health",
    operation_id="health",
    response_model=Health,
    responses=errors(),
    summary="Is the server up; what is queued and running",
)
def health(st: State) -> dict:
    jobs = st.queue.list()
    return {
        "ok": True,
        "version": __version__,
        "uptime_s": round(time.time() - st.started, 1),
        "queued": sum(j.state == "queued" for j in jobs),
        "running": st.queue.running_job_id,
        "warm_engines": len(st.pool.warm()),
        "max_queued": st.opts.max_queued,
        "max_upload_mb": st.opts.max_upload_mb,
    }

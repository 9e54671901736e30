"""Operations: ``GET /v1/health`` (liveness), ``GET /v1/ready`` (can it render now), ``GET /metrics``,
``GET /v1/scheduler`` (the lanes' and clients' counters, and the engine calls' batches).

Ready means ready: 503 with what the server is doing and ``Retry-After`` until the engines it
serves are loaded and warm (``studio.api.warmup``), then 200. The two probes answer without the
token when the server allows it (``--open-probes``, on by default on loopback); such an answer says
nothing about jobs."""

from __future__ import annotations

import os
import shutil
import time
import uuid
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from studio import __version__
from studio.api.models import errors
from studio.api.route import Route
from studio.api.server_models import Health, Ready, SchedulerState
from studio.api.state import ApiState, State

router = APIRouter(tags=["server"], route_class=Route)

MIN_FREE_BYTES = 512 * 2**20  # a render needs room for its file and its temporaries


@router.get("/v1/health", response_model=Health, responses=errors())
def health(st: State, request: Request) -> dict:
    """Is the server up (liveness); what is queued and running"""
    if anonymous(request):  # a probe without the token: alive, and nothing about jobs
        return {"ok": True, "version": __version__, "uptime_s": round(time.time() - st.started, 1)}
    from studio.api.clients import sees

    jobs = [j for j in st.queue.list() if sees(j)]  # a named client: only its own jobs
    running = st.queue.running_job_id
    return {
        "ok": True,
        "version": __version__,
        "uptime_s": round(time.time() - st.started, 1),
        "queued": sum(j.state == "queued" for j in jobs),
        "running": running if any(j.id == running for j in jobs) else None,
        "warm_engines": len(st.pool.warm()),
        "max_queued": st.opts.max_queued,
        "max_upload_mb": st.opts.max_upload_mb,
    }


@router.get("/v1/ready", response_model=Ready, responses=errors(503))
async def ready(st: State, request: Request):
    """Can this server render now: an engine, the device, a writable data folder, the queue runner"""
    w = st.warmup
    if w is not None and not w.ready:  # the engines are loading: say what, and when to ask again
        text = st.public_text(w.status())
        return JSONResponse({"error": f"not ready ({text})"}, status_code=503, headers={"Retry-After": "2"})
    checks = await run_in_threadpool(readiness, st)
    failed = [c for c in checks if not c["ok"]]
    if failed:
        text = st.public_text("; ".join(f"{c['name']}: {c['detail']}" for c in failed))
        return JSONResponse({"error": f"not ready ({text})"}, status_code=503, headers={"Retry-After": "10"})
    return {"ready": True, "checks": checks}


def anonymous(request: Request) -> bool:
    """The request came without the token (a probe the guard let through)."""
    return bool(request.scope.get("studio_anonymous"))


def readiness(st: ApiState) -> list[dict]:
    out = []

    def check(name: str, fn) -> None:
        try:
            detail = fn()
            out.append({"name": name, "ok": True, "detail": detail})
        except Exception as exc:  # noqa: BLE001 - every failure is a reason, said in one line
            out.append({"name": name, "ok": False, "detail": str(exc) or type(exc).__name__})

    check("engine", lambda: _engine(st))
    check("device", _device)
    check("data folder", _data_folder)
    check("queue", lambda: _queue(st))
    return out


def _engine(st: ApiState) -> str:
    from studio.core.engines.selection import engine_status

    ready = [a for a in engine_status().values() if a.ready]
    if not ready:
        raise RuntimeError("no engine can run here")
    text = ", ".join(f"{a.name} ({a.reason})" for a in ready)
    w = st.warmup
    if w is not None and w.seconds is not None:
        warm = ", ".join(f"{e['engine']} on {e['device']}" for e in st.pool.warm())
        text += f"; warm: {warm or 'none'} (warmed in {w.seconds:.1f} s)"
    return text


def _device() -> str:
    import torch

    if torch.cuda.is_available():
        return f"cuda ({torch.cuda.device_count()} GPU(s): {torch.cuda.get_device_name(0)})"
    return f"cpu ({os.cpu_count()} cores; no CUDA GPU)"


def _data_folder() -> str:
    from studio.core.env import data_dir
    from studio.service.retention import OWNED

    folders = [data_dir() / name for name in OWNED]
    for folder in folders:
        if not folder.is_dir():
            raise RuntimeError(f"its {folder.name}/ is not a folder")
        probe = folder / f".ready-{uuid.uuid4().hex}.tmp"
        try:
            probe.write_bytes(b"ok")
        except OSError as exc:
            raise RuntimeError(f"its {folder.name}/ cannot be written ({exc.strerror or exc})") from None
        finally:
            probe.unlink(missing_ok=True)
    free = shutil.disk_usage(folders[0]).free
    if free < MIN_FREE_BYTES:
        raise RuntimeError(f"only {free / 2**20:.0f} MB free; a render needs at least {MIN_FREE_BYTES >> 20} MB")
    return f"writable, {free / 2**30:.1f} GB free"


def _queue(st: ApiState) -> str:
    st.queue.list()  # jobs.sqlite readable
    if not st.queue.started:
        raise RuntimeError("the queue runner is not running")
    return "jobs.sqlite readable, runner started"


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {
            "description": "Prometheus' text format, or OpenMetrics when the scraper asks (names start with studio_)",
            "content": {
                "text/plain": {"schema": {"type": "string"}},
                "application/openmetrics-text": {"schema": {"type": "string"}},
            },
        },
        **errors(),
    },
)
def metrics(st: State, request: Request):
    """Metrics for Prometheus: jobs by state, render seconds, frames/s, queue depth, uploads, GPU memory"""
    body, kind = st.metrics.render(request.headers.get("accept"))
    return Response(body, headers={"Content-Type": kind})


@router.get("/v1/scheduler", response_model=SchedulerState, responses=errors(422))
def scheduler(
    st: State,
    since: Annotated[
        float | None, Query(ge=0, le=1e12, description="only the batches served after this (the server's `now`)")
    ] = None,
) -> dict:
    """The scheduler's counters: frames served per client and lane, weights, and the recent batches"""
    return st.scheduler.snapshot(since=since)

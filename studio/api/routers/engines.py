"""``GET /v1/engines``: which engines can run here, which ``auto`` picks, which are warm."""

from __future__ import annotations

from fastapi import APIRouter

from studio.api.models import errors
from studio.api.route import Route
from studio.api.server_models import Engines
from studio.api.state import State

router = APIRouter(tags=["server"], route_class=Route)


@router.get("/v1/engines", response_model=Engines, responses=errors())
def list_engines(st: State) -> dict:
    """Which engines can run here, which auto picks, which are warm"""
    from studio.core.engines import auto_engine, engine_status

    status = engine_status()
    return {
        "auto": auto_engine(status),
        "engines": [{"name": k, "ready": v.ready, "detail": str(v)} for k, v in status.items()],
        "warm": st.pool.warm(),
    }

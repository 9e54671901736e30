"""``GET /v1/farm``: the Ray farm of ``studio serve --farm`` (nodes, render actors, jobs in flight, frames/s).

The answer is the dispatcher's ``status()`` (``studio.service.farm_dispatch``) with two figures added:
the nodes alive and the actors' frames/s together. It needs the server's token (or the read token, or
a named client that sees every job, as ``/metrics``): it lists every client's jobs in flight. A server
started without ``--farm`` answers 409 with one sentence.
"""

from __future__ import annotations

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from studio.api.errors import ApiError
from studio.api.models import errors
from studio.api.route import Route
from studio.api.server_models import Farm
from studio.api.state import State

router = APIRouter(tags=["server"], route_class=Route)

NO_FARM = "this server does not render on a farm: start it with `studio serve --farm [HOST:PORT]`"


@router.get("/v1/farm", response_model=Farm, responses=errors(409))
async def farm_status(st: State) -> dict:
    """The farm's nodes and render actors: devices, warm engines, jobs in flight, frames/s"""
    dispatcher = st.farm  # the FarmDispatcher of --farm (None without)
    if dispatcher is None:
        raise ApiError(409, NO_FARM)
    return farm_answer(await run_in_threadpool(dispatcher.status))


def farm_answer(status: dict) -> dict:
    """The dispatcher's status with the nodes alive and the live actors' frames/s together."""
    live = [a for a in status.get("actors", []) if a.get("state") != "dead"]
    return {
        **status,
        "nodes_alive": sum(1 for n in status.get("nodes", []) if n.get("alive")),
        "frames_per_s": round(sum(float(a.get("frames_per_s") or 0) for a in live), 2),
    }

"""``placement: farm`` on ``studio serve --farm``: one long clip split in chunks over the farm's actors.

    result, extra = yield from chunked_on_actors(render, request)     # in ``Render._actor_chunks``

The chunks run on the same warm actors that render whole jobs (a ``ServeWorker`` is the farm's chunk
worker): the job takes a slot on every actor with one free when it starts (at least one, waited
for), and core's ``Farm`` (``core.scale.farm``) cuts the clip, sends each chunk to a free one of them,
retries a chunk whose actor died on another, and joins the segments here on the head with the audio
muxed once (the output claimed as every render's is).
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator
from typing import Any


def chunked_on_actors(render, req) -> Generator[Any, None, tuple]:
    """Yields ``RenderProgress``; returns ``(RenderResult, extra)`` (``extra``: the actors it ran on)."""
    import ray

    from studio.core.scale.farm import Farm
    from studio.service.driver import farm_render

    d = render.dispatcher
    actors = d.reserve_all(render.job_id, 0, render._cancel)
    farm = Farm(actors={a.name: a.handle for a in actors}, gpus=any(a.device == "cuda" for a in actors))
    render._active = farm
    try:
        if render.cancelled:
            farm.cancel()
        render._started(f"farm: {len(actors)} actor{'s' if len(actors) != 1 else ''} in chunks", req.settings.engine)
        yield from farm_render(farm, req)
    finally:
        with contextlib.suppress(Exception):
            ray.kill(farm._board)
        d.release(render.job_id)
    extra = dict(farm=dict(actors=[a.name for a in actors], chunks=True, retries=farm.retries, returned="joined"))
    return farm.result, extra

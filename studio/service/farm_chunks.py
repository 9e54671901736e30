"""``placement: farm`` on ``studio serve --farm``: one long clip in chunks over several replicas.

    job = dispatcher.chunked(job_id, request, cancel_event)      # in ``Render._actor_chunks``
    for p in job.run(on_started): ...                            # RenderProgress
    job.result, job.extra                                        # the joined file; the replicas it ran on

The same replicas that render whole jobs render the chunks: the job reserves a slot on every replica
with one free when it starts (at least one, waited for) through the dispatcher's router, and core's
``Farm`` on that same dispatcher cuts the clip, sends each chunk to one of them (the replicas' one
task protocol), retries a chunk whose replica died on another, fetches each segment in checked
pieces and joins them here on the head with the audio muxed once (the output claimed as every
render's is).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any


class ChunkedFarmJob:
    """One ``placement: farm`` job of the queue on the farm's replicas."""

    def __init__(self, dispatcher, job_id: int, request, cancel: threading.Event):
        from studio.core.scale.farm import Farm

        self.request, self.cancelled = request, cancel
        self.farm = Farm(dispatcher, job_id=job_id)
        self.result: Any = None
        self.extra: dict = {}

    def cancel(self) -> None:
        self.cancelled.set()
        self.farm.cancel()

    def run(self, on_started: Callable[[str], None]) -> Iterator:
        f, req = self.farm, self.request
        if self.cancelled.is_set():
            f.cancel()
        n = len(f.dispatcher.router.reserve_many(f.job_id, 0, self.cancelled))
        on_started(f"farm: {n} actor{'s' if n != 1 else ''} in chunks")
        s = req.render_settings
        yield from f.render(
            req.avatar, req.audio, req.output, s, chunks=req.placement.chunks or None, overwrite=req.overwrite
        )
        self.result = f.result
        self.extra = dict(farm=dict(actors=f.reserved, chunks=True, retries=f.retries, returned="joined"))

"""One whole job of ``studio serve --farm``'s queue on a replica: ``FarmJob`` (``FarmDispatcher.job``).

    job = dispatcher.job(job_id, request, cancel_event)
    for p in job.run(on_started): ...        # RenderProgress from the replica, about four times a second
    job.result, job.extra                    # a RenderResult with the head's path; where it ran
    job.cancel()                             # any thread: the replica stops after its batch

The job runs on the replica the queue reserved for it (else it waits for one, through the router);
it is one task of the replicas' one protocol (``core.scale.dispatch.TaskCall``): its progress is what
the controller last read from that replica, a cancel is the replica's one cancel, and its file comes
back in checked pieces into a temporary beside the output, claimed under the output's name
(``fsutil.atomic_output``, as every local render's) only once its size and SHA-256 match; a replica
whose file went straight to the head's shared folder sends nothing. A replica that goes away
(process killed, node lost, a file that stops coming or arrives damaged) costs the job one attempt:
it renders once more on another replica, and a second loss fails it with one sentence. Nothing
half-written stays on the head: the temporary goes with the failed attempt.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from studio.core.errors import RenderError
from studio.core.scale.dispatch import Lost, TaskCall

if TYPE_CHECKING:
    from studio.core.scale.controller import Actor
    from studio.service.farm_dispatch import FarmDispatcher

log = logging.getLogger(__name__)

ATTEMPTS = 2  # a job is rendered at most this often when its replicas are lost


class FarmJob:
    """One job of the queue on the farm: reserve, run, follow, fetch its file, retry once when lost."""

    def __init__(self, dispatcher: FarmDispatcher, job_id: int, request, cancel: threading.Event):
        self.d, self.job_id, self.request, self.cancelled = dispatcher, job_id, request, cancel
        self.result: Any = None  # a RenderResult once done
        self.extra: dict = {}
        self.call: TaskCall | None = None

    def cancel(self) -> None:
        self.cancelled.set()
        call = self.call
        if call is not None:
            call.cancel()

    def run(self, on_started: Callable[[str], None]) -> Iterator:
        """Yields ``RenderProgress``; ``self.result`` (a ``RenderResult`` with the head's path) at the end."""
        from studio.core.render.results import RenderProgress

        task, frames = self.spec()
        router = self.d.router
        t0 = time.perf_counter()
        tried: list[str] = []
        lost = ""
        try:
            for attempt in range(1, ATTEMPTS + 1):
                actor = router.actor_of(self.job_id) or router.wait_reserve(
                    self.job_id, frames, tuple(tried), self.cancelled
                )
                on_started(f"farm: {actor.name} on {actor.host or actor.node[:8]}")
                try:
                    out, in_flight = yield from self._attempt(actor, task, frames, t0, attempt)
                except Lost as exc:
                    lost = str(exc)
                    log.warning("farm: job %d lost its replica %s (%s)", self.job_id, actor.name, exc)
                    tried.append(actor.name)
                    router.release(self.job_id)
                    continue
                self.extra = dict(
                    farm=dict(
                        actor=actor.name,
                        node=actor.node,
                        host=actor.host,
                        attempts=attempt,
                        lost=tried,
                        in_flight_at_start=in_flight,
                        returned="in place" if out["shared"] else "streamed",
                        sha256=out["sha256"],
                        bytes=out["size"],
                    )
                )
                self.result = out["result"]
                yield RenderProgress.final(self.result, time.perf_counter() - t0, retries=attempt - 1)
                return
        finally:
            router.release(self.job_id)
        raise RenderError(
            f"The job failed twice as its farm workers were lost (last: {lost}); check the farm's nodes "
            "with `studio farm status` and retry it."
        )

    def spec(self) -> tuple[dict, int]:
        """The task as a replica gets it (its inputs in the object store), and its frames."""
        from studio.core.avatars.library import resolve
        from studio.core.media.audio import probe

        req = self.request
        assets = req.avatar if hasattr(req.avatar, "frames") else resolve(req.avatar)
        frames = (
            req.frames[1] - req.frames[0] if req.frames else probe(req.audio).frames_at(req.output_rate)
        )  # the rate the request resolved
        task = dict(
            self.d.inputs(assets, req.audio),
            settings=req.render_settings,
            frames=req.frames,
            output=req.output,
            overwrite=req.overwrite,
            share=self.d.share if inside_data(req.output) else None,
        )
        return task, int(frames)

    def _attempt(self, actor: Actor, task: dict, frames: int, t0: float, attempt: int):
        from studio.core.render.results import RenderProgress
        from studio.core.store.fsutil import atomic_output

        call = self.call = self.d.call(actor, self.job_id, task, frames)
        if self.cancelled.is_set():
            call.cancel()
        shown = -1
        try:
            while not call.ended(timeout=0.25):
                if call.lost:
                    raise Lost("its node or process went away")
                if self.cancelled.is_set():
                    call.cancel()
                done, total, fps, _ = call.progress()
                if done != shown:
                    shown = done
                    p = RenderProgress.measured(
                        done, total or frames, time.perf_counter() - t0, workers={actor.name: round(fps, 2)}
                    )
                    yield replace(p, retries=attempt - 1)
            out = call.outcome()
            if not out["shared"]:
                req = self.request
                with atomic_output(req.output, overwrite=req.overwrite) as o:
                    call.fetch(out, o.tmp, self.cancelled)
                assert o.final is not None
                out["result"] = replace(out["result"], output=str(o.final))
            return out, call.in_flight
        finally:
            self.call = None
            call.close()


def inside_data(path: str) -> bool:
    """Whether ``path`` is in the head's data folder (a replica that shares it writes there in place)."""
    from studio.core.env import data_dir
    from studio.core.store.files import inside

    return inside(path, data_dir())

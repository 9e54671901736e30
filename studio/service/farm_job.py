"""One job of ``studio serve --farm``'s queue on an actor: ``FarmJob`` (made by ``FarmDispatcher.job``).

    job = dispatcher.job(job_id, request, cancel_event)
    for p in job.run(on_started): ...        # RenderProgress from the worker, about four times a second
    job.result, job.extra                    # a RenderResult with the head's path; where it ran
    job.cancel()                             # any thread: the worker stops after its batch

The job runs on the actor the queue reserved for it (else it waits for one); its progress is what
the dispatcher's monitor last read from that actor. The finished file comes back in pieces into a
temporary beside the output, claimed under the output's name (``fsutil.atomic_output``, as every
local render's) only once its size and SHA-256 match what the worker measured; a worker whose file
went straight to the head's shared folder sends nothing. An actor that goes away (process killed,
node lost, a file that stops coming or arrives damaged) costs the job one attempt: it renders once
more on another actor, and a second loss fails it with one sentence. Nothing half-written stays
on the head: the temporary goes with the failed attempt.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from studio.core.errors import Cancelled, RenderError, StudioError

if TYPE_CHECKING:
    from studio.service.farm_dispatch import FarmDispatcher, _Actor

log = logging.getLogger(__name__)

ATTEMPTS = 2  # a job is rendered at most this often when its actors are lost
POLL_S = 0.25
READ_TIMEOUT_S = 120.0


class _Lost(Exception):
    """The actor running a job went away (process killed, node lost, no answer)."""


class FarmJob:
    """One job of the queue on the farm: reserve, run, follow, fetch its file, retry once when lost."""

    def __init__(self, dispatcher: FarmDispatcher, job_id: int, request, cancel: threading.Event):
        self.d, self.job_id, self.request, self._cancel = dispatcher, job_id, request, cancel
        self.result: Any = None  # a RenderResult once done
        self.extra: dict = {}
        self._running: tuple[_Actor, str] | None = None

    def cancel(self) -> None:
        self._cancel.set()
        run = self._running
        if run is not None:
            with contextlib.suppress(Exception):
                run[0].handle.cancel_job.remote(run[1])

    def run(self, on_started: Callable[[str], None]) -> Iterator:
        """Yields ``RenderProgress``; ``self.result`` (a ``RenderResult`` with the head's path) at the end."""
        from studio.core.render.results import RenderProgress

        spec, frames = self.d.spec(self.request)
        t0 = time.perf_counter()
        tried: list[str] = []
        lost = ""
        try:
            for attempt in range(1, ATTEMPTS + 1):
                actor = self.d.actor_of(self.job_id) or self.d.wait_reserve(
                    self.job_id, frames, tuple(tried), self._cancel
                )
                with self.d._lock:
                    actor.jobs[self.job_id] = frames
                    in_flight = len(actor.jobs)
                on_started(f"farm: {actor.name} on {actor.host or actor.node[:8]}")
                try:
                    out = yield from self._attempt(actor, spec, frames, t0, attempt)
                except _Lost as exc:
                    lost = str(exc)
                    log.warning("farm: job %d lost its actor %s (%s)", self.job_id, actor.name, exc)
                    tried.append(actor.name)
                    self.d.release(self.job_id)
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
            self.d.release(self.job_id)
        raise RenderError(
            f"The job failed twice as its farm workers were lost (last: {lost}); check the farm's nodes "
            "with `studio farm status` and retry it."
        )

    def _attempt(self, actor: _Actor, spec: dict, frames: int, t0: float, attempt: int):
        import ray

        from studio.core.render.results import RenderProgress

        key = uuid.uuid4().hex
        with self.d._lock:
            actor.keys[key] = self.job_id
        job = dict(spec, key=key)
        self._running = (actor, key)
        ref = actor.handle.run_job.remote(job)
        if self._cancel.is_set():
            self.cancel()
        shown = -1
        try:
            while True:
                ready, _ = ray.wait([ref], timeout=POLL_S)
                if ready:
                    break
                if actor.state == "dead":
                    raise _Lost("its node or process went away")
                if self._cancel.is_set():
                    self.cancel()
                done, total, fps = actor.progress.get(key, (0, frames, 0.0))[:3]
                if done != shown:
                    shown = done
                    elapsed = time.perf_counter() - t0
                    p = RenderProgress.measured(done, total or frames, elapsed, workers={actor.name: round(fps, 2)})
                    yield replace(p, retries=attempt - 1)
            try:
                out = ray.get(ref)
            except ray.exceptions.RayTaskError as exc:
                cause = getattr(exc, "cause", None)
                if isinstance(cause, StudioError):
                    raise cause from None
                raise RenderError(f"The job failed on farm worker {actor.name}: {cause or exc}.") from exc
            except _lost_errors() as exc:
                raise _Lost(type(exc).__name__) from exc
            if not out["shared"]:
                final = self._fetch(actor, key, out)
                out["result"] = replace(out["result"], output=str(final))
            return out
        finally:
            self._running = None
            if ray.is_initialized():
                with contextlib.suppress(Exception):
                    actor.handle.discard.remote(key)
            with self.d._lock:
                actor.keys.pop(key, None)

    def _fetch(self, actor: _Actor, key: str, out: dict) -> Path:
        """The worker's file, in pieces, into a temporary claimed under the output's name once its
        size and SHA-256 match (a damaged transfer writes nothing and counts as a lost actor)."""
        import ray

        from studio.core.scale.serve_worker import READ_CHUNK
        from studio.core.store.fsutil import atomic_output

        req = self.request
        h = hashlib.sha256()
        n = 0
        gone: tuple[type[BaseException], ...] = (*_lost_errors(), ray.exceptions.GetTimeoutError)
        with atomic_output(req.output, overwrite=req.overwrite) as o:
            with open(o.tmp, "wb") as fh:
                while True:
                    if self._cancel.is_set():
                        raise Cancelled("render cancelled; nothing was written")
                    try:
                        data = ray.get(actor.handle.read.remote(key, n, READ_CHUNK), timeout=READ_TIMEOUT_S)
                    except gone as exc:
                        raise _Lost(f"the file stopped coming ({type(exc).__name__})") from exc
                    if not data:
                        break
                    fh.write(data)
                    h.update(data)
                    n += len(data)
            if n != out["size"] or h.hexdigest() != out["sha256"]:
                raise _Lost(f"the file arrived damaged ({n} of {out['size']} bytes, SHA-256 differs)")
        assert o.final is not None
        return o.final


def _lost_errors() -> tuple[type[BaseException], ...]:
    import ray

    e = ray.exceptions
    return tuple(
        getattr(e, n)
        for n in ("RayActorError", "WorkerCrashedError", "NodeDiedError", "ObjectLostError", "OwnerDiedError")
        if hasattr(e, n)
    )

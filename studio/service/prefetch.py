"""The next jobs prepared while the current batches run: ``Prefetcher``.

While the device renders, the jobs that will be claimed next (the scheduler's order: ``upcoming``)
get their renderer made on the warm engine and made ready on a ``studio-prefetch`` thread: the
voice-over decoded and planned, the engine's audio features (whisper) computed, the avatar prepared
and uploaded, the compositor's frames on the device. When the runner claims such a job it takes the
ready renderer (``take``), so the job's first batch does not wait for any of it; a job being prepared
when it is claimed is waited for (never prepared twice).

Bounded: at most ``limit`` jobs are prepared ahead (``STUDIO_PREFETCH_JOBS``, default 2; 0: off),
one at a time. A prepared job that is no longer among the next ``limit`` (cancelled, held, moved,
overtaken by a higher lane) is dropped: its engine view closed and the engine's hold released, so
its memory goes as it would after a render. A job whose request differs when it is claimed (another
device) is dropped too and prepared by its own thread, as without a prefetcher.

    ahead = Prefetcher(pool, upcoming, request_for, ticket_for, limit=2)
    ahead.start(); ahead.poke()                       # the queue changed: look again
    renderer, waited_s = ahead.take(job_id, request, cancelled)   # (None, 0.0): not prepared ahead
    ahead.stop()                                      # everything prepared is dropped

The tests hold a preparation with ``$STUDIO_TEST_HOLD`` + ``.prefetch`` (``studio.core.hold``), after
its renderer is made and before it is made ready.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("studio.service.queue")

PREFETCH_JOBS = 2  # jobs prepared ahead at most (``STUDIO_PREFETCH_JOBS``)


def prefetch_limit() -> int:
    from studio.core import env

    return max(0, env.get_int("STUDIO_PREFETCH_JOBS", PREFETCH_JOBS))


@dataclass(eq=False)
class _Ahead:
    job_id: int
    key: tuple = ()
    renderer: Any = None
    error: BaseException | None = None
    seconds: float = 0.0
    dropped: bool = False
    done: threading.Event = field(default_factory=threading.Event)
    stop: threading.Event = field(default_factory=threading.Event)


def _key(req) -> tuple:
    return (str(req.avatar), str(req.audio), req.render_settings, req.frames)


class Prefetcher:
    """Prepares the next ``limit`` queued jobs' renderers ahead of their claim (one thread)."""

    def __init__(
        self,
        pool: Any,
        upcoming: Callable[[int], tuple[list, int]],
        request_for: Callable[[Any], Any],
        ticket_for: Callable[[Any], Any] = lambda job: None,
        *,
        limit: int = PREFETCH_JOBS,
    ):
        self.pool = pool
        #: ``upcoming(n)``: the next queued jobs in claim order, the first ``k`` of them claimed at once
        #: (a slot is free), then ``n`` more; and ``k``
        self._upcoming = upcoming
        self._request_for = request_for  # a job's RenderRequest as the runner will run it; None: not local
        self._ticket_for = ticket_for
        self.limit = max(0, int(limit))
        self._cond = threading.Condition()
        self._ahead: dict[int, _Ahead] = {}
        self._poked = False
        self._stopped = True
        self._thread: threading.Thread | None = None
        #: jobs prepared ahead, taken by their run, and dropped unused (what the tests count)
        self.prepared = self.taken = self.dropped = 0

    # ---- the runner's side ----------------------------------------------------------------

    def start(self) -> None:
        with self._cond:
            if self.limit <= 0 or (self._thread is not None and self._thread.is_alive()):
                return
            self._stopped = False
            self._thread = threading.Thread(target=self._loop, name="studio-prefetch", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop preparing and drop everything prepared (its memory released)."""
        with self._cond:
            self._stopped = True
            ahead, self._ahead = list(self._ahead.values()), {}
            self._cond.notify_all()
        for a in ahead:
            self._drop(a)

    def ahead(self) -> list[int]:
        """The jobs prepared ahead or being prepared now (at most ``limit``)."""
        with self._cond:
            return list(self._ahead)

    def poke(self) -> None:
        """The queue changed (a job added, claimed, ended): look at the next jobs again."""
        with self._cond:
            self._poked = True
            self._cond.notify_all()

    def take(self, job_id: int, request: Any, cancelled: Callable[[], bool] = lambda: False) -> tuple[Any, float]:
        """``job_id``'s ready renderer for ``request`` and the seconds waited for it (a preparation on
        its way is finished first); ``(None, waited)`` when it was not prepared ahead or differs."""
        with self._cond:
            a = self._ahead.pop(job_id, None)
        if a is None:
            return None, 0.0
        t0 = time.monotonic()
        while not a.done.wait(0.05):
            if cancelled():
                a.stop.set()
        waited = round(time.monotonic() - t0, 4)
        self.poke()  # the next job's turn
        if a.renderer is None or a.error is not None or a.key != _key(request) or a.stop.is_set():
            self._drop(a)
            return None, waited
        self.taken += 1
        return a.renderer, waited

    # ---- the thread ------------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._poked and not self._stopped:
                    if not self._cond.wait(0.5):
                        break  # another process may have queued a job: look now and then
                if self._stopped:
                    return
                self._poked = False
            try:
                jobs, now = self._upcoming(self.limit)
            except Exception:
                log.warning("prefetch: reading the queue failed", exc_info=True)
                continue
            want = {j.id for j in jobs}
            with self._cond:
                stale = [a for i, a in self._ahead.items() if i not in want]
                for a in stale:
                    del self._ahead[a.job_id]
                # the first ``now`` are claimed at once (a slot is free): their own thread prepares them
                job = next((j for j in jobs[now:] if j.id not in self._ahead), None)
                if job is not None and len(self._ahead) < self.limit and not self._stopped:
                    a = self._ahead[job.id] = _Ahead(job.id)
                else:
                    job = None
            for s in stale:
                self._drop(s)
            if job is not None:
                self._prepare(a, job)
                self.poke()  # the next one, if there is room

    def _prepare(self, a: _Ahead, job: Any) -> None:
        from studio.core.cancel import stop_when
        from studio.core.hold import hold

        t0 = time.perf_counter()
        try:
            req = self._request_for(job)
            if req is None:  # not rendered here: nothing to prepare
                return
            a.key = _key(req)
            kw: dict[str, Any] = {"slot": 0, "hold": True} if hasattr(self.pool, "release") else {}
            ticket = self._ticket_for(job)
            if ticket is not None:
                kw["ticket"] = ticket
            r = self.pool.renderer(req.avatar, req.audio, req.render_settings, **kw)
            a.renderer = r
            hold(a.stop.is_set, "prefetch")  # the tests' hold (off unless $STUDIO_TEST_HOLD is set)
            with stop_when(a.stop.is_set):
                r.focus(req.frames)
                _ = r.plan  # the voice-over decoded and planned
                # a shared engine (no batcher) is bound per batch under its lock: binding this clip's
                # features outside it would race the running job's batch
                with r.engine_lock or contextlib.nullcontext():
                    r.ready()  # audio features, the prepared avatar, the compositor's frames on the device
            a.seconds = round(time.perf_counter() - t0, 4)
            self.prepared += 1
        except BaseException as exc:
            a.error = exc
            log.debug("prefetch of job %d failed", job.id, exc_info=True)
        finally:
            with self._cond:
                a.done.set()
                drop_now = a.dropped
            if drop_now:
                self._release(a)

    def _drop(self, a: _Ahead) -> None:
        a.stop.set()
        with self._cond:
            a.dropped = True
            ready = a.done.is_set()
        if ready:
            self._release(a)

    def _release(self, a: _Ahead) -> None:
        r, a.renderer = a.renderer, None
        if r is not None:
            self.release(r)

    def release(self, r: Any) -> None:
        """A prepared renderer no render will use: its engine view closed, the engine's hold released."""
        self.dropped += 1
        try:
            engine = r.engine
            done = getattr(engine, "done", None)
            if done is not None:
                done()  # a batcher's view: closed
            if hasattr(self.pool, "release"):
                self.pool.release(engine)
        except Exception:
            log.warning("releasing a prepared job's engine failed", exc_info=True)

"""One batch, many clients: ``Batcher`` merges the engine calls of the jobs in flight on one device.

    batcher = Batcher(engine, lock)              # one per warm engine (the pool keeps them)
    view = batcher.view()                        # what one job's Renderer gets as its engine
    view.bind(features); faces = view.generate(prepared, avatar_idx, feat_idx, weight)

Each job keeps its own renderer: its compositing, encoder lanes and muxer run on its own thread,
and only the engine call is shared. A job's ``generate`` puts its batch in the batcher's queue and
waits; one of the waiting threads (the leader) takes what is queued, lets the other jobs in flight
add theirs for a moment (half the last merged call's time, ``GATHER_S``: a job still compositing its
last batch; waiting longer than the engine's own work would cost more than it saves; not at all once
``max_frames``, the engine's batch, is queued), and runs them as
one call (``engine.generate_many``: one UNet/decoder batch for MuseTalk), then hands each job its
faces. A job has at most one batch queued (its render loop waits for it), and the leader takes the
batches in the order they came, up to ``max_frames``, so every job in flight gets one batch per
round: a short job is never stuck behind a long one (round-robin across jobs), and a face is the
one the job makes alone (the engines' faces do not depend on their batch neighbours).

With a ``Scheduler`` (``studio serve``: ``studio.service.scheduler``) the leader takes the batches
in the scheduler's order instead: the highest lane first (live, breaking, normal, bulk), a minimum
share for the lanes below, weighted fair shares between clients within a lane. A view carries its
job's ``Ticket`` (``batcher.view(ticket)``: the client, the lane, the job); a live session's view
gets ``Ticket(level=LIVE)``, above every queued job's lane.

Continuous batching as LLM servers do it across requests; written here because the merge is a
few lines on the engine boundary and no library knows the engines' inputs.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

GATHER_S = (0.002, 0.05)  # a leader waits for the other jobs in flight half a merged call's time, in these bounds
ACTIVE_S = 1.0  # a view that asked within this long counts as a job in flight


@dataclass(eq=False)
class _Ask:
    view: EngineView
    item: tuple
    frames: int
    done: threading.Event = field(default_factory=threading.Event)
    faces: Any = None
    error: BaseException | None = None
    passed: int = 0  # engine calls made while it waited (the scheduler's record)
    beside: list = field(default_factory=list)  # the tickets of the asks left queued when it was taken
    top: int | None = None  # the highest lane queued when it was taken


class Batcher:
    """Merges concurrent ``generate`` calls on one engine into one ``generate_many`` call."""

    def __init__(self, engine: Any, lock: Any = None, max_frames: int = 0, scheduler: Any = None):
        self.engine = engine
        self.scheduler = scheduler  # a ``Scheduler``: lanes and fair shares pick the batches (None: oldest first)
        self.lock = lock  # the engine's (scrub frames take turns with the merged batches)
        # one warm bucket at most: merging fills the engine's batch, it never makes a call of several
        # (on the H200 a merged call of two 64-frame batches only made each job wait for the other's)
        self.max_frames = int(max_frames) or max(8, int(engine.preferred_batch()))
        self._cond = threading.Condition()
        self._queue: list[_Ask] = []
        self._leading = False
        self._views: weakref.WeakSet[EngineView] = weakref.WeakSet()
        #: merged calls made and the batches they carried (``batches / calls``: jobs per call)
        self.calls = 0
        self.batches = 0
        self._gather_s = GATHER_S[0]

    def view(self, ticket: Any = None, join: bool = True) -> EngineView:
        """One job's view; ``ticket`` (a ``scheduler.Ticket``): whose work its batches are. ``join``:
        the scheduler counts it in flight until ``done`` (a live session's view; the queue's runner
        counts its jobs itself, from claim to end, and passes False)."""
        v = EngineView(self, ticket)
        v.joined = ticket is not None and self.scheduler is not None and join
        with self._cond:
            self._views.add(v)
        if v.joined:
            self.scheduler.join(ticket)
        return v

    def left(self, view: EngineView) -> None:
        """A view's job has no more batches (``EngineView.done``)."""
        if view.joined:
            self.scheduler.leave(view.ticket)
        with self._cond:
            self._cond.notify_all()  # a leader waiting for this job's batch stops waiting

    def _in_flight(self) -> int:
        now = time.monotonic()
        return sum(1 for v in list(self._views) if not v.closed and now - v.asked < ACTIVE_S)

    def generate(self, view: EngineView, item: tuple) -> Any:
        ask = _Ask(view, item, len(item[2]))
        with self._cond:
            view.asked = time.monotonic()
            self._queue.append(ask)
            self._cond.notify_all()
            while not ask.done.is_set() and self._leading:
                self._cond.wait()
            lead = not ask.done.is_set()
            if lead:
                self._leading = True
        if lead:
            try:
                while not ask.done.is_set():
                    self._run(self._take())
            finally:
                with self._cond:
                    self._leading = False
                    self._cond.notify_all()
        if ask.error is not None:
            raise ask.error
        return ask.faces

    def _take(self) -> list[_Ask]:
        """The batches to merge: wait briefly for every job in flight to have one queued, then the
        oldest first (with a scheduler: in its order), up to ``max_frames`` (at least one)."""
        deadline = time.monotonic() + self._gather_s
        with self._cond:
            while True:
                waiting = {id(a.view) for a in self._queue}
                left = deadline - time.monotonic()
                queued = sum(a.frames for a in self._queue)
                if len(waiting) >= self._in_flight() or left <= 0 or queued >= self.max_frames:
                    break  # everyone is in, or enough to keep the device busy: no idle wait
                self._cond.wait(left)
            take: list[_Ask] = []
            if self.scheduler is not None:
                order = self.scheduler.pick([(a.view.ticket, a.frames) for a in self._queue], self.max_frames)
                top = max((a.view.ticket.level for a in self._queue if a.view.ticket is not None), default=None)
                take = [self._queue[i] for i in order]
                self._queue = [a for a in self._queue if all(a is not t for t in take)]
                for a in self._queue:
                    a.passed += 1  # a call went before it
                for a in take:
                    a.beside = [b.view.ticket for b in self._queue]  # what waited as it was taken
                    a.top = top
                return take
            frames = 0
            for a in self.order(self._queue):
                if take and frames + a.frames > self.max_frames:
                    break
                take.append(a)
                frames += a.frames
            self._queue = [a for a in self._queue if all(a is not t for t in take)]
        return take

    @staticmethod
    def order(queue: list[_Ask]) -> list[_Ask]:
        """Without a scheduler: the queued batches in the order they came, a live session's first
        (its view's ``Ticket(level=LIVE)``): a frame due in 40 ms never waits behind a file's batch."""
        from studio.service.scheduler import LIVE

        return sorted(queue, key=lambda a: a.view.ticket is None or a.view.ticket.level != LIVE)

    def _run(self, asks: list[_Ask]) -> None:
        from studio.core.render.stagetrace import tracer

        trace = tracer()
        try:
            t0 = time.perf_counter()
            with self.lock or contextlib.nullcontext():
                g0 = trace.mark(self.engine.device) if trace is not None else None
                faces = self.engine.generate_many([a.item for a in asks])
                if trace is not None:
                    n = sum(a.frames for a in asks)
                    trace.gpu("engine", g0, trace.mark(self.engine.device), id(self), n=n, jobs=len(asks))
                    trace.cpu("merged", t0, time.perf_counter(), id(self), n=n, jobs=len(asks))
            self._gather_s = min(GATHER_S[1], max(GATHER_S[0], (time.perf_counter() - t0) / 2))
            for a, f in zip(asks, faces, strict=True):
                a.faces = f
            if self.scheduler is not None:
                self.scheduler.served(
                    [(a.view.ticket, a.frames) for a in asks], asks[0].beside, [a.passed for a in asks], asks[0].top
                )
        except BaseException as exc:  # noqa: BLE001 - every job in the batch gets the error
            if len(asks) > 1:  # one job's bad batch must not fail the others: each alone
                for a in asks:
                    try:
                        with self.lock or contextlib.nullcontext():
                            a.faces = self.engine.generate_many([a.item])[0]
                    except BaseException as one:  # noqa: BLE001
                        a.error = one
            else:
                asks[0].error = exc
        finally:
            self.calls += 1
            self.batches += len(asks)
            with self._cond:
                for a in asks:
                    a.done.set()
                self._cond.notify_all()


class EngineView:
    """One job's handle on a shared engine: ``bind`` keeps the job's clip here, ``generate`` goes
    through the batcher; everything else is the engine's (``base_engine``)."""

    def __init__(self, batcher: Batcher, ticket: Any = None):
        self._batcher = batcher
        self.ticket = ticket  # whose work its batches are (``scheduler.Ticket``), or None
        self.joined = False  # the scheduler counts it in flight (``Batcher.view``)
        self.features: Any = None
        self.asked = 0.0
        self.closed = False

    @property
    def base_engine(self) -> Any:
        return self._batcher.engine

    def bind(self, features) -> None:
        self.features = features

    def generate(self, prepared, avatar_idx, feat_idx, weight=None):
        if self.features is None:
            raise RuntimeError("generate: call bind(audio_features(wave)) first")
        return self._batcher.generate(self, (prepared, self.features, avatar_idx, feat_idx, weight))

    def generate_item(self, item: tuple):
        """``generate_many``'s one item ``(prepared, features, avatar_idx, feat_idx, weight)`` through
        the batcher: a caller that carries its own features per call (a live session)."""
        return self._batcher.generate(self, item)

    def done(self) -> None:
        """The job has no more batches (the batcher stops waiting for it)."""
        if not self.closed:
            self.closed = True
            self._batcher.left(self)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._batcher.engine, name)

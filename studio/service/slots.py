"""Jobs at once: ``Slots`` runs up to ``capacity`` of the queue's jobs, each on its own thread and on
the least busy device.

The ``Runner`` owns one and hands it what it needs: the store, the emitter, the condition the runner
is woken on, the way to run one job (``run(job, slot, ended)``), the renders alive now (to cancel),
and the scheduler, the farm's dispatcher, the sweeper, the devices. With ``devices`` (``studio serve
--gpus``) or ``jobs_per_device`` above one, the runner's loop is this one: it claims up to
``capacity`` jobs and runs each in its own thread (``studio-job-<id>``) on the device with the fewest
jobs now; their engine calls share batches when the pool batches (``studio.service.batching``). With
a ``dispatcher`` (``studio serve --farm``) a job is claimed when an actor of the farm has a free slot
and reserved on the one with the fewest frames queued (``studio.service.farm_dispatch``).

With a ``scheduler`` (``studio serve``) the runner is this one whatever the capacity, and:

- jobs are claimed in the scheduler's order (highest lane, then the client with the lowest
  counter, then queue order: ``Scheduler.rank``; ``order`` is that order without claiming);
- a job of a lane with no job rendering gets a slot beyond ``capacity`` (one per lane at most), so
  a breaking clip starts beside long jobs instead of after them (the batcher then serves its
  batches first) and a bulk job is never held back by a stream of normal ones (the batcher then
  gives it its minimum share);
- a job past its deadline is cancelled ("its deadline passed"), queued or running.

A job whose frames have all left the engine gives its slot back (``left_engine``) while a finishing
worker finishes its file (``studio.service.finishing``), so the next job's engine work starts at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from studio.core.store import jobs as J

log = logging.getLogger("studio.service.queue")

DEADLINE_REASON = "its deadline passed before it was done; nothing was written"


class Slots:
    """Several of the queue's jobs at once (the ``Runner``'s)."""

    def __init__(
        self,
        store: J.JobStore,
        emitter: Any,
        wake: threading.Condition,
        run: Callable[[J.Job, int, Callable[[], None]], Any],
        live: Callable[[], list],
        *,
        devices: list,
        jobs_per_device: int = 1,
        scheduler: Any = None,
        dispatcher: Any = None,
        sweeper: Any = None,
        frames_of: Callable[[J.Job], int | None] = lambda job: None,
    ):
        self.store = store
        self._emitter = emitter
        self._wake = wake  # the runner's: its lock guards what follows
        self._run = run
        self._live = live
        self.devices = devices
        self.jobs_per_device = max(1, int(jobs_per_device))
        self.scheduler = scheduler
        self.dispatcher = dispatcher  # a ``FarmDispatcher`` (``studio serve --farm``): jobs go to the farm's actors
        self._sweeper = sweeper
        self._frames_of = frames_of
        self._workers: dict[int, tuple[Any, int, threading.Thread]] = {}  # job id -> (render, slot, thread)
        self._deadline_missed: set[int] = set()
        self._levels: dict[int, int] = {}  # job id -> its lane, while it renders
        self._clients: dict[int, str] = {}  # job id -> its client, while it renders

    @property
    def capacity(self) -> int:
        """Jobs this queue renders at once (every device's)."""
        return len(self.devices) * self.jobs_per_device

    # ---- what the runner asks ---------------------------------------------------------------

    def renders(self) -> list[tuple[int, Any]]:
        """(job id, render) of the jobs rendering on a slot now (called with the lock)."""
        return [(i, w[0]) for i, w in self._workers.items() if w[0] is not None]

    def job_ids(self) -> list[int]:
        return list(self._workers)

    def threads(self) -> list[threading.Thread]:
        return [w[2] for w in self._workers.values()]

    def placed(self, job_id: int, render: Any) -> None:
        """``job_id``'s render is made (a cancel reaches it from now on)."""
        with self._wake:
            w = self._workers.get(job_id)
            if w is not None:
                self._workers[job_id] = (render, w[1], w[2])

    def left_engine(self, job_id: int) -> None:
        """``job_id``'s frames have all left the engine (a finishing worker has its file): its slot
        is free for the next job."""
        with self._wake:
            self._drop(job_id)
            self._wake.notify_all()

    def missed_deadline(self, job_id: int) -> bool:
        return job_id in self._deadline_missed

    def _drop(self, job_id: int) -> None:
        self._workers.pop(job_id, None)
        self._levels.pop(job_id, None)
        self._clients.pop(job_id, None)

    # ---- claiming -----------------------------------------------------------------------------

    def _free(self) -> int:
        """Jobs that may start now (called with the lock): free slots here, or on the farm's actors."""
        if self.dispatcher is not None:
            return self.dispatcher.free_slots()
        return self.capacity - len(self._workers)

    def free_now(self) -> int:
        """Jobs the loop would claim at once (a free slot each)."""
        with self._wake:
            return max(0, self._free())

    def _idle_lanes(self) -> set[int]:
        """Lanes with a job queued and none rendering (called with the lock): such a job may take a
        slot beyond ``capacity``."""
        from studio.service.scheduler import job_level

        queued = {job_level(j.settings) for j in self.store.list((J.QUEUED,))}
        return queued - set(self._levels.values())

    def order(self, jobs: list[J.Job], extra: bool = False) -> list[J.Job]:
        """``jobs`` (queued, in queue order) in the order they will be claimed: the scheduler's,
        else as they are; ``extra``: only jobs of a lane with none rendering."""
        if self.scheduler is None:
            return jobs
        from studio.service.scheduler import job_level

        with self._wake:
            busy = set(self._levels.values()) if extra else set()
            rendering: dict[str, int] = {}
            for c in self._clients.values():
                rendering[c] = rendering.get(c, 0) + 1
        jobs = [j for j in jobs if job_level(j.settings) not in busy]
        return self.scheduler.rank(jobs, lambda j: job_level(j.settings), lambda j: j.client or "", rendering)

    def _claim(self, extra: bool = False) -> J.Job | None:
        """The next job to run, claimed (the scheduler's order, else the queue's)."""
        if self.scheduler is None:
            return self.store.claim_next()
        return self.store.claim_next(order=lambda jobs: self.order(jobs, extra))

    @staticmethod
    def _gate_open() -> bool:
        """A test hook: with ``STUDIO_QUEUE_GATE=FILE`` nothing is claimed until FILE exists (a test
        queues every job first, then lets them contend from one instant)."""
        import os

        from studio.core import env

        gate = env.get("STUDIO_QUEUE_GATE")
        return not gate or os.path.exists(gate)

    def _sweep_deadlines(self) -> None:
        """Cancel every job, queued or running, whose deadline has passed (a promise not kept is
        said, never a late file)."""
        now = time.time()
        late = [j for j in self.store.list((J.QUEUED, J.RUNNING)) if (j.settings.get("deadline") or now + 1) < now]
        for j in late:
            with self._wake:
                self._deadline_missed.add(j.id)
                live = [r for i, r in self._live() if i == j.id]
            if live:
                for r in live:
                    r.cancel()
            elif j.state == J.QUEUED:
                try:
                    self._emitter.emit("state", j.id, self.store.cancel(j.id, DEADLINE_REASON))
                except Exception:
                    log.debug("job %d changed while its deadline passed", j.id, exc_info=True)

    # ---- the loop ----------------------------------------------------------------------------

    def loop(self, stopped: Callable[[], bool]) -> None:
        """Up to ``capacity`` jobs at once, each on its own thread and on the least busy device
        (their engine calls share batches when the pool batches: ``studio.service.batching``),
        until ``stopped()``."""
        while True:
            with self._wake:
                if stopped():
                    return
                free = self._free()
            if self._sweeper is not None:
                self._sweeper.maybe()
            extra = False
            if self.scheduler is not None:
                self._sweep_deadlines()
                if free <= 0 and self.dispatcher is None:  # a farm's replicas know no lanes: a job waits
                    with self._wake:  # for a free slot there, then is claimed first (the scheduler's order)
                        extra = bool(self._idle_lanes())
            job = None
            if (free > 0 or extra) and self._gate_open():
                try:
                    job = self._claim(extra=free <= 0)
                except Exception:
                    log.exception("queue runner: could not take the next job")
            if job is not None:
                self._start(job)
                continue
            with self._wake:
                if stopped():
                    return
                self._wake.wait(1.0 if self.scheduler is None else 0.25)  # deadlines are checked this often

    def _start(self, job: J.Job) -> None:
        from studio.service.scheduler import job_level

        self._emitter.emit("state", job.id, job)
        if self.dispatcher is not None:
            # the actor with the fewest frames queued takes it with its frames (else the job waits)
            self.dispatcher.reserve(job.id, self._frames_of(job) or 0)
        with self._wake:
            slot = self._least_busy()
            t = threading.Thread(target=self._work, args=(job, slot), name=f"studio-job-{job.id}", daemon=True)
            self._workers[job.id] = (None, slot, t)
            self._levels[job.id] = job_level(job.settings)
            self._clients[job.id] = job.client or ""
        t.start()

    def _least_busy(self) -> int:
        """The device (slot) with the fewest jobs now; the first of equals (called with the lock)."""
        busy = [0] * len(self.devices)
        for _, slot, _ in self._workers.values():
            busy[slot] += 1
        return min(range(len(busy)), key=lambda i: (busy[i], i))

    def _work(self, job: J.Job, slot: int) -> None:
        ticket = None
        if self.scheduler is not None:  # in flight from its claim to its end (its file finished)
            from studio.service.scheduler import ticket_of

            ticket = ticket_of(job)
            self.scheduler.join(ticket, lift=False)
        ended = threading.Event()

        def end() -> None:  # once: on this thread, or on the finishing worker that has its file
            if ended.is_set():
                return
            ended.set()
            if ticket is not None:
                self.scheduler.leave(ticket)
            if self.dispatcher is not None:
                self.dispatcher.release(job.id)
            with self._wake:
                self._drop(job.id)
                if self._sweeper is not None:
                    self._sweeper.again()  # a job ended (a new file): retention looks again, as one at a time does
                self._wake.notify_all()

        try:
            self._run(job, slot, end)
        except Exception:
            log.exception("queue runner: job %d", job.id)
            end()

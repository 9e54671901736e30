"""Jobs at once: the queue runner's ``capacity`` jobs on their own threads, each on the least busy device.

``QueueService`` takes it in (a mixin): with ``devices`` (``studio serve --gpus``) or
``jobs_per_device`` above one, its runner claims up to ``capacity`` jobs and runs each in its own
thread (``studio-job-<id>``) on the device with the fewest jobs now; their engine calls share
batches when the pool batches (``studio.service.batching``). With one device and one job a device
the runner stays the pipelined one-at-a-time loop. With a ``dispatcher`` (``studio serve --farm``)
a job is claimed when an actor of the farm has a free slot and reserved on the one with the fewest
frames queued (``studio.service.farm_dispatch``).

With a ``scheduler`` (``studio serve``) the runner is this one whatever the capacity, and:

- jobs are claimed in the scheduler's order (highest lane, then the client with the lowest
  counter, then queue order: ``Scheduler.rank``);
- a job of a lane with no job rendering gets a slot beyond ``capacity`` (one per lane at most), so
  a breaking clip starts beside long jobs instead of after them (the batcher then serves its
  batches first) and a bulk job is never held back by a stream of normal ones (the batcher then
  gives it its minimum share);
- a job whose frames have all left the engine gives its slot back while its thread finishes the
  file (at most ``capacity`` jobs finishing at once), so the next job's engine work starts at once;
- a job past its deadline is cancelled ("its deadline passed"), queued or running.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from studio.core.store import jobs as J

log = logging.getLogger("studio.service.queue")

DEADLINE_REASON = "its deadline passed before it was done; nothing was written"


class Slots:
    """The part of ``QueueService`` that runs several jobs at once (its attributes are the queue's)."""

    _lock: threading.RLock
    _wake: threading.Condition
    _stop: bool
    _workers: dict
    devices: list
    jobs_per_device: int
    store: Any
    _emit: Any  # the queue's own methods, used here
    _live: Any
    _run: Any
    _maybe_sweep: Any
    _swept: float  # monotonic time of the last retention sweep (the queue's)
    _frames_of: Any
    dispatcher: Any  # a ``FarmDispatcher`` (``studio serve --farm``): jobs go to the farm's actors
    scheduler: Any  # a ``Scheduler`` (``studio serve``): lanes, fair shares, deadlines
    _finishing: set  # job ids whose frames have left the engine (their file is being finished)
    _deadline_missed: set  # job ids cancelled because their deadline passed
    _levels: dict  # job id -> its lane, while it runs on a slot
    _clients: dict  # job id -> its client, while it runs on a slot

    def _free(self) -> int:
        """Jobs that may start now (called with the lock): free slots here, or on the farm's actors.
        A job finishing its file holds no slot (at most ``capacity`` of them at once)."""
        if self.dispatcher is not None:
            return self.dispatcher.free_slots()
        finishing = len(self._finishing & set(self._workers))
        rendering = len(self._workers) - finishing
        if finishing > self.capacity:
            return 0
        return self.capacity - rendering

    def _lane_free(self) -> bool:
        """A queued job's lane has no job rendering (called with the lock): it may take a slot beyond
        ``capacity`` (one per lane at most), so a breaking clip starts beside long jobs instead of
        after them, and a bulk job is never held back by a stream of normal ones."""
        if self.scheduler is None or self.dispatcher is not None:  # a farm's replicas know no lanes: a job
            return False  # waits for a free slot, then is claimed first (the scheduler's order)
        return bool(self._idle_lanes())

    def _idle_lanes(self) -> set[int]:
        """Lanes with a job queued and none rendering (called with the lock)."""
        from studio.service.scheduler import job_level

        queued = {job_level(j.settings) for j in self.store.list((J.QUEUED,))}
        return queued - self._rendering_lanes()

    def _rendering_lanes(self) -> set[int]:
        return {lv for i, lv in self._levels.items() if i in self._workers and i not in self._finishing}

    def _claim(self, extra: bool = False):
        """The next job to run, claimed (the scheduler's order, else the queue's); ``extra``: a slot
        beyond capacity, only for a job of a lane with none rendering."""
        if self.scheduler is None:
            return self.store.claim_next()
        from studio.service.scheduler import job_level

        with self._lock:
            busy = self._rendering_lanes() if extra else set()
            rendering: dict[str, int] = {}
            for i, c in self._clients.items():
                if i in self._workers and i not in self._finishing:
                    rendering[c] = rendering.get(c, 0) + 1

        def order(jobs):
            jobs = [j for j in jobs if job_level(j.settings) not in busy]
            return self.scheduler.rank(jobs, lambda j: job_level(j.settings), lambda j: j.client or "", rendering)

        return self.store.claim_next(order=order)

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
            with self._lock:
                self._deadline_missed.add(j.id)
                live = [r for i, r in self._live() if i == j.id]
            if live:
                for r in live:
                    r.cancel()
            elif j.state == J.QUEUED:
                try:
                    self._emit("state", j.id, self.store.cancel(j.id, DEADLINE_REASON))
                except Exception:
                    log.debug("job %d changed while its deadline passed", j.id, exc_info=True)

    @property
    def capacity(self) -> int:
        """Jobs this queue renders at once (every device's)."""
        return len(self.devices) * self.jobs_per_device

    def _loop_many(self) -> None:
        """Up to ``capacity`` jobs at once, each on its own thread and on the least busy device
        (their engine calls share batches when the pool batches: ``studio.service.batching``)."""
        while True:
            with self._lock:
                if self._stop:
                    return
                free = self._free()
            self._maybe_sweep()
            extra = False
            if self.scheduler is not None:
                self._sweep_deadlines()
                if free <= 0:
                    with self._lock:
                        extra = self._lane_free()
            job = None
            if (free > 0 or extra) and self._gate_open():
                try:
                    job = self._claim(extra=free <= 0)
                except Exception:
                    log.exception("queue runner: could not take the next job")
            if job is not None:
                self._emit("state", job.id, job)
                if self.dispatcher is not None:
                    # the actor with the fewest frames queued takes it with its frames (else the job waits)
                    self.dispatcher.reserve(job.id, self._frames_of(job) or 0)
                with self._lock:
                    slot = self._least_busy()
                    t = threading.Thread(target=self._work, args=(job, slot), name=f"studio-job-{job.id}", daemon=True)
                    self._workers[job.id] = (None, slot, t)
                    from studio.service.scheduler import job_level

                    self._levels[job.id] = job_level(job.settings)
                    self._clients[job.id] = job.client or ""
                t.start()
                continue
            with self._lock:
                if self._stop:
                    return
                self._wake.wait(1.0 if self.scheduler is None else 0.25)  # deadlines are checked this often

    def _least_busy(self) -> int:
        """The device (slot) with the fewest jobs now; the first of equals (called with the lock)."""
        busy = [0] * len(self.devices)
        for i, (_, slot, _) in self._workers.items():
            busy[slot] += i not in self._finishing
        return min(range(len(busy)), key=lambda i: (busy[i], i))

    def _work(self, job, slot: int) -> None:
        ticket = None
        if self.scheduler is not None:  # in flight from its claim to its end (its file finished)
            from studio.service.scheduler import ticket_of

            ticket = ticket_of(job)
            self.scheduler.join(ticket, lift=False)
        try:
            self._run(job, slot)
        except Exception:
            log.exception("queue runner: job %d", job.id)
        finally:
            if ticket is not None:
                self.scheduler.leave(ticket)
            if self.dispatcher is not None:
                self.dispatcher.release(job.id)
            with self._lock:
                self._workers.pop(job.id, None)
                self._finishing.discard(job.id)
                self._levels.pop(job.id, None)
                self._clients.pop(job.id, None)
                self._swept = float("-inf")  # a job ended (a new file): retention looks again, as one at a time does
                self._wake.notify_all()

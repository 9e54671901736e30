"""Jobs at once: the queue runner's ``capacity`` jobs on their own threads, each on the least busy device.

``QueueService`` takes it in (a mixin): with ``devices`` (``studio serve --gpus``) or
``jobs_per_device`` above one, its runner claims up to ``capacity`` jobs and runs each in its own
thread (``studio-job-<id>``) on the device with the fewest jobs now; their engine calls share
batches when the pool batches (``studio.service.batching``). With one device and one job a device
the runner stays the pipelined one-at-a-time loop. With a ``dispatcher`` (``studio serve --farm``)
a job is claimed when an actor of the farm has a free slot and reserved on the one with the fewest
frames queued (``studio.service.farm_dispatch``).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

log = logging.getLogger("studio.service.queue")


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
    _run: Any
    _maybe_sweep: Any
    _frames_of: Any
    dispatcher: Any  # a ``FarmDispatcher`` (``studio serve --farm``): jobs go to the farm's actors

    def _free(self) -> int:
        """Jobs that may start now (called with the lock): free slots here, or on the farm's actors."""
        if self.dispatcher is not None:
            return self.dispatcher.free_slots()
        return self.capacity - len(self._workers)

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
            job = None
            if free > 0:
                try:
                    job = self.store.claim_next()
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
                t.start()
                continue
            with self._lock:
                if self._stop:
                    return
                self._wake.wait(1.0)

    def _least_busy(self) -> int:
        """The device (slot) with the fewest jobs now; the first of equals (called with the lock)."""
        busy = [0] * len(self.devices)
        for _, slot, _ in self._workers.values():
            busy[slot] += 1
        return min(range(len(busy)), key=lambda i: (busy[i], i))

    def _work(self, job, slot: int) -> None:
        try:
            self._run(job, slot)
        except Exception:
            log.exception("queue runner: job %d", job.id)
        finally:
            if self.dispatcher is not None:
                self.dispatcher.release(job.id)
            with self._lock:
                self._workers.pop(job.id, None)
                self._wake.notify_all()

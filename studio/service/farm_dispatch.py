"""``studio serve --farm``: one queue on the head, its jobs rendered by the farm's replicas.

    d = FarmDispatcher("10.0.0.5:6379", jobs_per_device=2)     # "": the farm started here, else a local one
    d.start(then)                              # connect, one replica per GPU (or CPU slot) of every node
    d.reserve(job_id, frames)                  # the queue: a slot on the replica with the fewest frames queued
    job = d.job(job_id, request, cancel_event)     # what ``Render`` runs for a whole job (``farm_job``)
    job = d.chunked(job_id, request, cancel_event) # ... for a ``placement: farm`` job (``farm_chunks``)
    d.status()                                 # nodes, replicas, jobs in flight (GET /v1/farm)
    d.close()

It is core's one farm dispatcher (``studio.core.scale.dispatch``: controller, router, replicas)
with the service's engine pool on every replica (``EnginePool``, its batches merged across the
jobs of one replica). The HTTP API, the SQLite queue and retention stay on the head. The queue
claims jobs in its scheduler's order (lanes, fair shares: ``studio.service.scheduler``) when a
replica has a free slot (``free_slots``) and reserves each on the replica with the fewest frames
queued, never more than its ``capacity`` (``--jobs-per-device``) jobs on its engine; a job whose
frames have left the engine (the replica reports it ``finishing``) frees its slot for the next
job, at most one such job more per replica. Inputs travel through Ray's object store (once per
node); a finished file comes back in checked pieces (``TaskCall.fetch``) unless the replica's node
sees the head's data folder (a token file), where it writes the file in place.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

from studio.core.scale.dispatch import Dispatcher


def serve_pool(batching: bool):
    """A replica's engine pool (made on the replica: the service's ``EnginePool``, its batches merged)."""
    from studio.service.pool import EnginePool

    pool = EnginePool()
    pool.batching = batching
    return pool


class FarmDispatcher(Dispatcher):
    """The farm's dispatcher with the service's engine pool on its replicas, and the queue's jobs."""

    def __init__(self, address: str = "", *, batching: bool = True, **options: Any):
        """``options``: the ``Dispatcher``'s (``jobs_per_device``, ``warm``, ``discover_s``, ...); its
        replicas' pools are the service's (``serve_pool``), batching frames across jobs or not."""
        super().__init__(address, make_pool=functools.partial(serve_pool, batching), **options)
        self.batching = batching

    def job(self, job_id: int, request, cancel: threading.Event):
        """What ``Render`` runs for a whole job of the queue (``farm_job.FarmJob``)."""
        from studio.service.farm_job import FarmJob

        return FarmJob(self, job_id, request, cancel)

    def chunked(self, job_id: int, request, cancel: threading.Event):
        """What ``Render`` runs for a ``placement: farm`` job: one clip in chunks over several replicas."""
        from studio.service.farm_chunks import ChunkedFarmJob

        return ChunkedFarmJob(self, job_id, request, cancel)

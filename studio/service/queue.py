"""The render queue, Qt-free: ``QueueService`` runs jobs from the SQLite store and tells subscribers.

    qs = QueueService()                                   # <data>/jobs.sqlite, the default engine pool
    job = qs.add(RenderRequest("anna", "voice.flac", "out.mp4"))     # queued; "out_002.mp4" if taken
    unsubscribe = qs.subscribe(lambda ev: print(ev.kind, ev.job_id))
    qs.run_until_empty()                                  # foreground (``studio queue run``), or
    qs.start(); ...; qs.stop()                            # a runner thread (the window, the server)
    qs.cancel(job.id); qs.hold(id); qs.resume(id); qs.move(id, 0); qs.remove(id)
    again = qs.retry(job.id)                              # a new job (retry_of=job.id); the original stays
    qs.delete(job.id)                                     # cancel an active job; a finished one: JobFinished
    qs.delete(job.id, purge=True)                         # ... unless purged: the job and its file go
    qs.estimates()                                        # {id: Estimate(position, eta_s)} of waiting jobs
    qs.apply_retention()                                  # expire old renders, remove old uploads

Jobs run in queue order through the one driver (``Render``) on the shared engine pool, so engines
stay warm between jobs. Pipelined (the default; ``pipeline=False`` or ``STUDIO_QUEUE_PIPELINE=0``
runs them strictly one after another): once a job's last frame has left the engine, its encoders
drain and its file is finished on a drain thread while the next job's engine work starts, so one
GPU serves many clients at its own rate. At most one job drains while one renders (bounded
memory), and each writes the file it would write alone. States and progress are persisted (progress at
most once a second), so every view of the same store (the window, ``studio queue list``, the
server) sees the same queue. Nothing starts by itself: queued jobs wait until ``start`` or
``run_until_empty`` is called; a job that was running when its process died comes back
``interrupted`` (the store does it on open).

Retention (``Retention``: ``STUDIO_KEEP_RENDERS`` / ``STUDIO_MAX_STORAGE_GB``, or what ``studio serve``
was given) runs in the runner every minute and after each job, for every face alike: it removes only
files Studio keeps in its data folder (``renders/``, ``uploads/``), never a file a user named.

Events go to plain callbacks, called on the runner's thread (a Qt view re-emits them as queued
signals): ``added``, ``state`` (any change of a job's state), ``progress`` (per batch, with the
``Progress``), ``placed`` (the running job's placement is known: ``where``), ``removed``, ``moved``,
``checked`` (a done job's lip-sync check started or ended: ``job.result["check"]``).

A job whose settings ask for it (``check``) is checked after its file is written (``checks``:
``studio check`` in a child process at the lowest CPU priority, one at a time); the queue goes on
to the next job meanwhile, and ``run_until_empty`` waits for the checks before it returns.

Objects: ``QueueService`` holds the queue's operations and owns its collaborators, each built with
the narrow things it needs (never the service itself): an ``Emitter`` (``queue_events``: the
subscribers), a ``Sweeper`` (``retention``), a ``CheckRunner`` (``checks``), an ``Estimates``
(``estimates``: positions, ETAs, admission by deadline) and a ``Runner`` (``runner``: the loop and
one job's run), which owns its ``Slots`` (``slots``: several jobs at once, the scheduler's claim
order, deadlines) and its ``Finisher`` (``finishing``: files finished off the render thread). A job
row <-> a request and the output names are ``job_requests``. docs/architecture.md draws them.
"""

from __future__ import annotations

import builtins  # QueueService.list shadows list in its annotations
import functools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

from studio.core.errors import InputError, StudioError
from studio.core.store import jobs as J
from studio.core.store.jobs import (  # noqa: F401
    CANCELLED,
    DAMAGED,
    DONE,
    DRAFT,
    FAILED,
    FINAL,
    HELD,
    INTERRUPTED_STATE,
    QUEUED,  # the states, for views (they use the service, not the store)
    RUNNING,
)
from studio.service.driver import Progress
from studio.service.estimates import DeadlineRefused, Estimate, Estimates
from studio.service.job_requests import absolute_request, job_settings, owned_output, request_of, unique_output
from studio.service.queue_events import Emitter, QueueEvent
from studio.service.request import RenderRequest
from studio.service.runner import Runner

__all__ = ["DeadlineRefused", "JobActive", "JobFinished", "QueueEvent", "QueueFull", "QueueService", "gpus_here"]

_P = ParamSpec("_P")
_R = TypeVar("_R")


class QueueFull(StudioError):
    """Too many jobs are queued already (the server answers 429)."""


class JobFinished(InputError):
    """A finished job was asked to go without ``purge`` (the server answers 409)."""


class JobActive(InputError):
    """A job that has not finished was asked to be retried (the server answers 409)."""


def _forward(method: Callable[Concatenate[J.JobStore, _P], _R]) -> Callable[Concatenate[Any, _P], _R]:
    """A ``QueueService`` method that is its store's as it is (the same parameters and docstring): the
    queries ``studio serve`` makes go through the service, which front ends may import, not the store."""
    name = method.__name__

    @functools.wraps(method)
    def call(self, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        return getattr(self.store, name)(*args, **kwargs)

    return call


class QueueService:
    def __init__(
        self,
        store: J.JobStore | str | Path | None = None,
        pool=None,
        *,
        max_queued: int | None = None,
        in_process_farm: bool = False,
        pipeline: bool | None = None,
        retention=None,
        devices: builtins.list[str] | None = None,
        jobs_per_device: int = 1,
        dispatcher=None,
        scheduler=None,
    ):
        from studio.core import env
        from studio.service.checks import CheckRunner
        from studio.service.pool import default_pool
        from studio.service.retention import Retention, Sweeper

        self.store = store if isinstance(store, J.JobStore) else J.JobStore(store)  # a path, or None: the default
        self.pool = pool if pool is not None else default_pool()
        self.max_queued = max_queued
        self.events = Emitter()
        self.sweeper = Sweeper(
            self.store, retention if retention is not None else Retention.from_env(strict=False), self.events
        )
        self.checks = CheckRunner(on_done=self._checked, on_start=lambda job_id: self._checked(job_id, None))
        #: ``studio serve``: lanes, fair shares and deadlines (``studio.service.scheduler``); the pool's
        #: batchers order their batches by it, the runner claims jobs by it (None: queue order)
        self.scheduler = scheduler
        if scheduler is not None and hasattr(self.pool, "scheduler"):
            self.pool.scheduler = scheduler
        self.estimator = Estimates(self.store, progress_of=self._progress_of)
        #: ``devices``: where jobs run at once (``studio serve --gpus``) and ``jobs_per_device`` on each;
        #: ``dispatcher``: ``studio serve --farm``'s (a ``FarmDispatcher``: jobs on a Ray cluster's actors)
        self.runner = Runner(
            self.store,
            self.pool,
            self.events,
            self.checks,
            self.sweeper,
            frames_of=self.estimator.frames_of,
            scheduler=scheduler,
            dispatcher=dispatcher,
            devices=devices,
            jobs_per_device=jobs_per_device,
            pipeline=env.flag("STUDIO_QUEUE_PIPELINE") if pipeline is None else bool(pipeline),
            in_process_farm=in_process_farm,
        )
        self.dispatcher = dispatcher
        if dispatcher is not None:
            dispatcher.on_free = self.runner.poke  # a job's frames left its actor's engine: claim the next now

    def _progress_of(self, job_id: int) -> Progress | None:
        return self.runner.progress_of(job_id)

    # ---- what the runner knows (the views read it here) ------------------------------------

    @property
    def retention(self):
        return self.sweeper.retention

    @property
    def last_progress(self) -> dict[int, Progress]:
        """Each running job's last ``Progress`` (without its preview frame)."""
        return self.runner.last_progress

    @property
    def timings(self) -> dict[int, dict]:
        """job id -> ``queue_s``, ``first_frame_s`` of the running jobs."""
        return self.runner.timings

    @property
    def capacity(self) -> int:
        """Jobs rendering at once: ``devices`` x ``jobs_per_device``."""
        return self.runner.capacity

    @property
    def jobs_per_device(self) -> int:
        return self.runner.slots.jobs_per_device

    @property
    def pipeline(self) -> bool:
        """A job's file is finished while the next job renders (the default)."""
        return self.runner.pipeline

    @property
    def running_job_id(self) -> int | None:
        return self.runner.running_job_id

    @property
    def running_job_ids(self) -> builtins.list[int]:
        return self.runner.running_job_ids

    @property
    def farm_link(self):
        return self.runner.farm_link

    @property
    def started(self) -> bool:
        return self.runner.started

    def start(self) -> None:
        """Run queued jobs on a background thread until ``stop`` (``Runner.start``)."""
        self.runner.start()

    def stop(self, interrupt: bool = False, timeout: float | None = 30.0) -> None:
        """Pause after the running job, or ``interrupt`` it (``Runner.stop``)."""
        self.runner.stop(interrupt, timeout)

    def close(self, timeout: float = 30.0) -> None:
        """Stop now, a running job interrupted, and leave the farm (``Runner.close``)."""
        self.runner.close(timeout)

    def run_next(self) -> J.Job | None:
        return self.runner.run_next()

    def run_until_empty(self, on_event: Callable[[QueueEvent], None] | None = None) -> builtins.list[J.Job]:
        """Run queued jobs in this thread until none is left; the finished jobs (``on_event``: told
        of every event meanwhile)."""
        unsub = self.subscribe(on_event) if on_event else None
        try:
            return self.runner.run_until_empty()
        finally:
            if unsub:
                unsub()

    def wait_drained(self, timeout: float | None = None) -> None:
        """Wait until no job is finishing its file."""
        self.runner.wait_drained(timeout)

    # ---- events -------------------------------------------------------------------------

    def subscribe(self, callback: Callable[[QueueEvent], None]) -> Callable[[], None]:
        return self.events.subscribe(callback)

    def _emit(self, kind: str, job_id: int, job=None, progress=None, where: str = "") -> None:
        self.events.emit(kind, job_id, job, progress, where)

    # ---- the queue ----------------------------------------------------------------------

    def add(
        self,
        request: RenderRequest,
        state: str = J.QUEUED,
        *,
        retry_of: int | None = None,
        webhook: str = "",
        client: str = "",
        priority: object = None,
        deadline_s: float | None = None,
    ) -> J.Job:
        """Queue (or keep as a draft) a request; its output gets a free numbered name unless
        ``overwrite``. Bad requests are refused here, before they reach the queue. ``webhook``: a URL
        ``studio serve`` tells of the job's final state; ``client``: the server's client that owns it.
        ``priority``: breaking / normal / bulk or 0-100 (``scheduler.parse_priority``); ``deadline_s``:
        seconds from now by which it must be done, else it is cancelled then; a deadline the queue
        ahead cannot meet is refused now (``DeadlineRefused``), an accepted one records the estimate
        it was accepted with (``promised_s``)."""
        from studio.service.preflight import check_output
        from studio.service.scheduler import parse_priority

        level = parse_priority(priority)
        if deadline_s is not None and not (0 < float(deadline_s) <= 7 * 86400):
            raise InputError(f"deadline_s {deadline_s}: give seconds from now, more than 0 and at most a week")

        request = absolute_request(request)
        output = request.output
        if not request.overwrite:
            from studio.core.store.files import check_kept_name

            check_kept_name(output)  # a kept file whose numbered name cannot be made: one sentence
            output = unique_output(output, self._taken())
        check_output(output, request.avatar, request.audio, codec=request.settings.codec)
        if request.placement.kind != "server":  # a server checks its own avatar
            request.resolution.check()  # a canvas needing more enlargement than allowed: refused, with the choices
        request = request.with_(output=output)
        stored = job_settings(request)
        stored["priority"] = level
        if deadline_s is not None and state == J.QUEUED:
            promised = self.estimator.admit(request, level, float(deadline_s))
            stored.update(deadline=time.time() + float(deadline_s), promised_s=promised)
        try:
            job = self.store.add(
                request.avatar,
                request.audio,
                stored,
                output,
                state=state,
                max_queued=self.max_queued,
                retry_of=retry_of,
                webhook=webhook,
                client=client,
            )
        except J.QueueLimit as exc:
            raise QueueFull(str(exc)) from None
        if self.scheduler is not None and state == J.QUEUED:
            waiting = self.store.list((J.QUEUED, J.RUNNING))
            if not any(j.client == job.client and j.id != job.id for j in waiting):
                self.scheduler.arrive(job.client)  # it was idle: no credit banked meanwhile
        self._emit("added", job.id, job)
        self._poke()
        return job

    def _taken(self, but: int | None = None) -> set[str]:
        """Outputs other jobs will write or wrote (a finished file may have been moved: its name stays taken
        only while the file exists, which ``unique_output`` checks)."""
        live = (J.DRAFT, J.QUEUED, J.HELD, J.RUNNING)
        return {str(Path(j.output).resolve()) for j in self.store.list() if j.state in live and j.id != but}

    def list(self) -> list[J.Job]:
        return self.store.list()

    def get(self, job_id: int) -> J.Job:
        return self.store.get(job_id)

    def request(self, job_id: int) -> RenderRequest:
        return request_of(self.get(job_id))

    def enqueue(self, job_id: int) -> J.Job:
        return self._changed(self.store.enqueue(job_id))

    def cancel(self, job_id: int) -> J.Job:
        """A queued or held job is cancelled; a running one stops within one batch, leaving no file."""
        if self.runner.cancel(job_id):
            return self.store.get(job_id)
        return self._changed(self.store.cancel(job_id))

    def retry(self, job_id: int) -> J.Job:
        """A finished job rendered again as a new job (``retry_of`` names the original), at the end of
        the queue; the original, and its video, stay as they were (the new job writes a new numbered
        file when the old one is there, whatever ``overwrite`` says)."""
        job = self.store.get(job_id)
        if job.damaged:
            raise InputError(job.reason)
        if job.state not in J.FINAL:
            raise JobActive(f"job {job_id} is {job.state}; only a finished job can be retried")
        req = request_of(job)
        if req.overwrite and Path(req.output).exists() and job.state == J.DONE:
            req = req.with_(overwrite=False)
        again = self.add(  # still its client's, in its lane (a deadline was the first run's)
            req, retry_of=job_id, webhook=job.webhook, client=job.client, priority=job.settings.get("priority")
        )
        return again

    def delete(self, job_id: int, purge: bool = False) -> tuple[J.Job | None, builtins.list[str]]:
        """DELETE: a draft, queued, held or running job is cancelled (a running one stops within one
        batch, writing nothing) and stays listed; a finished job is refused (``JobFinished``: nothing
        changes) unless ``purge``, which removes the job and its file. Answers the job (None once
        purged) and the files removed."""
        job = self.store.get(job_id)
        if job.state not in J.FINAL and not job.damaged:
            return self.cancel(job_id), []
        if not purge:
            raise JobFinished(
                f"job {job_id} is {job.state}; it is kept with its file: purge it to remove the job and its file"
            )
        removed = []
        out = owned_output(job)  # this job's own file only, never one that replaced it
        if out is not None:
            out.unlink()
            removed.append(str(out))
        self.remove(job_id)
        return None, removed

    def hold(self, job_id: int) -> J.Job:
        return self._changed(self.store.hold(job_id))

    def resume(self, job_id: int) -> J.Job:
        return self._changed(self.store.resume(job_id))

    def move(self, job_id: int, index: int) -> J.Job:
        job = self.store.move(job_id, index)
        self._emit("moved", job_id, job)
        self._poke()
        return job

    def remove(self, job_id: int) -> None:
        self.store.remove(job_id)
        self.runner.forget(job_id)
        self._emit("removed", job_id)

    def estimates(self) -> dict[int, Estimate]:
        """The running job and every queued one (in queue order): position and expected seconds."""
        return self.estimator.estimates()

    # ---- pages, estimates, idempotency, deliveries (what ``studio serve`` shows) ---------------

    page = _forward(J.JobStore.page)  # a stable cursor, newest first; ``client``: only that client's
    retries = _forward(J.JobStore.retries)  # what ``studio serve --max-retries`` bounds
    finish_key = _forward(J.JobStore.finish_key)
    release_key = _forward(J.JobStore.release_key)
    deliveries = _forward(J.JobStore.deliveries)
    add_delivery = _forward(J.JobStore.add_delivery)
    webhook_jobs = _forward(J.JobStore.webhook_jobs)
    webhook_checks = _forward(J.JobStore.webhook_checks)

    def claim_key(self, scope: str, key: str, fingerprint: str, ttl_s: float = 86400.0) -> dict | None:
        """An ``Idempotency-Key``: None when new (reserved now), else what it made (``store.claim_key``);
        keys older than ``ttl_s`` are forgotten first."""
        self.store.purge_keys(time.time() - ttl_s)
        return self.store.claim_key(scope, key, fingerprint)

    # ---- retention ----------------------------------------------------------------------

    def apply_retention(self, now: float | None = None):
        """Expire renders and remove uploads past the retention's age or over its size (``Swept``)."""
        return self.sweeper.apply(now)

    def _changed(self, job: J.Job) -> J.Job:
        self._emit("state", job.id, job)
        self._poke()  # what is claimed (and prepared) next may have changed
        return job

    def _checked(self, job_id: int, check: dict | None) -> None:
        """A check started (``check`` None) or ended: into the job's result, and an event."""
        if check is not None and isinstance(check.get("files"), dict):  # its report: a side file of the job
            check = dict(check)
            files = {**((self.store.get(job_id).result or {}).get("files") or {}), **check.pop("files")}
            job = self.store.update_result(job_id, check=check, files=files)
        else:
            job = self.store.update_result(job_id, check=check if check is not None else {"state": "running"})
        self._emit("checked", job_id, job)

    def _poke(self) -> None:
        self.runner.poke()


def gpus_here() -> list[str]:
    """The CUDA devices of this machine (for "All GPUs here"); [] without torch or a GPU."""
    from studio.core.scale.multigpu import cuda_devices

    return cuda_devices()

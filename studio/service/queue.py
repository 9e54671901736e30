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
"""

from __future__ import annotations

import builtins  # QueueService.list shadows list in its annotations
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from studio.core.errors import Cancelled, InputError, StudioError
from studio.core.settings import from_dict as settings_from_dict
from studio.core.store import jobs as J
from studio.core.store.files import numbered, numbered_names  # noqa: F401 - numbered: for views
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
from studio.service.driver import Progress, Render
from studio.service.request import Placement, RenderRequest
from studio.service.slots import Slots

log = logging.getLogger(__name__)

STORE_PROGRESS_S = 1.0  # persisted progress at most this often
_HANDED = object()  # _consume: the job goes on in the drain thread
RETENTION_EVERY_S = 60.0  # the runner applies retention this often (and after each job)


class QueueFull(StudioError):
    """Too many jobs are queued already (the server answers 429)."""


class JobFinished(InputError):
    """A finished job was asked to go without ``purge`` (the server answers 409)."""


class JobActive(InputError):
    """A job that has not finished was asked to be retried (the server answers 409)."""


@dataclass(frozen=True)
class Estimate:
    """Where a waiting job stands: ``position`` (1 = next; 0 = rendering now) and the seconds until it
    is expected to be done (None until the queue has finished a job to learn the speed from)."""

    position: int
    eta_s: float | None
    starts_in_s: float | None


@dataclass(frozen=True)
class QueueEvent:
    kind: str  # added | state | placed | progress | removed | moved | checked
    job_id: int
    job: J.Job | None = None
    progress: Progress | None = None
    where: str = ""


def request_of(job: J.Job) -> RenderRequest:
    """The ``RenderRequest`` a job row holds (rows of earlier versions included)."""
    s = dict(job.settings)
    frames = s.get("frames")
    return RenderRequest(
        job.avatar,
        job.audio,
        job.output,
        settings_from_dict(s),
        request_of_settings(s),
        tuple(frames) if frames else None,
        bool(s.get("overwrite", False)),
    )


def request_of_settings(s: dict) -> Placement:
    """Where a job's stored settings say it renders."""
    place = s.get("placement")
    if isinstance(place, dict):
        return Placement(
            kind=place.get("kind", "local"),
            devices=tuple(place.get("devices") or ()),
            chunks=int(place.get("chunks") or 0),
            farm=str(place.get("farm") or ""),
            server=str(place.get("server") or ""),
        )
    if s.get("render_on") == "farm":  # rows written by the window before the service
        return Placement("farm", farm=str(s.get("farm_address") or ""))
    if s.get("render_on") == "gpus":
        return Placement("gpus", devices=tuple(s.get("devices") or ()))
    return Placement()


def job_settings(req: RenderRequest) -> dict:
    """What the store keeps for a request: the render settings flat (as earlier rows), plus where
    and which frames."""
    d = req.to_dict()
    out = dict(d["settings"])
    out.update(placement=d["placement"], frames=d["frames"], overwrite=d["overwrite"])
    return out


def unique_output(path: str, taken: set[str]) -> str:
    """``path`` if no file and no other job has it, else the first free ``_002``, ``_003`` ...

    What the queue shows for a new job; the name is only claimed when the file is written
    (``studio.core.store.fsutil.claim``), so a file that appears meanwhile is never replaced."""
    for name in numbered_names(path):
        if not name.exists() and str(name.resolve()) not in taken:
            return str(name)
    raise InputError(f"no free name like {Path(path).name} in {Path(path).parent}")


def absolute_request(req: RenderRequest) -> RenderRequest:
    """``req`` with absolute paths (the voice-over, the output, an avatar that is a file), so a job
    means the same files whichever folder the process that runs it started in. A library
    avatar's name stays a name."""
    import os

    from studio.core.avatars.assets import library_dir

    avatar = req.avatar
    if not (library_dir() / avatar / "meta.json").exists() and (os.sep in avatar or Path(avatar).exists()):
        avatar = os.path.abspath(os.path.expanduser(avatar))
    return req.with_(
        avatar=avatar,
        audio=os.path.abspath(os.path.expanduser(req.audio)),
        output=os.path.abspath(os.path.expanduser(req.output)),
    )


def relative_paths(job: J.Job) -> list[str]:
    """Paths a job row holds that are not absolute (rows queued by an earlier Studio)."""
    from studio.core.avatars.assets import NAME_RE

    out = [p for p in (job.audio, job.output) if p and not Path(p).is_absolute()]
    if job.avatar and not Path(job.avatar).is_absolute() and not NAME_RE.match(job.avatar):
        out.append(job.avatar)
    return out


def file_identity(path: str | Path) -> str:
    """What a finished job records about its file (device, inode, size, modification time): a file
    replaced or moved in later no longer matches, so a job never serves another's file."""
    st = os.stat(path)
    return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"


def owned_output(job: J.Job) -> Path | None:
    """The file a done job wrote, while it is still that file (None: gone, or replaced by another
    job's or anyone's); rows of earlier versions, which recorded no identity, by name only."""
    if job.state != J.DONE or not job.output:
        return None
    path = Path(job.output)
    want = (job.result or {}).get("output_id")
    try:
        if not path.is_file():
            return None
        return path if not want or file_identity(path) == want else None
    except OSError:
        return None


class QueueService(Slots):
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
    ):
        from studio.core import env
        from studio.service.pool import default_pool
        from studio.service.retention import Retention

        self.store = store if isinstance(store, J.JobStore) else J.JobStore(store)  # a path, or None: the default
        self.pool = pool if pool is not None else default_pool()
        self.max_queued = max_queued
        self.in_process_farm = in_process_farm
        self._subs: list[Callable[[QueueEvent], None]] = []
        self._lock = threading.RLock()
        self._wake = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None
        self._stop = False
        self._current: tuple[int, Render] | None = None
        self.pipeline = env.flag("STUDIO_QUEUE_PIPELINE") if pipeline is None else bool(pipeline)
        self._draining: tuple[int, Render, threading.Thread] | None = None  # a job finishing its file
        self._idle_engine = None  # the last job's engine: it warms its other batch sizes when idle
        self._farm_link = None  # kept warm between farm jobs
        self._interrupting = False
        self.last_progress: dict[int, Progress] = {}
        self.retention = retention if retention is not None else Retention.from_env(strict=False)
        self._swept = float("-inf")  # monotonic time of the last retention sweep
        self._frames_cache: dict[tuple, int] = {}
        self._rates: dict[tuple, object] = {}  # (job id, avatar, fps setting) -> its output rate
        from studio.service.checks import CheckRunner

        self.checks = CheckRunner(on_done=self._checked, on_start=lambda job_id: self._checked(job_id, None))
        #: where jobs run at once (``studio serve --gpus``; None: the job's own device setting) and how
        #: many on each; more than one in all: each job on its own thread, on the least busy device
        self.devices: builtins.list[str | None] = list(devices) if devices else [None]
        self.jobs_per_device = max(1, int(jobs_per_device))
        self._workers: dict[int, tuple[Render | None, int, threading.Thread]] = {}  # job id -> (render, slot, thread)
        #: ``studio serve --farm``: a ``FarmDispatcher`` renders the jobs on a Ray cluster's actors
        self.dispatcher = dispatcher

    # ---- events -------------------------------------------------------------------------

    def subscribe(self, callback: Callable[[QueueEvent], None]) -> Callable[[], None]:
        with self._lock:
            self._subs.append(callback)

        def unsubscribe():
            with self._lock:
                if callback in self._subs:
                    self._subs.remove(callback)

        return unsubscribe

    def _emit(self, kind: str, job_id: int, job=None, progress=None, where: str = "") -> None:
        with self._lock:
            subs = list(self._subs)
        ev = QueueEvent(kind, job_id, job, progress, where)
        for cb in subs:
            try:
                cb(ev)
            except Exception:
                log.exception("queue subscriber failed on %s", kind)

    # ---- the queue ----------------------------------------------------------------------

    def add(
        self,
        request: RenderRequest,
        state: str = J.QUEUED,
        *,
        retry_of: int | None = None,
        webhook: str = "",
        client: str = "",
    ) -> J.Job:
        """Queue (or keep as a draft) a request; its output gets a free numbered name unless
        ``overwrite``. Bad requests are refused here, before they reach the queue. ``webhook``: a URL
        ``studio serve`` tells of the job's final state; ``client``: the server's client that owns it."""
        from studio.service.driver import check_output

        request = absolute_request(request)
        output = request.output
        if not request.overwrite:
            from studio.core.store.files import check_kept_name

            check_kept_name(output)  # a kept file whose numbered name cannot be made: one sentence
            output = unique_output(output, self._taken())
        check_output(output, request.avatar, request.audio, codec=request.settings.codec)
        request = request.with_(output=output)
        try:
            job = self.store.add(
                request.avatar,
                request.audio,
                job_settings(request),
                output,
                state=state,
                max_queued=self.max_queued,
                retry_of=retry_of,
                webhook=webhook,
                client=client,
            )
        except J.QueueLimit as exc:
            raise QueueFull(str(exc)) from None
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
        with self._lock:
            live = [c for c in (self._current, self._draining) if c is not None]
            live += [(i, w[0]) for i, w in self._workers.items() if w[0] is not None]
        for cur in live:
            if cur[0] == job_id:
                cur[1].cancel()
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
        again = self.add(req, retry_of=job_id, webhook=job.webhook, client=job.client)  # still its client's
        return again

    def retries(self, job_id: int) -> int:
        """Jobs made by rendering this job's original again (``JobStore.retries``)."""
        return self.store.retries(job_id)

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
        job = self._changed(self.store.resume(job_id))
        self._poke()
        return job

    def move(self, job_id: int, index: int) -> J.Job:
        job = self.store.move(job_id, index)
        self._emit("moved", job_id, job)
        return job

    def remove(self, job_id: int) -> None:
        self.store.remove(job_id)
        self.last_progress.pop(job_id, None)
        self._emit("removed", job_id)

    # ---- pages, estimates, idempotency, deliveries (what ``studio serve`` shows) ---------------

    def page(
        self,
        states: tuple[str, ...] | None = None,
        before: int | None = None,
        limit: int = 50,
        client: str | None = None,
    ) -> builtins.list[J.Job]:
        """Jobs newest first, ids below ``before`` (a cursor that holds while the queue changes);
        ``client``: only that client's (None: every job)."""
        return self.store.page(states, before, limit, client)

    def estimates(self) -> dict[int, Estimate]:
        """The running job and every queued one (in queue order): position and expected seconds.

        The speed is learnt from the last finished jobs (seconds per frame, loading included); the
        running job's remaining frames from its progress."""
        jobs = self.store.list((J.QUEUED, J.RUNNING))
        if not jobs:
            return {}
        spf = self._seconds_per_frame()
        out: dict[int, Estimate] = {}
        clock: float | None = 0.0  # seconds from now until the job being placed can start
        running = [j for j in jobs if j.state == J.RUNNING]
        for j in running:  # one, normally (another process may run one too)
            p = self.last_progress.get(j.id)
            frames = self._frames_of(j)
            if p is not None and p.fps > 0:
                left: float | None = max(0, p.total - p.done) / p.fps
            else:
                left = None if spf is None or frames is None else frames * (1 - j.progress) * spf
            out[j.id] = Estimate(0, left, 0.0)
            clock = None if clock is None or left is None else max(clock, left)
        waiting = sorted((j for j in jobs if j.state == J.QUEUED), key=lambda j: (j.position, j.id))
        for n, j in enumerate(waiting, start=1):
            frames = self._frames_of(j)
            took = None if spf is None or frames is None else frames * spf
            done = None if clock is None or took is None else clock + took
            out[j.id] = Estimate(n, done, clock)
            clock = done
        return out

    def _seconds_per_frame(self) -> float | None:
        done = [j.result for j in self.store.page((J.DONE, J.EXPIRED), limit=20)]
        frames = sum(int(r.get("frames") or 0) for r in done if r.get("seconds"))
        seconds = sum(float(r.get("seconds") or 0) for r in done if r.get("frames"))
        return seconds / frames if frames > 0 and seconds > 0 else None

    def _frames_of(self, job: J.Job) -> int | None:
        frames = job.settings.get("frames")
        if frames:
            return int(frames[1]) - int(frames[0])
        try:
            st = Path(job.audio).stat()
        except OSError:
            return None
        rate = self._rate_of(job)
        key = (job.audio, st.st_size, st.st_mtime_ns, rate)
        if key not in self._frames_cache:
            from studio.core.media.audio import probe

            try:
                self._frames_cache[key] = probe(job.audio).frames_at(rate)
            except StudioError:
                return None
        return self._frames_cache[key]

    def _rate_of(self, job: J.Job):
        """The job's own output rate (a 60 fps job has 2.4x the frames of a 25 fps one), once per job
        and setting: ``auto`` with a video file reads the video's header, not on every listing."""
        from studio.core.avatars.library import output_rate_for
        from studio.core.media.rates import DEFAULT_RATE

        key = (job.id, job.avatar, job.settings.get("fps"))
        if key not in self._rates:
            if len(self._rates) > 10_000:
                self._rates.clear()
            try:
                self._rates[key] = output_rate_for(key[2], job.avatar)
            except (StudioError, OSError, ValueError):
                return DEFAULT_RATE  # not kept: the avatar may be fixed before the job runs
        return self._rates[key]

    def claim_key(self, scope: str, key: str, fingerprint: str, ttl_s: float = 86400.0) -> dict | None:
        """An ``Idempotency-Key``: None when new (reserved now), else what it made (``store.claim_key``);
        keys older than ``ttl_s`` are forgotten first."""
        self.store.purge_keys(time.time() - ttl_s)
        return self.store.claim_key(scope, key, fingerprint)

    def finish_key(self, scope: str, key: str, job_id: int | None = None, answer: dict | None = None) -> None:
        self.store.finish_key(scope, key, job_id, answer)

    def release_key(self, scope: str, key: str) -> None:
        self.store.release_key(scope, key)

    def deliveries(self, job_id: int) -> builtins.list[dict]:
        return self.store.deliveries(job_id)

    def add_delivery(self, job_id: int, state: str, url: str, attempt: int, ok: bool, status, error: str) -> None:
        self.store.add_delivery(job_id, state, url, attempt, ok, status, error)

    def webhook_jobs(self, max_attempts: int | None = None) -> builtins.list[J.Job]:
        """Finished jobs whose webhook is still to be told (``store.webhook_jobs``)."""
        return self.store.webhook_jobs(max_attempts)

    def webhook_checks(self, max_attempts: int | None = None) -> builtins.list[J.Job]:
        """Done jobs whose check ended and whose webhook is still to be told of it (``store.webhook_checks``)."""
        return self.store.webhook_checks(max_attempts)

    # ---- retention ----------------------------------------------------------------------

    def apply_retention(self, now: float | None = None):
        """Expire renders and remove uploads past the retention's age or over its size (``Swept``)."""
        from studio.service.retention import sweep

        self._swept = time.monotonic()
        swept = sweep(self, self.retention, now)
        for job in swept.jobs:
            self._emit("state", job.id, job)
        return swept

    def _maybe_sweep(self) -> None:
        if self.retention.active and time.monotonic() - self._swept >= RETENTION_EVERY_S:
            try:
                self.apply_retention()
            except Exception:
                log.exception("retention sweep failed")

    def _changed(self, job: J.Job) -> J.Job:
        self._emit("state", job.id, job)
        return job

    @property
    def farm_link(self):
        """The link to the Ray farm (a child process), while a farm job runs and kept between them."""
        with self._lock:
            cur = self._current
        return cur[1].farm_link if cur is not None and cur[1].farm_link is not None else self._farm_link

    @property
    def running_job_id(self) -> int | None:
        """The job the engine works on (else the one finishing its file)."""
        with self._lock:
            cur = self._current or self._draining
            return cur[0] if cur else next(iter(self._workers), None)

    @property
    def running_job_ids(self) -> builtins.list[int]:
        """Every running job: the one on the engine and the one whose encoders drain."""
        with self._lock:
            return [c[0] for c in (self._draining, self._current) if c is not None] + list(self._workers)

    # ---- running ------------------------------------------------------------------------

    def run_next(self) -> J.Job | None:
        """Claim and run the next queued job in this thread; None when nothing is queued. A
        pipelined job is answered (still ``running``) once its frames have left the engine: its
        file is finished on the drain thread (``wait_drained``)."""
        job = self.store.claim_next()
        if job is None:
            return None
        self._emit("state", job.id, job)
        return self._run(job)

    def run_until_empty(self, on_event: Callable[[QueueEvent], None] | None = None) -> builtins.list[J.Job]:
        """Run queued jobs in this thread until none is left; the finished jobs."""
        unsub = self.subscribe(on_event) if on_event else None
        self._maybe_sweep()
        try:
            out = []
            while not self._stop and (job := self.run_next()) is not None:
                out.append(job)
            self.wait_drained()
            self.checks.wait()  # the checks of the finished jobs, before the caller (a command) ends
            return [f for j in out if (f := self._fresh(j)) is not None]  # a job removed meanwhile is left out
        finally:
            if unsub:
                unsub()

    def wait_drained(self, timeout: float | None = None) -> None:
        """Wait until no job is finishing its file on the drain thread."""
        with self._lock:
            d = self._draining
        if d is not None and d[2] is not threading.current_thread():
            d[2].join(timeout)

    def start(self) -> None:
        """Run queued jobs on a background thread until ``stop`` (jobs added later run too). The
        encoder processes start meanwhile, so the first job does not wait for them."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stop = self._interrupting = False
            self._thread = threading.Thread(target=self._loop, name="studio-queue", daemon=True)
            self._thread.start()
        threading.Thread(target=_prestart_encoders, name="studio-encoders-start", daemon=True).start()

    @property
    def started(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and not self._stop

    def stop(self, interrupt: bool = False, timeout: float | None = 30.0) -> None:
        """Stop the runner after the running job (``pause``), or stop that job now (``interrupt``):
        it stops within one batch, writes nothing, and is marked ``interrupted`` (Retry runs it)."""
        with self._lock:
            self._stop = True
            self._interrupting = interrupt
            live = [c for c in (self._current, self._draining) if c is not None]
            live += [(i, w[0]) for i, w in self._workers.items() if w[0] is not None]
            workers = [w[2] for w in self._workers.values()]
            self._wake.notify_all()
        if interrupt:
            for cur in live:
                cur[1].cancel()
        t = self._thread
        if timeout is not None and t is not None and t is not threading.current_thread():
            t.join(timeout)  # timeout None: do not wait (a pause lets the running job finish)
        for w in workers if timeout is not None else ():
            if w is not threading.current_thread():
                w.join(timeout)
        if timeout is not None:
            self.wait_drained(timeout)

    def close(self, timeout: float = 30.0) -> None:
        """Stop now (a running job is interrupted) and leave the farm. ``timeout``: how long to wait
        for the runner (a server waits less: a step that cannot be cut short, such as a cold import
        of the engine's libraries, must not keep it past a container's stop deadline; a job left
        running is marked interrupted when the queue opens next)."""
        self.stop(interrupt=True, timeout=timeout)
        if self.dispatcher is not None:
            self.dispatcher.close()
        link, self._farm_link = self._farm_link, None
        if link is not None:
            link.close()
        self.checks.close()

    def _fresh(self, job: J.Job | None) -> J.Job | None:
        try:
            return self.store.get(job.id) if job is not None else None
        except InputError:  # removed meanwhile
            return job

    def _checked(self, job_id: int, check: dict | None) -> None:
        """A check started (``check`` None) or ended: into the job's result, and an event."""
        job = self.store.update_result(job_id, check=check if check is not None else {"state": "running"})
        self._emit("checked", job_id, job)

    def _poke(self) -> None:
        with self._lock:
            self._wake.notify_all()

    def _loop(self) -> None:
        if self.capacity > 1 or self.dispatcher is not None:
            return self._loop_many()
        while True:
            with self._lock:
                if self._stop:
                    return
            self._maybe_sweep()
            try:
                job = self.run_next()
            except Exception:
                log.exception("queue runner: could not take the next job")
                job = None
            if job is not None:
                self._swept = float("-inf")  # a new file: retention looks again before the next job
            if job is None:
                self._warm_idle()
                with self._lock:
                    if self._stop:
                        return
                    self._wake.wait(1.0)  # also picks up jobs queued by another process

    def _warm_idle(self) -> None:
        """Nothing queued: let the last job's engine capture its other batch sizes now (a warm
        server's short jobs then pay no capture), one at a time under its lock."""
        engine, self._idle_engine = self._idle_engine, None
        warm = getattr(engine, "warm_buckets", None)
        if warm is None:
            return
        try:
            lock = self.pool.lock_for(engine) if hasattr(self.pool, "lock_for") else None
            got = warm(lock=lock)
            if got:
                log.info("engine warmed while idle: CUDA graphs for batches %s", got)
        except Exception:
            log.warning("warming the engine's other batch sizes failed", exc_info=True)

    def _run(self, job: J.Job, slot: int | None = None) -> J.Job | None:
        relative = relative_paths(job)
        if relative:
            return self._finish(
                job.id,
                J.FAILED,
                f"this job names {relative[0]} without its folder (queued by an earlier Studio), so which file it "
                "means depends on where Studio runs; queue it again",
            )
        try:
            req = request_of(job)
        except StudioError as exc:
            return self._finish(job.id, J.FAILED, str(exc))
        device = self.devices[slot] if slot is not None else None
        if device is not None and req.placement.kind == "local" and req.settings.device in (None, "", "auto"):
            req = req.with_(settings=req.settings.with_(device=device))
        render = Render(
            req, self.pool, farm_link=self._farm_link, in_process_farm=self.in_process_farm, dispatcher=self.dispatcher
        )
        render.slot, render.job_id = slot or 0, job.id
        render.on_started = lambda where: self._emit("placed", job.id, self.store.get(job.id), where=where)
        with self._lock:
            if slot is None:
                self._current = (job.id, render)
            else:
                self._workers[job.id] = (render, slot, self._workers[job.id][2])
            if self._interrupting:  # stop(interrupt=True) came while this job was being claimed
                render.cancel()
        handed = False
        try:
            out = self._consume(job, render, render.run(), [0.0], may_hand_off=self.pipeline and slot is None)
            handed = out is _HANDED
            return self.store.get(job.id) if handed else out
        finally:
            if not handed:
                self._farm_link = render.farm_link  # kept warm for the next farm job (None once lost)
            with self._lock:
                if self._current is not None and self._current[0] == job.id:
                    self._current = None

    def _consume(self, job: J.Job, render: Render, gen, last_store: builtins.list, may_hand_off: bool):
        """Run ``gen`` (the render's progress) to its end: the job's final row. With
        ``may_hand_off``, a local render whose last frame has left the engine goes on in a drain
        thread instead (``_HANDED``): its encoders drain while the runner takes the next job."""
        try:
            for p in gen:
                self.last_progress[job.id] = replace(p, preview=None)  # kept per job: no frames
                now = time.monotonic()
                if now - last_store[0] >= STORE_PROGRESS_S or p.finished:
                    last_store[0] = now
                    self.store.set_progress(job.id, p.fraction)
                    if self.store.get(job.id).state != J.RUNNING:  # cancelled by another process's view
                        render.cancel()
                self._emit("progress", job.id, progress=p, where=render.where)
                if may_hand_off and self._engine_done(render, p):
                    self._hand_off(job, render, gen, last_store)
                    return _HANDED
            r = render.result
            data = r.to_json() if r is not None else {}
            data.update(ran_on=render.where, engine_reason=render.engine_reason or data.get("engine_reason", ""))
            data.update(render.extra)  # where on a farm, and how the file came back
            if data.get("output"):
                data["output"] = os.path.abspath(data["output"])
                with contextlib.suppress(OSError):
                    data["output_id"] = file_identity(data["output"])  # owned_output checks it
            req = render.request
            if req.settings.check:
                data["check"] = {"state": "pending"}
            done = self.store.finish(job.id, output=data.get("output"), result=data)
            self._emit("state", job.id, done, where=render.where)
            if req.settings.check and done.state == J.DONE:
                self.checks.submit(job.id, req, done.output)
            self._idle_engine = render.engine or self._idle_engine
            return done
        except Cancelled:
            return self._cancelled(job.id)
        except StudioError as exc:
            if render.cancelled:
                return self._cancelled(job.id)
            return self._finish(job.id, J.FAILED, str(exc))
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                self._finish(job.id, J.CANCELLED, "cancelled by the user")
                raise
            log.error("job %d failed", job.id, exc_info=True)
            from studio.core.env import log_file

            return self._finish(
                job.id, J.FAILED, f"internal error ({type(exc).__name__}: {exc}); the details are in {log_file()}"
            )

    @staticmethod
    def _engine_done(render: Render, p: Progress) -> bool:
        """Every frame has left the engine; what is left is the encoders' drain and the file."""
        return render.request.placement.kind == "local" and not p.finished and 0 < p.total <= p.done

    def _hand_off(self, job: J.Job, render: Render, gen, last_store: builtins.list) -> None:
        """Finish ``job`` on a drain thread (after the previous one: at most one drains)."""
        self.wait_drained()
        t = threading.Thread(
            target=self._drain, args=(job, render, gen, last_store), name=f"studio-queue-drain-{job.id}", daemon=True
        )
        with self._lock:
            self._draining = (job.id, render, t)
            if self._current is not None and self._current[0] == job.id:
                self._current = None
        t.start()

    def _drain(self, job: J.Job, render: Render, gen, last_store: builtins.list) -> None:
        try:
            self._consume(job, render, gen, last_store, may_hand_off=False)
        finally:
            with self._lock:
                if self._draining is not None and self._draining[0] == job.id:
                    self._draining = None
                self._wake.notify_all()

    def _cancelled(self, job_id: int) -> J.Job | None:
        if self._interrupting:
            return self._finish(job_id, J.INTERRUPTED_STATE, J.INTERRUPTED)
        return self._finish(job_id, J.CANCELLED, "cancelled by the user")

    def _finish(self, job_id: int, state: str, reason: str) -> J.Job | None:
        try:
            if state in (J.CANCELLED, J.INTERRUPTED_STATE):
                job = self.store.get(job_id)
                if job.state == J.RUNNING:
                    job = self.store.cancel(job_id, reason) if state == J.CANCELLED else self.store.interrupt(job_id)
            else:
                job = self.store.fail(job_id, reason)
        except InputError:  # removed meanwhile
            return self.store.get(job_id) if any(j.id == job_id for j in self.store.list()) else None
        self._emit("state", job_id, job)
        return job


def _prestart_encoders() -> None:
    """Start the parallel x264 encoder processes (one per core) and the audio one, where renders
    use them (4 cores or more)."""
    import os

    from studio.core import env

    cores = os.cpu_count() or 1
    if cores < 4 or env.get("STUDIO_X264_PROCESSES") == "0":
        return
    try:
        from studio.core.media.x264_pool import prestart

        prestart(env.get_int("STUDIO_X264_WORKERS") or cores)
    except Exception:
        log.warning("starting the encoder processes ahead failed", exc_info=True)


def gpus_here() -> list[str]:
    """The CUDA devices of this machine (for "All GPUs here"); [] without torch or a GPU."""
    from studio.core.scale.multigpu import cuda_devices

    return cuda_devices()

"""The render queue, Qt-free: ``QueueService`` runs jobs from the SQLite store and tells subscribers.

    qs = QueueService()                                   # <data>/jobs.sqlite, the default engine pool
    job = qs.add(RenderRequest("anna", "voice.flac", "out.mp4"))     # queued; "out_002.mp4" if taken
    unsubscribe = qs.subscribe(lambda ev: print(ev.kind, ev.job_id))
    qs.run_until_empty()                                  # foreground (``studio queue run``), or
    qs.start(); ...; qs.stop()                            # a runner thread (the window, the server)
    qs.cancel(job.id); qs.retry(job.id); qs.hold(id); qs.resume(id); qs.move(id, 0); qs.remove(id)

Jobs run one after another, in queue order, through the one driver (``Render``) on the shared
engine pool, so engines stay warm between jobs. States and progress are persisted (progress at
most once a second), so every view of the same store (the window, ``studio queue list``, the
server) sees the same queue. Nothing starts by itself: queued jobs wait until ``start`` or
``run_until_empty`` is called; a job that was running when its process died comes back
``interrupted`` (the store does it on open).

Events go to plain callbacks, called on the runner's thread (a Qt view re-emits them as queued
signals): ``added``, ``state`` (any change of a job's state), ``progress`` (per batch, with the
``Progress``), ``placed`` (the running job's placement is known: ``where``), ``removed``, ``moved``.
"""

from __future__ import annotations

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
from studio.core.store.outputs import numbered, numbered_names  # noqa: F401 - numbered: for views
from studio.service.driver import Progress, Render
from studio.service.request import Placement, RenderRequest

log = logging.getLogger(__name__)

STORE_PROGRESS_S = 1.0  # persisted progress at most this often


class QueueFull(StudioError):
    """Too many jobs are queued already (the server answers 429)."""


@dataclass(frozen=True)
class QueueEvent:
    kind: str  # added | state | placed | progress | removed | moved
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


class QueueService:
    def __init__(
        self,
        store: J.JobStore | str | Path | None = None,
        pool=None,
        *,
        max_queued: int | None = None,
        in_process_farm: bool = False,
    ):
        from studio.service.pool import default_pool

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
        self._farm_link = None  # kept warm between farm jobs
        self._interrupting = False
        self.last_progress: dict[int, Progress] = {}

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

    def add(self, request: RenderRequest, state: str = J.QUEUED) -> J.Job:
        """Queue (or keep as a draft) a request; its output gets a free numbered name unless
        ``overwrite``. Bad requests are refused here, before they reach the queue."""
        from studio.service.driver import check_output

        request = absolute_request(request)
        output = request.output
        if not request.overwrite:
            output = unique_output(output, self._taken())
        check_output(output, request.avatar, request.audio)
        request = request.with_(output=output)
        try:
            job = self.store.add(
                request.avatar, request.audio, job_settings(request), output, state=state, max_queued=self.max_queued
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
            cur = self._current
        if cur is not None and cur[0] == job_id:
            cur[1].cancel()
            return self.store.get(job_id)
        return self._changed(self.store.cancel(job_id))

    def retry(self, job_id: int) -> J.Job:
        """Back in the queue; when its file exists (a done job retried) it writes a new numbered one."""
        job = self.store.get(job_id)
        if job.damaged:
            raise InputError(job.reason)
        req = request_of(job)
        out = req.output if req.overwrite else unique_output(req.output, self._taken(but=job_id))
        job = self._changed(self.store.retry(job_id, output=out))
        self._poke()
        return job

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
        with self._lock:
            return self._current[0] if self._current else None

    # ---- running ------------------------------------------------------------------------

    def run_next(self) -> J.Job | None:
        """Claim and run the next queued job in this thread; None when nothing is queued."""
        job = self.store.claim_next()
        if job is None:
            return None
        self._emit("state", job.id, job)
        return self._run(job)

    def run_until_empty(self, on_event: Callable[[QueueEvent], None] | None = None) -> list[J.Job]:
        """Run queued jobs in this thread until none is left; the finished jobs."""
        unsub = self.subscribe(on_event) if on_event else None
        try:
            out = []
            while not self._stop and (job := self.run_next()) is not None:
                out.append(job)
            return out
        finally:
            if unsub:
                unsub()

    def start(self) -> None:
        """Run queued jobs on a background thread until ``stop`` (jobs added later run too)."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stop = self._interrupting = False
            self._thread = threading.Thread(target=self._loop, name="studio-queue", daemon=True)
            self._thread.start()

    @property
    def started(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and not self._stop

    def stop(self, interrupt: bool = False, timeout: float | None = 30.0) -> None:
        """Stop the runner after the running job (``pause``), or stop that job now (``interrupt``):
        it stops within one batch, writes nothing, and is marked ``interrupted`` (Retry runs it)."""
        with self._lock:
            self._stop = True
            self._interrupting = interrupt
            cur = self._current
            self._wake.notify_all()
        if cur is not None and interrupt:
            cur[1].cancel()
        t = self._thread
        if timeout is not None and t is not None and t is not threading.current_thread():
            t.join(timeout)  # timeout None: do not wait (a pause lets the running job finish)

    def close(self) -> None:
        """Stop now (a running job is interrupted) and leave the farm."""
        self.stop(interrupt=True)
        link, self._farm_link = self._farm_link, None
        if link is not None:
            link.close()

    def _poke(self) -> None:
        with self._lock:
            self._wake.notify_all()

    def _loop(self) -> None:
        while True:
            with self._lock:
                if self._stop:
                    return
            try:
                job = self.run_next()
            except Exception:
                log.exception("queue runner: could not take the next job")
                job = None
            if job is None:
                with self._lock:
                    if self._stop:
                        return
                    self._wake.wait(1.0)  # also picks up jobs queued by another process

    def _run(self, job: J.Job) -> J.Job:
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
        render = Render(req, self.pool, farm_link=self._farm_link, in_process_farm=self.in_process_farm)
        render.on_started = lambda where: self._emit("placed", job.id, self.store.get(job.id), where=where)
        with self._lock:
            self._current = (job.id, render)
        last_store = 0.0
        try:
            for p in render.run():
                self.last_progress[job.id] = replace(p, preview=None)  # kept per job: no frames
                now = time.monotonic()
                if now - last_store >= STORE_PROGRESS_S or p.finished:
                    last_store = now
                    self.store.set_progress(job.id, p.fraction)
                    if self.store.get(job.id).state != J.RUNNING:  # cancelled by another process's view
                        render.cancel()
                self._emit("progress", job.id, progress=p, where=render.where)
            r = render.result
            data = r.to_json() if hasattr(r, "to_json") else dict(r or {})
            data.update(ran_on=render.where, engine_reason=render.engine_reason or data.get("engine_reason", ""))
            if data.get("output"):
                data["output"] = os.path.abspath(data["output"])
                with contextlib.suppress(OSError):
                    data["output_id"] = file_identity(data["output"])  # owned_output checks it
            done = self.store.finish(job.id, output=data.get("output"), result=data)
            self._emit("state", job.id, done, where=render.where)
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
            from studio.core.store.paths import log_file

            return self._finish(
                job.id, J.FAILED, f"internal error ({type(exc).__name__}: {exc}); the details are in {log_file()}"
            )
        finally:
            self._farm_link = render.farm_link  # kept warm for the next farm job (None once lost)
            with self._lock:
                self._current = None

    def _cancelled(self, job_id: int) -> J.Job:
        if self._interrupting:
            return self._finish(job_id, J.INTERRUPTED_STATE, J.INTERRUPTED)
        return self._finish(job_id, J.CANCELLED, "cancelled by the user")

    def _finish(self, job_id: int, state: str, reason: str) -> J.Job:
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


def gpus_here() -> list[str]:
    """The CUDA devices of this machine (for "All GPUs here"); [] without torch or a GPU."""
    from studio.core.scale.multigpu import cuda_devices

    return cuda_devices()

"""The render queue, Qt-free: ``QueueService`` runs jobs from the SQLite store and tells subscribers.

    qs = QueueService()                                   # <data>/jobs.sqlite, the default engine pool
    job = qs.add(RenderRequest("anna", "voice.flac", "out.mp4"))     # queued; "out_002.mp4" if taken
    unsubscribe = qs.subscribe(lambda ev: print(ev.kind, ev.job_id))
    qs.run_until_empty()                                  # foreground (``studio queue run``), or
    qs.start(); ...; qs.stop()                            # a runner thread (the window, the server)
    qs.cancel(job.id); qs.retry(job.id); qs.hold(id); qs.resume(id); qs.move(id, 0); qs.remove(id)

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

Events go to plain callbacks, called on the runner's thread (a Qt view re-emits them as queued
signals): ``added``, ``state`` (any change of a job's state), ``progress`` (per batch, with the
``Progress``), ``placed`` (the running job's placement is known: ``where``), ``removed``, ``moved``.
"""

from __future__ import annotations

import logging
import re
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
from studio.service.driver import Progress, Render
from studio.service.request import Placement, RenderRequest

log = logging.getLogger(__name__)

STORE_PROGRESS_S = 1.0  # persisted progress at most this often
_HANDED = object()  # _consume: the job goes on in the drain thread


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


_NUMBERED = re.compile(r"^(.*)_(\d{3,})$")


def numbered(path: str, n: int) -> str:
    """``out.mp4`` -> ``out_002.mp4`` (n=2); an already numbered stem is renumbered."""
    p = Path(path)
    m = _NUMBERED.match(p.stem)
    stem = m.group(1) if m else p.stem
    return str(p.with_name(f"{stem}_{n:03d}{p.suffix}"))


def unique_output(path: str, taken: set[str]) -> str:
    """``path`` if no file and no other job has it, else the first free ``_002``, ``_003`` ..."""

    def free(c: str) -> bool:
        return not Path(c).exists() and str(Path(c).resolve()) not in taken

    if free(path):
        return path
    m = _NUMBERED.match(Path(path).stem)
    n = int(m.group(2)) + 1 if m else 2
    while not free(numbered(path, n)):
        n += 1
    return numbered(path, n)


class QueueService:
    def __init__(
        self,
        store: J.JobStore | str | Path | None = None,
        pool=None,
        *,
        max_queued: int | None = None,
        in_process_farm: bool = False,
        pipeline: bool | None = None,
    ):
        from studio.core import env
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
        self.pipeline = env.flag("STUDIO_QUEUE_PIPELINE") if pipeline is None else bool(pipeline)
        self._draining: tuple[int, Render, threading.Thread] | None = None  # a job finishing its file
        self._idle_engine = None  # the last job's engine: it warms its other batch sizes when idle
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

        inputs = [request.audio] + ([request.avatar] if Path(request.avatar).exists() else [])
        output = request.output
        if not request.overwrite:
            output = unique_output(output, self._taken())
        check_output(output, inputs)
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
            live = [c for c in (self._current, self._draining) if c is not None]
        for cur in live:
            if cur[0] == job_id:
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
        """The job the engine works on (else the one finishing its file)."""
        with self._lock:
            cur = self._current or self._draining
            return cur[0] if cur else None

    @property
    def running_job_ids(self) -> list[int]:
        """Every running job: the one on the engine and the one whose encoders drain."""
        with self._lock:
            return [c[0] for c in (self._draining, self._current) if c is not None]

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

    def run_until_empty(self, on_event: Callable[[QueueEvent], None] | None = None) -> list[J.Job]:
        """Run queued jobs in this thread until none is left; the finished jobs."""
        unsub = self.subscribe(on_event) if on_event else None
        try:
            out = []
            while not self._stop and (job := self.run_next()) is not None:
                out.append(job)
            self.wait_drained()
            return [self._row(j) for j in out]
        finally:
            if unsub:
                unsub()

    def wait_drained(self, timeout: float | None = None) -> None:
        """Wait until no job is finishing its file on the drain thread."""
        with self._lock:
            d = self._draining
        if d is not None and d[2] is not threading.current_thread():
            d[2].join(timeout)

    def _row(self, job: J.Job) -> J.Job:
        try:
            return self.store.get(job.id)
        except InputError:  # removed meanwhile
            return job

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
            self._wake.notify_all()
        if interrupt:
            for cur in live:
                cur[1].cancel()
        t = self._thread
        if timeout is not None and t is not None and t is not threading.current_thread():
            t.join(timeout)  # timeout None: do not wait (a pause lets the running job finish)
        if timeout is not None:
            self.wait_drained(timeout)

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

    def _run(self, job: J.Job) -> J.Job:
        try:
            req = request_of(job)
        except StudioError as exc:
            return self._finish(job.id, J.FAILED, str(exc))
        render = Render(req, self.pool, farm_link=self._farm_link, in_process_farm=self.in_process_farm)
        render.on_started = lambda where: self._emit("placed", job.id, self.store.get(job.id), where=where)
        with self._lock:
            self._current = (job.id, render)
        handed = False
        try:
            out = self._consume(job, render, render.run(), [0.0], may_hand_off=self.pipeline)
            handed = out is _HANDED
            return self.store.get(job.id) if handed else out
        finally:
            if not handed:
                self._farm_link = render.farm_link  # kept warm for the next farm job (None once lost)
            with self._lock:
                if self._current is not None and self._current[0] == job.id:
                    self._current = None

    def _consume(self, job: J.Job, render: Render, gen, last_store: list, may_hand_off: bool):
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
            data = r.to_json() if hasattr(r, "to_json") else dict(r or {})
            data.update(ran_on=render.where, engine_reason=render.engine_reason or data.get("engine_reason", ""))
            done = self.store.finish(job.id, output=data.get("output"), result=data)
            self._emit("state", job.id, done, where=render.where)
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
            from studio.core.store.paths import log_file

            return self._finish(
                job.id, J.FAILED, f"internal error ({type(exc).__name__}: {exc}); the details are in {log_file()}"
            )

    @staticmethod
    def _engine_done(render: Render, p: Progress) -> bool:
        """Every frame has left the engine; what is left is the encoders' drain and the file."""
        return render.request.placement.kind == "local" and not p.finished and 0 < p.total <= p.done

    def _hand_off(self, job: J.Job, render: Render, gen, last_store: list) -> None:
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

    def _drain(self, job: J.Job, render: Render, gen, last_store: list) -> None:
        try:
            self._consume(job, render, gen, last_store, may_hand_off=False)
        finally:
            with self._lock:
                if self._draining is not None and self._draining[0] == job.id:
                    self._draining = None
                self._wake.notify_all()

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

"""Work off the GUI thread, and the service's events as Qt signals.

``RenderWorker`` is a QObject living on its own QThread. It is the window's view of the render
service: the queue runner (``studio.service.QueueService``, on its own thread) renders jobs, and
the worker re-emits the runner's events as signals (``placed``, ``started``, ``progress``,
``preview``, ``finished``, ``failed``, ``cancelled``), which Qt queues to the GUI thread. It also
renders single frames for scrubbing (``request_frame``, coalesced so only the newest timestamp is
computed) on the service's warm engine pool: during a render the scrub frame takes its turn on the
shared engine between two of the render's batches, so an editor can check frames while a long
render runs. ``cancel`` is thread-safe and stops the running job within one batch.

``run_in_background`` runs one short job (import an avatar, analyse audio, the doctor) on a
daemon thread and delivers its result, progress and error as queued signals.
"""

from __future__ import annotations

import inspect
import logging
import threading
from dataclasses import dataclass

from PySide6.QtCore import QObject, QThread, Signal, Slot

log = logging.getLogger(__name__)

LOCAL = "this computer"


@dataclass(frozen=True)
class JobRun:
    """A job of the queue being rendered: what the signals carry."""

    job_id: int
    request: object  # studio.service.RenderRequest

    @property
    def output(self) -> str:
        return self.request.output

    @property
    def farm(self):
        p = self.request.placement
        return p.farm if p.kind == "farm" else None


def frame_index(seconds: float, rate=25) -> int:
    """The frame shown at ``seconds`` (the renderer's own rule, ``floor(t * rate)``)."""
    from studio.core.render.plan import frame_index as rule

    return rule(seconds, rate)


def _rate(settings, avatar):
    """The output rate of a scrub frame's render (25 where the avatar cannot be read here: a server's)."""
    from studio.core.avatars.library import output_rate_for
    from studio.core.errors import StudioError

    try:
        return output_rate_for(settings.fps, avatar)
    except (StudioError, OSError):
        return 25


def error_text(exc: BaseException) -> str:
    """One readable line: a StudioError's own sentence, or 'internal error' plus the log file."""
    from studio.core.errors import StudioError

    if isinstance(exc, StudioError):
        return str(exc)
    log.error("internal error", exc_info=(type(exc), exc, exc.__traceback__))
    from studio.core.env import log_file

    return f"internal error ({type(exc).__name__}: {exc}); the details are in {log_file()}"


class RenderWorker(QObject):
    started = Signal(object)  # JobRun
    progress = Signal(object, object)  # JobRun, studio.service.Progress
    preview = Signal(object, int)  # RGB [H,W,3] uint8, frame index
    frameReady = Signal(float, int, object)  # seconds, frame index, RGB
    finished = Signal(object, object)  # JobRun, RenderResult
    failed = Signal(object, str)  # JobRun or None (a scrub frame), message
    cancelled = Signal(object)  # JobRun
    engineReady = Signal(str, str)  # engine name, why it was chosen
    placed = Signal(object, str)  # JobRun, where it runs: "this computer", "2 GPUs here", "farm (N workers)"
    queueChanged = Signal()  # any job of the queue changed (state, order, added, removed)
    checked = Signal(int, object)  # job id, its result's "check" (a lip-sync check started or ended)
    _frameTick = Signal()
    _relay = Signal(object)  # a service event, from the runner's thread to this worker's thread

    def __init__(self, service):
        super().__init__()
        self.service = service
        self.pool = service.pool
        self._lock = threading.Lock()
        self._pending: tuple | None = None  # (avatar, audio, settings, seconds)
        self._tick_posted = False
        self.run: JobRun | None = None  # the job being rendered
        self.remote = None  # a studio.service.remote.RemoteFrames: scrub frames from a Studio server
        self.engine_reason = ""
        self.generation = 0  # bumped by invalidate(): scrub clips of older generations are dropped
        self.frames_rendered = 0  # scrub frames actually computed (coalescing is visible here)
        self._frameTick.connect(self._serve_frame)
        self._relay.connect(self._event)
        # the runner calls back on its thread; the events are handled (and re-emitted) on this
        # worker's thread, in order, as all of its other signals are
        self._unsubscribe = service.subscribe(self._relay.emit)

    # ---- called from the GUI thread ---------------------------------------------------

    def request_frame(self, avatar: str, audio: str, settings, seconds: float) -> None:
        """Ask for the exact frame at ``seconds``; newer requests replace older unserved ones."""
        with self._lock:
            self._pending = (avatar, audio, settings, float(seconds))
            if self._tick_posted:
                return
            self._tick_posted = True
        self._frameTick.emit()

    def cancel(self) -> None:
        """Thread-safe: the running job stops within one batch and leaves no file."""
        run = self.run
        if run is not None:
            try:
                self.service.cancel(run.job_id)
            except Exception:
                log.debug("cancel of job %s ignored", run.job_id, exc_info=True)

    def invalidate(self) -> None:
        """Forget prepared scrub clips (an avatar was re-prepared); thread-safe."""
        self.generation += 1
        self.pool.invalidate()

    @property
    def busy(self) -> bool:
        return self.run is not None

    @property
    def farm(self):
        """The service's link to the Ray farm (None until a farm job ran)."""
        return self.service.farm_link

    # ---- the queue runner's events (its thread) -----------------------------------------

    @Slot(object)
    def _event(self, ev) -> None:
        from studio.service import queue as J  # the job states

        run = self.run
        if ev.kind == "placed":
            from studio.service.job_requests import request_of

            run = self.run = JobRun(ev.job_id, request_of(ev.job))
            self.placed.emit(run, ev.where)
            self.started.emit(run)
        elif ev.kind == "progress" and run is not None and run.job_id == ev.job_id:
            p = ev.progress
            if p.preview is not None:
                self.preview.emit(live_preview(p.preview), -1 if p.preview_index is None else int(p.preview_index))
            self.progress.emit(run, p)
        elif ev.kind == "state" and ev.job is not None and ev.job.state in J.FINAL:
            job = ev.job
            if run is None or run.job_id != job.id:
                from studio.service.job_requests import request_of

                try:
                    run = JobRun(job.id, request_of(job))
                except Exception:  # noqa: BLE001 - a job that never started (bad settings)
                    run = None
            was_running = self.run is not None and self.run.job_id == job.id
            if was_running:
                self.run = None
            reason = job.result.get("engine_reason") if job.result else ""
            if reason and reason != self.engine_reason:
                self.engine_reason = reason
                self.engineReady.emit(job.result.get("engine", ""), reason)
            if job.state == J.DONE:
                self.finished.emit(run, _result(job.result))
            elif job.state == J.FAILED and (was_running or run is not None):
                self.failed.emit(run, job.reason)
            elif job.state in (J.CANCELLED, J.INTERRUPTED_STATE) and was_running:
                self.cancelled.emit(run)
        elif ev.kind == "checked" and ev.job is not None:
            self.checked.emit(ev.job_id, (ev.job.result or {}).get("check"))
        if ev.kind != "progress":  # per batch: the Render panel and the Queue's cell move, not the table
            self.queueChanged.emit()

    # ---- scrub frames (this worker's thread) --------------------------------------------

    @Slot()
    def _serve_frame(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, None
            self._tick_posted = False
        if pending is None:
            return
        avatar, audio, settings, seconds = pending
        try:
            source = self.remote or self.pool
            image = source.frame_at(avatar, audio, settings, seconds)
            self.frames_rendered += 1
            self.frameReady.emit(seconds, frame_index(seconds, _rate(settings, avatar)), image)
        except BaseException as exc:  # noqa: BLE001
            self.failed.emit(None, error_text(exc))

    def close(self) -> None:
        """Stop listening to the service (the service and its engines are closed by their owner)."""
        self._unsubscribe()


def _result(data: dict):
    """The job's stored result as a ``RenderResult`` (fields it lacks take their defaults)."""
    from studio.core.render.results import RenderResult

    return RenderResult.from_json(data)


class WorkerThread:
    """A RenderWorker on its own QThread, stopped cleanly by ``stop``."""

    def __init__(self, service):
        self.thread = QThread()
        self.thread.setObjectName("render-worker")
        self.worker = RenderWorker(service)
        self.worker.moveToThread(self.thread)
        self.thread.start()

    def stop(self, timeout_ms: int = 10000) -> None:
        self.thread.quit()
        if not self.thread.wait(timeout_ms):
            log.warning("the render worker did not stop within %d ms", timeout_ms)
        self.worker.close()


# --------------------------------------------------------------------------------------------
# Short background jobs


class Task(QObject):
    """One short job on a daemon thread; its result, error and progress reach the GUI thread as
    queued signals.

    ``run_in_background``'s callbacks are called from the Task's own slots, not connected to the
    signals. With PySide 6.11.3, a job's callback (usually a closure) connected to the signal of a
    short-lived Task was sometimes never called although the Task's own slot on the same signal was:
    'Speak this text' spoke and analysed the script and never showed it in about one run in fifteen
    (most likely PySide's bookkeeping of connections to plain callables, which it keeps per callable
    and drops when a sender dies). Called from the Task's own slots: 0 failures in 50 runs."""

    progress = Signal(int, int, str)  # done, total, stage
    done = Signal(object)
    error = Signal(str)

    _alive: set = set()  # keeps running tasks referenced until they finish

    def __init__(self, fn, *args, on_done=None, on_error=None, on_progress=None, **kwargs):
        super().__init__()
        self._fn, self._args, self._kwargs = fn, args, kwargs
        self._on_done, self._on_error, self._on_progress = on_done, on_error, on_progress
        self.result = None
        self.message = None
        self.finished_event = threading.Event()
        self.cancel_event = threading.Event()
        self.done.connect(self._finished_ok)
        self.error.connect(self._failed)
        self.progress.connect(self._progressed)

    @Slot(object)
    def _finished_ok(self, result) -> None:
        try:
            _call(self._on_done, result)
        finally:
            self._release()

    @Slot(str)
    def _failed(self, message: str) -> None:
        try:
            _call(self._on_error, message)
        finally:
            self._release()

    @Slot(int, int, str)
    def _progressed(self, done: int, total: int, stage: str) -> None:
        _call(self._on_progress, done, total, stage)

    def _release(self) -> None:
        # after every other slot of this emission has run: dropping the last reference mid-emission
        # would delete the sender and skip the remaining slots
        from PySide6.QtCore import QTimer

        QTimer.singleShot(0, lambda: Task._alive.discard(self))

    def cancel(self) -> None:
        """Ask the job to stop: its next progress report raises ``Cancelled``."""
        self.cancel_event.set()

    def _report(self, done, total, stage="") -> None:
        if self.cancel_event.is_set():
            from studio.core.errors import Cancelled

            raise Cancelled("cancelled; nothing was kept")
        self.progress.emit(int(done), int(total or 0), str(stage or ""))

    def start(self) -> Task:
        Task._alive.add(self)
        threading.Thread(target=self._run, name=f"task-{getattr(self._fn, '__name__', 'job')}", daemon=True).start()
        return self

    def _run(self) -> None:
        try:
            kwargs = dict(self._kwargs)
            if _accepts(self._fn, "progress") and "progress" not in kwargs:
                kwargs["progress"] = self._report
            self.result = self._fn(*self._args, **kwargs)
            self._tell(self.done, self.result)
        except BaseException as exc:  # noqa: BLE001
            self.message = error_text(exc) if not self.cancel_event.is_set() else "cancelled"
            self._tell(self.error, self.message)
        finally:
            self.finished_event.set()

    def _tell(self, signal, value) -> None:
        try:
            signal.emit(value)
        except RuntimeError:  # the Qt object is gone (the app quit while this ran): nobody to tell
            log.debug("task %s finished after its window closed", getattr(self._fn, "__name__", "job"))


def _call(callback, *args) -> None:
    """``callback(*args)``, unless it is a method of a Qt object that has been deleted meanwhile (a
    window closed while its job ran: a connection to it would have been dropped by Qt too)."""
    if callback is None:
        return
    owner = getattr(callback, "__self__", None)
    if isinstance(owner, QObject):
        import shiboken6

        if not shiboken6.isValid(owner):
            return
    try:
        callback(*args)
    except RuntimeError as exc:  # a signal's emit whose object is gone (``on_error=panel.error.emit``)
        if "deleted" not in str(exc):
            raise
        log.debug("a background job's callback found its object deleted: %s", exc)


def run_in_background(fn, *args, on_done=None, on_error=None, on_progress=None, **kwargs) -> Task:
    return Task(fn, *args, on_done=on_done, on_error=on_error, on_progress=on_progress, **kwargs).start()


#: a running render's preview frames are scaled to at most this many pixels on their long side (on
#: the service's thread, not the GUI's): the pane shows them smaller than 1080p anyway, and a quarter
#: of the pixels is a quarter of the drawing. Scrubbed frames are never scaled (they are exact).
PREVIEW_MAX_SIDE = 960


def live_preview(image):
    """A render's preview frame as the Live pane draws it: at most ``PREVIEW_MAX_SIDE`` pixels on its
    long side (area-averaged), always a copy of its own (the render goes on writing its batch)."""
    import numpy as np

    h, w = image.shape[:2]
    scale = PREVIEW_MAX_SIDE / max(h, w)
    if scale >= 1.0:
        return np.array(image, copy=True)
    import cv2

    return cv2.resize(
        np.ascontiguousarray(image), (max(1, round(w * scale)), max(1, round(h * scale))), interpolation=cv2.INTER_AREA
    )


def _accepts(fn, name: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())

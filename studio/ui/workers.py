"""Work off the GUI thread.

``RenderWorker`` is a QObject living on its own QThread: it owns the renderer and its engine,
runs renders (``renderRequested``), renders single frames for scrubbing (``request_frame``,
coalesced so only the newest timestamp is computed; during a render the newest request waits
for the render to end, because the warm engine is bound to the render's audio) and reports
through signals. ``cancel`` is
thread-safe and stops the run within one batch.

A request with ``farm`` set renders on a Ray render farm instead, through a ``FarmLink`` (the Ray
driver in a child process, connected on the first such job, kept warm between jobs, opened again
after it was lost): its ``ChunkedProgress`` goes out on the same ``progress`` signal, ``placed``
says where it runs ("farm (2 workers)"), and ``cancel`` stops all its chunks. Scrub frames
always render on this computer.

``run_in_background`` runs one short job (import an avatar, analyse audio, the doctor) on a
daemon thread and delivers its result, progress and error as queued signals.
"""

from __future__ import annotations

import inspect
import logging
import threading
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QObject, QThread, Signal, Slot

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RenderRequest:
    avatar: str
    audio: str
    settings: Any  # studio.core.render.RenderSettings
    output: str
    job_id: int | None = None
    farm: str | None = None  # None: this computer; "": the farm started here (studio farm up); or HOST:PORT
    devices: tuple[str, ...] | None = None  # render on these devices at once ("All GPUs here")


def frame_index(seconds: float) -> int:
    """The frame shown at ``seconds`` (the renderer's own rule, ``floor(t * 25)``)."""
    from studio.core.render import frame_index as rule

    return rule(seconds)


def error_text(exc: BaseException) -> str:
    """One readable line: a StudioError's own sentence, or 'internal error' plus the log file."""
    from studio.core.errors import StudioError

    if isinstance(exc, StudioError):
        return str(exc)
    log.error("internal error", exc_info=(type(exc), exc, exc.__traceback__))
    from studio.core.paths import log_file

    return f"internal error ({type(exc).__name__}: {exc}); the details are in {log_file()}"


class RenderWorker(QObject):
    renderRequested = Signal(object)  # RenderRequest
    started = Signal(object)  # RenderRequest
    progress = Signal(object, object)  # RenderRequest, RenderProgress
    preview = Signal(object, int)  # RGB [H,W,3] uint8, frame index
    frameReady = Signal(float, int, object)  # seconds, frame index, RGB
    finished = Signal(object, object)  # RenderRequest, RenderResult
    failed = Signal(object, str)  # RenderRequest or None (a scrub frame), message
    cancelled = Signal(object)  # RenderRequest
    engineReady = Signal(str, str)  # engine name, why it was chosen
    placed = Signal(object, str)  # RenderRequest, where it runs: "this computer" or "farm (N workers)"
    _frameTick = Signal()

    def __init__(self, renderer_factory=None):
        super().__init__()
        self._factory = renderer_factory
        self._lock = threading.Lock()
        self._pending: tuple | None = None  # (avatar, audio, settings, seconds)
        self._tick_posted = False
        self._cancel = threading.Event()
        self._active = None
        self._scrub = None  # (key, Renderer) reused while avatar/audio/settings stay the same
        self._engines: dict[tuple, tuple] = {}  # warm engines: settings key -> (engine, reason)
        self.engine_reason = ""
        self.generation = 0  # bumped by invalidate(): cached renderers of older generations are dropped
        self.frames_rendered = 0  # scrub frames actually computed (coalescing is visible here)
        self.farm = None  # studio.service.farm_link.FarmLink, kept between farm jobs
        self.renderRequested.connect(self._render)
        self._frameTick.connect(self._serve_frame)

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
        """Thread-safe: the running render stops within one batch and leaves no file."""
        self._cancel.set()
        r = self._active
        if r is not None:
            r.cancel()

    def invalidate(self) -> None:
        """Forget cached scrub renderers (an avatar was re-prepared); thread-safe."""
        self.generation += 1

    @property
    def busy(self) -> bool:
        return self._active is not None

    # ---- on the worker thread ---------------------------------------------------------

    @Slot(object)
    def _render(self, req: RenderRequest) -> None:
        from studio.core.errors import Cancelled

        self._cancel.clear()
        try:
            if req.farm is not None:
                self._render_on_farm(req)
                return
            if req.devices:  # one clip split over several GPUs, each with its warm engine
                from studio.core.multigpu import DeviceRender

                engines = []
                for d in req.devices:  # warm engines; a device named twice gets its own
                    one = self._make(req.avatar, req.audio, req.settings.with_(device=d)).engine
                    engines.append(one if one not in engines else self._fresh_engine(req.settings.with_(device=d)))
                r = DeviceRender(req.avatar, req.audio, req.settings, engines=engines)
                where = f"{len(engines)} GPUs here"
            else:
                r = self._make(req.avatar, req.audio, req.settings)
                where = LOCAL
            self._active = r
            if self._cancel.is_set():
                r.cancel()
            self.placed.emit(req, where)
            self.started.emit(req)
            for p in r.run(req.output):
                if p.preview is not None:
                    self.preview.emit(p.preview, -1 if p.preview_index is None else int(p.preview_index))
                self.progress.emit(req, p)
            if self._cancel.is_set() or r.result is None:
                self.cancelled.emit(req)
            else:
                self.finished.emit(req, r.result)
        except Cancelled:
            self.cancelled.emit(req)
        except BaseException as exc:  # noqa: BLE001 - every error becomes a readable message
            if self._cancel.is_set():
                self.cancelled.emit(req)
            else:
                self.failed.emit(req, error_text(exc))
        finally:
            self._active = None
            if self._pending is not None:
                self._serve_frame()

    def _render_on_farm(self, req: RenderRequest) -> None:
        """One job on the farm; a link lost before the job made progress (the farm was restarted
        since the last job) is opened again once."""
        from studio.core.errors import Cancelled
        from studio.service.farm_link import LinkLost

        for attempt in (1, 2):
            link = self._farm_link(req.farm)
            if self._cancel.is_set():  # cancelled while connecting
                raise Cancelled("render cancelled; nothing was written")
            self._active = link
            progressed = False
            try:
                self.placed.emit(req, link.where)
                self.started.emit(req)
                for p in link.render(req.avatar, req.audio, req.output, req.settings):
                    if self._cancel.is_set():
                        link.cancel()  # also when cancel came before the farm's job started
                    progressed = progressed or p.done > 0
                    self.progress.emit(req, p)
                break
            except LinkLost:
                self.close_farm()
                if progressed or attempt == 2 or self._cancel.is_set():
                    raise
                log.warning("the farm link was lost before the job started; connecting again")
        self.finished.emit(req, link.result)  # a cancelled job raised Cancelled: this one's file exists

    def _farm_link(self, address: str):
        """The warm link for ``address``, else a new one (the old one is closed)."""
        from studio.service.farm_link import FarmLink

        address = (address or "").strip()
        if self.farm is not None and self.farm.address == address and self.farm.alive:
            return self.farm
        self.close_farm()
        self.farm = FarmLink.open(address)
        log.info("render farm at %s: %s", address or "this machine", self.farm.where)
        return self.farm

    def close_farm(self) -> None:
        """Leave the farm (its warm workers stay on a `studio farm up` cluster)."""
        link, self.farm = self.farm, None
        if link is not None:
            link.close()

    @Slot()
    def _serve_frame(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, None
            self._tick_posted = False
        if pending is None:
            return
        avatar, audio, settings, seconds = pending
        try:
            key = (avatar, audio, settings, self.generation)
            if self._scrub is None or self._scrub[0] != key:
                self._scrub = (key, self._make(avatar, audio, settings))
            image = self._scrub[1].frame_at(seconds)
            self.frames_rendered += 1
            self.frameReady.emit(seconds, frame_index(seconds), image)
        except BaseException as exc:  # noqa: BLE001
            self._scrub = None
            self.failed.emit(None, error_text(exc))

    @staticmethod
    def _fresh_engine(settings):
        from studio.core.engines import select_engine

        return select_engine(settings.engine, device=settings.device, precision=settings.precision,
                             decoder=settings.decoder, batch=settings.batch, runtime=settings.runtime).engine

    def _make(self, avatar, audio, settings):
        """A Renderer that reuses a warm engine when the engine settings are unchanged."""
        if self._factory is not None:
            return self._factory(avatar, audio, settings)
        from studio.core.render import Renderer

        key = (settings.engine, settings.device, settings.precision, settings.decoder, settings.batch)
        warm = self._engines.get(key)
        r = Renderer(avatar, audio, settings, engine=warm[0] if warm else None)
        if warm is None:
            warm = self._engines[key] = (r.engine, r.engine_reason)
        if warm[1] != self.engine_reason:
            self.engine_reason = warm[1]
            self.engineReady.emit(warm[0].name, warm[1])
        return r

    def close(self) -> None:
        """Release the engines (GPU memory, sessions); call on the worker thread or after it stopped."""
        for engine, _ in self._engines.values():
            try:
                engine.close()
            except Exception:  # noqa: BLE001 - closing must not fail the exit
                log.debug("engine close failed", exc_info=True)
        self._engines.clear()
        self._scrub = None
        self.close_farm()


LOCAL = "this computer"


class WorkerThread:
    """A RenderWorker on its own QThread, stopped cleanly by ``stop``."""

    def __init__(self, renderer_factory=None):
        self.thread = QThread()
        self.thread.setObjectName("render-worker")
        self.worker = RenderWorker(renderer_factory)
        self.worker.moveToThread(self.thread)
        self.thread.start()

    def stop(self, timeout_ms: int = 10000) -> None:
        self.worker.cancel()
        self.thread.quit()
        if not self.thread.wait(timeout_ms):
            log.warning("the render worker did not stop within %d ms", timeout_ms)
            return
        self.worker.close()


# --------------------------------------------------------------------------------------------
# Short background jobs


class Task(QObject):
    progress = Signal(int, int, str)  # done, total, stage
    done = Signal(object)
    error = Signal(str)

    _alive: set = set()  # keeps running tasks referenced until they finish

    def __init__(self, fn, *args, **kwargs):
        super().__init__()
        self._fn, self._args, self._kwargs = fn, args, kwargs
        self.result = None
        self.message = None
        self.finished_event = threading.Event()
        self.cancel_event = threading.Event()
        self.done.connect(self._release)
        self.error.connect(self._release)

    def _release(self, *_):
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
            self.done.emit(self.result)
        except BaseException as exc:  # noqa: BLE001
            self.message = error_text(exc) if not self.cancel_event.is_set() else "cancelled"
            self.error.emit(self.message)
        finally:
            self.finished_event.set()


def run_in_background(fn, *args, on_done=None, on_error=None, on_progress=None, **kwargs) -> Task:
    task = Task(fn, *args, **kwargs)
    if on_done:
        task.done.connect(on_done)
    if on_error:
        task.error.connect(on_error)
    if on_progress:
        task.progress.connect(on_progress)
    return task.start()


def _accepts(fn, name: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())

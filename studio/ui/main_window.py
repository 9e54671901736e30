"""The main window: preview and timeline in the middle, Library / Render / Queue / Doctor docks.

Everything slow runs elsewhere: renders and scrub frames on the ``RenderWorker`` thread, audio
analysis, avatar loading and the doctor on background tasks. Errors from the core appear in a
banner above the preview (one readable sentence), never as a traceback dialog.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from PySide6.QtCore import QByteArray, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QIcon, QKeySequence
from PySide6.QtWidgets import (
    QDockWidget,
    QFrame,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QPushButton,
    QSplitter,
    QToolBar,
    QVBoxLayout,
    QWidget,
)

from studio.core.constants import FPS
from studio.ui import settings as cfg
from studio.ui.doctor_panel import DoctorPanel
from studio.ui.library import LibraryPanel
from studio.ui.preview import PreviewView
from studio.ui.queue_panel import QueuePanel
from studio.ui.render_panel import RenderPanel
from studio.ui.render_queue import RenderQueue
from studio.ui.timeline import TimelineView, time_text
from studio.ui.workers import WorkerThread, error_text, run_in_background

log = logging.getLogger(__name__)


class MainWindow(QMainWindow):
    analysisReady = Signal(object)  # AudioAnalysis of the selected script
    avatarLoaded = Signal(object)  # AvatarAssets of the selected avatar
    scrubShown = Signal(float, int)  # seconds, frame index of a scrub frame now on screen

    def __init__(self, renderer_factory=None, store=None):
        super().__init__()
        self.setWindowTitle("Studio")
        self.setWindowIcon(QIcon(_icon("studio")))
        self.setObjectName("mainWindow")
        self.setDockOptions(QMainWindow.DockOption.AnimatedDocks | QMainWindow.DockOption.AllowTabbedDocks)
        self.settings = cfg.settings()
        self.analysis = None
        self.assets = None
        self.last_scrub: tuple[float, int] | None = None
        self._errors: list[float] = []

        from studio.core.jobs import JobStore

        self.store = store or JobStore()
        self.worker_thread = WorkerThread(renderer_factory)
        self.worker = self.worker_thread.worker

        # ---- centre: banner, preview, timeline
        self.banner = QFrame()
        self.banner.setObjectName("banner")
        self.banner_text = QLabel("")
        self.banner_text.setWordWrap(True)
        self.banner_text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        dismiss = QPushButton("Dismiss")
        dismiss.setObjectName("flat")
        dismiss.clicked.connect(self.banner.hide)
        bl = QHBoxLayout(self.banner)
        bl.setContentsMargins(10, 6, 6, 6)
        bl.addWidget(self.banner_text, 1)
        bl.addWidget(dismiss)
        self.banner.hide()

        self.preview = PreviewView()
        self.timeline = TimelineView()
        self.splitter = QSplitter(Qt.Orientation.Vertical)
        self.splitter.setObjectName("centreSplitter")
        top = QWidget()
        tl = QVBoxLayout(top)
        tl.setContentsMargins(6, 6, 6, 0)
        tl.addWidget(self.banner)
        tl.addWidget(self.preview, 1)
        self.splitter.addWidget(top)
        self.splitter.addWidget(self.timeline)
        self.splitter.setChildrenCollapsible(False)
        top.setMinimumHeight(220)
        self.timeline.setMinimumHeight(230)
        self.splitter.setStretchFactor(0, 3)
        self.splitter.setStretchFactor(1, 2)
        self.setCentralWidget(self.splitter)

        # ---- docks
        self.library = LibraryPanel()
        self.render_panel = RenderPanel()
        self.queue_panel = QueuePanel(self.store)
        self.doctor = DoctorPanel()
        self.library_dock = self._dock("Library", self.library, Qt.DockWidgetArea.LeftDockWidgetArea, scroll=True)
        self.render_dock = self._dock("Render", self.render_panel, Qt.DockWidgetArea.RightDockWidgetArea, scroll=True)
        self.queue_dock = self._dock("Queue", self.queue_panel, Qt.DockWidgetArea.BottomDockWidgetArea)
        self.doctor_dock = self._dock("Doctor", self.doctor, Qt.DockWidgetArea.BottomDockWidgetArea)
        self.queue = RenderQueue(self.store, self.worker, self.render_panel, self.queue_panel, self)
        self.tabifyDockWidget(self.queue_dock, self.doctor_dock)
        self.queue_dock.raise_()
        self.doctor_dock.visibilityChanged.connect(self._doctor_visible)

        self._build_toolbar()
        self.engine_status = QLabel("engine: loading…")
        self.engine_status.setObjectName("dim")
        self.statusBar().addPermanentWidget(self.engine_status)
        self.player = None

        self._connect()
        self._restore()
        self.statusBar().showMessage("Ready", 3000)
        if self.store.interrupted:
            self.show_error(
                f"{len(self.store.interrupted)} render(s) were interrupted when Studio last closed; "
                "select them in the Queue and press Retry"
            )
        QTimer.singleShot(0, self._start_background)

    # ---- public API (used by tests and the app) -----------------------------------------

    def show_error(self, message: str) -> None:
        """Show one readable message in the banner (rate-limited) and log it."""
        log.warning("%s", message)
        now = time.monotonic()
        self._errors = [t for t in self._errors if now - t < 5] + [now]
        if len(self._errors) > 5:
            return
        self.banner_text.setText(message)
        self.banner.show()
        self.statusBar().showMessage(message, 8000)

    def load_avatar(self, source: str, name: str | None = None):
        return self.library.import_avatar(source, name)

    def load_script(self, path: str) -> None:
        self.library.add_script(path)

    def render(self) -> int | None:
        """Queue a render of the current avatar x script with the panel's settings and start the queue."""
        return self.queue.add(self.library.avatar, self.library.script, start=True)

    def cancel_render(self) -> None:
        self.queue.cancel()

    @property
    def current(self):
        """The RenderRequest being rendered, or None."""
        return self.queue.current

    def scrub_to(self, seconds: float) -> None:
        self.timeline.set_playhead(seconds)

    def play(self, path: str) -> None:
        if not path or not Path(path).exists():
            self.show_error(f"{path or 'the output'} does not exist any more; render it again")
            return
        try:
            if self.player is None:
                from studio.ui.player import PlayerWidget

                self.player = PlayerWidget()
                self.player.closed.connect(lambda: self.preview.set_widget(None))
                self.player.error.connect(self.show_error)
            self.preview.set_widget(self.player)
            self.player.play(path)
        except ImportError as exc:
            self.show_error(f"in-app playback needs QtMultimedia ({exc}); install pyside6-addons and libpulse0")

    # ---- wiring -------------------------------------------------------------------------

    def _dock(self, title: str, widget: QWidget, area, scroll: bool = False) -> QDockWidget:
        dock = QDockWidget(title, self)
        dock.setObjectName(f"dock{title}")
        if scroll:  # a tall panel scrolls instead of squeezing its groups
            from PySide6.QtWidgets import QScrollArea

            area_widget = QScrollArea()
            area_widget.setWidgetResizable(True)
            area_widget.setFrameShape(QFrame.Shape.NoFrame)
            area_widget.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
            area_widget.setWidget(widget)
            bar = area_widget.verticalScrollBar().sizeHint().width()
            area_widget.setMinimumWidth(widget.minimumSizeHint().width() + bar + 2)
            dock.setWidget(area_widget)
        else:
            dock.setWidget(widget)
        dock.setFeatures(QDockWidget.DockWidgetFeature.DockWidgetMovable | QDockWidget.DockWidgetFeature.DockWidgetFloatable)
        self.addDockWidget(area, dock)
        return dock

    def _build_toolbar(self) -> None:
        bar = QToolBar("Main")
        bar.setObjectName("mainToolbar")
        bar.setMovable(False)
        bar.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.addToolBar(bar)

        def action(text, icon, slot, shortcut=None):
            a = QAction(QIcon(_icon(icon)), text, self)
            a.triggered.connect(slot)
            if shortcut:
                a.setShortcut(QKeySequence(shortcut))
            bar.addAction(a)
            return a

        action("Import avatar", "import", self.library._import_avatar_dialog, "Ctrl+I")
        action("Import audio", "audio", self.library._import_audio_dialog, "Ctrl+O")
        bar.addSeparator()
        self.render_action = action("Render", "render", self.render, "Ctrl+R")
        self.cancel_action = action("Cancel", "cancel", self.cancel_render, "Esc")
        self.cancel_action.setEnabled(False)
        bar.addSeparator()
        action("Doctor", "doctor", self._show_doctor)
        from PySide6.QtGui import QShortcut

        # frame stepping like a video editor: , and . one frame, < and > one second
        for key, step in ((",", -1), (".", 1), ("<", -FPS), (">", FPS)):
            QShortcut(QKeySequence(key), self, lambda step=step: self.scrub_to(self.timeline.position + step / FPS))

    def _connect(self) -> None:
        lib, panel, w = self.library, self.render_panel, self.worker
        lib.avatarSelected.connect(self._avatar_selected)
        lib.scriptSelected.connect(self._script_selected)
        lib.maskToggled.connect(lambda _on: self._show_avatar_frame())
        lib.error.connect(self.show_error)
        lib.avatarPrepared.connect(lambda _name: self.worker.invalidate())
        self.timeline.thresholdChanged.connect(self._threshold_changed)
        self.timeline.min_run_box.valueChanged.connect(lambda v: panel.set_silence(min_silence=v))
        self.timeline.playheadMoved.connect(self._playhead_moved)
        panel.renderClicked.connect(self.render)
        panel.queueClicked.connect(self.render)
        panel.cancelClicked.connect(self.cancel_render)
        panel.playClicked.connect(self.play)
        self.queue_panel.openClicked.connect(self.play)
        self.queue_panel.error.connect(self.show_error)
        q = self.queue
        self.jobFinished = q.jobFinished
        q.error.connect(self.show_error)
        q.status.connect(lambda text: self.statusBar().showMessage(text, 5000))
        q.previewFrame.connect(self.preview.offer)
        q.running.connect(self._running)
        w.frameReady.connect(self._frame_ready)
        w.engineReady.connect(lambda name, why: self.engine_status.setText(f"engine: {name}"))
        w.engineReady.connect(lambda name, why: self.engine_status.setToolTip(why))
        w.engineReady.connect(lambda name, why: panel.engine_label.setText(_short(f"engine: {why}")))
        w.engineReady.connect(lambda name, why: panel.engine_label.setToolTip(why))
        self.preview.shown.connect(self._preview_shown)

    def _start_background(self) -> None:
        """Warm up off the GUI thread: the engine list (imports torch) feeds the Render panel."""
        from studio.core.engines import available_engines

        def ready(status: dict) -> None:
            self.render_panel.show_engines(status)
            from studio.core.multigpu import cuda_devices  # torch is loaded by now

            self.gpus_task = run_in_background(cuda_devices, on_done=self.render_panel.set_gpus)  # "All GPUs here"
            auto = "musetalk" if status.get("musetalk", "").startswith("ready") else "classic"
            self.engine_status.setText(f"engine: auto → {auto}")
            self.engine_status.setToolTip("\n".join(f"{k}: {v}" for k, v in status.items()))

        self.engines_task = run_in_background(available_engines, on_done=ready, on_error=self.show_error)
        self.queue.pump()

    # ---- library ------------------------------------------------------------------------

    def _avatar_selected(self, name: str) -> None:
        self.render_panel.set_context(avatar=name)
        self.assets = None
        if not name:
            return
        from studio.core.avatar import load

        def loaded(assets) -> None:
            if self.library.avatar != name:
                return
            self.assets = assets
            self._show_avatar_frame()
            self.avatarLoaded.emit(assets)
            if self.library.script:
                self._playhead_moved(self.timeline.position)

        run_in_background(load, name, on_done=loaded, on_error=self.show_error)

    def _show_avatar_frame(self) -> None:
        if self.assets is None or self.current is not None:
            return
        a = self.assets
        index = 0
        if self.last_scrub is not None:
            index = a.cycle_index(self.last_scrub[1]) if hasattr(a, "cycle_index") else 0
        image = a.frames[index]
        caption = f"{self.library.avatar} · {a.width}x{a.height} · {a.N} frame(s)"
        if self.library.show_mask.isChecked():
            try:
                from studio.core.avatar import overlay

                image = overlay(a, index)
                caption += " · blend mask"
            except Exception as exc:  # noqa: BLE001
                self.show_error(error_text(exc))
        self.preview.show_now(image, caption, -1)

    def _script_selected(self, path: str) -> None:
        self.render_panel.set_context(script=path)
        if not path:
            return
        from studio.core.audio import analyze

        def done(analysis) -> None:
            if self.library.script != path:
                return
            self.analysis = analysis
            self.timeline.set_threshold(self.render_panel.threshold)
            self.timeline.set_min_run(self.render_panel.min_silence)
            self.timeline.set_analysis(analysis)
            self.analysisReady.emit(analysis)

        self.timeline.info.setText(f"analysing {Path(path).name}…")
        run_in_background(analyze, path, on_done=done, on_error=self.show_error)

    def _threshold_changed(self, value: float) -> None:
        self.render_panel.set_silence(threshold=value)
        self._scrub_timer_restart()

    def _scrub_timer_restart(self) -> None:
        # the silence mask changes which frames are the plain avatar: refresh the shown frame
        if not hasattr(self, "_rescrub"):
            self._rescrub = QTimer(self)
            self._rescrub.setSingleShot(True)
            self._rescrub.setInterval(250)
            self._rescrub.timeout.connect(lambda: self._playhead_moved(self.timeline.position))
        self._rescrub.start()

    def _playhead_moved(self, seconds: float) -> None:
        avatar, script = self.library.avatar, self.library.script
        if not avatar or not script or self.analysis is None:
            return
        self.worker.request_frame(avatar, script, self.render_panel.render_settings(), seconds)

    def _frame_ready(self, seconds: float, index: int, image) -> None:
        if self.current is not None:
            return  # the live render owns the preview
        self.last_scrub = (seconds, index)
        self.preview.offer(image, f"{time_text(seconds)} · frame {index} · exact render preview", index)

    def _running(self, running: bool) -> None:
        self.cancel_action.setEnabled(running)
        self.render_action.setEnabled(not running)

    def _preview_shown(self, index: int) -> None:
        if self.last_scrub is not None and index == self.last_scrub[1] and self.current is None:
            self.scrubShown.emit(*self.last_scrub)

    # ---- doctor, persistence, exit ------------------------------------------------------

    def _show_doctor(self) -> None:
        self.doctor_dock.show()
        self.doctor_dock.raise_()

    def _doctor_visible(self, visible: bool) -> None:
        if visible and not self.doctor.checks and self.doctor.task is None:
            self.doctor.run()

    def _restore(self) -> None:
        s = self.settings
        geometry = s.value("window/geometry")
        if isinstance(geometry, QByteArray) and not geometry.isEmpty():
            self.restoreGeometry(geometry)
        else:
            self.resize(1480, 980)
            self.resizeDocks([self.library_dock, self.render_dock], [310, 350], Qt.Orientation.Horizontal)
            self.resizeDocks([self.queue_dock], [165], Qt.Orientation.Vertical)
        state = s.value("window/state")
        if isinstance(state, QByteArray) and not state.isEmpty():
            self.restoreState(state, cfg.VERSION)
        sizes = s.value("window/splitter")
        if isinstance(sizes, QByteArray) and not sizes.isEmpty():
            self.splitter.restoreState(sizes)
        else:
            self.splitter.setSizes([520, 300])
        self.timeline.set_threshold(self.render_panel.threshold)
        self.timeline.set_min_run(self.render_panel.min_silence)
        script = cfg.value(s, "library/selected_script", str)
        if script and Path(script).exists():
            self.library.select_script(script)

    def save_state(self) -> None:
        s = self.settings
        s.setValue("window/geometry", self.saveGeometry())
        s.setValue("window/state", self.saveState(cfg.VERSION))
        s.setValue("window/splitter", self.splitter.saveState())
        self.render_panel.save()
        s.sync()

    def closeEvent(self, event) -> None:
        self.save_state()
        self.queue.closing = True
        if self.player is not None:
            self.player.player.stop()
        self.worker_thread.stop()
        super().closeEvent(event)


def _short(text: str, limit: int = 90) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _icon(name: str) -> str:
    from studio.core.paths import repo_resources

    return str(repo_resources() / "icons" / f"{name}.svg")

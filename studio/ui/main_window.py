"""The main window: preview and timeline in the middle, Library / Render / Queue / Doctor docks.

Everything slow runs elsewhere: renders and scrub frames on the ``RenderWorker`` thread, audio
analysis, avatar loading and the doctor on background tasks. Errors from the core appear in a
banner above the preview (one readable sentence), never as a traceback dialog.

The editor's keys and the finished render's player are ``TransportControls``
(``studio.ui.transport_controls``); playback's clock is the ``Transport``.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from PySide6.QtCore import QByteArray, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QIcon
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

from studio.ui import settings as cfg
from studio.ui.doctor_panel import DoctorPanel
from studio.ui.library import LibraryPanel
from studio.ui.preview import PreviewView
from studio.ui.queue_panel import QueuePanel
from studio.ui.render_panel import RenderPanel
from studio.ui.render_queue import RenderQueue
from studio.ui.timeline import TimelineView
from studio.ui.transport import Transport
from studio.ui.transport_controls import TransportControls
from studio.ui.widgets import FileDrops, guard_inputs
from studio.ui.workers import WorkerThread, error_text, run_in_background

log = logging.getLogger(__name__)


class MainWindow(FileDrops, QMainWindow):
    analysisReady = Signal(object)  # AudioAnalysis of the selected script
    avatarLoaded = Signal(object)  # AvatarAssets of the selected avatar
    scrubShown = Signal(float, int)  # seconds, frame index of a scrub frame now on screen

    def __init__(self, service=None, store=None):
        super().__init__()
        self.setWindowTitle("Studio")
        self.setWindowIcon(QIcon(_icon("studio")))
        self.setObjectName("mainWindow")
        self.setDockOptions(QMainWindow.DockOption.AnimatedDocks | QMainWindow.DockOption.AllowTabbedDocks)
        #: True: close without asking, even during a render (a signal, the answer "Close", a test's teardown)
        self.close_confirmed = False
        self.settings = cfg.settings()
        self.analysis = None
        self.assets = None
        self.last_scrub: tuple[float, int] | None = None
        self._errors: list[float] = []

        from studio.core.errors import StudioError
        from studio.service import QueueService

        # the render service: the queue over jobs.sqlite and the warm engines (shared with scrubbing)
        self.store_problem = ""
        try:
            self.service = service or QueueService(store)
        except StudioError as exc:  # a damaged or foreign jobs.sqlite: say so, keep the app usable
            import tempfile

            self.store_problem = f"{exc} Until then the queue lives in a temporary file and is lost when Studio closes."
            folder = tempfile.mkdtemp(prefix="studio-queue-")
            self.service = QueueService(Path(folder) / "jobs.sqlite")
        self.store = self.service.store
        self.worker_thread = WorkerThread(self.service)
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
        self.transport = Transport(self.timeline, self)
        self.splitter = QSplitter(Qt.Orientation.Vertical)
        self.splitter.setObjectName("centreSplitter")
        self.splitter.setHandleWidth(8)  # easy to grab
        top = QWidget()
        tl = QVBoxLayout(top)
        tl.setContentsMargins(6, 6, 6, 0)
        tl.addWidget(self.banner)
        tl.addWidget(self.preview, 1)
        self.splitter.addWidget(top)
        self.splitter.addWidget(self.timeline)
        self.splitter.setChildrenCollapsible(False)
        top.setMinimumHeight(120)  # what fits under a 1280x720 screen's menu, toolbar, queue and status bar
        self.timeline.setMinimumHeight(180)
        self.splitter.setStretchFactor(0, 3)
        self.splitter.setStretchFactor(1, 2)
        self.setCentralWidget(self.splitter)

        # ---- docks
        self.library = LibraryPanel()
        self.render_panel = RenderPanel()
        self.queue_panel = QueuePanel(self.service)
        self.doctor = DoctorPanel()
        # the Render dock runs the full height (it fits 1080p unscrolled); the Queue spans the rest
        self.setCorner(Qt.Corner.BottomLeftCorner, Qt.DockWidgetArea.BottomDockWidgetArea)
        self.setCorner(Qt.Corner.BottomRightCorner, Qt.DockWidgetArea.RightDockWidgetArea)
        self.library_dock = self._dock("Library", self.library, Qt.DockWidgetArea.LeftDockWidgetArea, scroll=True)
        self.render_dock = self._dock("Render", self.render_panel, Qt.DockWidgetArea.RightDockWidgetArea, scroll=True)
        self.queue_dock = self._dock("Queue", self.queue_panel, Qt.DockWidgetArea.BottomDockWidgetArea)
        self.doctor_dock = self._dock("Doctor", self.doctor, Qt.DockWidgetArea.BottomDockWidgetArea)
        self.queue = RenderQueue(self.service, self.worker, self.render_panel, self.queue_panel, self)
        self.tabifyDockWidget(self.queue_dock, self.doctor_dock)
        self.queue_dock.raise_()
        self.doctor_dock.visibilityChanged.connect(self._doctor_visible)

        from PySide6.QtGui import QUndoStack

        self.undo_stack = QUndoStack(self)
        self._build_actions()
        self.engine_status = QLabel("engine: loading…")
        self.engine_status.setObjectName("dim")
        self.queue_state_label = QLabel("")
        self.queue_state_label.setObjectName("queueState")
        self.queue_state_label.setToolTip("The render queue: Start queue (Ctrl+Return) renders queued jobs in order")
        self.statusBar().addPermanentWidget(self.queue_state_label)
        self.statusBar().addPermanentWidget(self.engine_status)
        self.controls = TransportControls(self, self.timeline, self.transport, self.preview, self.actions)
        self.controls.playerClosed.connect(lambda: self._playhead_moved(self.timeline.position))

        self._connect()
        self._restore()
        self._track_edits()
        # the Library chose its avatar (the saved one) before these signals were connected: take it
        # now, so the output name and the preview say that avatar from the first paint on
        self.render_panel.set_context(avatar=self.library.avatar, script=self.library.script)
        if self.library.avatar:
            self._avatar_selected(self.library.avatar)
        elif self.library.avatars.count() == 0:
            self.preview.caption.setText(NO_AVATAR)
        self.setAcceptDrops(True)  # files dropped anywhere in the window are imported
        guard_inputs(self)
        self.statusBar().showMessage("Ready", 3000)
        if self.store_problem:
            self.show_error(self.store_problem)
        elif self.store.interrupted:
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
        """Render now: queue the current avatar x script with the panel's settings and start the queue."""
        return self.queue.add(self.library.avatar, self.library.script, start=True)

    def add_to_queue(self) -> list[int]:
        """Add to queue: every selected avatar x every selected script as a queued job, in one step.

        The queue is not started: a stopped queue keeps them until Start queue, a running one takes
        them in order. Names never collide: a taken name gets a number (_002)."""
        pairs = [(a, s) for s in self.library.selected_scripts() for a in self.library.selected_avatars()]
        if not pairs:
            self.show_error("choose an avatar and a voice-over in the Library first")
            return []
        ids = [i for a, s in pairs if (i := self.queue.add(a, s, start=False)) is not None]
        self.render_panel.set_context(avatar=self.library.avatar, script=self.library.script)
        if ids:
            state = self.queue.state
            then = "the queue renders them in order" if state == "running" else "press Start queue to render"
            self.statusBar().showMessage(f"{len(ids)} job(s) queued; {then}", 8000)
        return ids

    def _start_queue_toggled(self, on: bool) -> None:
        if on:
            self.queue.start()
        else:
            self.queue.pause()

    def cancel_render(self) -> None:
        self.queue.cancel()

    @property
    def current(self):
        """The job being rendered (a ``JobRun``), or None."""
        return self.queue.current

    def scrub_to(self, seconds: float) -> None:
        self.timeline.set_playhead(seconds)

    def play(self, path: str) -> None:
        """Play a finished render in the preview (the player and the timeline move together)."""
        self.controls.play(path)

    def play_from(self, path: str, seconds: float) -> None:
        """Play a finished render from ``seconds`` (its lip-sync check's worst second)."""
        self.controls.play(path)
        player = self.player
        if player is None or not self.player_shown:
            return
        from studio.core.render.plan import frame_index

        frame = frame_index(max(0.0, float(seconds)))
        if player.player.duration() > 0:
            player.seek_frame(frame)
            return

        def loaded(ms: int) -> None:  # the position is taken once the file is open
            if ms > 0:
                player.player.durationChanged.disconnect(loaded)
                player.seek_frame(frame)

        player.player.durationChanged.connect(loaded)

    @property
    def player(self):
        return self.controls.player

    @property
    def player_shown(self) -> bool:
        return self.controls.player_shown

    @property
    def shortcuts(self):
        return self.controls.shortcuts

    def showEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        guard_inputs(self)  # inputs made since construction (each is guarded once)
        super().showEvent(event)
        if not getattr(self, "_fitted", False):  # once the window manager's frame is known
            self._fitted = True
            QTimer.singleShot(200, self.fit_screen)

    def keyReleaseEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        self.controls.key_released(event)
        super().keyReleaseEvent(event)

    def drop_files(self, paths) -> None:
        """Import dropped files: photos and videos as avatars, audio files as scripts (several at once)."""
        self.library.import_files([str(p) for p in paths])

    # ---- drag and drop ------------------------------------------------------------------

    only_known = False  # files of other kinds are named in one message (drop_files)

    def files_dropped(self, paths: list[str]) -> None:
        self.drop_files(paths)

    # ---- wiring -------------------------------------------------------------------------

    def _dock(self, title: str, widget: QWidget, area, scroll: bool = False) -> QDockWidget:
        dock = QDockWidget(title, self)
        dock.setObjectName(f"dock{title}")
        if scroll:  # a tall panel scrolls instead of squeezing its groups
            from PySide6.QtWidgets import QScrollArea

            area_widget = QScrollArea()
            area_widget.setWidgetResizable(True)
            area_widget.setFrameShape(QFrame.Shape.NoFrame)
            # never clipped: should the contents ever be wider than the dock, a scroll bar shows
            area_widget.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
            area_widget.setWidget(widget)
            bar = area_widget.verticalScrollBar().sizeHint().width()
            area_widget.setMinimumWidth(widget.minimumSizeHint().width() + bar + 2)
            dock.setWidget(area_widget)
        else:
            dock.setWidget(widget)
        # movable between areas, never floating: a slip of the mouse must not tear a panel off
        dock.setFeatures(QDockWidget.DockWidgetFeature.DockWidgetMovable)
        self.addDockWidget(area, dock)
        return dock

    def _build_actions(self) -> None:
        """The menu bar (File, Edit, View, Playback, Render, Help) and the toolbar, from one set of actions."""
        from studio.ui.actions import Actions

        acts = self.actions = Actions(self)
        add, lib = acts.add, self.library
        add(
            "import_avatar",
            "File",
            "Import photo or video…",
            lib.import_avatar_dialog,
            "Ctrl+I",
            "Import a photo or a video as an avatar",
            _icon("import"),
        )
        add(
            "import_audio",
            "File",
            "Import voice-over…",
            lib.import_audio_dialog,
            "Ctrl+O",
            "Import an audio file as a script",
            _icon("audio"),
        )
        acts.separator("File")
        add("show_output", "File", "Show output folder", self._show_output_folder, tip="Open the output folder")
        acts.separator("File")
        add("quit", "File", "Quit", self.close, "Ctrl+Q")

        undo = self.undo_stack.createUndoAction(self, "Undo")
        redo = self.undo_stack.createRedoAction(self, "Redo")
        add("undo", "Edit", "", shortcuts=["Ctrl+Z"], action=undo)
        add("redo", "Edit", "", shortcuts=["Ctrl+Shift+Z", "Ctrl+Y"], action=redo)
        undo.setProperty("command", "Undo")
        redo.setProperty("command", "Redo")
        acts.separator("Edit")
        add(
            "remove_avatar",
            "Edit",
            "Remove avatar",
            lib.remove_selected_avatars,
            tip="Remove the selected avatar (undo restores it)",
        )
        add(
            "remove_script",
            "Edit",
            "Remove voice-over from the list",
            lib.remove_selected_scripts,
            tip="Take the selected voice-over off the list (the file stays)",
        )

        for dock in (self.library_dock, self.render_dock, self.queue_dock, self.doctor_dock):
            view = dock.toggleViewAction()
            add(f"view_{dock.objectName()}", "View", f"{dock.windowTitle()} panel", action=view)
        bar = self.toolbar = QToolBar("Toolbar")
        bar.setObjectName("mainToolbar")
        bar.setMovable(False)
        bar.setIconSize(QSize(18, 18))
        bar.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.addToolBar(bar)
        add("view_toolbar", "View", "Toolbar", action=bar.toggleViewAction())
        acts.separator("View")
        face = add("face_box", "View", "Face box on the preview", lib.show_box.setChecked, checkable=True)
        lib.show_box.toggled.connect(face.setChecked)
        mask = add("blend_mask", "View", "Blend mask on the preview", lib.show_mask.setChecked, checkable=True)
        lib.show_mask.toggled.connect(mask.setChecked)
        acts.separator("View")
        add("reset_layout", "View", "Reset layout", self.reset_layout, tip="Put every panel back where it started")

        add(
            "render",
            "Render",
            "Render now",
            self.render,
            ["Ctrl+R", "Ctrl+M"],
            "Queue the selected avatar and voice-over and start the queue",
            _icon("render"),
        )
        add(
            "add_to_queue",
            "Render",
            "Add to queue",
            self.add_to_queue,
            "Ctrl+Shift+R",
            "Queue every selected avatar × voice-over pair; the queue renders them once started",
            _icon("queue"),
        )
        acts.separator("Render")
        add(
            "start_queue",
            "Render",
            "Start queue",
            self._start_queue_toggled,
            "Ctrl+Return",
            "Render queued jobs one after another (again: pause after the running job)",
            checkable=True,
        )
        acts["start_queue"].setProperty("command", "Start / pause queue")
        add(
            "cancel",
            "Render",
            "Cancel render",
            self.cancel_render,
            "Esc",
            "Stop the running render (nothing is written)",
            _icon("cancel"),
        )
        self.render_action, self.cancel_action = acts["render"], acts["cancel"]
        self.cancel_action.setEnabled(False)
        acts.separator("Render")
        rng = add(
            "range_only", "Render", "Render in/out range only", self.render_panel.range_check.setChecked, checkable=True
        )
        self.render_panel.range_check.toggled.connect(rng.setChecked)
        rng.setEnabled(False)

        add("shortcuts", "Help", "Keyboard shortcuts", self.show_shortcuts, ["F1", "?"], "Every key of the editor")
        add("doctor", "Help", "Doctor (check this machine)", self._show_doctor, icon=_icon("doctor"))
        add("editor_guide", "Help", "Editor guide", self._open_guide, tip="docs/editor.md: keys, menus, undo, markers")
        add("about", "Help", "About Studio", self._about)

        bar = self.toolbar
        for key in ("import_avatar", "import_audio", None, "render", "add_to_queue", "cancel", None, "doctor"):
            if key is None:
                bar.addSeparator()
            else:
                bar.addAction(acts[key])
        short = {
            "import_avatar": "Import avatar",
            "import_audio": "Import audio",
            "render": "Render",
            "cancel": "Cancel",
            "doctor": "Doctor",
        }
        for key, text in short.items():  # the toolbar's words; the menus say it in full
            acts[key].setIconText(text)

    def show_shortcuts(self):
        """Help > Keyboard shortcuts (F1, ?): the list made from the menus' actions."""
        return self.actions.show_shortcuts()

    def reset_layout(self) -> None:
        for dock in (self.library_dock, self.render_dock, self.queue_dock, self.doctor_dock):
            dock.show()
        self.addDockWidget(Qt.DockWidgetArea.LeftDockWidgetArea, self.library_dock)
        self.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, self.render_dock)
        self.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, self.queue_dock)
        self.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, self.doctor_dock)
        self.tabifyDockWidget(self.queue_dock, self.doctor_dock)
        self.queue_dock.raise_()
        self._default_sizes()

    def _show_output_folder(self) -> None:
        from PySide6.QtCore import QUrl
        from PySide6.QtGui import QDesktopServices

        folder = Path(self.render_panel.output_path()).parent
        folder.mkdir(parents=True, exist_ok=True)
        QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder)))

    def _open_guide(self) -> None:
        from PySide6.QtCore import QUrl
        from PySide6.QtGui import QDesktopServices

        guide = Path(__file__).resolve().parents[2] / "docs" / "editor.md"
        if guide.exists():
            QDesktopServices.openUrl(QUrl.fromLocalFile(str(guide)))
        else:
            self.show_shortcuts()

    def _about(self) -> None:
        from PySide6.QtWidgets import QMessageBox

        try:
            from importlib.metadata import version

            v = version("studio")
        except Exception:  # noqa: BLE001 - a source checkout
            v = "(source)"
        QMessageBox.about(self, "About Studio", f"Studio {v}\nLip-synced presenter video on this computer.")

    def _connect(self) -> None:
        lib, panel, w = self.library, self.render_panel, self.worker
        lib.avatarSelected.connect(self._avatar_selected)
        lib.scriptSelected.connect(self._script_selected)
        lib.maskToggled.connect(lambda _on: self._overlay_toggled())
        lib.error.connect(self.show_error)
        lib.avatarPrepared.connect(lambda _name: self.worker.invalidate())
        lib.avatarPreparing.connect(self._avatar_preparing)
        lib.avatarRestored.connect(lambda _name: self.worker.invalidate())
        lib.status.connect(lambda text: self.statusBar().showMessage(text, 8000))
        self.timeline.thresholdChanged.connect(self._threshold_changed)
        self.timeline.min_run_box.valueChanged.connect(lambda v: panel.set_silence(min_silence=v))
        self.timeline.playheadMoved.connect(self._playhead_moved)
        self.timeline.rangeChanged.connect(panel.set_range)
        self.timeline.rangeChanged.connect(lambda _r: self._save_marks())
        self.timeline.markersChanged.connect(self._save_marks)
        self.timeline.renderMarker.connect(self.render_marker)
        self.timeline.playClicked.connect(self.transport.toggle)
        panel.fields["fps"].currentTextChanged.connect(lambda _t: self._rate_changed())
        self.timeline.error.connect(lambda text: self.statusBar().showMessage(text, 8000))
        self.preview.filesDropped.connect(self.drop_files)
        panel.renderClicked.connect(self.render)
        panel.queueClicked.connect(self.add_to_queue)
        panel.cancelClicked.connect(self.cancel_render)
        panel.playClicked.connect(self.play)
        self.queue_panel.openClicked.connect(self.play)
        panel.worstClicked.connect(self.play_from)
        self.queue_panel.worstClicked.connect(self.play_from)
        self.queue_panel.error.connect(self.show_error)
        q = self.queue
        self.jobFinished = q.jobFinished
        q.error.connect(self.show_error)
        q.status.connect(lambda text: self.statusBar().showMessage(text, 5000))
        q.previewFrame.connect(self._render_preview)
        q.running.connect(self._running)
        q.stateChanged.connect(self._queue_state)
        lib.selectionChanged.connect(self._selection_changed)
        self._queue_state(q.state)
        w.frameReady.connect(self._frame_ready)
        w.engineReady.connect(lambda name, why: self.engine_status.setText(f"engine: {name}"))
        w.engineReady.connect(lambda name, why: self.engine_status.setToolTip(why))
        w.engineReady.connect(lambda name, why: panel.engine_label.setText(_short(f"engine: {why}")))
        w.engineReady.connect(lambda name, why: panel.engine_label.setToolTip(why))
        self.preview.shown.connect(self._preview_shown)

    def _start_background(self) -> None:
        """Warm up off the GUI thread: the engine list (imports torch) feeds the Render panel."""
        from studio.core.engines import auto_engine, engine_status

        def ready(status: dict) -> None:
            self.render_panel.show_engines({k: str(v) for k, v in status.items()})
            from studio.service import gpus_here  # torch is loaded by now

            self.gpus_task = run_in_background(gpus_here, on_done=self._gpus_found)  # "All GPUs here"
            self.engine_status.setText(f"engine: auto → {auto_engine(status)}")
            self.engine_status.setToolTip("\n".join(f"{k}: {v}" for k, v in status.items()))

        self.engines_task = run_in_background(engine_status, on_done=ready, on_error=self.show_error)
        QTimer.singleShot(0, self._offer_queued)
        QTimer.singleShot(300, self._check_audio_device)

    def _gpus_found(self, devices) -> None:
        """Offer "All GPUs here"; choosing the saved target again is no edit (nothing to undo)."""
        with self.history.quiet():
            self.render_panel.set_gpus(devices)
        self.history.reset("setting:target")

    def _check_audio_device(self) -> None:
        """Say once, beside the transport, when playback will be silent (no audio output here)."""
        from studio.ui.transport import audio_device

        device = audio_device()
        self.transport.has_audio = device is not None
        if device is None:
            self.timeline.set_audio_note("no audio device: silent")
            self.timeline.audio_note.setToolTip(
                "No audio output device (PulseAudio/PipeWire) here: playback is silent; see the Doctor"
            )
        else:
            self.timeline.set_audio_note("")
            self.timeline.audio_note.setToolTip(f"sound: {device}")

    # ---- library ------------------------------------------------------------------------

    def _avatar_selected(self, name: str) -> None:
        self.render_panel.set_context(avatar=name)
        self.assets = None
        if not name:
            if self.current is None and not self.player_shown:
                self.preview.clear(NO_AVATAR)
            return
        from studio.core.avatars.library import load

        if self.current is None and not self.player_shown:
            self.preview.caption.setText(f"loading avatar “{name}”…")

        def loaded(assets) -> None:
            if self.library.avatar != name:
                return
            self.assets = assets
            self._rate_changed()  # "auto" follows the avatar's own rate
            self._show_avatar_frame()
            self._mark_faceless()
            self.avatarLoaded.emit(assets)
            if self.library.script:
                self._playhead_moved(self.timeline.position)

        def failed(message: str) -> None:
            if self.library.avatar == name:  # not for an avatar the user has since left or removed
                self.show_error(message)

        run_in_background(load, name, on_done=loaded, on_error=failed)

    def _avatar_preparing(self, name: str) -> None:
        if self.assets is None and self.current is None and not self.player_shown:
            self.preview.caption.setText(f"preparing avatar “{name}”…")

    def _show_avatar_frame(self) -> None:
        if self.assets is None or self.current is not None:
            return
        a = self.assets
        index = 0
        if self.last_scrub is not None:
            index = self._avatar_index(self.last_scrub[1]) if hasattr(a, "cycle_index") else 0
        frame = a.frames[index]
        if getattr(a, "alpha", None) is not None:  # a transparent presenter: over the checkerboard
            import numpy as np

            frame = np.dstack([frame, a.alpha[index]])
        image, extra = self._decorate(frame, index)
        caption = f"{self.library.avatar} · {a.width}x{a.height} · {a.N} frame(s){extra}"
        self.preview.show_now(image, caption, -1)

    def _decorate(self, image, avatar_index: int):
        """``image`` with the face box and/or blend mask of avatar frame ``avatar_index`` drawn on it,
        as the Library's two boxes say; and the caption's note."""
        a = self.assets
        box, mask = self.library.show_box.isChecked(), self.library.show_mask.isChecked()
        if a is None or not (box or mask) or image.shape[:2] != a.frames.shape[1:3]:
            return image, ""
        try:
            import numpy as np

            from studio.core.avatars.faces import overlay_image

            i = int(avatar_index)
            blend = a.masks[i] if mask else np.zeros_like(a.masks[i])
            rgb = image[..., :3]
            out = overlay_image(rgb, a.boxes[i], blend, a.landmarks[i] if mask else None, bool(a.face_ok[i]))
            if image.shape[-1] == 4:  # the drawing on a transparent presenter keeps its alpha
                out = np.dstack([out, image[..., 3]])
        except Exception as exc:  # noqa: BLE001
            self.show_error(error_text(exc))
            return image, ""
        return out, " · " + " + ".join(n for n, on in (("face box", box), ("blend mask", mask)) if on)

    def _overlay_toggled(self) -> None:
        if self.last_scrub is not None and self.analysis is not None and self.current is None and self.library.script:
            self._playhead_moved(self.timeline.position)  # the scrub frame comes back decorated
        else:
            self._show_avatar_frame()

    def _mark_faceless(self) -> None:
        """Mark the output frames whose avatar frame has no face (video avatars) on the timeline."""
        a, analysis = self.assets, self.analysis
        if a is None or analysis is None:
            self.timeline.set_faceless([])
            return
        import numpy as np

        from studio.core.media.audio import runs

        ok = np.asarray(a.face_ok, bool)
        if ok.all():
            self.timeline.set_faceless([])
            return
        bad = ~ok[np.asarray(self._avatar_index(np.arange(analysis.frames)))]
        self.timeline.set_faceless(runs(bad))

    def _avatar_index(self, frame):
        """The avatar frame output frame ``frame`` (an int or an array) shows, at the timeline's rate."""
        from studio.core.media.rates import map_frames

        a = self.assets
        return a.cycle_index(map_frames(frame, self.timeline.rate, getattr(a, "fps", self.timeline.rate)))

    def output_rate(self):
        """The rate the next render has: the Frame rate setting, or for auto the avatar's own (25 for a photo)."""
        from studio.core.media.rates import output_rate

        return output_rate(self.render_panel.render_settings().fps, self.assets)

    def _rate_changed(self) -> None:
        """The output rate changed (the setting, or an avatar with another rate): the timeline's frames,
        timecode and silence mask are those of the new rate."""
        if self.library.script and self.analysis is not None and self.analysis.rate != self.output_rate():
            self._script_selected(self.library.script)

    def _script_selected(self, path: str) -> None:
        self.render_panel.set_context(script=path)
        if not path:
            return
        from studio.core.media.audio import analyze
        from studio.ui.voiceovers import content_key

        rate = self.output_rate()
        known = self.library.analyses.get(path)  # checked when it was added: no second decode
        if known is not None and known.rate != rate:
            known = None  # analysed at another frame rate

        def read(p: str):  # on a background thread: the analysis (cached) and the content key
            return (known if known is not None else analyze(p, True, rate)), content_key(p)

        def done(result) -> None:
            analysis, key = result
            if self.library.script != path:
                return
            if analysis.rate != self.output_rate():  # the rate changed meanwhile: analyse at the new one
                self._script_selected(path)
                return
            self.transport.stop()
            self.transport.audio_path = path
            self.analysis = analysis
            self.timeline.set_threshold(self.render_panel.threshold)
            self.timeline.set_min_run(self.render_panel.min_silence)
            self.timeline.set_analysis(analysis)
            self.render_panel.set_range(None)
            self._restore_marks(key)
            self._mark_faceless()
            self.analysisReady.emit(analysis)

        self.voice_key = ""  # until the new one is read, nothing is saved under the old one
        if known is None:
            self.timeline.info.setText(f"analysing {Path(path).name}…")
        run_in_background(read, path, on_done=done, on_error=self.show_error)

    # ---- in/out and markers per voice-over; undo ------------------------------------------

    def _restore_marks(self, key: str) -> None:
        """In/out and markers as they were left on this voice-over (any earlier session)."""
        self.voice_key = key
        m = self.memory.get(key, rate=float(self.timeline.rate))
        with self.history.quiet():
            self.timeline.set_markers(m["markers"])
            if m["in"] is not None or m["out"] is not None:
                self.timeline.set_range(m["in"], m["out"])
        self.history.reset("range")
        self.history.reset("markers")

    def _save_marks(self) -> None:
        if not self.voice_key:
            return
        tl = self.timeline
        self.memory.put(
            self.voice_key,
            name=Path(self.library.script).name,
            rate=float(tl.rate),
            in_frame=tl.in_frame,
            out_frame=tl.out_frame,
            markers=[(m.frame, m.name) for m in tl.markers],
        )

    def _track_edits(self) -> None:
        """Every value an editor changes by hand becomes an undo step (``studio.ui.undo``)."""
        from studio.core.media.timecode import timecode
        from studio.ui.undo import History
        from studio.ui.voiceovers import VoiceoverMemory

        self.memory = VoiceoverMemory()
        self.voice_key = ""
        h = self.history = History(self.undo_stack)
        tl, panel = self.timeline, self.render_panel
        h.track(
            "threshold",
            "Threshold",
            lambda: tl.threshold,
            tl.set_threshold,
            tl.thresholdChanged,
            describe=lambda v: f"{v:g}",
            widget=tl.threshold_box,
        )
        h.track(
            "min_silence",
            "Min silence",
            lambda: tl.min_run,
            tl.set_min_run,
            tl.min_run_box.valueChanged,
            describe=lambda v: f"{v} frames",
            widget=tl.min_run_box,
        )
        tl.editSession.connect(h.session)

        def point(v) -> str:
            a, b = v
            return (
                "no in/out"
                if a is None and b is None
                else f"{'—' if a is None else timecode(a, tl.rate)}–{'—' if b is None else timecode(b, tl.rate)}"
            )

        h.track(
            "range",
            "In/out",
            lambda: (tl.in_frame, tl.out_frame),
            lambda v: tl.set_range(*v),
            tl.rangeChanged,
            describe=point,
            scope=lambda: self.voice_key,
            apply_elsewhere=lambda key, v: self.memory.put(key, in_frame=v[0], out_frame=v[1]),
        )
        h.track(
            "markers",
            "Markers",
            lambda: tuple((m.frame, m.name) for m in tl.markers),
            tl.set_markers,
            tl.markersChanged,
            text=_markers_step,
            scope=lambda: self.voice_key,
            apply_elsewhere=lambda key, v: self.memory.put(key, markers=v),
        )
        for name, widget, label, get, set_, signal in panel.tracked_settings():
            h.track(f"setting:{name}", label, get, set_, signal, widget=widget)
        self.library.history = h
        self.library.jobs_using = self._jobs_using

    def _jobs_using(self, avatars: list[str]) -> int:
        """Jobs of the queue still to render (draft, queued, held, running) with one of ``avatars``."""
        try:
            waiting = self.store.list(("draft", "queued", "held", "running"))
        except Exception:  # noqa: BLE001 - the store's trouble is said elsewhere
            return 0
        return sum(1 for j in waiting if j.avatar in avatars)

    def _marker_action(self, what: str) -> None:
        tl = self.timeline
        if tl.analysis is None:
            self.statusBar().showMessage("import a voice-over first: markers sit on its timeline", 5000)
            return
        here = [m for m in tl.markers if m.frame <= tl.frame]
        if what == "add":
            tl.add_marker()
        elif what == "next":
            tl.next_marker(1)
        elif what == "prev":
            tl.next_marker(-1)
        elif not here:
            self.statusBar().showMessage("no marker at or before the playhead (M adds one)", 5000)
        elif what == "delete":
            tl.remove_marker(here[-1].frame)
        elif what == "rename":
            tl.rename_marker(here[-1].frame)
        elif what == "render":
            self.render_marker(*tl.marker_span(here[-1].frame))

    def render_marker(self, start: int, end: int) -> int | None:
        """Render frames [start, end) (a marker to the next) of the current pair now."""
        return self.queue.add(self.library.avatar, self.library.script, start=True, frames=(start, end))

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
        if self.player_shown:  # the finished render is on screen: the timeline seeks it
            from studio.core.render.plan import frame_index

            self.player.seek_frame(frame_index(seconds, self.timeline.rate))
            return
        avatar, script = self.library.avatar, self.library.script
        if not avatar or not script or self.analysis is None:
            return
        self.worker.request_frame(avatar, script, self.render_panel.render_settings(), seconds)

    SCRUB_HOLD_S = 3.0  # a frame scrubbed during a render stays on screen this long before previews resume

    def _render_preview(self, image, caption: str, index: int) -> None:
        """The running render's preview, unless the editor scrubbed a frame a moment ago."""
        if time.monotonic() < getattr(self, "_scrub_hold_until", 0.0):
            return
        self.preview.offer(image, caption, index)

    def _frame_ready(self, seconds: float, index: int, image) -> None:
        """A scrub frame: shown also during a render (the render's previews wait a few seconds)."""
        self.last_scrub = (seconds, index)
        extra = ""
        if self.assets is not None:
            image, extra = self._decorate(image, self._avatar_index(index))
        from studio.core.media.timecode import timecode

        during = " · while rendering" if self.current is not None else ""
        if self.transport.playing and index != self.timeline.frame:
            during += " · playing (the picture catches up)"
        if self.current is not None:
            self._scrub_hold_until = time.monotonic() + self.SCRUB_HOLD_S
        caption = f"{timecode(index, self.timeline.rate)} · frame {index} · exact render preview{extra}{during}"
        self.preview.offer(image, caption, index)

    def _running(self, running: bool) -> None:
        self.cancel_action.setEnabled(running)
        self.render_action.setEnabled(not running)
        if not running:  # no stale "rendering · frame 351": the scrub frame or the avatar comes back
            QTimer.singleShot(0, self._refresh_preview)

    def _queue_state(self, state: str) -> None:
        """The queue's state, always in sight: the status bar, the Queue dock's title, the menu."""
        a = self.actions["start_queue"]
        a.blockSignals(True)
        a.setChecked(state == "running")
        a.blockSignals(False)
        a.setText("Pause queue" if state == "running" else "Start queue")
        text = self.queue.state_text()
        self.queue_state_label.setText(text)
        self.queue_state_label.setProperty("state", state)
        self.queue_state_label.style().unpolish(self.queue_state_label)
        self.queue_state_label.style().polish(self.queue_state_label)

    def _selection_changed(self) -> None:
        n = len(self.library.selected_avatars()) * len(self.library.selected_scripts())
        self.render_panel.set_batch(n)
        self.actions["add_to_queue"].setText(f"Add {n} jobs to queue" if n > 1 else "Add to queue")

    def _refresh_preview(self) -> None:
        if self.current is not None or self.player_shown:
            return
        if self.analysis is not None and self.library.avatar and self.library.script:
            self._playhead_moved(self.timeline.position)
        else:
            self._show_avatar_frame()

    def _preview_shown(self, index: int) -> None:
        if self.last_scrub is not None and index == self.last_scrub[1]:
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
            self._first_geometry()
            self._default_sizes()
            if self.height() < self.SHORT_SCREEN:  # a laptop: the timeline needs the toolbar's height
                self.toolbar.hide()  # (View > Toolbar; the Render panel and the menus have it all)
        self._placed_size = self.size()
        state = s.value("window/state")
        if isinstance(state, QByteArray) and not state.isEmpty():
            self.restoreState(state, cfg.VERSION)
        sizes = s.value("window/splitter")
        if isinstance(sizes, QByteArray) and not sizes.isEmpty():
            self.splitter.restoreState(sizes)
        else:  # on a short screen the timeline gets the larger share: its plots need the height
            screen = self.screen().availableGeometry().height() if self.screen() else 1000
            self.splitter.setSizes([450, 550] if screen < 900 else [600, 400])
        self.timeline.set_threshold(self.render_panel.threshold)
        self.timeline.set_min_run(self.render_panel.min_silence)
        script = cfg.value(s, "library/selected_script", str)
        if script and Path(script).exists():
            self.library.select_script(script)

    DEFAULT_SIZE = (1480, 980)
    SHORT_SCREEN = 800  # a first window less tall than this starts without the toolbar
    FRAME_ALLOWANCE = (16, 48)  # a window manager's borders and title bar, before they are known

    def _first_geometry(self) -> None:
        """The first window fits the available screen area, title bar included: the default size,
        or the screen's available area less a window manager's frame, centred. (``fit_screen``
        corrects it once the real frame is known.)"""
        screen = self.screen().availableGeometry() if self.screen() else None
        w, h = self.DEFAULT_SIZE
        if screen is None:
            self.resize(w, h)
            return
        fw, fh = self.FRAME_ALLOWANCE
        w, h = min(w, screen.width() - fw), min(h, screen.height() - fh)
        self.resize(w, h)
        self.move(screen.x() + (screen.width() - w - fw) // 2, screen.y() + (screen.height() - h - fh) // 2)

    def fit_screen(self) -> None:
        """Keep the whole frame (title bar too) inside the available screen area: a restored
        geometry from a bigger monitor, or a frame taller than allowed for, is pulled in."""
        if self.isMaximized() or self.isFullScreen() or self.screen() is None:
            return
        if self.size() != getattr(self, "_placed_size", self.size()):
            return  # resized since it was placed (by the user, a tool, a test): theirs
        avail = self.screen().availableGeometry()
        frame, inner = self.frameGeometry(), self.geometry()
        extra_w, extra_h = frame.width() - inner.width(), frame.height() - inner.height()
        w = min(inner.width(), avail.width() - extra_w)
        h = min(inner.height(), avail.height() - extra_h)
        if (w, h) != (inner.width(), inner.height()):
            self.resize(w, h)
        frame = self.frameGeometry()
        x = min(max(frame.x(), avail.x()), avail.right() - frame.width() + 1)
        y = min(max(frame.y(), avail.y()), avail.bottom() - frame.height() + 1)
        if (x, y) != (frame.x(), frame.y()):
            self.move(x, y)

    def _default_sizes(self) -> None:
        """Docks as they start: Library and Render side by side with the centre, the Queue tall
        enough for three rows."""
        self.resizeDocks([self.library_dock, self.render_dock], [300, 360], Qt.Orientation.Horizontal)
        self.resizeDocks([self.queue_dock], [self.queue_panel.minimumSizeHint().height() + 34], Qt.Orientation.Vertical)

    def save_state(self) -> None:
        s = self.settings
        s.setValue("window/geometry", self.saveGeometry())
        s.setValue("window/state", self.saveState(cfg.VERSION))
        s.setValue("window/splitter", self.splitter.saveState())
        self.render_panel.save()
        s.sync()

    def _offer_queued(self) -> None:
        """Queued jobs wait for a Start when the window opens: ask once (the answer can be kept)."""
        try:
            waiting = len(self.store.list(("queued",)))
        except Exception as exc:  # noqa: BLE001
            self.show_error(error_text(exc))
            return
        if not waiting:
            return
        choice = cfg.value(self.settings, "queue/on_start", str)
        if choice == "start":
            self.queue.start()
            return
        if choice == "wait":
            self.statusBar().showMessage(f"{waiting} queued render(s) wait: press Start queue", 8000)
            return
        from PySide6.QtWidgets import QCheckBox, QMessageBox

        box = QMessageBox(
            QMessageBox.Icon.Question,
            "Queued renders",
            f"{waiting} render(s) are queued from an earlier session. Start them now?",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
            self,
        )
        box.setObjectName("queuedOnStart")
        remember = QCheckBox("Remember my answer")
        box.setCheckBox(remember)

        def answered(button) -> None:
            yes = box.standardButton(button) == QMessageBox.StandardButton.Yes
            if remember.isChecked():
                self.settings.setValue("queue/on_start", "start" if yes else "wait")
            if yes:
                self.queue.start()

        box.buttonClicked.connect(answered)
        self.queued_box = box
        box.open()

    def closeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        if self.current is not None and not self.close_confirmed:
            from PySide6.QtWidgets import QMessageBox

            event.ignore()  # ask first; the answer closes (or not) later
            box = QMessageBox(
                QMessageBox.Icon.Warning,
                "A render is running",
                "A render is running. Stop it and close Studio? Nothing of it is written; "
                "the job comes back as interrupted, ready to retry.",
                QMessageBox.StandardButton.Close | QMessageBox.StandardButton.Cancel,
                self,
            )
            box.setObjectName("closeDuringRender")
            box.setDefaultButton(QMessageBox.StandardButton.Cancel)
            was_running = self.queue.state == "running"
            if was_running:  # no next job starts while the question is open
                self.queue.pause()

            def answered(button) -> None:
                if box.standardButton(button) == QMessageBox.StandardButton.Close:
                    self.close_confirmed = True
                    QTimer.singleShot(0, self.close)
                elif was_running:
                    self.queue.start()

            box.buttonClicked.connect(answered)
            self.close_box = box
            box.open()
            return
        self.transport.stop()
        self.save_state()
        from studio.ui.library import empty_trash

        empty_trash()  # removals can be undone until now
        if self.player is not None:
            self.player.release()
        self.queue.close()  # a running job stops now (nothing written) and comes back interrupted
        self.worker_thread.stop()
        super().closeEvent(event)


NO_AVATAR = "No avatar yet: import or drop a photo or a video (and a voice-over)"


def _markers_step(before, after) -> str:
    """An undo step's words for a change of the markers: "Add marker “Intro”", "Rename marker ..."."""
    b, a = dict(before), dict(after)
    added = [a[f] for f in a if f not in b]
    gone = [b[f] for f in b if f not in a]
    renamed = [(b[f], a[f]) for f in a if f in b and a[f] != b[f]]
    if len(added) == 1 and not gone and not renamed:
        return f"Add marker “{added[0]}”"
    if len(gone) == 1 and not added and not renamed:
        return f"Delete marker “{gone[0]}”"
    if len(renamed) == 1 and not added and not gone:
        return f"Rename marker “{renamed[0][0]}” to “{renamed[0][1]}”"
    return "Change markers"


def _short(text: str, limit: int = 90) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _icon(name: str) -> str:
    from studio.core.env import repo_resources

    return str(repo_resources() / "icons" / f"{name}.svg")

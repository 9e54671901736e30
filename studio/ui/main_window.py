"""The main window: it lays out the preview and timeline in the middle and the Library / Render /
Queue / Doctor docks and connects the views. It owns its parts: ``commands`` (every QAction by id, the
menu bar: ``studio.ui.actions``), ``window_commands`` (the File/Edit/View/Render/Help entries and the
toolbar: ``studio.ui.window_actions``), ``controls`` (the Playback keys and the player) and ``state``
(geometry, docks, the start and close questions: ``studio.ui.window_state``). ``controls`` and
``editor`` are handed the parts they use (the session, the Library, the timeline, the preview, the
transport, the queue, the worker, the actions), never the window, which is only their Qt parent;
they tell it things by signals (``error``, ``status``, ``renderMarker``, ``avatarLoaded``,
``scrubShown``) that ``_connect`` wires.

The editor's state is the ``EditorSession`` (``studio.ui.model``): the selected avatar and voice-over
with its analysis, in/out, markers, every render setting, the output and the placement, the rate in
effect. The timeline and the Render panel are its views; undo records its changes (``studio.ui.undo``);
the preview follows it (``studio.ui.editor_preview``).

Everything slow runs elsewhere: renders and scrub frames on the ``RenderWorker`` thread, audio
analysis, avatar loading and the doctor on background tasks. Errors from the core appear in a
banner above the preview (one readable sentence), never as a traceback dialog.
"""

from __future__ import annotations

import logging
import time
from operator import attrgetter
from pathlib import Path

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from studio.ui import settings as cfg
from studio.ui.actions import Actions
from studio.ui.doctor_panel import DoctorPanel
from studio.ui.editor_preview import NO_AVATAR, EditorPreview
from studio.ui.library import LibraryPanel
from studio.ui.model import EditorSession
from studio.ui.preview import PreviewView
from studio.ui.queue_panel import QueuePanel
from studio.ui.render_panel import RenderPanel
from studio.ui.render_queue import RenderQueue
from studio.ui.timeline import TimelineView
from studio.ui.transport import Transport
from studio.ui.transport_controls import TransportControls
from studio.ui.widgets import FileDrops, guard_inputs
from studio.ui.window_actions import WindowCommands, icon
from studio.ui.window_state import WindowState, add_dock
from studio.ui.workers import WorkerThread, run_in_background

log = logging.getLogger(__name__)


class MainWindow(QMainWindow):
    analysisReady = Signal(object)  # AudioAnalysis of the selected script
    avatarLoaded = Signal(object)  # AvatarAssets of the selected avatar
    scrubShown = Signal(float, int)  # seconds, frame index of a scrub frame now on screen

    def __init__(self, service=None, store=None):
        super().__init__()
        self.setWindowTitle("Studio")
        self.setWindowIcon(QIcon(icon("studio")))
        self.setObjectName("mainWindow")
        self.setDockOptions(QMainWindow.DockOption.AnimatedDocks | QMainWindow.DockOption.AllowTabbedDocks)
        #: True: close without asking, even during a render (a signal, the answer "Close", a test's teardown)
        self.close_confirmed = False
        self._fitted = False  # fitted to the screen once its window manager's frame is known
        self.settings = cfg.settings()
        self._errors: list[float] = []
        from studio.ui.voiceovers import VoiceoverMemory

        self.session = EditorSession(VoiceoverMemory())
        cfg.load_session(self.session, self.settings)

        from studio.core.errors import StudioError
        from studio.service.queue import QueueService

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
        self.timeline = TimelineView(self.session)
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
        self.render_panel = RenderPanel(self.session)
        self.queue_panel = QueuePanel(self.service)
        self.doctor = DoctorPanel()
        # the Render dock runs the full height (it fits 1080p unscrolled); the Queue spans the rest
        self.setCorner(Qt.Corner.BottomLeftCorner, Qt.DockWidgetArea.BottomDockWidgetArea)
        self.setCorner(Qt.Corner.BottomRightCorner, Qt.DockWidgetArea.RightDockWidgetArea)
        area = Qt.DockWidgetArea
        self.library_dock = add_dock(self, "Library", self.library, area.LeftDockWidgetArea, scroll=True)
        self.render_dock = add_dock(self, "Render", self.render_panel, area.RightDockWidgetArea, scroll=True)
        self.queue_dock = add_dock(self, "Queue", self.queue_panel, area.BottomDockWidgetArea)
        self.doctor_dock = add_dock(self, "Doctor", self.doctor, area.BottomDockWidgetArea)
        #: by title, in the View menu's order
        self.docks = {
            d.windowTitle(): d for d in (self.library_dock, self.render_dock, self.queue_dock, self.doctor_dock)
        }
        self.queue = RenderQueue(self.service, self.worker, self.render_panel, self.queue_panel, self)
        self.tabifyDockWidget(self.queue_dock, self.doctor_dock)
        self.queue_dock.raise_()
        self.doctor_dock.visibilityChanged.connect(self._doctor_visible)

        from PySide6.QtGui import QUndoStack

        from studio.ui.undo import History

        self.undo_stack = QUndoStack(self)
        self.history = History(self.undo_stack, self.session)
        self.library.history = self.history
        self.render_panel.delivery_buttons.history = self.history  # a removed delivery comes back on undo
        self.library.jobs_using = self._jobs_using
        self.commands = Actions(self)
        self.window_commands = WindowCommands(
            self.commands, self.library, self.session, self.queue, self.undo_stack, self.docks, parent=self
        )
        self.addToolBar(self.window_commands.toolbar)
        self.state = WindowState(
            self,
            self.settings,
            self.session,
            self.splitter,
            self.timeline,
            self.window_commands.toolbar,
            self.docks,
            self.queue_panel,
            self.queue,
            self.show_error,
        )
        self.engine_status = QLabel("engine: loading…")
        self.engine_status.setObjectName("dim")
        self.queue_state_label = QLabel("")
        self.queue_state_label.setObjectName("queueState")
        self.queue_state_label.setToolTip("The render queue: Start queue (Ctrl+Return) renders queued jobs in order")
        self.statusBar().addPermanentWidget(self.timeline.audio_note)  # "no audio device: silent", when so
        self.statusBar().addPermanentWidget(self.queue_state_label)
        self.statusBar().addPermanentWidget(self.engine_status)
        self.controls = TransportControls(self.timeline, self.transport, self.preview, self.commands, parent=self)
        self.editor = EditorPreview(
            self.session,
            self.library,
            self.timeline,
            self.preview,
            self.queue,
            self.controls,
            self.worker,
            self.transport,
            parent=self,
        )
        self.controls.playerClosed.connect(lambda: self.editor.scrub(self.timeline.position))

        self._connect()
        self.state.restore()
        script = cfg.value(self.settings, "library/selected_script", str)
        if script and Path(script).exists():
            self.library.select_script(script)
        # the Library chose its avatar (the saved one) before these signals were connected: take it
        # now, so the output name and the preview say that avatar from the first paint on
        self.session.select(avatar=self.library.avatar)
        if self.library.avatar:
            self.editor.avatar_selected(self.library.avatar)
        elif self.library.avatars.count() == 0:
            self.preview.caption.setText(NO_AVATAR)
        # files dropped anywhere in the window are imported; other kinds are named in one message
        self.drops = FileDrops(self, self.drop_files, only_known=False)
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
        from studio.ui.words import window_words

        log.warning("%s", message)
        message = window_words(message)  # the core's sentences name flags; the window names its fields
        now = time.monotonic()
        self._errors = [t for t in self._errors if now - t < 5] + [now]
        if len(self._errors) > 5:
            return
        self.banner_text.setText(message)
        self.banner.show()
        self.banner_keys = cause_keys(message)  # the settings it is about: a change of one clears it
        self.statusBar().showMessage(message, 8000)

    banner_keys: frozenset[str] = frozenset()

    def _setting_changed(self, key: str, _before, _after) -> None:
        """A banner about a setting ("captions need the script's text") goes when that setting changes:
        its cause is gone, or the next render says it again."""
        if key in self.banner_keys and self.banner.isVisible():
            self.banner.hide()
            self.banner_keys = frozenset()

    # what the window's parts hold, read through the window (tests and the app's own code use these)
    analysis = property(attrgetter("session.analysis"))
    assets = property(attrgetter("editor.assets"))
    last_scrub = property(attrgetter("editor.last_scrub"))
    voice_key = property(attrgetter("session.voice_key"))
    memory = property(attrgetter("session.memory"))

    def load_avatar(self, source: str, name: str | None = None):
        return self.library.import_avatar(source, name)

    def load_script(self, path: str) -> None:
        self.library.add_script(path)

    def render_now(self) -> int | None:
        """Render now: queue the current avatar x script with the session's settings and start the queue."""
        return self.queue.add(self.session.avatar, self.session.script, start=True)

    def add_to_queue(self) -> list[int]:
        """Add to queue: every selected avatar x every selected script as a queued job, in one step.

        The queue is not started: a stopped queue keeps them until Start queue, a running one takes
        them in order. Names never collide: a taken name gets a number (_002)."""
        pairs = [(a, s) for s in self.library.selected_scripts() for a in self.library.selected_avatars()]
        if not pairs:
            self.show_error("choose an avatar and a voice-over in the Library first")
            return []
        ids = [i for a, s in pairs if (i := self.queue.add(a, s, start=False)) is not None]
        if ids:
            then = "the queue renders them in order" if self.queue.state == "running" else "press Start queue to render"
            self.statusBar().showMessage(f"{len(ids)} job(s) queued; {then}", 8000)
        return ids

    def render_marker(self, start: int, end: int) -> int | None:
        """Render frames [start, end) (a marker to the next) of the current pair now."""
        return self.queue.add(self.session.avatar, self.session.script, start=True, frames=(start, end))

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
        """Play a finished render from ``seconds`` (its lip-sync check's worst second), sought at the
        file's own frame rate."""
        self.controls.play(path)
        if self.player is not None and self.player_shown:
            self.controls.seek_seconds(seconds)  # kept by the player until the file can seek

    player = property(attrgetter("controls.player"))
    player_shown = property(attrgetter("controls.player_shown"))
    shortcuts = property(attrgetter("controls.shortcuts"))

    def output_rate(self):
        """The rate the next render has: the Frame rate setting, or for auto the avatar's own (25 for a photo)."""
        return self.session.rate

    def show_shortcuts(self):
        """Help > Keyboard shortcuts (F1, ?): the list made from the menus' actions."""
        return self.commands.show_shortcuts()

    def showEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        guard_inputs(self)  # inputs made since construction (each is guarded once)
        super().showEvent(event)
        if not self._fitted:  # once the window manager's frame is known
            self._fitted = True
            QTimer.singleShot(200, self, self.state.fit_screen)  # (not after the window is gone)

    def keyReleaseEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        self.controls.key_released(event)
        super().keyReleaseEvent(event)

    def drop_files(self, paths) -> None:
        """Import dropped files: photos and videos as avatars, audio files as scripts (several at once)."""
        self.library.import_files([str(p) for p in paths])

    # ---- wiring -------------------------------------------------------------------------

    def _connect(self) -> None:
        lib, panel, w, s, ed = self.library, self.render_panel, self.worker, self.session, self.editor
        ed.error.connect(self.show_error)
        ed.avatarLoaded.connect(self.avatarLoaded)
        ed.scrubShown.connect(self.scrubShown)
        controls = self.controls
        controls.error.connect(self.show_error)
        controls.status.connect(self.statusBar().showMessage)
        controls.renderMarker.connect(self.render_marker)
        self.window_commands.error.connect(self.show_error)
        self.window_commands.status.connect(self.statusBar().showMessage)
        own = {  # the menus' commands that are the window's own
            "quit": self.close,
            "render": self.render_now,
            "add_to_queue": self.add_to_queue,
            "cancel": self.cancel_render,
            "doctor": self.show_doctor,
            "reset_layout": self.state.reset_layout,
        }
        for key, slot in own.items():
            self.commands.on(key, slot)
        lib.avatarSelected.connect(lambda name: (s.select(avatar=name), ed.avatar_selected(name)))
        lib.scriptSelected.connect(self._script_selected)
        lib.maskToggled.connect(lambda _on: ed.overlay_toggled())
        lib.error.connect(self.show_error)
        lib.avatarPrepared.connect(lambda _name: self.worker.invalidate())
        lib.avatarPreparing.connect(ed.avatar_preparing)
        lib.avatarRestored.connect(lambda _name: self.worker.invalidate())
        lib.status.connect(lambda text: self.statusBar().showMessage(text, 8000))
        lib.selectionChanged.connect(self._selection_changed)
        lib.text.textChanged.connect(self._script_text)  # the one script box: the captions' text too
        s.events.rate.connect(lambda _rate: self._rate_changed())
        s.events.changed.connect(self._setting_changed)
        self.timeline.playheadMoved.connect(ed.scrub)
        self.timeline.renderMarker.connect(self.render_marker)
        self.timeline.playClicked.connect(self.transport.toggle)
        self.timeline.error.connect(lambda text: self.statusBar().showMessage(text, 8000))
        self.timeline.editSession.connect(self.history.session_edit)
        self.history.focus("threshold", self.timeline.threshold_box)
        self.history.focus("min_silence", self.timeline.min_run_box)
        from PySide6.QtWidgets import QAbstractSpinBox, QComboBox, QLineEdit

        for key, widget in {**panel.fields, "folder": panel.folder, "pattern": panel.pattern}.items():
            typed = isinstance(widget, (QAbstractSpinBox, QLineEdit))
            if typed or (isinstance(widget, QComboBox) and widget.isEditable()):  # one edit: one step
                self.history.focus(key, widget)
        self.preview.filesDropped.connect(self.drop_files)
        panel.renderClicked.connect(self.render_now)
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
        q.previewFrame.connect(ed.render_preview)
        q.running.connect(self._running)
        q.stateChanged.connect(self._queue_state)
        self._queue_state(q.state)
        w.frameReady.connect(ed.frame_ready)
        w.engineReady.connect(self._engine_ready)
        self.preview.shown.connect(ed.shown)
        self._undo_index = self.undo_stack.index()
        self.undo_stack.indexChanged.connect(self._undone)

    def _engine_ready(self, name: str, why: str) -> None:
        self.engine_status.setText(f"engine: {name}")
        self.engine_status.setToolTip(why)
        self.render_panel.live.engine_label.setText(_short(f"engine: {why}"))
        self.render_panel.live.engine_label.setToolTip(why)

    def _undone(self, index: int) -> None:
        """The status bar says what an undo or redo did (not what the step before it said)."""
        before, self._undo_index = self._undo_index, index
        if self.history.pushing or index == before:
            return
        if index < before:
            self.statusBar().showMessage(f"Undone: {self.undo_stack.text(index)}", 5000)
        else:
            self.statusBar().showMessage(f"Redone: {self.undo_stack.text(index - 1)}", 5000)

    def _start_background(self) -> None:
        """Warm up off the GUI thread: the engine list (imports torch) feeds the Render panel."""
        from studio.core.engines import auto_engine, engine_status

        def ready(status: dict) -> None:
            self.render_panel.show_engines({k: str(v) for k, v in status.items()})
            from studio.service.queue import gpus_here  # torch is loaded by now

            self.gpus_task = run_in_background(gpus_here, on_done=self.render_panel.set_gpus)  # "All GPUs here"
            self.engine_status.setText(f"engine: auto → {auto_engine(status)}")
            self.engine_status.setToolTip("\n".join(f"{k}: {v}" for k, v in status.items()))

        self.engines_task = run_in_background(engine_status, on_done=ready, on_error=self.show_error)
        QTimer.singleShot(0, self, self.state.offer_queued)
        QTimer.singleShot(300, self._check_audio_device)

    def _jobs_using(self, avatars: list[str]) -> int:
        """Jobs of the queue still to render (draft, queued, held, running) with one of ``avatars``."""
        try:
            waiting = self.store.list(("draft", "queued", "held", "running"))
        except Exception:  # noqa: BLE001 - the store's trouble is said elsewhere
            return 0
        return sum(1 for j in waiting if j.avatar in avatars)

    # ---- the voice-over and the rate ----------------------------------------------------

    def _script_text(self) -> None:
        """The Library's script box is the ``script`` setting's view (captions are made from it); its
        own Ctrl+Z undoes typing, so its changes are no steps of the window's undo."""
        from studio.core.errors import InputError

        with self.session.quiet():
            try:
                self.session.set("script", self.library.text.toPlainText())
            except InputError as exc:  # too long for captions: said once typing stops making it longer
                self.statusBar().showMessage(str(exc), 8000)

    def _rate_changed(self) -> None:
        """The output rate changed (the setting, or an avatar with another rate): the timeline's frames,
        timecode and silence mask are those of the new rate."""
        if self.session.script and self.session.stale:
            self._script_selected(self.session.script)

    def _script_selected(self, path: str) -> None:
        self.session.select(script=path)
        if not path:
            return
        from studio.core.media.analysis import analyze
        from studio.ui.voiceovers import content_key

        rate = self.session.rate
        known = self.library.analyses.get(path)  # checked when it was added: no second decode
        if known is not None and known.rate != rate:
            known = None  # analysed at another frame rate

        def read(p: str):  # on a background thread: the analysis (cached) and the content key
            return (known if known is not None else analyze(p, True, rate)), content_key(p)

        def done(result) -> None:
            analysis, key = result
            if self.session.script != path:
                return
            if analysis.rate != self.session.rate:  # the rate changed meanwhile: analyse at the new one
                self._script_selected(path)
                return
            self.transport.stop()
            # the same voice-over at another rate keeps its moment; another voice-over starts at 0
            at = self.timeline.position if self.transport.audio_path == path else 0.0
            self.transport.audio_path = path
            self.session.set_analysis(analysis, key)  # the timeline draws it, with its remembered marks
            self.timeline.set_playhead(min(at, analysis.info.duration_s), emit=False)
            self.editor.mark_faceless()
            self.editor.last_scrub = None
            self.editor.refresh()  # the frame at the playhead (0) now, not the one before the change
            self.analysisReady.emit(analysis)

        if known is None:
            self.timeline.info.setText(f"analysing {Path(path).name}…")
        run_in_background(read, path, on_done=done, on_error=self.show_error)

    def _running(self, running: bool) -> None:
        self.window_commands.cancel_action.setEnabled(running)
        self.window_commands.render_action.setEnabled(not running)
        if not running:  # no stale "rendering · frame 351": the scrub frame or the avatar comes back
            QTimer.singleShot(0, self.editor.refresh)

    def _queue_state(self, state: str) -> None:
        """The queue's state, always in sight: the status bar, the Queue dock's title, the menu."""
        a = self.commands["start_queue"]
        a.setText("Pause queue" if state == "running" else "Start queue")
        self.queue_state_label.setText(self.queue.state_text())
        self.queue_state_label.setProperty("state", state)
        self.queue_state_label.style().unpolish(self.queue_state_label)
        self.queue_state_label.style().polish(self.queue_state_label)

    def _selection_changed(self) -> None:
        n = len(self.library.selected_avatars()) * len(self.library.selected_scripts())
        self.render_panel.set_batch(n)
        self.commands["add_to_queue"].setText(f"Add {n} jobs to queue" if n > 1 else "Add to queue")

    # ---- doctor, audio, exit -------------------------------------------------------------

    def show_doctor(self) -> None:
        self.doctor_dock.show()
        self.doctor_dock.raise_()

    def _doctor_visible(self, visible: bool) -> None:
        if visible and not self.doctor.checks and self.doctor.task is None:
            self.doctor.run()

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

    def _close_now(self) -> None:
        """Close without asking again (the answer "Close" to the question about a running render)."""
        self.close_confirmed = True
        QTimer.singleShot(0, self.close)

    def closeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        if not self.close_confirmed and self.state.ask_before_close(self._close_now):
            event.ignore()  # asked first; the answer closes (or not) later
            return
        self.transport.stop()
        self.state.save()
        from studio.ui.library_trash import empty_trash

        empty_trash()  # removals can be undone until now
        if self.player is not None:
            self.player.release()
        self.queue.close()  # a running job stops now (nothing written) and comes back interrupted
        self.worker_thread.stop()
        super().closeEvent(event)


def cause_keys(message: str) -> frozenset[str]:
    """The render settings a message is about: those it names by their label or their name
    ("captions need the script's text" -> captions, script)."""
    import re

    from studio.core.settings import SCHEMA

    text = message.lower()
    return frozenset(
        k
        for k, spec in SCHEMA.items()
        if re.search(rf"\b({re.escape(k.replace('_', ' '))}|{re.escape(spec.label.lower())})\b", text)
    )


def _short(text: str, limit: int = 90) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"

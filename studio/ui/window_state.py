"""The window's place on the screen and its life: the docks, the first geometry, fitting a restored
one into the screen, the docks' sizes, saving the layout and the session's settings, the question about
queued renders at start and the one about a running render at close.

``WindowState`` is a mix-in of ``MainWindow`` (it uses its docks, splitter, queue and session).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import QByteArray, Qt, QTimer
from PySide6.QtWidgets import QDockWidget, QFrame, QMainWindow, QWidget

from studio.ui import settings as cfg
from studio.ui.workers import error_text


def _size_of(text: str) -> tuple[int, int] | None:
    """ "1600x868" -> (1600, 868); None for anything else (no screen saved yet)."""
    w, _, h = (text or "").partition("x")
    return (int(w), int(h)) if w.isdigit() and h.isdigit() and int(w) > 0 and int(h) > 0 else None


class WindowState(QMainWindow):
    # MainWindow's parts this mix-in uses
    settings: Any
    session: Any
    store: Any
    queue: Any
    queue_panel: Any
    transport: Any
    worker_thread: Any
    splitter: Any
    timeline: Any
    toolbar: Any
    library: Any
    library_dock: Any
    render_dock: Any
    queue_dock: Any
    close_confirmed: bool
    show_error: Any
    current: Any
    player: Any
    docks: Any
    doctor: Any
    doctor_dock: Any

    def _restore(self) -> None:
        s = self.settings
        geometry = s.value("window/geometry")
        saved_on = _size_of(cfg.value(s, "window/screen", str))  # the screen the layout was left on
        here = self._screen_size()
        #: "same", "scaled" (another screen, the window scaled to it), "reset" (it would not fit) or "first"
        self.layout_restored = "first"
        if isinstance(geometry, QByteArray) and not geometry.isEmpty():
            self.restoreGeometry(geometry)
            self.layout_restored = "same" if saved_on is None or here is None or saved_on == here else "scaled"
        if self.layout_restored == "scaled" and saved_on is not None and here is not None:
            self._scale_to_screen(saved_on, here)
        if self.layout_restored in ("first", "reset"):
            self._first_geometry()
            self._default_sizes()
            if self.height() < self.SHORT_SCREEN:  # a laptop: the timeline needs the toolbar's height
                self.toolbar.hide()  # (View > Toolbar; the Render panel and the menus have it all)
        self._placed_size = self.size()
        state = s.value("window/state")
        if isinstance(state, QByteArray) and not state.isEmpty() and self.layout_restored != "reset":
            self.restoreState(state, cfg.VERSION)
        sizes = s.value("window/splitter")
        if isinstance(sizes, QByteArray) and not sizes.isEmpty() and self.layout_restored == "same":
            self.splitter.restoreState(sizes)
        else:  # once shown: the timeline gets the height its two plots need, the picture its share
            QTimer.singleShot(0, self.timeline_room)
        script = cfg.value(s, "library/selected_script", str)
        if script and Path(script).exists():
            self.library.select_script(script)

    TIMELINE_HEIGHT = 400  # two rows of fields and two plots of about 130 px each with the time axis
    PREVIEW_SHARE = 0.42  # the picture keeps at least this share of the centre (issue 52: 40 %)

    def timeline_room(self) -> None:
        """Split the centre between the preview and the timeline: the timeline gets ``TIMELINE_HEIGHT``
        where the centre is tall, the preview never less than ``PREVIEW_SHARE`` of it (on a 1600x900 or
        1280x720 screen the plots are shorter, their axes thinned to what fits: ``plot_axes``)."""
        total = sum(self.splitter.sizes())
        if total <= 0 or not self.isVisible():  # not laid out yet: once it is shown (for 10 s at most)
            self._room_tries = getattr(self, "_room_tries", 0) + 1
            if self._room_tries < 200:
                QTimer.singleShot(50, self, self.timeline_room)
            return
        want = min(self.TIMELINE_HEIGHT, total - max(120, int(total * self.PREVIEW_SHARE + 0.5)))
        want = max(want, self.timeline.minimumHeight())
        self.splitter.setSizes([total - want, want])
        self.room_given = True  # (a test waits for it)

    room_given = False

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

    def _screen_size(self) -> tuple[int, int] | None:
        screen = self.screen()
        if screen is None:
            return None
        avail = screen.availableGeometry()
        return avail.width(), avail.height()

    def _scale_to_screen(self, was: tuple[int, int], now: tuple[int, int]) -> None:
        """A layout left on another screen: the window scaled by the screens' ratio (a 1280x720
        laptop's window on a 1600x900 monitor grows with it); one that would not fit the smaller
        screen even scaled (its panels' widths, a tall Render panel) starts as a first window does."""
        fw, fh = self.FRAME_ALLOWANCE
        w = min(round(self.width() * now[0] / was[0]), now[0] - fw)
        h = min(round(self.height() * now[1] / was[1]), now[1] - fh)
        need = self.minimumSizeHint()
        if now[0] < was[0] or now[1] < was[1]:  # a smaller screen: the panels as saved would not fit
            self.layout_restored = "reset"
            return
        if w < need.width() or h < need.height():
            self.layout_restored = "reset"
            return
        self.resize(w, h)
        screen = self.screen().availableGeometry()
        self.move(screen.x() + (screen.width() - w - fw) // 2, screen.y() + (screen.height() - h - fh) // 2)

    def _default_sizes(self) -> None:
        """Docks as they start: Library and Render side by side with the centre (the Render panel's
        settings two a row on a wide window, one a row on a narrow one, where the centre needs the
        room), the Queue tall enough for three rows."""
        wide = self.width() >= 1440
        self.resizeDocks(
            [self.library_dock, self.render_dock],
            [300 if wide else 260, 440 if wide else 360],
            Qt.Orientation.Horizontal,
        )
        self.resizeDocks([self.queue_dock], [self.queue_panel.minimumSizeHint().height() + 34], Qt.Orientation.Vertical)

    def save_state(self) -> None:
        s = self.settings
        s.setValue("window/geometry", self.saveGeometry())
        s.setValue("window/state", self.saveState(cfg.VERSION))
        s.setValue("window/splitter", self.splitter.saveState())
        here = self._screen_size()
        if here is not None:  # a later start on another screen scales or resets the layout
            s.setValue("window/screen", f"{here[0]}x{here[1]}")
        cfg.save_session(self.session, s)
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
        from studio.ui.library_trash import empty_trash

        empty_trash()  # removals can be undone until now
        if self.player is not None:
            self.player.release()
        self.queue.close()  # a running job stops now (nothing written) and comes back interrupted
        self.worker_thread.stop()
        super().closeEvent(event)

    # ---- docks and panels ---------------------------------------------------------------

    def show_doctor(self) -> None:
        self.doctor_dock.show()
        self.doctor_dock.raise_()

    def reset_layout(self) -> None:
        for dock in self.docks:
            dock.show()
        self.addDockWidget(Qt.DockWidgetArea.LeftDockWidgetArea, self.library_dock)
        self.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, self.render_dock)
        self.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, self.queue_dock)
        self.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, self.doctor_dock)
        self.tabifyDockWidget(self.queue_dock, self.doctor_dock)
        self.queue_dock.raise_()
        self._default_sizes()
        self.timeline_room()

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
        # movable between areas and closable (View brings a panel back), never floating: a slip of
        # the mouse must not tear a panel off
        dock.setFeatures(
            QDockWidget.DockWidgetFeature.DockWidgetMovable | QDockWidget.DockWidgetFeature.DockWidgetClosable
        )
        self.addDockWidget(area, dock)
        return dock

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

    def _doctor_visible(self, visible: bool) -> None:
        if visible and not self.doctor.checks and self.doctor.task is None:
            self.doctor.run()

"""The window's place on the screen and its life: the docks, the first geometry, fitting a restored
one into the screen, the docks' sizes, saving the layout and the session's settings, the question about
queued renders at start and the one about a running render at close.

    state = WindowState(window, settings, session, splitter, timeline, toolbar, docks, queue_panel, queue, show_error)
    state.restore()            # the saved geometry, docks and splitter (or a first window's)
    state.save()               # and the session's settings
    state.ask_before_close(close)   # True: a render runs, the question is open (its "Close" calls close())

The ``MainWindow`` owns one; this object holds no widget of its own but the two questions it asks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QByteArray, Qt, QTimer
from PySide6.QtWidgets import QDockWidget, QFrame, QMainWindow, QSplitter, QToolBar, QWidget

from studio.ui import settings as cfg
from studio.ui.workers import error_text


def _size_of(text: str) -> tuple[int, int] | None:
    """ "1600x868" -> (1600, 868); None for anything else (no screen saved yet)."""
    w, _, h = (text or "").partition("x")
    return (int(w), int(h)) if w.isdigit() and h.isdigit() and int(w) > 0 and int(h) > 0 else None


class WindowState:
    """The geometry, docks and splitter of ``window`` and its start and close questions."""

    def __init__(
        self,
        window: QMainWindow,
        settings: Any,
        session: Any,
        splitter: QSplitter,
        timeline: Any,
        toolbar: QToolBar,
        docks: dict[str, QDockWidget],
        queue_panel: Any,
        queue: Any,
        show_error: Callable[[str], None],
    ):
        self.window, self.settings, self.session = window, settings, session
        self.splitter, self.timeline, self.toolbar = splitter, timeline, toolbar
        self.docks, self.queue_panel, self.queue, self.show_error = docks, queue_panel, queue, show_error
        #: "same", "scaled" (another screen, the window scaled to it), "reset" (it would not fit) or "first"
        self.layout_restored = "first"
        self.queued_box: Any = None  # the question about queued renders at start, once asked
        self.close_box: Any = None  # the question about a running render at close, once asked
        self._room_tries = 0
        self._placed_size = window.size()

    def restore(self) -> None:
        s = self.settings
        geometry = s.value("window/geometry")
        saved_on = _size_of(cfg.value(s, "window/screen", str))  # the screen the layout was left on
        here = self._screen_size()
        if isinstance(geometry, QByteArray) and not geometry.isEmpty():
            self.window.restoreGeometry(geometry)
            self.layout_restored = "same" if saved_on is None or here is None or saved_on == here else "scaled"
        if self.layout_restored == "scaled" and saved_on is not None and here is not None:
            self._scale_to_screen(saved_on, here)
        if self.layout_restored in ("first", "reset"):
            self._first_geometry()
            self._default_sizes()
            if self.window.height() < self.SHORT_SCREEN:  # a laptop: the timeline needs the toolbar's height
                self.toolbar.hide()  # (View > Toolbar; the Render panel and the menus have it all)
        self._placed_size = self.window.size()
        state = s.value("window/state")
        if isinstance(state, QByteArray) and not state.isEmpty() and self.layout_restored != "reset":
            self.window.restoreState(state, cfg.VERSION)
        sizes = s.value("window/splitter")
        if isinstance(sizes, QByteArray) and not sizes.isEmpty() and self.layout_restored == "same":
            self.splitter.restoreState(sizes)
        else:  # once shown: the timeline gets the height its two plots need, the picture its share
            QTimer.singleShot(0, self.window, self.timeline_room)  # (a timer of the window: not after it is gone)

    TIMELINE_HEIGHT = 400  # two rows of fields and two plots of about 130 px each with the time axis
    PREVIEW_SHARE = 0.42  # the picture keeps at least this share of the centre (issue 52: 40 %)

    def timeline_room(self) -> None:
        """Split the centre between the preview and the timeline: the timeline gets ``TIMELINE_HEIGHT``
        where the centre is tall, the preview never less than ``PREVIEW_SHARE`` of it (on a 1600x900 or
        1280x720 screen the plots are shorter, their axes thinned to what fits: ``plot_axes``)."""
        total = sum(self.splitter.sizes())
        if total <= 0 or not self.window.isVisible():  # not laid out yet: once it is shown (for 10 s at most)
            self._room_tries += 1
            if self._room_tries < 200:
                QTimer.singleShot(50, self.window, self.timeline_room)
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
        screen = self.window.screen().availableGeometry() if self.window.screen() else None
        w, h = self.DEFAULT_SIZE
        if screen is None:
            self.window.resize(w, h)
            return
        fw, fh = self.FRAME_ALLOWANCE
        w, h = min(w, screen.width() - fw), min(h, screen.height() - fh)
        self.window.resize(w, h)
        self.window.move(screen.x() + (screen.width() - w - fw) // 2, screen.y() + (screen.height() - h - fh) // 2)

    def fit_screen(self) -> None:
        """Keep the whole frame (title bar too) inside the available screen area: a restored
        geometry from a bigger monitor, or a frame taller than allowed for, is pulled in."""
        if self.window.isMaximized() or self.window.isFullScreen() or self.window.screen() is None:
            return
        if self.window.size() != self._placed_size:
            return  # resized since it was placed (by the user, a tool, a test): theirs
        avail = self.window.screen().availableGeometry()
        frame, inner = self.window.frameGeometry(), self.window.geometry()
        extra_w, extra_h = frame.width() - inner.width(), frame.height() - inner.height()
        w = min(inner.width(), avail.width() - extra_w)
        h = min(inner.height(), avail.height() - extra_h)
        if (w, h) != (inner.width(), inner.height()):
            self.window.resize(w, h)
        frame = self.window.frameGeometry()
        x = min(max(frame.x(), avail.x()), avail.right() - frame.width() + 1)
        y = min(max(frame.y(), avail.y()), avail.bottom() - frame.height() + 1)
        if (x, y) != (frame.x(), frame.y()):
            self.window.move(x, y)

    def _screen_size(self) -> tuple[int, int] | None:
        screen = self.window.screen()
        if screen is None:
            return None
        avail = screen.availableGeometry()
        return avail.width(), avail.height()

    def _scale_to_screen(self, was: tuple[int, int], now: tuple[int, int]) -> None:
        """A layout left on another screen: the window scaled by the screens' ratio (a 1280x720
        laptop's window on a 1600x900 monitor grows with it); one that would not fit the smaller
        screen even scaled (its panels' widths, a tall Render panel) starts as a first window does."""
        fw, fh = self.FRAME_ALLOWANCE
        w = min(round(self.window.width() * now[0] / was[0]), now[0] - fw)
        h = min(round(self.window.height() * now[1] / was[1]), now[1] - fh)
        need = self.window.minimumSizeHint()
        if now[0] < was[0] or now[1] < was[1]:  # a smaller screen: the panels as saved would not fit
            self.layout_restored = "reset"
            return
        if w < need.width() or h < need.height():
            self.layout_restored = "reset"
            return
        self.window.resize(w, h)
        screen = self.window.screen().availableGeometry()
        self.window.move(screen.x() + (screen.width() - w - fw) // 2, screen.y() + (screen.height() - h - fh) // 2)

    def _default_sizes(self) -> None:
        """Docks as they start: Library and Render side by side with the centre (the Render panel's
        settings two a row on a wide window, one a row on a narrow one, where the centre needs the
        room), the Queue tall enough for three rows."""
        wide = self.window.width() >= 1440
        self.window.resizeDocks(
            [self.docks["Library"], self.docks["Render"]],
            [300 if wide else 260, 440 if wide else 360],
            Qt.Orientation.Horizontal,
        )
        self.window.resizeDocks(
            [self.docks["Queue"]], [self.queue_panel.minimumSizeHint().height() + 34], Qt.Orientation.Vertical
        )

    def save(self) -> None:
        s = self.settings
        s.setValue("window/geometry", self.window.saveGeometry())
        s.setValue("window/state", self.window.saveState(cfg.VERSION))
        s.setValue("window/splitter", self.splitter.saveState())
        here = self._screen_size()
        if here is not None:  # a later start on another screen scales or resets the layout
            s.setValue("window/screen", f"{here[0]}x{here[1]}")
        cfg.save_session(self.session, s)
        s.sync()

    def offer_queued(self) -> None:
        """Queued jobs wait for a Start when the window opens: ask once (the answer can be kept)."""
        try:
            waiting = len(self.queue.store.list(("queued",)))
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
            self.window.statusBar().showMessage(f"{waiting} queued render(s) wait: press Start queue", 8000)
            return
        from PySide6.QtWidgets import QCheckBox, QMessageBox

        box = QMessageBox(
            QMessageBox.Icon.Question,
            "Queued renders",
            f"{waiting} render(s) are queued from an earlier session. Start them now?",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
            self.window,
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

    def ask_before_close(self, close: Callable[[], None]) -> bool:
        """While a render runs, ask before closing (True: asked; the window stays open until the
        answer, and "Close" calls ``close``, which closes without asking again)."""
        if self.queue.current is None:
            return False
        from PySide6.QtWidgets import QMessageBox

        box = QMessageBox(
            QMessageBox.Icon.Warning,
            "A render is running",
            "A render is running. Stop it and close Studio? Nothing of it is written; "
            "the job comes back as interrupted, ready to retry.",
            QMessageBox.StandardButton.Close | QMessageBox.StandardButton.Cancel,
            self.window,
        )
        box.setObjectName("closeDuringRender")
        box.setDefaultButton(QMessageBox.StandardButton.Cancel)
        was_running = self.queue.state == "running"
        if was_running:  # no next job starts while the question is open
            self.queue.pause()

        def answered(button) -> None:
            if box.standardButton(button) == QMessageBox.StandardButton.Close:
                close()
            elif was_running:
                self.queue.start()

        box.buttonClicked.connect(answered)
        self.close_box = box
        box.open()
        return True

    # ---- docks ----------------------------------------------------------------------------

    def reset_layout(self) -> None:
        w, d = self.window, self.docks
        for dock in d.values():
            dock.show()
        w.addDockWidget(Qt.DockWidgetArea.LeftDockWidgetArea, d["Library"])
        w.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, d["Render"])
        w.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, d["Queue"])
        w.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, d["Doctor"])
        w.tabifyDockWidget(d["Queue"], d["Doctor"])
        d["Queue"].raise_()
        self._default_sizes()
        self.timeline_room()


def add_dock(window: QMainWindow, title: str, widget: QWidget, area, scroll: bool = False) -> QDockWidget:
    """A dock named ``title`` holding ``widget`` in ``area`` of ``window`` (``scroll``: in a scroll area)."""
    dock = QDockWidget(title, window)
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
    dock.setFeatures(QDockWidget.DockWidgetFeature.DockWidgetMovable | QDockWidget.DockWidgetFeature.DockWidgetClosable)
    window.addDockWidget(area, dock)
    return dock

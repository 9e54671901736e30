"""The timeline's markers layer: adding, naming in place, moving between them, their lines on the
plots and their context menu. The ``TimelineView`` owns one (``view.markers_layer``) and draws its
markers through it; the markers themselves live in the ``EditorSession``.

    layer = MarkersLayer(view, session)      # its ticks on the RMS plot, its name field over the plots
    layer.add_marker(50, "Intro", edit=False)
    layer.draw()                             # the session's markers as lines on both plots
"""

from __future__ import annotations

from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtWidgets import QLineEdit, QMenu

from studio.ui.model import EditorSession, Marker

MARKER = "#c792ea"
MARKER_HIT_PX = 7  # a click this close to a marker's line is on the marker


class MarkersLayer(QObject):
    """The markers of ``view``'s plots (a ``TimelineView``: its plots, its frame and rate, its
    ``set_frame`` / ``set_range``). ``naming`` is the frame of the marker being named in place (or None)."""

    renderMarker = Signal(int, int)  # frames [start, end): "Render from this marker to the next"
    error = Signal(str)

    def __init__(self, view: Any, session: EditorSession):
        super().__init__(view)
        self.view, self.session = view, session
        self.plots, self.wave_plot, self.rms_plot = view.plots, view.wave_plot, view.rms_plot
        self.lines: list[tuple[Any, ...]] = []  # (line on the waveform, line on the RMS plot) per marker
        self.naming: int | None = None
        self.marker_menu: QMenu | None = None  # the context menu of a marker, once opened
        # markers on the ruler: a triangle under each one, on the time axis
        self.marker_ticks = pg.ScatterPlotItem(size=11, symbol="t1", pen=pg.mkPen(None), brush=pg.mkBrush(MARKER))
        self.marker_ticks.setZValue(25)
        self.rms_plot.addItem(self.marker_ticks)
        # naming a marker in place: a small field over the waveform at the marker
        self.marker_edit = QLineEdit(self.plots)
        self.marker_edit.setObjectName("markerName")
        self.marker_edit.setPlaceholderText("marker name")
        self.marker_edit.hide()
        self.marker_edit.installEventFilter(self)
        self.marker_edit.returnPressed.connect(self._name_done)

    @property
    def markers(self) -> list[Marker]:
        return self.session.marks.markers

    @property
    def fps(self) -> float:
        return self.view.fps

    def add_marker(self, frame: int | None = None, name: str | None = None, edit: bool = True) -> Marker | None:
        """A marker at ``frame`` (default: the playhead), named ``name`` (default "Marker N");
        ``edit``: then named in place. A marker already there is renamed instead."""
        marker = self.session.marks.add_marker(self.view.frame if frame is None else frame, name)
        if marker is not None and edit:
            self.rename_marker(marker.frame)
        return marker

    def marker_at(self, frame: int) -> Marker | None:
        return self.session.marks.marker_at(frame)

    def set_markers(self, markers) -> None:
        """All markers at once: ``Marker``s or (frame, name)."""
        self.session.set("markers", list(markers))

    def remove_marker(self, frame: int) -> None:
        self.session.marks.remove_marker(frame)

    def rename_marker(self, frame: int, name: str | None = None) -> None:
        """Rename the marker at ``frame`` to ``name``, or (None) open its name field in place."""
        m = self.marker_at(frame)
        if m is None:
            return
        if name is not None:
            self.session.marks.rename_marker(m.frame, name)
            return
        self.naming = m.frame
        edit = self.marker_edit
        edit.setText(m.name)
        x = int(self.plots.mapFromScene(self.view.scene_pos_of(m.frame / self.fps)).x())
        width = max(120, edit.fontMetrics().horizontalAdvance(m.name) + 24)
        edit.setGeometry(max(0, min(x + 4, self.plots.width() - width)), 4, width, edit.sizeHint().height())
        edit.show()
        edit.raise_()
        edit.setFocus(Qt.FocusReason.OtherFocusReason)
        edit.selectAll()

    def next_marker(self, direction: int) -> None:
        """Move the playhead to the next (``direction`` > 0) or previous marker."""
        target = self.session.marks.next_marker(self.view.frame, direction)
        if target is None:
            self.error.emit("no marker " + ("after" if direction > 0 else "before") + " the playhead (M adds one)")
            return
        self.view.set_frame(target)

    def marker_span(self, frame: int) -> tuple[int, int]:
        """Frames ``[marker, next marker)`` (or to the end) of the marker at ``frame``."""
        return self.session.marks.marker_span(frame)

    def marker_near(self, scene_x: float) -> Marker | None:
        """The marker whose line is within a few pixels of scene x ``scene_x``."""
        best, gap = None, MARKER_HIT_PX + 1.0
        for m in self.markers:
            x = self.view.scene_pos_of(m.frame / self.fps).x()
            if abs(x - scene_x) < gap:
                best, gap = m, abs(x - scene_x)
        return best

    def changed(self) -> None:
        """The session's markers changed: a marker being named that is gone stops being named; draw them."""
        if self.naming is not None and self.marker_at(self.naming) is None:
            self.cancel_naming()
        self.draw()

    def draw(self) -> None:
        while len(self.lines) < len(self.markers):
            pair = []
            for p, label in ((self.wave_plot, True), (self.rms_plot, False)):
                line = pg.InfiniteLine(
                    angle=90,
                    movable=False,
                    pen=pg.mkPen(MARKER, width=1, style=Qt.PenStyle.DashLine),
                    label="" if label else None,
                    labelOpts={"position": 0.97, "color": MARKER, "anchors": [(0, 0), (0, 0)]}
                    if label
                    else None,  # hangs below the top
                )
                line.setZValue(15)
                p.addItem(line)
                pair.append(line)
            self.lines.append(tuple(pair))
        for i, (wave, rms) in enumerate(self.lines):
            if i < len(self.markers):
                m = self.markers[i]
                for line in (wave, rms):
                    line.setValue(m.frame / self.fps)
                    line.show()
                wave.label.setFormat(f" {m.name}")
                wave.label.show()
            else:
                wave.hide()
                rms.hide()
        xs = [m.frame / self.fps for m in self.markers]
        lo = self.rms_plot.vb.viewRange()[1][0]
        self.marker_ticks.setData(xs, [lo] * len(xs))

    def eventFilter(self, obj, event) -> bool:  # noqa: N802 (Qt's name)
        if obj is self.marker_edit:
            if event.type() == QEvent.Type.KeyPress and event.key() == Qt.Key.Key_Escape:
                self.cancel_naming()  # the marker keeps the name it had
                self.plots.setFocus(Qt.FocusReason.OtherFocusReason)
                return True
            if event.type() == QEvent.Type.FocusOut and self.naming is not None:
                self._name_done()  # clicking elsewhere keeps what was typed
        return super().eventFilter(obj, event)

    def _name_done(self) -> None:
        frame, self.naming = self.naming, None
        self.marker_edit.hide()
        if frame is not None:
            name = self.marker_edit.text().strip()
            if name:
                self.rename_marker(frame, name)
        self.plots.setFocus(Qt.FocusReason.OtherFocusReason)

    def cancel_naming(self) -> None:
        if self.naming is not None:
            self.naming = None
            self.marker_edit.hide()

    def open_menu(self, marker: Marker, screen_pos) -> None:
        """The marker's context menu at ``screen_pos``: render or set in/out to the next, go, rename, delete."""
        menu = QMenu(self.view)
        menu.setObjectName("markerMenu")
        start, end = self.marker_span(marker.frame)
        until = "the next marker" if end < self.session.frames else "the end"
        render = menu.addAction(f"Render from “{marker.name}” to {until}")
        use = menu.addAction(f"Set in/out from “{marker.name}” to {until}")
        menu.addSeparator()
        go = menu.addAction("Go to marker")
        rename = menu.addAction("Rename…")
        delete = menu.addAction("Delete marker")
        render.triggered.connect(lambda: self.renderMarker.emit(start, end))
        use.triggered.connect(lambda: self.view.set_range(start, end - 1))
        go.triggered.connect(lambda: self.view.set_frame(marker.frame))
        rename.triggered.connect(lambda: self.rename_marker(marker.frame))
        delete.triggered.connect(lambda: self.remove_marker(marker.frame))
        self.marker_menu = menu
        menu.popup(screen_pos)

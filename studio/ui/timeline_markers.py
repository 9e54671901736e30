"""The timeline's markers: adding, naming in place, moving between them, their lines on the plots
and their context menu (``TimelineMarkers``, a part of ``TimelineView``; the markers themselves live
in the ``EditorSession``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLineEdit, QMenu, QWidget

from studio.ui.model import EditorSession, Marker

MARKER = "#c792ea"
MARKER_HIT_PX = 7  # a click this close to a marker's line is on the marker


class TimelineMarkers(QWidget):
    """The marker methods of ``TimelineView`` (its base class). They use what the view builds and
    shows, declared here; ``_naming`` is the frame of the marker being named in place (or None)."""

    if TYPE_CHECKING:
        session: EditorSession
        plots: Any
        wave_plot: Any
        rms_plot: Any
        marker_ticks: Any
        marker_edit: QLineEdit
        marker_menu: QMenu
        markers: list[Marker]
        frames: int
        frame: int
        fps: float
        error: Any
        renderMarker: Any
        _naming: int | None
        _marker_items: list[tuple[Any, ...]]

        def scene_pos_of(self, seconds: float, plot: Any = None) -> Any: ...
        def set_range(self, in_frame: int | None, out_frame: int | None) -> None: ...
        def set_frame(self, frame: int, emit: bool = True) -> None: ...

    def _build_markers(self) -> None:
        """The marker items (after the plots): their ticks on the ruler and the in-place name field."""
        self._marker_items = []  # (line on the waveform, line on the RMS plot) per marker
        self._naming = None
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

    def add_marker(self, frame: int | None = None, name: str | None = None, edit: bool = True) -> Marker | None:
        """A marker at ``frame`` (default: the playhead), named ``name`` (default "Marker N");
        ``edit``: then named in place. A marker already there is renamed instead."""
        marker = self.session.add_marker(self.frame if frame is None else frame, name)
        if marker is not None and edit:
            self.rename_marker(marker.frame)
        return marker

    def marker_at(self, frame: int) -> Marker | None:
        return self.session.marker_at(frame)

    def set_markers(self, markers) -> None:
        """All markers at once: ``Marker``s or (frame, name)."""
        self.session.set("markers", list(markers))

    def remove_marker(self, frame: int) -> None:
        self.session.remove_marker(frame)

    def rename_marker(self, frame: int, name: str | None = None) -> None:
        """Rename the marker at ``frame`` to ``name``, or (None) open its name field in place."""
        m = self.marker_at(frame)
        if m is None:
            return
        if name is not None:
            self.session.rename_marker(m.frame, name)
            return
        self._naming = m.frame
        edit = self.marker_edit
        edit.setText(m.name)
        x = int(self.plots.mapFromScene(self.scene_pos_of(m.frame / self.fps)).x())
        width = max(120, edit.fontMetrics().horizontalAdvance(m.name) + 24)
        edit.setGeometry(max(0, min(x + 4, self.plots.width() - width)), 4, width, edit.sizeHint().height())
        edit.show()
        edit.raise_()
        edit.setFocus(Qt.FocusReason.OtherFocusReason)
        edit.selectAll()

    def next_marker(self, direction: int) -> None:
        """Move the playhead to the next (``direction`` > 0) or previous marker."""
        target = self.session.next_marker(self.frame, direction)
        if target is None:
            self.error.emit("no marker " + ("after" if direction > 0 else "before") + " the playhead (M adds one)")
            return
        self.set_frame(target)

    def marker_span(self, frame: int) -> tuple[int, int]:
        """Frames ``[marker, next marker)`` (or to the end) of the marker at ``frame``."""
        return self.session.marker_span(frame)

    def marker_near(self, scene_x: float) -> Marker | None:
        """The marker whose line is within a few pixels of scene x ``scene_x``."""
        best, gap = None, MARKER_HIT_PX + 1.0
        for m in self.markers:
            x = self.scene_pos_of(m.frame / self.fps).x()
            if abs(x - scene_x) < gap:
                best, gap = m, abs(x - scene_x)
        return best

    def _draw_markers(self) -> None:
        while len(self._marker_items) < len(self.markers):
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
            self._marker_items.append(tuple(pair))
        for i, (wave, rms) in enumerate(self._marker_items):
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

    def _name_done(self) -> None:
        frame, self._naming = self._naming, None
        self.marker_edit.hide()
        if frame is not None:
            name = self.marker_edit.text().strip()
            if name:
                self.rename_marker(frame, name)
        self.plots.setFocus(Qt.FocusReason.OtherFocusReason)

    def _cancel_naming(self) -> None:
        if self._naming is not None:
            self._naming = None
            self.marker_edit.hide()

    def _marker_menu(self, marker: Marker, screen_pos) -> None:
        menu = QMenu(self)
        menu.setObjectName("markerMenu")
        start, end = self.marker_span(marker.frame)
        until = "the next marker" if end < self.frames else "the end"
        render = menu.addAction(f"Render from “{marker.name}” to {until}")
        use = menu.addAction(f"Set in/out from “{marker.name}” to {until}")
        menu.addSeparator()
        go = menu.addAction("Go to marker")
        rename = menu.addAction("Rename…")
        delete = menu.addAction("Delete marker")
        render.triggered.connect(lambda: self.renderMarker.emit(start, end))
        use.triggered.connect(lambda: self.set_range(start, end - 1))
        go.triggered.connect(lambda: self.set_frame(marker.frame))
        rename.triggered.connect(lambda: self.rename_marker(marker.frame))
        delete.triggered.connect(lambda: self.remove_marker(marker.frame))
        self.marker_menu = menu
        menu.popup(screen_pos)

"""Plot axes that stay readable at any height: a vertical axis shows only as many tick labels as fit one
above the other (every second or third major tick, then none), none past the plot's top or bottom
edge (where it would print into the plot above or below), and its title ("wave", "RMS") only when the
plot is taller than the title; nothing is ever drawn over another label.

    plot = layout.addPlot(row=0, col=0, axisItems={"left": ReadableAxis("left")})

pyqtgraph always draws every major tick's label (its ``textFillLimits`` thin only the minor levels), so a
log axis of four decades on a 30-pixel plot prints four labels into one another; this axis thins the
major level too, before pyqtgraph lays the text out.
"""

from __future__ import annotations

import math

import pyqtgraph as pg
from PySide6.QtGui import QFontMetrics

#: a label's share of the axis: text height times this is the room one label needs
ROOM = 1.6


class ReadableAxis(pg.AxisItem):
    def __init__(self, orientation: str, **kwargs):
        super().__init__(orientation, **kwargs)
        if orientation in ("left", "right"):  # a label past the plot's edge would print into the next plot's
            self.setStyle(hideOverlappingLabels=True)

    def _text_height(self) -> int:
        font = self.style.get("tickFont") or self.font()
        return QFontMetrics(font).height()

    def fits(self, size: float) -> int:
        """How many labels fit along ``size`` pixels of this axis (horizontal axes: no limit here)."""
        if self.orientation not in ("left", "right"):
            return 1 << 30
        return int(size // (self._text_height() * ROOM))

    def tickValues(self, minVal, maxVal, size):  # noqa: N802 (pyqtgraph's names)
        levels = super().tickValues(minVal, maxVal, size)
        room = self.fits(size)
        if room < 2:  # not even two labels: none (the grid and the curve keep the whole height)
            return [(spacing, []) for spacing, _values in levels[:1]]
        if not levels:
            return levels
        spacing, majors = levels[0]
        majors = list(majors)
        if len(majors) > room:  # every k-th major tick, so that what is shown fits
            step = math.ceil(len(majors) / room)
            majors = majors[::step]
            return [(spacing * step, majors)]  # the minor levels would be crowded as well
        return levels

    def resizeEvent(self, ev=None):  # noqa: N802 (Qt's name)
        super().resizeEvent(ev)
        if self.orientation not in ("left", "right") or not self.labelText:
            return
        wanted = QFontMetrics(self.label.font()).horizontalAdvance(self.labelText) + 8
        show = self.size().height() >= wanted
        if show != self.label.isVisible():
            self.label.setVisible(show)

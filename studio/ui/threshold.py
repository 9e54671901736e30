"""The timeline's silence threshold controls: the draggable line on the log RMS axis and the number
field beside it, and ``exact_threshold`` (the value both of them keep: what the field shows).
"""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QDoubleSpinBox

RMS_FLOOR = 1e-4  # log axis floor
THRESHOLD_DECIMALS = 5  # the number field's; the threshold is always a value it shows exactly
DECADES_PER_PX = 0.01  # the line's drag: at most 1/100 of a decade (x1.023) per pixel ...
FINE_DECADES_PER_PX = 0.001  # ... and with Shift held 1/1000 (x1.0023)


def exact_threshold(value: float, significant: int | None = None) -> float:
    """``value`` as the number field shows it (``THRESHOLD_DECIMALS``), first rounded to
    ``significant`` digits (a dragged value: 0.0123, not 0.012347); within [RMS_FLOOR, 1]."""
    v = min(max(float(value), RMS_FLOOR), 1.0)
    if significant:
        v = float(f"{v:.{significant}g}")
    return round(v, THRESHOLD_DECIMALS)


class ThresholdLine(pg.InfiniteLine):
    """The horizontal threshold line on the log RMS axis. A drag moves it by a fixed ratio per pixel
    (``DECADES_PER_PX``; Shift: ``FINE_DECADES_PER_PX``) rather than following the pointer, so a short
    RMS plot (four decades in 60 pixels on a laptop) cannot jump from 0.008 to 0.15 in a flick; on a
    tall plot, where a pixel is finer than that, it follows the pointer."""

    sigDragStarted = Signal(object)

    def mouseDragEvent(self, ev) -> None:  # noqa: N802 (pyqtgraph's name)
        if not self.movable or ev.button() != Qt.MouseButton.LeftButton:
            return
        ev.accept()
        if ev.isStart():
            self.moving = True
            self._anchor(ev)
            self._y0 = ev.buttonDownScenePos().y()  # the whole movement counts, from the press
            self.sigDragStarted.emit(self)
        if not self.moving:
            return
        fine = bool(ev.modifiers() & Qt.KeyboardModifier.ShiftModifier)
        if fine != self._fine:  # Shift pressed or let go mid-drag: carry on from here
            self._anchor(ev)
        vb = self.getViewBox()
        per_px = abs(vb.viewPixelSize()[1]) if vb is not None else DECADES_PER_PX
        gain = min(per_px, FINE_DECADES_PER_PX if fine else DECADES_PER_PX)
        dy = ev.scenePos().y() - self._y0  # scene y grows downwards
        self.setValue(self._v0 - dy * gain)
        self.sigDragged.emit(self)
        if ev.isFinish():
            self.moving = False
            self.sigPositionChangeFinished.emit(self)

    def _anchor(self, ev) -> None:
        self._v0 = float(self.value())
        self._y0 = ev.scenePos().y()
        self._fine = bool(ev.modifiers() & Qt.KeyboardModifier.ShiftModifier)


class LogSpinBox(QDoubleSpinBox):
    """The threshold's number field: arrows step by a ratio (about 5 %, Page Up/Down 25 %), so the
    same key press means as much at 0.0005 as at 0.05; typed values are kept exactly."""

    RATIO = 1.05
    PAGE = 1.25

    def stepBy(self, steps: int) -> None:  # noqa: N802 (Qt's name)
        v = self.value()
        ratio = self.PAGE if abs(steps) >= 10 else self.RATIO
        n = steps // 10 if abs(steps) >= 10 else steps
        target = exact_threshold(v * ratio**n, significant=3)
        if target == v:  # at the field's resolution: one last digit
            target = exact_threshold(v + (10**-THRESHOLD_DECIMALS) * (1 if steps > 0 else -1))
        self.setValue(target)

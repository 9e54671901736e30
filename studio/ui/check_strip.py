"""The lip-sync check's per-second strip under the player: a click on a second plays from there.

    strip = CheckStrip()
    strip.load("out.mp4")          # reads out.check.html beside it (hidden when there is none)
    strip.secondClicked.connect(lambda s: player.seek_frame(round(s * fps)))

Three rows, one column per second, as the visual report draws them (docs/check.md): the sync (the
local correlation, blue bars), each second's own offset (purple marks, the +-1 frame band dashed)
and the jitter (orange bars); seconds that are mostly silent are shaded, the worst second framed in
red, and the second under the mouse named in the tooltip.
"""

from __future__ import annotations

import math

from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QPainter, QPen
from PySide6.QtWidgets import QWidget

ROWS = (("sync", "sync"), ("offset", "offset"), ("jitter", "jitter"))
LABEL_W = 48  # px: the rows' names on the left


class CheckStrip(QWidget):
    secondClicked = Signal(int)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("check_strip")
        self.data: dict | None = None
        self.setMinimumHeight(78)
        self.setMaximumHeight(110)
        self.setMouseTracking(True)
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        self.hide()

    def load(self, video: str) -> None:
        """The report beside ``video`` (its ``.check.html``), or hidden when it has none."""
        from studio.service.checks import report_data

        self.set_data(report_data(video))

    def set_data(self, data: dict | None) -> None:
        self.data = data if data and data.get("per_second") else None
        self.setVisible(self.data is not None)
        self.setToolTip("")
        self.update()

    @property
    def seconds(self) -> int:
        return len(self.data["per_second"]) if self.data else 0

    def second_at(self, x: float) -> int | None:
        """The second under ``x`` (widget pixels), or None left of the plot."""
        if not self.seconds or x < LABEL_W:
            return None
        w = (self.width() - LABEL_W) / self.seconds
        return min(self.seconds - 1, int((x - LABEL_W) / max(w, 1e-6)))

    def x_of(self, second: int) -> float:
        """The centre of ``second``'s column (widget pixels)."""
        return LABEL_W + (second + 0.5) * (self.width() - LABEL_W) / max(self.seconds, 1)

    def mousePressEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        k = self.second_at(event.position().x())
        if k is not None and event.button() == Qt.MouseButton.LeftButton:
            self.secondClicked.emit(k)
        super().mousePressEvent(event)

    def mouseMoveEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        k = self.second_at(event.position().x())
        if k is not None and self.data:
            r = self.data["per_second"][k]
            parts = [f"{name} {r.get(name)}" for name in ("sync", "offset", "jitter") if r.get(name) is not None]
            self.setToolTip(f"{k // 60}:{k % 60:02d}  " + ", ".join(parts) + "  (click: play from here)")
        super().mouseMoveEvent(event)

    def paintEvent(self, _event) -> None:  # noqa: N802 (Qt's name)
        if not self.data:
            return
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        per = self.data["per_second"]
        n = len(per)
        w = (self.width() - LABEL_W) / n
        row_h = self.height() / len(ROWS)
        pal = self.palette()
        p.fillRect(self.rect(), pal.base())
        for k, r in enumerate(per):  # the silences
            if (r.get("speech") or 0) < 0.5:
                p.fillRect(QRectF(LABEL_W + k * w, 0, w, self.height()), QColor(128, 128, 128, 60))
        top_jitter = max((r["jitter"] for r in per if r.get("jitter") is not None), default=1.0) or 1.0
        colours = {"sync": QColor("#0969da"), "offset": QColor("#8250df"), "jitter": QColor("#bc4c00")}
        for i, (key, label) in enumerate(ROWS):
            y0 = i * row_h
            p.setPen(pal.text().color())
            p.drawText(QRectF(2, y0, LABEL_W - 4, row_h), Qt.AlignmentFlag.AlignVCenter, label)
            p.setPen(QPen(QColor(128, 128, 128, 90), 1))
            p.drawLine(QPointF(LABEL_W, y0 + row_h), QPointF(self.width(), y0 + row_h))
            if key == "offset":
                mid = y0 + row_h / 2
                reach = max([3.0] + [abs(float(r["offset"])) + 1 for r in per if r.get("offset") is not None])
                scale = (row_h / 2 - 3) / reach
                p.setPen(QPen(QColor(207, 34, 46, 140), 1, Qt.PenStyle.DashLine))
                for band in (-1.5, 1.5):
                    p.drawLine(QPointF(LABEL_W, mid - band * scale), QPointF(self.width(), mid - band * scale))
            for k, r in enumerate(per):
                v = r.get(key)
                if v is None or not math.isfinite(float(v)):
                    continue
                x = LABEL_W + k * w
                if key == "offset":
                    p.setPen(Qt.PenStyle.NoPen)
                    p.setBrush(colours[key])
                    p.drawEllipse(QPointF(x + w / 2, mid - float(v) * scale), 3, 3)
                    continue
                frac = max(0.0, float(v)) / (1.0 if key == "sync" else top_jitter)
                h = min(1.0, frac) * (row_h - 4)
                p.fillRect(QRectF(x + w * 0.1, y0 + row_h - 2 - h, w * 0.8, h), colours[key])
        worst = self.data.get("worst_second")
        if worst is not None and 0 <= worst < n:
            p.setPen(QPen(QColor("#c62828"), 2))
            p.setBrush(Qt.BrushStyle.NoBrush)
            p.drawRect(QRectF(LABEL_W + worst * w + 1, 1, w - 2, self.height() - 2))
        p.end()

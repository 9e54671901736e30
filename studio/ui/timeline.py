"""The timeline: waveform, silent spans, RMS with a draggable threshold, and the playhead.

The waveform is drawn from the cached envelope (100 min/max buckets per second) with peak
downsampling and clip-to-view, so a one-hour file pans smoothly. Silent spans are shaded with
``LinearRegionItem``s (a shaded step curve past ``MAX_REGIONS`` spans). Moving the threshold line
recomputes the mask at once; moving or clicking the playhead emits ``playheadMoved(seconds)``.
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QSpinBox, QVBoxLayout, QWidget

from studio.core.constants import DEFAULT_MIN_SILENCE_FRAMES, DEFAULT_SILENCE_THRESHOLD, FPS

MAX_REGIONS = 400
RMS_FLOOR = 1e-4  # log axis floor
WAVE_PEN = "#4fa3ff"
SILENCE_BRUSH = (255, 170, 60, 45)
ACCENT = "#ffb347"


def time_text(seconds: float) -> str:
    m, s = divmod(max(0.0, seconds), 60)
    return f"{int(m):02d}:{s:05.2f}"


class TimelineView(QWidget):
    thresholdChanged = Signal(float)
    maskChanged = Signal(object)  # bool [T]
    playheadMoved = Signal(float)  # seconds (already snapped to the start of its frame)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("timeline")
        self.analysis = None
        self.mask: np.ndarray | None = None
        self.threshold = DEFAULT_SILENCE_THRESHOLD
        self.min_run = DEFAULT_MIN_SILENCE_FRAMES
        self.position = 0.0
        self._regions: list[pg.LinearRegionItem] = []
        self._silence_curve = None

        self.plots = pg.GraphicsLayoutWidget()
        self.plots.setBackground("#16181d")
        self.wave_plot = self.plots.addPlot(row=0, col=0)
        self.rms_plot = self.plots.addPlot(row=1, col=0)
        self.plots.ci.layout.setRowStretchFactor(0, 3)
        self.plots.ci.layout.setRowStretchFactor(1, 2)
        for p in (self.wave_plot, self.rms_plot):
            p.setMenuEnabled(False)
            p.showGrid(x=True, y=False, alpha=0.15)
            p.setMouseEnabled(x=True, y=False)
            p.getAxis("left").setWidth(48)
            p.setClipToView(True)
            p.setDownsampling(auto=True, mode="peak")
            p.hideButtons()
        self.rms_plot.setXLink(self.wave_plot)
        self.wave_plot.hideAxis("bottom")
        self.wave_plot.setYRange(-1, 1, padding=0.05)
        self.wave_plot.getAxis("left").setLabel("wave")
        self.rms_plot.setLogMode(x=False, y=True)
        self.rms_plot.getAxis("left").setLabel("RMS")
        self.rms_plot.getAxis("left").enableAutoSIPrefix(False)
        self.wave_plot.getAxis("left").enableAutoSIPrefix(False)
        self.rms_plot.getAxis("bottom").setLabel("time (s)")
        self.rms_plot.getAxis("bottom").enableAutoSIPrefix(False)
        self.wave_plot.setXRange(0, 10, padding=0)
        self.rms_plot.setYRange(math.log10(RMS_FLOOR), 0, padding=0)

        fill = pg.mkBrush(79, 163, 255, 110)
        self.wave_max = self.wave_plot.plot(pen=pg.mkPen(WAVE_PEN, width=1), fillLevel=0, brush=fill)
        self.wave_min = self.wave_plot.plot(pen=pg.mkPen(WAVE_PEN, width=1), fillLevel=0, brush=fill)
        self.rms_curve = self.rms_plot.plot(pen=pg.mkPen("#9be38b", width=1))

        self.threshold_line = pg.InfiniteLine(
            angle=0, movable=True, pen=pg.mkPen(ACCENT, width=2), hoverPen=pg.mkPen("#ffd08a", width=3),
            label="threshold {value:.4f}", labelOpts={"position": 0.88, "color": ACCENT, "movable": True},
        )
        self.threshold_line.setValue(math.log10(self.threshold))
        self.threshold_line.sigPositionChanged.connect(self._threshold_dragged)
        self.rms_plot.addItem(self.threshold_line)
        # the label shows the RMS value, not its log
        self.threshold_line.label.setFormat("")
        self.playheads = []
        for p in (self.wave_plot, self.rms_plot):
            line = pg.InfiniteLine(angle=90, movable=True, pen=pg.mkPen("#ff5c7a", width=2),
                                   hoverPen=pg.mkPen("#ff8da1", width=3))
            line.sigPositionChanged.connect(self._playhead_dragged)
            p.addItem(line)
            self.playheads.append(line)
        self.wave_plot.scene().sigMouseClicked.connect(self._clicked)

        self.info = QLabel("Import a voice-over to see its waveform and silences")
        self.info.setObjectName("timelineInfo")
        self.time_label = QLabel(self._time_caption(0.0))
        self.time_label.setObjectName("timeLabel")
        self.min_run_box = QSpinBox()
        self.min_run_box.setRange(1, 250)
        self.min_run_box.setValue(self.min_run)
        self.min_run_box.setSuffix(" frames")
        self.min_run_box.setToolTip("Shortest silence: shorter dips between words stay speech")
        self.min_run_box.valueChanged.connect(self.set_min_run)

        top = QHBoxLayout()
        top.addWidget(self.time_label)
        top.addStretch(1)
        top.addWidget(self.info)
        top.addSpacing(12)
        top.addWidget(QLabel("min silence"))
        top.addWidget(self.min_run_box)
        box = QVBoxLayout(self)
        box.setContentsMargins(6, 4, 6, 4)
        box.addLayout(top)
        box.addWidget(self.plots, 1)
        self._update_threshold_label()

    # ---- public API --------------------------------------------------------------------

    def set_analysis(self, analysis) -> None:
        """Show an ``AudioAnalysis`` (envelope, RMS); keeps the current threshold."""
        self.analysis = analysis
        n = len(analysis.env_max)
        t = np.arange(n, dtype=np.float64) * (analysis.bucket / 16000.0)
        self.wave_max.setData(t, analysis.env_max)
        self.wave_min.setData(t, analysis.env_min)
        rt = (np.arange(analysis.frames, dtype=np.float64) + 0.5) / FPS
        self.rms_curve.setData(rt, np.maximum(analysis.rms, RMS_FLOOR))
        duration = analysis.info.duration_s
        for p in (self.wave_plot, self.rms_plot):
            p.setLimits(xMin=0, xMax=max(duration, 0.04))
        self.wave_plot.setXRange(0, duration, padding=0)
        lo = math.log10(RMS_FLOOR)
        hi = math.log10(max(float(analysis.rms.max(initial=0.0)), RMS_FLOOR * 10)) + 0.2
        self.rms_plot.setYRange(lo, hi, padding=0)
        self.set_playhead(0.0, emit=False)
        self._recompute()

    def set_threshold(self, value: float) -> None:
        self.threshold_line.setValue(math.log10(max(value, RMS_FLOOR)))

    def set_min_run(self, frames: int) -> None:
        self.min_run = int(frames)
        if self.min_run_box.value() != self.min_run:
            self.min_run_box.setValue(self.min_run)
        self._recompute()

    def set_playhead(self, seconds: float, emit: bool = True) -> None:
        duration = self.analysis.info.duration_s if self.analysis else 0.0
        seconds = min(max(0.0, seconds), max(0.0, duration - 1e-6))
        from studio.core.render import frame_index

        snapped = frame_index(seconds) / FPS
        self.position = snapped
        for line in self.playheads:
            line.blockSignals(True)
            line.setValue(snapped)
            line.blockSignals(False)
        self.time_label.setText(self._time_caption(snapped))
        if emit:
            self.playheadMoved.emit(snapped)

    @property
    def silent_spans(self) -> list[tuple[int, int]]:
        from studio.core.audio import runs

        return runs(self.mask) if self.mask is not None else []

    # ---- internals ---------------------------------------------------------------------

    def _time_caption(self, seconds: float) -> str:
        from studio.core.render import frame_index

        return f"{time_text(seconds)}  ·  frame {frame_index(seconds)}"

    def _threshold_dragged(self) -> None:
        self.threshold = float(10 ** self.threshold_line.value())
        self._update_threshold_label()
        self._recompute()
        self.thresholdChanged.emit(self.threshold)

    def _update_threshold_label(self) -> None:
        self.threshold_line.label.setFormat(f"threshold {self.threshold:.4f}")

    def _playhead_dragged(self, line) -> None:
        self.set_playhead(float(line.value()))

    def _clicked(self, event) -> None:
        if event.button() != 1 or self.analysis is None:
            return
        pos = self.wave_plot.vb.mapSceneToView(event.scenePos())
        self.set_playhead(float(pos.x()))

    def _recompute(self) -> None:
        if self.analysis is None:
            return
        self.mask = self.analysis.mask(self.threshold, self.min_run)
        spans = self.silent_spans
        self._draw_spans(spans)
        silent = int(self.mask.sum())
        total = max(1, len(self.mask))
        self.info.setText(
            f"{self.analysis.info.duration_s:.1f} s · {len(self.mask)} frames · "
            f"{len(spans)} silences · {silent} silent frames ({100 * silent / total:.0f} %)"
        )
        self.maskChanged.emit(self.mask)

    def _draw_spans(self, spans) -> None:
        use_regions = len(spans) <= MAX_REGIONS
        while use_regions and len(self._regions) < len(spans):
            r = pg.LinearRegionItem(movable=False, brush=pg.mkBrush(*SILENCE_BRUSH), pen=pg.mkPen(None))
            r.setZValue(-10)
            self.wave_plot.addItem(r)
            self._regions.append(r)
        for i, r in enumerate(self._regions):
            if use_regions and i < len(spans):
                a, b = spans[i]
                r.setRegion((a / FPS, b / FPS))
                r.show()
            else:
                r.hide()
        if self._silence_curve is None:
            self._silence_curve = self.wave_plot.plot(pen=None, fillLevel=-1, brush=pg.mkBrush(*SILENCE_BRUSH))
            self._silence_curve.setZValue(-10)
        if use_regions:
            self._silence_curve.setData([], [])
        else:
            xs = np.array([[a, a, b, b] for a, b in spans], np.float64).ravel() / FPS
            ys = np.tile([-1.0, 1.0, 1.0, -1.0], len(spans))
            self._silence_curve.setData(xs, ys)

    @property
    def visible_regions(self) -> int:
        return sum(1 for r in self._regions if r.isVisible())

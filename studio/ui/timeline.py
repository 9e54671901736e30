"""The timeline: transport bar, waveform, silent spans, RMS with a draggable threshold, playhead,
in/out range and the frames where a video avatar has no face.

The waveform is drawn from the cached envelope (100 min/max buckets per second) with peak
downsampling and clip-to-view, so a one-hour file pans smoothly. Silent spans are shaded with
``LinearRegionItem``s (a shaded step curve past ``MAX_REGIONS`` spans). Moving the threshold line
(or typing in the number field beside it) recomputes the mask at once. A click anywhere on the
waveform, the RMS plot or the time ruler moves the playhead there; so does dragging the playhead,
typing a timecode in the timecode field (see ``studio.core.media.timecode``) or the transport keys the
main window binds. The playhead always sits on the start of a frame and emits
``playheadMoved(seconds)``.

The in/out range is frames ``[in, out)``: ``set_in()`` marks the playhead's frame as the first one,
``set_out()`` marks it as the last one (as in Premiere, the out frame is included), so
``range_frames()`` returns ``(in, out + 1)``.
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtGui import QFontDatabase, QFontMetrics
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QSizePolicy,
    QSpinBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from studio.core.media.timecode import JUMP_HELP, parse_jump, timecode
from studio.ui.model import EditorSession, session_attr, session_value
from studio.ui.plot_axes import ReadableAxis
from studio.ui.threshold import RMS_FLOOR, THRESHOLD_DECIMALS, LogSpinBox, ThresholdLine, exact_threshold
from studio.ui.timeline_markers import MarkersLayer
from studio.ui.widgets import ElidedLabel

MAX_REGIONS = 400
WAVE_PEN = "#4fa3ff"
SILENCE_BRUSH = (255, 170, 60, 45)
RANGE_BRUSH = (79, 163, 255, 38)
RANGE_PEN = "#7cc0ff"
FACELESS_BRUSH = (255, 90, 90, 170)
ACCENT = "#ffb347"
PLAYHEAD = "#ff5c7a"


def time_text(seconds: float) -> str:
    m, s = divmod(max(0.0, seconds), 60)
    return f"{int(m):02d}:{s:05.2f}"


class TimelineView(QWidget):
    thresholdChanged = Signal(float)
    maskChanged = Signal(object)  # bool [T]
    playheadMoved = Signal(float)  # seconds (already snapped to the start of its frame)
    rangeChanged = Signal(object)  # (in, out) frames [in, out) or None
    playClicked = Signal()
    loopToggled = Signal(bool)
    error = Signal(str)
    markersChanged = Signal()  # added, renamed, removed (by the editor, an undo, or a restore)
    renderMarker = Signal(int, int)  # frames [start, end): "Render from this marker to the next"
    editSession = Signal(str, bool)  # "threshold" / "min_silence": an edit (a drag, a focused field) began / ended

    def __init__(self, session: EditorSession | None = None, parent=None):
        super().__init__(parent)
        self.setObjectName("timeline")
        #: the editor's state (threshold, min silence, in/out, markers, the analysis): the timeline draws it
        self.session = session if session is not None else EditorSession()
        self.position = 0.0
        self.faceless_spans: list[tuple[int, int]] = []
        self._regions: list[pg.LinearRegionItem] = []
        self._silence_curve = None

        self.plots = pg.GraphicsLayoutWidget()
        self.plots.setBackground("#16181d")
        self.plots.setAcceptDrops(False)  # dropped files go to the window, not the scene
        self.plots.viewport().setAcceptDrops(False)
        # axes that thin their labels to what fits: no overprint at any splitter position
        self.wave_plot = self.plots.addPlot(row=0, col=0, axisItems={"left": ReadableAxis("left")})
        self.rms_plot = self.plots.addPlot(row=1, col=0, axisItems={"left": ReadableAxis("left")})
        self.plots.ci.layout.setRowStretchFactor(0, 1)  # as tall as each other: the RMS plot is
        self.plots.ci.layout.setRowStretchFactor(1, 1)  # where the threshold is dragged
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
        self.rms_plot.getAxis("bottom").setLabel("s")  # one short line: the plots keep the height
        self.rms_plot.getAxis("bottom").enableAutoSIPrefix(False)
        self._set_x_extent(10.0)
        self.rms_plot.setYRange(math.log10(RMS_FLOOR), 0, padding=0)

        fill = pg.mkBrush(79, 163, 255, 110)
        self.wave_max = self.wave_plot.plot(pen=pg.mkPen(WAVE_PEN, width=1), fillLevel=0, brush=fill)
        self.wave_min = self.wave_plot.plot(pen=pg.mkPen(WAVE_PEN, width=1), fillLevel=0, brush=fill)
        self.rms_curve = self.rms_plot.plot(pen=pg.mkPen("#9be38b", width=1))

        # the in/out range: shaded on both plots, edged by two lines; not draggable (clicks seek)
        self.range_items = []
        for p in (self.wave_plot, self.rms_plot):
            r = pg.LinearRegionItem(movable=False, brush=pg.mkBrush(*RANGE_BRUSH), pen=pg.mkPen(RANGE_PEN, width=2))
            r.setZValue(-5)
            r.hide()
            p.addItem(r)
            self.range_items.append(r)
        # faceless frames of a video avatar: a red band along the top of the waveform
        self.faceless_curve = self.wave_plot.plot(pen=None, fillLevel=0.86, brush=pg.mkBrush(*FACELESS_BRUSH))
        self.faceless_curve.setZValue(5)

        self.threshold_line = ThresholdLine(
            angle=0,
            movable=True,
            pen=pg.mkPen(ACCENT, width=2),
            hoverPen=pg.mkPen("#ffd08a", width=3),
            label="threshold {value:.4f}",
            labelOpts={"position": 0.88, "color": ACCENT, "movable": True},
        )
        self.threshold_line.setValue(math.log10(self.threshold))
        self.threshold_line.sigDragged.connect(self._threshold_dragged)
        self.threshold_line.sigDragStarted.connect(lambda _l: self.editSession.emit("threshold", True))
        self.threshold_line.sigPositionChangeFinished.connect(lambda _l: self.editSession.emit("threshold", False))
        self.rms_plot.addItem(self.threshold_line)
        self.threshold_line.label.setFormat("")  # the label shows the RMS value, not its log
        self.playheads = []
        for p in (self.wave_plot, self.rms_plot):
            line = pg.InfiniteLine(
                angle=90, movable=True, pen=pg.mkPen(PLAYHEAD, width=2), hoverPen=pg.mkPen("#ff8da1", width=3)
            )
            line.setZValue(20)
            line.sigPositionChanged.connect(self._playhead_dragged)
            p.addItem(line)
            self.playheads.append(line)
        self.wave_plot.scene().sigMouseClicked.connect(self._clicked)
        self.markers_layer = MarkersLayer(self, self.session)  # the markers' lines, ticks, name field, menu
        self.markers_layer.renderMarker.connect(self.renderMarker)
        self.markers_layer.error.connect(self.error)

        # ---- transport row: play, loop, timecode field, frame / duration, in/out, audio note
        self.play_btn = QToolButton()
        self.play_btn.setObjectName("playButton")
        self.play_btn.setText("▶ Play")
        self.play_btn.setToolTip("Play / stop (Space); J K L shuttle, repeat J or L for 2x and 4x")
        self.play_btn.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.play_btn.clicked.connect(self.playClicked)
        self.loop_btn = QToolButton()
        self.loop_btn.setText("Loop")
        self.loop_btn.setCheckable(True)
        self.loop_btn.setToolTip("Loop playback of the in/out range (the whole clip when no range is set)")
        self.loop_btn.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.loop_btn.toggled.connect(self.loopToggled)
        self.timecode_edit = QLineEdit(timecode(0, self.rate))
        self.timecode_edit.setObjectName("timecodeEdit")
        self.timecode_edit.setToolTip(JUMP_HELP + ". Enter jumps, Esc goes back.")
        self.timecode_edit.setAlignment(Qt.AlignmentFlag.AlignCenter)
        mono = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        mono.setPixelSize(14)
        self.timecode_edit.setFont(mono)
        self.timecode_edit.setFixedWidth(QFontMetrics(mono).horizontalAdvance("00:00:00:00") + 30)
        self.timecode_edit.returnPressed.connect(self._jump_typed)
        self.timecode_edit.installEventFilter(self)
        self.time_label = QLabel(self._time_caption(0.0))
        self.time_label.setObjectName("timeLabel")
        self.time_label.setMinimumWidth(self.time_label.fontMetrics().horizontalAdvance("frame 00000 / 00000") + 8)
        self.range_label = ElidedLabel("")
        self.range_label.setObjectName("rangeLabel")
        self.range_label.setToolTip("In/out range: I sets in, O sets out, Alt+I / Alt+O clear them")
        self.audio_note = ElidedLabel("", max_hint=300)  # the window puts it in its status bar
        self.audio_note.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
        self.audio_note.setObjectName("warnLabel")
        self.audio_note.hide()  # until there is something to say

        # ---- silence row: summary, threshold number, min silence
        self.info = ElidedLabel("Import a voice-over to see its waveform and silences")
        self.info.setObjectName("timelineInfo")
        self.threshold_box = LogSpinBox()
        self.threshold_box.setObjectName("setting_threshold")
        self.threshold_box.setDecimals(THRESHOLD_DECIMALS)
        from studio.core.settings import SCHEMA  # the silence settings' ranges are the schema's

        self.threshold_box.setRange(RMS_FLOOR, SCHEMA["threshold"].maximum)  # the log plot starts above 0
        self.threshold_box.setValue(self.threshold)
        self.threshold_box.setKeyboardTracking(False)  # a typed value counts when it is complete (Enter, Tab)
        self.threshold_box.setToolTip(
            "Silence threshold (RMS); the same as dragging the orange line (Shift: fine). "
            "Arrows step by 5 %, Page Up/Down by 25 %"
        )
        self.threshold_box.valueChanged.connect(self._threshold_typed)
        self.min_run_box = QSpinBox()
        self.min_run_box.setObjectName("setting_min_silence")
        self.min_run_box.setRange(int(SCHEMA["min_silence"].minimum), int(SCHEMA["min_silence"].maximum))
        self.min_run_box.setValue(self.min_run)
        self.min_run_box.setSuffix(" frames")
        self.min_run_box.setToolTip("Shortest silence: shorter dips between words stay speech")
        self.min_run_box.valueChanged.connect(self.set_min_run)
        self.session.events.changed.connect(self._session_changed)
        self.session.events.analysis.connect(self._show_analysis)

        transport = QHBoxLayout()
        transport.setSpacing(6)
        transport.addWidget(self.play_btn)
        transport.addWidget(self.loop_btn)
        transport.addWidget(self.timecode_edit)
        transport.addWidget(self.time_label)
        transport.addWidget(self.range_label, 1)  # the in/out text has the rest of the row
        silence = QHBoxLayout()
        silence.setSpacing(6)
        silence.addWidget(self.info, 1)
        for text, box in (("Threshold", self.threshold_box), ("Min silence", self.min_run_box)):
            label = QLabel(text)
            label.setBuddy(box)
            silence.addSpacing(6)
            silence.addWidget(label)
            silence.addWidget(box)
        box = QVBoxLayout(self)
        box.setContentsMargins(6, 4, 6, 4)
        box.setSpacing(4)
        box.addLayout(transport)
        box.addLayout(silence)
        box.addWidget(self.plots, 1)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)  # never widens the window
        self._update_threshold_label()
        self._show_range()

    # ---- public API --------------------------------------------------------------------

    analysis = session_attr("analysis")
    rate = session_attr("grid_rate", "The rate of the frames shown (exact): the clip's frames, timecode, frame_at.")
    threshold = session_value("threshold")
    min_run = session_value("min_silence")
    silence_mask = session_attr("mask", "The silence mask (bool per frame) of the threshold and min silence in effect.")
    in_frame = session_attr("marks.in_frame")
    out_frame = session_attr("marks.out_frame", "The last frame of the range (included).")
    markers = session_attr("marks.markers")
    frames = session_attr("frames", "Frames of the shown clip (0 without one).")

    @property
    def frame(self) -> int:
        """The playhead's frame."""
        from studio.core.render.plan import frame_index

        return frame_index(self.position, self.rate)

    @property
    def fps(self) -> float:
        """The output's frame rate as a float (for drawing; ``rate`` is exact)."""
        return float(self.rate)

    def set_analysis(self, analysis) -> None:
        """Show an ``AudioAnalysis`` (the session's now): keeps the threshold, clears the in/out range."""
        self.session.set_analysis(analysis)

    def _show_analysis(self, analysis) -> None:
        """Draw the session's ``AudioAnalysis`` (envelope, RMS). Its frame grid (``analysis.rate``) is
        the output's: frames, timecode (drop-frame at 29.97 and 59.94) and the playhead follow it."""
        import shiboken6

        if not shiboken6.isValid(self):
            self.session.events.analysis.disconnect(self._show_analysis)
            return
        n = len(analysis.env_max)
        t = np.arange(n, dtype=np.float64) * (analysis.bucket / 16000.0)
        self.wave_max.setData(t, analysis.env_max)
        self.wave_min.setData(t, analysis.env_min)
        rt = (np.arange(analysis.frames, dtype=np.float64) + 0.5) / self.fps
        self.rms_curve.setData(rt, np.maximum(analysis.rms, RMS_FLOOR))
        self._set_x_extent(max(analysis.info.duration_s, 0.04))
        lo = math.log10(RMS_FLOOR)
        hi = math.log10(max(float(analysis.rms.max(initial=0.0)), RMS_FLOOR * 10)) + 0.2
        self.rms_plot.setYRange(lo, hi, padding=0)
        self._show_range()
        self.markers_layer.cancel_naming()
        self.markers_layer.draw()
        self.set_faceless([])
        self.set_playhead(0.0, emit=False)
        self._recompute()

    def _session_changed(self, key, _before, _after) -> None:
        """The session changed (an edit here or elsewhere, an undo, a restore): draw it."""
        import shiboken6

        if not shiboken6.isValid(self):
            self.session.events.changed.disconnect(self._session_changed)
            return
        if key == "threshold":
            v = self.threshold
            line = self.threshold_line
            if abs(line.value() - math.log10(max(v, RMS_FLOOR))) > 1e-12:
                line.blockSignals(True)
                line.setValue(math.log10(max(v, RMS_FLOOR)))
                line.blockSignals(False)
                line.update()
            self._update_threshold_label()
            if self.threshold_box.value() != v:
                self.threshold_box.blockSignals(True)
                self.threshold_box.setValue(v)
                self.threshold_box.blockSignals(False)
            self._recompute()
            self.thresholdChanged.emit(v)
        elif key == "min_silence":
            if self.min_run_box.value() != self.min_run:
                self.min_run_box.blockSignals(True)
                self.min_run_box.setValue(self.min_run)
                self.min_run_box.blockSignals(False)
            self._recompute()
        elif key == "range":
            self._show_range()
            self.rangeChanged.emit(self.range_frames())
        elif key == "markers":
            self.markers_layer.changed()
            self.markersChanged.emit()

    def set_threshold(self, value: float) -> None:
        """Set the threshold to ``value`` as the number field shows it (5 decimals): line, field,
        label and mask follow; ``thresholdChanged`` when it changed."""
        v = exact_threshold(value)
        line = self.threshold_line
        line.blockSignals(True)
        line.setValue(math.log10(v))
        line.blockSignals(False)
        line.update()
        self._threshold_to(v)

    def set_min_run(self, frames: int) -> None:
        self.session.set("min_silence", int(frames))

    def set_playhead(self, seconds: float, emit: bool = True) -> None:
        from studio.core.render.plan import frame_index

        last = max(0, self.frames - 1)
        frame = min(max(0, frame_index(max(0.0, seconds) + 1e-9, self.rate)), last)
        snapped = frame / self.fps
        self.position = snapped
        for line in self.playheads:
            line.blockSignals(True)
            line.setValue(snapped)
            line.blockSignals(False)
        self.time_label.setText(self._time_caption(snapped))
        if not self.timecode_edit.hasFocus():
            self.timecode_edit.setText(timecode(frame, self.rate))
        if emit:
            self.playheadMoved.emit(snapped)

    def set_frame(self, frame: int, emit: bool = True) -> None:
        self.set_playhead(int(frame) / self.fps, emit=emit)

    def step(self, frames: int) -> None:
        """Move the playhead ``frames`` frames (negative: back)."""
        self.set_frame(self.frame + int(frames))

    def edges(self) -> list[int]:
        """Frames where speech starts or stops (silent span edges), plus the clip's ends."""
        last = max(0, self.frames - 1)
        out = {0, last}
        for a, b in self.silent_spans:
            out.update((a, min(b, last)))
        return sorted(out)

    def next_edge(self, direction: int) -> None:
        """Jump to the next (``direction`` > 0) or previous silence/speech edge."""
        f = self.frame
        edges = self.edges()
        if direction > 0:
            target = next((e for e in edges if e > f), edges[-1] if edges else 0)
        else:
            target = next((e for e in reversed(edges) if e < f), 0)
        self.set_frame(target)

    def set_in(self, frame: int | None = None) -> None:
        """Mark ``frame`` (default: the playhead's) as the first frame of the range (an in point past
        the out point clears the out point, as in Premiere)."""
        self.session.marks.set_in(self.frame if frame is None else frame)

    def set_out(self, frame: int | None = None) -> None:
        """Mark ``frame`` (default: the playhead's) as the last frame of the range (included)."""
        self.session.marks.set_out(self.frame if frame is None else frame)

    def clear_in(self) -> None:
        self.session.marks.clear_in()

    def clear_out(self) -> None:
        self.session.marks.clear_out()

    def clear_range(self) -> None:
        self.session.marks.clear_range()

    def set_range(self, in_frame: int | None, out_frame: int | None) -> None:
        """Both points at once (``out_frame`` included), e.g. from a marker to the next, or an undo."""
        self.session.marks.set_range(in_frame, out_frame)

    def focus_timecode(self) -> None:
        """The timecode field takes the focus with all its text selected (also when it had the focus)."""
        edit = self.timecode_edit
        edit.setFocus(Qt.FocusReason.ShortcutFocusReason)
        edit.selectAll()

    def range_frames(self) -> tuple[int, int] | None:
        """The in/out range as frames ``[start, end)``; None when neither point is set."""
        return self.session.marks.range_frames()

    def play_span(self) -> tuple[int, int]:
        """Frames ``[start, end)`` that playback covers: the range, else the whole clip."""
        return self.range_frames() or (0, self.frames)

    def set_playing(self, playing: bool) -> None:
        self.play_btn.setText("■ Stop" if playing else "▶ Play")

    def set_audio_note(self, text: str) -> None:
        self.audio_note.setText(text)
        self.audio_note.setToolTip(text)
        self.audio_note.setMinimumWidth(
            min(320, self.audio_note.fontMetrics().horizontalAdvance(text) + 30)
        )  # bold in the style
        self.audio_note.setVisible(bool(text))

    def set_faceless(self, spans) -> None:
        """Mark output frames ``[a, b)`` where the avatar has no face (a red band on the waveform)."""
        self.faceless_spans = [(int(a), int(b)) for a, b in spans]
        if not self.faceless_spans:
            self.faceless_curve.setData([], [])
            return
        xs = np.array([[a, a, b, b] for a, b in self.faceless_spans], np.float64).ravel() / self.fps
        ys = np.tile([0.86, 1.0, 1.0, 0.86], len(self.faceless_spans))
        self.faceless_curve.setData(xs, ys)

    @property
    def silent_spans(self) -> list[tuple[int, int]]:
        return self.session.silent_spans()

    def scene_pos_of(self, seconds: float, plot=None):
        """Scene position of time ``seconds`` at the vertical middle of ``plot`` (for tests and tools)."""
        from PySide6.QtCore import QPointF

        plot = plot or self.wave_plot
        vb = plot.vb
        y = vb.viewRect().center().y()
        return vb.mapViewToScene(QPointF(seconds, y))

    # ---- internals ---------------------------------------------------------------------

    def _set_x_extent(self, duration: float) -> None:
        # a small margin either side so the playhead at 0 and at the last frame stays in view
        pad = max(duration * 0.006, 0.02)
        for p in (self.wave_plot, self.rms_plot):
            p.setLimits(xMin=-pad, xMax=duration + pad)
        self.wave_plot.setXRange(-pad, duration + pad, padding=0)

    def _time_caption(self, seconds: float) -> str:
        from studio.core.render.plan import frame_index

        return self.session.time_caption(frame_index(seconds + 1e-9, self.rate))

    def _jump_typed(self) -> None:
        try:
            frame = parse_jump(self.timecode_edit.text(), current=self.frame, fps=self.rate)
        except Exception as exc:  # noqa: BLE001 - TimecodeError: one sentence
            self._set_bad(True)
            self.timecode_edit.selectAll()  # the next entry replaces the bad one
            self.error.emit(str(exc))
            return
        self._set_bad(False)
        self.timecode_edit.clearFocus()
        self.set_frame(frame)
        self.timecode_edit.setText(timecode(self.frame, self.rate))

    def eventFilter(self, obj, event):  # noqa: N802 (Qt's name)
        if obj is self.timecode_edit:
            if event.type() == QEvent.Type.FocusIn:
                from PySide6.QtCore import QTimer

                QTimer.singleShot(0, self.timecode_edit.selectAll)
            elif event.type() == QEvent.Type.FocusOut:
                self._set_bad(False)
                self.timecode_edit.setText(timecode(self.frame, self.rate))
            elif event.type() == QEvent.Type.KeyPress and event.key() == Qt.Key.Key_Escape:
                self._set_bad(False)  # Esc: the error goes, the field shows the playhead again
                self.timecode_edit.setText(timecode(self.frame, self.rate))
                self.timecode_edit.clearFocus()
                return True
        return super().eventFilter(obj, event)

    @property
    def timecode_bad(self) -> bool:
        return bool(self.timecode_edit.property("bad"))

    def _set_bad(self, bad: bool) -> None:
        w = self.timecode_edit
        if bool(w.property("bad")) == bad:
            return
        w.setProperty("bad", bad)
        w.style().unpolish(w)
        w.style().polish(w)

    def _threshold_dragged(self, *_) -> None:
        self._threshold_to(exact_threshold(10 ** self.threshold_line.value(), significant=3))

    def _threshold_to(self, v: float) -> None:
        self.session.set("threshold", v)  # the line, the field, the label and the mask follow the session

    def _threshold_typed(self, value: float) -> None:
        if value != self.threshold:
            self.set_threshold(value)

    def _update_threshold_label(self) -> None:
        self.threshold_line.label.setFormat(f"threshold {self.threshold:.{THRESHOLD_DECIMALS}g}")

    def _playhead_dragged(self, line) -> None:
        self.set_playhead(float(line.value()))

    def _clicked(self, event) -> None:
        if self.analysis is None:
            return
        near = self.markers_layer.marker_near(event.scenePos().x())
        if event.button() == Qt.MouseButton.RightButton and near is not None:
            event.accept()
            self.markers_layer.open_menu(near, event.screenPos().toPoint())
            return
        if event.button() != Qt.MouseButton.LeftButton:
            return
        if event.double():
            if near is not None:
                self.markers_layer.rename_marker(near.frame)
            return
        pos = self.wave_plot.vb.mapSceneToView(event.scenePos())  # the plots share the x axis
        self.set_playhead(float(pos.x()))

    def _show_range(self) -> None:
        r = self.range_frames()
        for item in self.range_items:
            if r is None:
                item.hide()
            else:
                item.setRegion((r[0] / self.fps, r[1] / self.fps))
                item.show()
        s = self.session
        self.range_label.setText(s.marks.inout_label(), shorter=(s.marks.inout_label(1), s.marks.inout_label(2)))
        self.range_label.setToolTip(
            f"{self.range_label.text()}\nI sets the in point, O the out point (included); Alt+I / Alt+O clear them"
        )

    def _recompute(self) -> None:
        if self.analysis is None:
            return
        self._draw_spans(self.silent_spans)
        s = self.session
        self.info.setText(s.silence_summary(), shorter=(s.silence_summary(1), s.silence_summary(2)))
        self.time_label.setText(self._time_caption(self.position))
        self.maskChanged.emit(self.silence_mask)

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
                r.setRegion((a / self.fps, b / self.fps))
                r.show()
            else:
                r.hide()
        if self._silence_curve is None:
            self._silence_curve = self.wave_plot.plot(pen=None, fillLevel=-1, brush=pg.mkBrush(*SILENCE_BRUSH))
            self._silence_curve.setZValue(-10)
        if use_regions:
            self._silence_curve.setData([], [])
        else:
            xs = np.array([[a, a, b, b] for a, b in spans], np.float64).ravel() / self.fps
            ys = np.tile([-1.0, 1.0, 1.0, -1.0], len(spans))
            self._silence_curve.setData(xs, ys)

    @property
    def visible_regions(self) -> int:
        return sum(1 for r in self._regions if r.isVisible())

"""The Render dock: settings, Render/Queue/Cancel, live progress, ETA, per-stage timing, FPS plot,
and the finished file (play in the app, reveal in the file manager).

The FPS number and the plot update once per second from the latest progress (never per batch).

"Render in/out range only" (offered once the timeline has an in or out point) makes
``render_range()`` return the range as frames ``[start, end)``; the queue puts it in the job.
The Live bar's percentage is ``studio.core.progress.percent``, the same rule as the Queue's.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer, QUrl, Signal
from PySide6.QtGui import QDesktopServices, QIcon
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from studio.ui import settings as cfg
from studio.ui.setting_widgets import SettingFields
from studio.ui.widgets import ElidedLabel

TARGETS = {
    "local": "This computer",
    "gpus": "All GPUs here",
    "farm": "Render farm",
    "server": "Studio server",
}  # setting value -> text


def fmt_eta(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class RenderPanel(QWidget):
    renderClicked = Signal()
    queueClicked = Signal()
    cancelClicked = Signal()
    playClicked = Signal(str)
    worstClicked = Signal(str, float)  # a render's path, the second its check found worst

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("renderPanel")
        self.settings = cfg.settings()
        self.avatar_name = ""
        self.script_path = ""
        self.threshold = cfg.value(self.settings, "render/threshold", float)
        self.min_silence = cfg.value(self.settings, "render/min_silence", int)
        self.last_output = ""
        self._range: tuple[int, int] | None = None  # the timeline's in/out range, frames [start, end)

        # every render setting the panel shows, made from the schema (threshold and min silence are
        # the timeline's: set_silence)
        from studio.core.settings import specs

        self.fields = SettingFields(specs("ui", groups=("engine", "silence", "encode", "output")))
        for name in ("threshold", "min_silence"):
            self.fields.pop(name).deleteLater()
            self.fields.specs.pop(name)
        f = self.fields
        self.engine, self.device, self.precision, self.decoder = f["engine"], f["device"], f["precision"], f["decoder"]
        self.runtime, self.batch, self.compile_box, self.crossfade = (
            f["runtime"],
            f["batch"],
            f["compile"],
            f["crossfade"],
        )
        self.encoder, self.preset, self.crf = f["encoder"], f["preset"], f["crf"]
        self.check_box = f["check"]  # the lip-sync check after each render (studio check)
        self.folder = QLineEdit()
        self.folder.setPlaceholderText("output folder")
        browse = QToolButton()
        browse.setText("…")
        browse.clicked.connect(self._browse)
        self.pattern = QLineEdit()
        self.pattern.setToolTip("Output name; {avatar} {script} {engine} {crf} {preset} {encoder} are filled in")
        # paths and file names have no spaces to wrap at: they are elided in the middle (the full
        # text is the tooltip), so a long name never widens the dock past its edge
        self.output_label = ElidedLabel("", mode=Qt.TextElideMode.ElideMiddle)
        self.output_label.setObjectName("dim")
        self.target = _combo(
            [TARGETS["local"], TARGETS["farm"], TARGETS["server"]],  # "All GPUs here": set_gpus
            "Where queued jobs render: here, split over all GPUs here (with two or more), "
            "or in chunks on a Ray render farm (studio farm up)",
        )
        self._gpus: list[str] = []
        self._want_gpus = False  # the saved choice was "All GPUs here", not offered yet
        self.farm_edit = QLineEdit()
        self.farm_edit.setPlaceholderText("HOST:PORT, empty: the farm started here")
        self.farm_edit.setToolTip("The farm's HOST:PORT; empty: the farm `studio farm up` started on this machine")
        self.server_edit = QLineEdit()
        self.server_edit.setPlaceholderText("http://gpu-box:8321")
        self.server_edit.setToolTip(
            "A machine running `studio serve`: jobs render there and the finished MP4 is "
            "downloaded into the output folder; scrubbing asks it for the exact frame. "
            "Its token, if it has one, comes from STUDIO_SERVER_TOKEN"
        )
        self.target.currentIndexChanged.connect(lambda _i: self._show_farm_row())

        form = QFormLayout()
        form.addRow("Render on", self.target)
        form.addRow("Farm", self.farm_edit)  # shown only while "Render farm" is chosen
        form.addRow("Server", self.server_edit)  # shown only while "Studio server" is chosen
        self._form = form
        form.addRow("Engine", _pair(self.engine, "Frame rate", f["fps"]))
        form.addRow("Device", _pair(self.device, "Batch", self.batch))
        form.addRow("Precision", _pair(self.precision, "Decoder", self.decoder))
        form.addRow("Runtime", _pair(self.runtime, "Crossfade", self.crossfade))
        form.addRow("", self.compile_box)
        form.addRow("Encoder", _pair(self.encoder, "Codec", f["codec"]))
        enc = QHBoxLayout()
        enc.addWidget(self.preset, 1)
        enc.addWidget(QLabel("CRF"))
        enc.addWidget(self.crf)
        form.addRow("Preset", enc)
        out = QHBoxLayout()
        out.addWidget(self.folder, 1)
        out.addWidget(browse)
        form.addRow("Folder", out)
        form.addRow("Name", self.pattern)
        form.addRow(self.output_label)
        self.overwrite_box = QCheckBox("Overwrite existing files")
        self.overwrite_box.setToolTip(
            "Off: a name that is taken (a file, or another job's output) gets a "
            "number, _002, _003 …, so no render is ever lost"
        )
        boxes = QHBoxLayout()  # one row: the panel fits a 1080p screen without scrolling
        boxes.addWidget(self.overwrite_box)
        boxes.addWidget(self.check_box)
        boxes.addStretch(1)
        form.addRow(boxes)
        self.range_check = QCheckBox("Render in/out range only")
        self.range_check.setToolTip("Render only the frames between the timeline's in and out points (I / O)")
        self.range_check.setEnabled(False)
        self.range_label = ElidedLabel("")
        self.range_label.setObjectName("dim")
        form.addRow(self.range_check)
        form.addRow(self.range_label)
        settings_box = QGroupBox("Settings")
        settings_box.setLayout(form)

        self.render_btn = QPushButton(QIcon(_icon("render")), "Render")
        self.render_btn.setObjectName("primary")
        self.render_btn.clicked.connect(self.renderClicked)
        self.queue_btn = QPushButton(QIcon(_icon("queue")), "Add to queue")
        self.queue_btn.setToolTip("Queue this avatar and voice-over; Start queue renders the queue (Ctrl+Shift+R)")
        self.queue_btn.clicked.connect(self.queueClicked)
        self.render_btn.setToolTip("Queue this avatar and voice-over and start the queue now (Ctrl+R)")
        self.cancel_btn = QPushButton(QIcon(_icon("cancel")), "Cancel")
        self.cancel_btn.setEnabled(False)
        self.cancel_btn.clicked.connect(self.cancelClicked)
        buttons = QHBoxLayout()
        buttons.addWidget(self.render_btn, 2)
        buttons.addWidget(self.queue_btn, 2)
        buttons.addWidget(self.cancel_btn, 1)

        self.progress_bar = QProgressBar()
        self.progress_bar.setRange(0, 1000)
        self.progress_bar.setValue(0)
        self.progress_bar.setFormat("idle")
        self.fps_label = QLabel("— fps")
        self.fps_label.setObjectName("fpsLabel")
        self.eta_label = QLabel("ETA —")
        self.eta_label.setObjectName("dim")
        self.stage_label = ElidedLabel("")
        self.stage_label.setObjectName("dim")
        self.engine_label = ElidedLabel("")  # one line; the tooltip has all of it
        self.engine_label.setObjectName("dim")
        self.fps_plot = pg.PlotWidget()
        self.fps_plot.setBackground("#16181d")
        self.fps_plot.setFixedHeight(96)
        self.fps_plot.setMenuEnabled(False)
        self.fps_plot.setMouseEnabled(False, False)
        self.fps_plot.hideButtons()
        self.fps_plot.showGrid(x=True, y=True, alpha=0.15)
        self.fps_plot.getAxis("left").setLabel("fps")
        self.fps_plot.getAxis("bottom").setLabel("s")
        self.fps_curve = self.fps_plot.plot(
            pen=pg.mkPen("#4fa3ff", width=2), fillLevel=0, brush=pg.mkBrush(79, 163, 255, 50)
        )
        self.fps_x: list[float] = []
        self.fps_y: list[float] = []

        live = QGroupBox("Live")
        lv = QVBoxLayout(live)
        row = QHBoxLayout()
        row.addWidget(self.fps_label)
        row.addStretch(1)
        row.addWidget(self.eta_label)
        lv.addLayout(row)
        lv.addWidget(self.progress_bar)
        lv.addWidget(self.fps_plot)
        lv.addWidget(self.stage_label)
        lv.addWidget(self.engine_label)
        # the last render's lip-sync check: its verdict, the sentence, and a jump to the worst second
        self.check_label = QLabel("")
        self.check_label.setObjectName("checkLabel")
        self.check_label.setWordWrap(True)
        self.check_label.hide()  # shown once a render asked for a check
        self.worst_btn = QPushButton("Worst second")
        self.worst_btn.setObjectName("worstSecond")
        self.worst_btn.setToolTip("Play the render from the second the check found worst")
        self.worst_btn.hide()
        self.worst_btn.clicked.connect(self._worst_clicked)
        self._worst: tuple[str, float] | None = None
        row = QHBoxLayout()
        row.addWidget(self.check_label, 1)
        row.addWidget(self.worst_btn)
        lv.addLayout(row)

        self.play_btn = QPushButton(QIcon(_icon("play")), "Play")
        self.play_btn.setEnabled(False)
        self.play_btn.clicked.connect(lambda: self.playClicked.emit(self.last_output))
        self.reveal_btn = QPushButton(QIcon(_icon("folder")), "Show in folder")
        self.reveal_btn.setEnabled(False)
        self.reveal_btn.clicked.connect(self.reveal)
        self.result_label = ElidedLabel("No render yet", mode=Qt.TextElideMode.ElideMiddle)
        self.result_label.setObjectName("dim")
        self.result_detail = ElidedLabel("")
        self.result_detail.setObjectName("dim")
        result = QGroupBox("Output")
        rv = QVBoxLayout(result)
        rv.addWidget(self.result_label)
        rv.addWidget(self.result_detail)
        row = QHBoxLayout()
        row.addWidget(self.play_btn)
        row.addWidget(self.reveal_btn)
        rv.addLayout(row)

        box = QVBoxLayout(self)
        box.setContentsMargins(6, 6, 6, 6)
        box.addWidget(settings_box)
        box.addLayout(buttons)
        box.addWidget(live)
        box.addWidget(result)
        box.addStretch(1)

        self._latest = None  # newest RenderProgress, read by the once-a-second timer
        self._t0 = 0.0
        self.fps_timer = QTimer(self)
        self.fps_timer.setInterval(1000)
        self.fps_timer.timeout.connect(self._tick)
        self.restore()
        for w in (self.engine, self.encoder, self.preset, f["codec"]):
            w.currentTextChanged.connect(self._update_output_label)
        self.crf.valueChanged.connect(self._update_output_label)
        self.folder.textChanged.connect(self._update_output_label)
        self.pattern.textChanged.connect(self._update_output_label)
        self._update_output_label()
        self._show_range()

    # ---- settings ----------------------------------------------------------------------

    def render_settings(self):
        from studio.core.settings import RenderSettings

        return RenderSettings(
            threshold=float(self.threshold), min_silence=int(self.min_silence), **self.fields.values()
        )

    def tracked_settings(self):
        """(name, widget, label, get, set, changed signal) of every setting an undo puts back."""
        from PySide6.QtWidgets import QAbstractSpinBox

        out = []
        for name, w in self.fields.items():
            spec = self.fields.specs[name]
            label = spec.label or name
            if isinstance(w, QCheckBox):
                out.append((name, None, label, w.isChecked, w.setChecked, w.toggled))
            elif isinstance(w, QComboBox):
                out.append((name, None, label, w.currentText, w.setCurrentText, w.currentTextChanged))
            elif isinstance(w, QAbstractSpinBox):
                out.append((name, w, label, w.value, w.setValue, w.valueChanged))  # type: ignore[attr-defined]
        for name, edit, label in (
            ("folder", self.folder, "Output folder"),
            ("pattern", self.pattern, "Output name"),
            ("farm", self.farm_edit, "Farm address"),
            ("server", self.server_edit, "Server"),
        ):
            out.append((name, None, label, edit.text, edit.setText, edit.editingFinished))
        out.append(
            (
                "target",
                None,
                "Render on",
                self.target.currentText,
                self.target.setCurrentText,
                self.target.currentTextChanged,
            )
        )
        out.append(
            (
                "overwrite",
                None,
                "Overwrite",
                self.overwrite_box.isChecked,
                self.overwrite_box.setChecked,
                self.overwrite_box.toggled,
            )
        )
        out.append(
            (
                "range_only",
                None,
                "Range only",
                self.range_check.isChecked,
                self.range_check.setChecked,
                self.range_check.toggled,
            )
        )
        return out

    def set_gpus(self, devices) -> None:
        """Offer "All GPUs here" when this machine has two GPUs or more (``devices``: their names,
        e.g. ``multigpu.cuda_devices()``); the clip is then split over them, one writer, one mux."""
        self._gpus = list(devices or [])
        have = self.target.findText(TARGETS["gpus"]) >= 0
        if len(self._gpus) >= 2 and not have:
            self.target.insertItem(1, TARGETS["gpus"])
            self.target.setItemData(1, f"Render each job on {', '.join(self._gpus)} at once", 3)  # Qt.ToolTipRole
            if self._want_gpus:
                self.target.setCurrentText(TARGETS["gpus"])

    def render_devices(self) -> tuple[str, ...] | None:
        """The devices a job renders on when "All GPUs here" is chosen; else None."""
        if self.target.currentText() != TARGETS["gpus"]:
            return None
        return tuple(self._gpus)

    def farm_address(self) -> str | None:
        """None: render on this computer; "" : the farm started here; else the farm's HOST:PORT."""
        if self.target.currentText() != TARGETS["farm"]:
            return None
        return self.farm_edit.text().strip()

    def server_url(self) -> str | None:
        """None unless "Studio server" is chosen; then its URL (may be empty: not set yet)."""
        if self.target.currentText() != TARGETS["server"]:
            return None
        return self.server_edit.text().strip()

    def _show_farm_row(self) -> None:
        on = self.farm_address() is not None
        self.farm_edit.setEnabled(on)
        self._form.setRowVisible(self.farm_edit, on)
        server = self.server_url() is not None
        self.server_edit.setEnabled(server)
        self._form.setRowVisible(self.server_edit, server)
        self.device.setEnabled(self.render_devices() is None)  # "All GPUs here" names the devices

    def output_path(self) -> str:
        folder = self.folder.text().strip() or str(_default_folder())
        fields = {
            "avatar": self.avatar_name or "avatar",
            "script": Path(self.script_path).stem if self.script_path else "script",
            "engine": self.engine.currentText(),
            "crf": self.crf.value(),
            "preset": self.preset.currentText(),
            "encoder": self.encoder.currentText(),
        }
        try:
            name = (self.pattern.text().strip() or cfg.DEFAULTS["render/pattern"]).format(**fields)
        except (KeyError, IndexError, ValueError):
            name = cfg.DEFAULTS["render/pattern"].format(**fields)
        return str(Path(folder) / _with_suffix(name, self.fields["codec"].currentText()))

    def overwrite_outputs(self) -> bool:
        """Whether a job may replace an existing file (otherwise its name is numbered)."""
        return self.overwrite_box.isChecked()

    def set_range(self, frames: tuple[int, int] | None) -> None:
        """The timeline's in/out range (frames ``[start, end)``), or None when it has none."""
        self._range = (int(frames[0]), int(frames[1])) if frames else None
        self.range_check.setEnabled(self._range is not None)
        self._show_range()

    def render_range(self) -> tuple[int, int] | None:
        """Frames ``[start, end)`` to render when "Render in/out range only" is ticked; None: the whole clip."""
        if self._range is None or not self.range_check.isChecked():
            return None
        return self._range

    def _show_range(self) -> None:
        from studio.core.media.timecode import seconds_text, timecode

        if self._range is None:
            self.range_label.setText("set I / O on the timeline")
            return
        a, b = self._range
        self.range_label.setText(f"{timecode(a)}–{timecode(b - 1)} · {seconds_text(b - a)}")

    def set_context(self, avatar: str | None = None, script: str | None = None) -> None:
        if avatar is not None:
            self.avatar_name = avatar
        if script is not None:
            self.script_path = script
        self._update_output_label()

    def set_silence(self, threshold: float | None = None, min_silence: int | None = None) -> None:
        if threshold is not None:
            self.threshold = float(threshold)
        if min_silence is not None:
            self.min_silence = int(min_silence)

    def save(self) -> None:
        s = self.settings
        self.fields.save(s)
        s.setValue("render/pattern", self.pattern.text())
        s.setValue("render/overwrite", self.overwrite_box.isChecked())
        s.setValue("render/threshold", self.threshold)
        s.setValue("render/min_silence", self.min_silence)
        s.setValue("folders/output", self.folder.text())
        offered = self.target.findText(TARGETS["gpus"]) >= 0
        gpus = self.render_devices() or (self._want_gpus and not offered)  # kept until the GPUs are known
        target = (
            "farm"
            if self.farm_address() is not None
            else "server"
            if self.server_url() is not None
            else "gpus"
            if gpus
            else "local"
        )
        s.setValue("render/target", target)
        s.setValue("render/farm_address", self.farm_edit.text().strip())
        s.setValue("render/server_url", self.server_edit.text().strip())

    def restore(self) -> None:
        s = self.settings
        self.fields.restore(s)
        self.pattern.setText(cfg.value(s, "render/pattern", str))
        self.overwrite_box.setChecked(cfg.value(s, "render/overwrite", bool))
        self.pattern.setCursorPosition(0)
        self.folder.setText(cfg.value(s, "folders/output", str) or str(_default_folder()))
        self.folder.setCursorPosition(0)
        saved = cfg.value(s, "render/target", str)
        self._want_gpus = saved == "gpus"
        if self._want_gpus and self.target.findText(TARGETS["gpus"]) < 0:
            saved = "local"  # until set_gpus offers it
        self.target.setCurrentText(TARGETS.get(saved, TARGETS["local"]))
        self.farm_edit.setText(cfg.value(s, "render/farm_address", str))
        self.farm_edit.setCursorPosition(0)
        self.server_edit.setText(cfg.value(s, "render/server_url", str))
        self._show_farm_row()

    def show_engines(self, status: dict) -> None:
        """Tooltips and availability of each engine (``str`` of ``engine_status``'s values)."""
        for i in range(self.engine.count()):
            name = self.engine.itemText(i)
            if name in status:
                self.engine.setItemData(i, status[name], 3)  # Qt.ToolTipRole

    # ---- live progress -----------------------------------------------------------------

    def start(self, label: str = "") -> None:
        self.fps_x.clear()
        self.fps_y.clear()
        self.fps_curve.setData([], [])
        self._latest = None
        self._t0 = time.perf_counter()
        self.progress_bar.setValue(0)
        self.progress_bar.setFormat(f"starting {label}…" if label else "starting…")
        self.fps_label.setText("— fps")
        self.eta_label.setText("ETA —")
        self.stage_label.setText("")
        self.show_check(None, "")
        self.set_running(True)
        self.fps_timer.start()

    def update_progress(self, p) -> None:
        """Called per batch: only stores the newest progress and moves the bar."""
        self._latest = p
        frac = p.done / p.total if p.total else 0.0
        self.progress_bar.setValue(int(frac * 1000))
        from studio.core.progress import percent

        self.progress_bar.setFormat(f"{p.done} / {p.total} frames  ({percent(p.done, p.total)} %)")

    def stop(self, message: str, output: str | None = None, detail: str = "") -> None:
        self._tick()
        self.fps_timer.stop()
        self.set_running(False)
        self.progress_bar.setFormat(message)
        if output:
            self.last_output = output
            self.play_btn.setEnabled(True)
            self.reveal_btn.setEnabled(True)
            self.result_label.setText(Path(output).name)
            self.result_label.setToolTip(output)
            self.result_detail.setText(detail or message)
            self.result_detail.setToolTip(detail or message)

    def show_check(self, check: dict | None, output: str) -> None:
        """The lip-sync check of ``output`` (the job result's ``check``; None: none was asked for)."""
        text, colour, worst = check_text(check)
        self.check_label.setText(text)
        self.check_label.setVisible(bool(text))
        self.check_label.setToolTip((check or {}).get("reason") or "")
        self.check_label.setStyleSheet(f"color: {colour};" if colour else "")
        self._worst = (output, float(worst)) if worst is not None else None
        self.worst_btn.setVisible(self._worst is not None)
        if worst is not None:
            self.worst_btn.setText(f"Worst second ({int(worst) // 60}:{int(worst) % 60:02d})")

    def _worst_clicked(self) -> None:
        if self._worst is not None:
            self.worstClicked.emit(*self._worst)

    def set_running(self, running: bool) -> None:
        self.cancel_btn.setEnabled(running)
        self.render_btn.setEnabled(not running)

    def _tick(self) -> None:
        p = self._latest
        if p is None:
            return
        self.fps_label.setText(f"{p.fps:.1f} fps")
        self.eta_label.setText(f"ETA {fmt_eta(p.eta_s)} · elapsed {fmt_eta(p.elapsed_s)}")
        stage_ms = getattr(p, "stage_ms", None)
        if getattr(p, "workers", None) is not None and getattr(p, "chunks", 0):  # a chunked or farm render
            self.stage_label.setText(farm_status(p))
        elif stage_ms:
            total = sum(stage_ms.values()) or 1.0
            parts = sorted(stage_ms.items(), key=lambda kv: -kv[1])[:4]
            self.stage_label.setText(" · ".join(f"{k} {v / 1000:.1f} s ({100 * v / total:.0f}%)" for k, v in parts))
        if not self.fps_x or p.elapsed_s > self.fps_x[-1]:
            self.fps_x.append(float(p.elapsed_s))
            self.fps_y.append(float(p.fps))
            self.fps_curve.setData(np.array(self.fps_x), np.array(self.fps_y))
            self.fps_plot.setYRange(0, max(self.fps_y) * 1.15 or 1.0, padding=0)

    # ---- output ------------------------------------------------------------------------

    def reveal(self) -> None:
        if self.last_output:
            QDesktopServices.openUrl(QUrl.fromLocalFile(str(Path(self.last_output).parent)))

    def _browse(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Output folder", self.folder.text())
        if path:
            self.folder.setText(path)

    def _update_output_label(self, *_):
        path = self.output_path()
        self.output_label.setText(f"→ {path}")
        self.output_label.setToolTip(path)

    def set_batch(self, pairs: int) -> None:
        """Several avatars x voice-overs are selected: Add to queue queues them all."""
        self.queue_btn.setText(f"Add {pairs} to queue" if pairs > 1 else "Add to queue")
        self.queue_btn.setToolTip(
            f"Queue all {pairs} selected avatar × voice-over pairs (Ctrl+Shift+R)"
            if pairs > 1
            else "Queue this avatar and voice-over; Start queue renders the queue (Ctrl+Shift+R)"
        )


def farm_status(p) -> str:
    """One line for a farm render's progress: per-worker fps, chunks and retries."""
    workers = " · ".join(f"{name} {fps:.1f} fps" for name, fps in sorted(p.workers.items())) or "workers starting"
    retries = f"{p.retries} retr{'y' if p.retries == 1 else 'ies'}"
    return f"farm: {workers} · chunks {p.chunks_done}/{p.chunks} · {retries}"


def _with_suffix(name: str, codec: str) -> str:
    """``name`` with the extension the codec writes (.mov for ProRes): a video extension that does
    not fit is replaced, none is added."""
    from studio.core.media.codecs import CODECS, SUFFIXES

    spec = CODECS.get(codec, CODECS["h264"])
    suffix = Path(name).suffix.lower()
    if suffix in spec.suffixes:
        return name
    if suffix in SUFFIXES:
        name = name[: -len(suffix)]
    return name + spec.suffix


def _pair(left: QWidget, label: str, right: QWidget) -> QHBoxLayout:
    row = QHBoxLayout()
    row.addWidget(left, 1)
    row.addWidget(QLabel(label))
    row.addWidget(right, 1)
    return row


def _combo(items: list[str], tip: str) -> QComboBox:
    c = QComboBox()
    c.addItems(items)
    c.setToolTip(tip)
    return c


def _default_folder() -> Path:
    from studio.core.env import sub_dir

    return sub_dir("renders")


def _icon(name: str) -> str:
    from studio.core.env import repo_resources

    return str(repo_resources() / "icons" / f"{name}.svg")


CHECK_COLOURS = {"ok": "#7bd88f", "check": "#ffb347", "out of sync": "#ff6b6b"}


def check_text(check: dict | None) -> tuple[str, str, float | None]:
    """``(text, colour, worst second)`` of a job result's ``check``, for the window."""
    if not check:
        return "", "", None
    state = check.get("state")
    if state in ("pending", "running"):
        return "check: measuring the lip sync…", "", None
    if state != "done":
        return f"check: {state or 'failed'}: {check.get('reason') or 'no reason given'}", "#a0a4ad", None
    verdict = str(check.get("verdict") or "?")
    return f"check: {verdict} — {check.get('reason') or ''}", CHECK_COLOURS.get(verdict, ""), check.get("worst_second")

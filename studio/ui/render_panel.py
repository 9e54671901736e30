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
    QFrame,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from studio.ui import settings as cfg
from studio.ui.model import session_value
from studio.ui.setting_widgets import SettingFields, SettingsGrid, bind
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

    #: settings another view places (the timeline's silence row): the panel shows the rest of the schema
    ELSEWHERE = ("threshold", "min_silence", "script")  # the script: the Library's text box under the voice-overs

    def __init__(self, session=None, parent=None):
        super().__init__(parent)
        self.setObjectName("renderPanel")
        self.settings = cfg.settings()
        if session is None:  # on its own (a test): the saved settings
            from studio.ui.model import EditorSession

            session = EditorSession()
            cfg.load_session(session, self.settings)
        self.session = session
        self.last_output = ""

        # every render setting of the schema the window shows, placed by group in the schema's order
        # (a setting added to studio.core.settings appears here by itself)
        from studio.core.settings import GROUPS, specs

        shown = [s for s in specs("ui") if s.name not in self.ELSEWHERE]
        self.fields = SettingFields(shown)
        for spec in shown:
            bind(session, spec, self.fields[spec.name])
            alias = {"compile": "compile_box", "check": "check_box"}.get(spec.name, spec.name)
            if not hasattr(self, alias):
                setattr(self, alias, self.fields[spec.name])
        self.crf_tip = self.fields["crf"].toolTip()  # its help, in the window's words (ProRes: another)

        self.target = _combo(
            [TARGETS["local"], TARGETS["farm"], TARGETS["server"]],  # "All GPUs here": set_gpus
            "Where queued jobs render: here, split over all GPUs here (with two or more), "
            "or in chunks on a Ray render farm (studio farm up)",
        )
        self.target.setObjectName("setting_target")
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
        form = QFormLayout()
        form.addRow("Render on", self.target)
        form.addRow("Farm", self.farm_edit)  # shown only while "Render farm" is chosen
        form.addRow("Server", self.server_edit)  # shown only while "Studio server" is chosen
        self._form = form
        # the delivery on a row of its own above the settings it fills, by its full name; under it what
        # the settings would do to this avatar before any render (an enlargement refused, a smaller fit)
        form.addRow(self.fields.labels_of("delivery"), self.fields["delivery"])
        self.resolution_note = QLabel("")
        self.resolution_note.setObjectName("resolutionNote")
        self.resolution_note.setWordWrap(True)
        self.resolution_note.hide()
        form.addRow(self.resolution_note)
        order = sorted(
            (s for s in shown if s.name != "delivery"),
            key=lambda s: GROUPS.index(s.group) if s.group in GROUPS else len(GROUPS),
        )
        self.grid = SettingsGrid(order, self.fields)
        # the settings scroll on their own (the delivery settings made them taller than a 1080p screen's
        # dock): Render, the Live panel and Play stay in view, every setting stays one wheel away
        self.grid_area = QScrollArea()
        self.grid_area.setObjectName("settingsArea")
        self.grid_area.setWidgetResizable(True)
        self.grid_area.setFrameShape(QFrame.Shape.NoFrame)
        self.grid_area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.grid_area.setWidget(self.grid)
        self.grid_area.setMinimumHeight(160)
        self.grid_area.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Expanding)
        form.addRow(self.grid_area)
        from studio.ui.delivery_buttons import DeliveryButtons

        self.delivery_buttons = DeliveryButtons(session, self.fields["delivery"])  # save / remove your own
        form.addRow(self.delivery_buttons)

        self.folder = QLineEdit()
        self.folder.setPlaceholderText("output folder")
        browse = QToolButton()
        browse.setText("…")
        browse.clicked.connect(self._browse)
        self.pattern = QLineEdit()
        self.pattern.setToolTip(
            "Output name; {avatar} {script} {engine} {crf} {preset} {encoder} {codec} are filled in "
            "(crf{crf} reads as the codec for ProRes and DNxHR, whose quality is fixed)"
        )
        # paths and file names have no spaces to wrap at: they are elided in the middle (the full
        # text is the tooltip), so a long name never widens the dock past its edge
        self.output_label = ElidedLabel("", mode=Qt.TextElideMode.ElideMiddle)
        self.output_label.setObjectName("dim")
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
        self.range_check = QCheckBox("Render in/out range only")
        self.range_check.setToolTip("Render only the frames between the timeline's in and out points (I / O)")
        form.addRow(self.overwrite_box)
        form.addRow(self.range_check)
        self.range_label = ElidedLabel("")
        self.range_label.setObjectName("dim")
        form.addRow(self.range_label)
        settings_box = QGroupBox("Settings")
        settings_box.setLayout(form)
        from studio.ui.widgets import ValueTip

        for edit in (self.folder, self.pattern, self.farm_edit, self.server_edit):
            ValueTip.keep(edit)  # a path or a pattern wider than its field: the whole of it in the tooltip
        for key, edit in (
            ("folder", self.folder),
            ("pattern", self.pattern),
            ("farm", self.farm_edit),
            ("server", self.server_edit),
        ):
            edit.setObjectName(f"setting_{key}")
            edit.textChanged.connect(lambda text, k=key, e=edit: self._typed(k, text, e))
        self.overwrite_box.toggled.connect(lambda on: self._set("overwrite", on))
        self.range_check.toggled.connect(lambda on: self._set("range_only", on))
        self.target.currentIndexChanged.connect(lambda _i: self._set("target", self._target_key()))

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

        live = self._live_box()
        result = self._output_box()
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
        self.fps_timer.timeout.connect(self.tick)
        session.events.changed.connect(self._session_changed)
        session.events.analysis.connect(lambda _a: self._session_changed("range", None, None))
        session.events.avatar.connect(lambda _n: (self._update_output_label(), self.show_resolution()))
        session.events.script.connect(lambda _p: self._update_output_label())
        for key in ("folder", "pattern", "farm", "server", "overwrite", "range_only", "target", "range", "codec"):
            self._session_changed(key, None, session.value(key))
        self.folder.setCursorPosition(0)
        self.pattern.setCursorPosition(0)

    # ---- the session's views ----------------------------------------------------------

    def _set(self, key: str, value) -> None:
        from studio.core.errors import InputError

        try:
            self.session.set(key, value)
        except InputError:
            pass

    def _typed(self, key: str, text: str, edit) -> None:
        """A field's text changed: typed by the editor (it has the focus: an undo step), or set by the
        program (a browse, a restore: no step)."""
        if edit.hasFocus():
            self._set(key, text)
        else:
            with self.session.quiet():
                self._set(key, text)

    def show_resolution(self) -> None:
        """What the settings would do to the selected avatar, before any render: the sentence a render
        would be refused with (an enlargement past Max upscale), or the note it would give."""
        from studio.core.errors import StudioError

        text, problem = "", False
        try:
            r = self.session.resolved()
            text, problem = (r.problem, True) if r.problem else ("; ".join(r.notes), False)
        except StudioError:  # a setting being typed, an avatar gone: said where it is used
            text = ""
        if text:
            from studio.ui.words import window_words

            text = window_words(text)  # the fields' names, not flags
            text = text[:1].upper() + text[1:] + "."
        self.resolution_note.setText(text)
        self.resolution_note.setToolTip(text)
        self.resolution_note.setStyleSheet("color: #e8a33d;" if problem else "color: #9aa0aa;")  # a refusal: amber
        self.resolution_note.setVisible(bool(text))

    def _target_key(self) -> str:
        text = self.target.currentText()
        return next((k for k, t in TARGETS.items() if t == text), "local")

    def _session_changed(self, key, _before, after) -> None:
        import shiboken6

        if not shiboken6.isValid(self):
            self.session.events.changed.disconnect(self._session_changed)
            return
        s = self.session
        if key in self.fields.specs:
            self.show_resolution()
        edits = {"folder": self.folder, "pattern": self.pattern, "farm": self.farm_edit, "server": self.server_edit}
        if key in edits and edits[key].text() != s.value(key):
            edits[key].setText(s.value(key))
        elif key in ("overwrite", "range_only"):
            box = self.overwrite_box if key == "overwrite" else self.range_check
            box.blockSignals(True)
            box.setChecked(bool(s.value(key)))
            box.blockSignals(False)
        elif key == "target":
            want = s.value("target")
            if want == "gpus" and self.target.findText(TARGETS["gpus"]) < 0:
                want = "local"  # shown once set_gpus offers it; the session keeps the choice
            self.target.blockSignals(True)
            self.target.setCurrentText(TARGETS[want])
            self.target.blockSignals(False)
            self._show_farm_row()
        elif key == "range":
            self.range_check.setEnabled(s.marks.range_frames() is not None)
            self.range_label.setText(s.marks.range_label())
            self.range_label.setToolTip(self.range_label.text())
        elif key == "codec":  # ProRes and DNxHR have a fixed quality: no CRF to set
            self.crf.setEnabled(s.output.crf_applies)
            self.crf.setToolTip(
                self.crf_tip if s.output.crf_applies else f"{s.value('codec')} has a fixed quality: CRF does not apply"
            )
        if key != "range":
            self._update_output_label()

    threshold = session_value("threshold")
    min_silence = session_value("min_silence")

    def render_settings(self):
        return self.session.render_settings()

    def set_gpus(self, devices) -> None:
        """Offer "All GPUs here" when this machine has two GPUs or more (``devices``: their names,
        e.g. ``multigpu.cuda_devices()``); the clip is then split over them, one writer, one mux."""
        self.session.gpus = tuple(devices or [])
        have = self.target.findText(TARGETS["gpus"]) >= 0
        if len(self.session.gpus) >= 2 and not have:
            self.target.blockSignals(True)
            self.target.insertItem(1, TARGETS["gpus"])
            self.target.setItemData(1, f"Render each job on {', '.join(self.session.gpus)} at once", 3)  # tooltip
            self.target.blockSignals(False)
            self._session_changed("target", None, self.session.value("target"))

    def render_devices(self) -> tuple[str, ...] | None:
        """The devices a job renders on when "All GPUs here" is chosen; else None."""
        p = self.session.output.placement(self.session.gpus)
        return tuple(p.devices) if p.kind == "gpus" else None

    def farm_address(self) -> str | None:
        """None: render on this computer; "" : the farm started here; else the farm's HOST:PORT."""
        return self.session.value("farm").strip() if self.session.value("target") == "farm" else None

    def server_url(self) -> str | None:
        """None unless "Studio server" is chosen; then its URL (may be empty: not set yet)."""
        return self.session.output.server_url()

    def _show_farm_row(self) -> None:
        on = self.farm_address() is not None
        self.farm_edit.setEnabled(on)
        self._form.setRowVisible(self.farm_edit, on)
        server = self.server_url() is not None
        self.server_edit.setEnabled(server)
        self._form.setRowVisible(self.server_edit, server)
        self.device.setEnabled(self.render_devices() is None)  # "All GPUs here" names the devices

    def output_path(self) -> str:
        return self.session.output_path()

    def overwrite_outputs(self) -> bool:
        """Whether a job may replace an existing file (otherwise its name is numbered)."""
        return bool(self.session.value("overwrite"))

    def render_range(self) -> tuple[int, int] | None:
        """Frames ``[start, end)`` to render when "Render in/out range only" is ticked; None: the whole clip."""
        return self.session.marks.render_range()

    def save(self) -> None:
        cfg.save_session(self.session, self.settings)

    def show_engines(self, status: dict) -> None:
        """Tooltips and availability of each engine (``str`` of ``engine_status``'s values)."""
        for i in range(self.engine.count()):
            name = self.engine.itemText(i)
            if name in status:
                self.engine.setItemData(i, status[name], 3)  # Qt.ToolTipRole

    def _live_box(self) -> QGroupBox:
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
        from studio.ui.plot_axes import ReadableAxis

        self.fps_plot = pg.PlotWidget(axisItems={"left": ReadableAxis("left")})  # labels thinned to fit
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
        return live

    def _output_box(self) -> QGroupBox:
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
        self.loudness_label = ElidedLabel("")  # the last render's loudness, before and after (--loudness)
        self.loudness_label.setObjectName("loudnessReadout")
        self.loudness_label.hide()
        result = QGroupBox("Output")
        rv = QVBoxLayout(result)
        rv.addWidget(self.result_label)
        rv.addWidget(self.result_detail)
        rv.addWidget(self.loudness_label)
        row = QHBoxLayout()
        row.addWidget(self.play_btn)
        row.addWidget(self.reveal_btn)
        rv.addLayout(row)
        return result

    def show_loudness(self, report: dict | None) -> None:
        """The render's loudness (its result's ``loudness``: before and after, in LUFS and dBTP)."""
        if not report:
            self.loudness_label.hide()
            self.loudness_label.setText("")
            return
        text = (
            f"Loudness {report['before_lufs']:.1f} → {report['after_lufs']:.1f} LUFS "
            f"(target {report['target_lufs']:g}) · true peak {report['after_true_peak']:.1f} dBTP"
        )
        self.loudness_label.setText(text)
        self.loudness_label.setToolTip(
            f"{text}\nbefore: {report['before_lufs']:.1f} LUFS, true peak {report['before_true_peak']:.1f} dBTP; "
            f"gain {report['gain_db']:+.1f} dB" + (" (the limiter held the peaks)" if report.get("limited") else "")
        )
        self.loudness_label.show()

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
        from studio.ui.words import window_words

        message = window_words(message)
        self.tick()
        self.fps_timer.stop()
        self.set_running(False)
        self.progress_bar.setFormat(message)
        self.eta_label.setText(f"took {fmt_eta(time.perf_counter() - self._t0)}" if output else "ETA —")
        if not output:  # cancelled or failed: no speed or time left to show
            self.fps_label.setText("— fps")
            self.stage_label.setText("")
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

    def tick(self) -> None:
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
            self._set("folder", path)

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


def _combo(items: list[str], tip: str) -> QComboBox:
    c = QComboBox()
    c.addItems(items)
    c.setToolTip(tip)
    return c


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

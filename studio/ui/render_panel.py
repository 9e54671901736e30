"""The Render dock: settings, Render/Queue/Cancel, the Live box (``live``: progress, ETA, per-stage
timing, FPS plot, the lip-sync check; ``studio.ui.live_box``) and the finished file (play in the app,
reveal in the file manager).

"Render in/out range only" (offered once the timeline has an in or out point) makes
``render_range()`` return the range as frames ``[start, end)``; the queue puts it in the job.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, QUrl, Signal
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
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from studio.ui import settings as cfg
from studio.ui.live_box import LiveBox
from studio.ui.model import session_value
from studio.ui.setting_widgets import SettingFields, SettingsGrid, bind
from studio.ui.widgets import ElidedLabel

TARGETS = {
    "local": "This computer",
    "gpus": "All GPUs here",
    "farm": "Render farm",
    "server": "Studio server",
}  # setting value -> text


class RenderPanel(QWidget):
    renderClicked = Signal()
    queueClicked = Signal()
    cancelClicked = Signal()
    playClicked = Signal(str)
    worstClicked = Signal(str, float)  # a render's path, the second its check found worst

    #: settings another view places (the timeline's silence row): the panel shows the rest of the schema
    ELSEWHERE = ("threshold", "min_silence", "script")  # the script: the Library's text box under the voice-overs

    def __init__(self, session=None, history=None, parent=None):
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

        # save / remove your own (``history``: the window's undo history, which brings a removed one back)
        self.delivery_buttons = DeliveryButtons(session, self.fields["delivery"], history)
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

        self.live = LiveBox()  # progress, fps, ETA, stages, the lip-sync check of the last render
        self.live.worstClicked.connect(self.worstClicked)
        live = self.live
        result = self._output_box()
        box = QVBoxLayout(self)
        box.setContentsMargins(6, 6, 6, 6)
        box.addWidget(settings_box)
        box.addLayout(buttons)
        box.addWidget(live)
        box.addWidget(result)
        box.addStretch(1)

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

    # ---- live progress (the Live box) -------------------------------------------------------

    def start(self, label: str = "") -> None:
        self.live.start(label)
        self.set_running(True)

    def update_progress(self, p) -> None:
        """Called per batch: only stores the newest progress and moves the bar."""
        self.live.update_progress(p)

    def stop(self, message: str, output: str | None = None, detail: str = "") -> None:
        from studio.ui.words import window_words

        message = window_words(message)
        self.live.stop(message, finished=bool(output))
        self.set_running(False)
        if output:
            self.last_output = output
            self.play_btn.setEnabled(True)
            self.reveal_btn.setEnabled(True)
            self.result_label.setText(Path(output).name)
            self.result_label.setToolTip(output)
            self.result_detail.setText(detail or message)
            self.result_detail.setToolTip(detail or message)

    def set_running(self, running: bool) -> None:
        self.cancel_btn.setEnabled(running)
        self.render_btn.setEnabled(not running)

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


def _combo(items: list[str], tip: str) -> QComboBox:
    c = QComboBox()
    c.addItems(items)
    c.setToolTip(tip)
    return c


def _icon(name: str) -> str:
    from studio.core.env import repo_resources

    return str(repo_resources() / "icons" / f"{name}.svg")

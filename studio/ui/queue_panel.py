"""The Queue dock: a view of the render service's queue (the same ``jobs.sqlite`` that
``studio queue`` and ``studio serve`` use), with the editor's controls.

Each row: the avatar's thumbnail, id, job, state, progress (the Live bar's rounding), duration, what
it makes (delivery, picture size, rate, codec, captions, OTIO: ``job_makes``; the engine and encoder
settings in its tooltip), the output's file name (elided in the middle; the full path is the tooltip),
and a note (where it runs or ran, the reason it
failed, or "damaged" with what to do). Buttons: Start/Pause the queue, Retry, Queue draft, Hold,
Resume, Up, Down, Cancel, Remove, Clear finished. The table refreshes on the service's events and,
once a second, when another process (``studio queue``, the server) changed the store.
"""

from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtCore import QSize, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QIcon, QPixmap
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QLabel,
    QPushButton,
    QSizePolicy,
    QStyledItemDelegate,
    QTableWidget,
    QTableWidgetItem,
    QToolBar,
    QVBoxLayout,
    QWidget,
)

from studio.core.progress import fraction_percent
from studio.ui.job_makes import job_rate, makes
from studio.ui.words import window_words

COLUMNS = ["", "#", "Job", "State", "Progress", "Duration", "Makes", "Output", "Note", "Check"]
ID_COL, STATE_COL, PROGRESS_COL, SETTINGS_COL, OUTPUT_COL, NOTE_COL, CHECK_COL = 1, 3, 4, 6, 7, 8, 9
MAKES_COL = SETTINGS_COL  # what the job makes (the engine settings are in its tooltip)
STATE_COLOURS = {
    "done": "#7bd88f",
    "failed": "#ff6b6b",
    "running": "#4fa3ff",
    "cancelled": "#a0a4ad",
    "queued": "#ffb347",
    "draft": "#a0a4ad",
    "held": "#d6a2ff",
    "interrupted": "#ff9e6b",
    "damaged": "#ff6b6b",
}
THUMB = 22  # small enough that three rows show whole in the Queue at 1280x720
MIN_ROWS = 3  # the Queue always shows at least this many rows


class _Elide(QStyledItemDelegate):
    """A path column elided in its middle: the folder gives way first, the file name stays whole
    while it fits ("/home/…/renders/anna_intro_auto_crf20.mp4"); the full path is the tooltip."""

    def initStyleOption(self, option, index) -> None:  # noqa: N802 (Qt's name)
        super().initStyleOption(option, index)
        option.text = elide_path(option.text, option.fontMetrics, option.rect.width() - 12)
        option.textElideMode = Qt.TextElideMode.ElideMiddle


class _Tail(QStyledItemDelegate):
    """A list of words ("web-720p · 1280x720 · 30 fps · H.264") cut at a "·" that fits, ending in "…"
    (the tooltip has all of it), never in the middle of a word."""

    def initStyleOption(self, option, index) -> None:  # noqa: N802 (Qt's name)
        super().initStyleOption(option, index)
        option.text = cut_words(option.text, option.fontMetrics, option.rect.width() - 12)


def cut_words(text: str, fm, width: int) -> str:
    """``text``'s first " · "-separated parts that fit ``width`` pixels, with " …" when some are left out."""
    if width <= 0 or fm.horizontalAdvance(text) <= width:
        return text
    parts = text.split(" · ")
    for n in range(len(parts) - 1, 0, -1):
        shown = " · ".join(parts[:n]) + " …"
        if fm.horizontalAdvance(shown) <= width:
            return shown
    return fm.elidedText(text, Qt.TextElideMode.ElideRight, width)


def elide_path(text: str, fm, width: int) -> str:
    """``text`` (a path) shortened to ``width`` pixels of font ``fm``, keeping the file name."""
    if width <= 0 or fm.horizontalAdvance(text) <= width:
        return text
    folder, sep, name = text.rpartition("/")
    tail = sep + name
    room = width - fm.horizontalAdvance(tail)
    if folder and room > fm.horizontalAdvance("…/"):
        return fm.elidedText(folder, Qt.TextElideMode.ElideMiddle, room) + tail
    return fm.elidedText(name or text, Qt.TextElideMode.ElideMiddle, width)


class QueuePanel(QWidget):
    retryClicked = Signal(int)
    cancelClicked = Signal(int)
    enqueueClicked = Signal(int)
    holdClicked = Signal(int)
    resumeClicked = Signal(int)
    moveClicked = Signal(int, int)  # job id, new index in the queue order
    removeClicked = Signal(int)
    startClicked = Signal(bool)  # start (True) or pause (False) the queue
    openClicked = Signal(str)
    worstClicked = Signal(str, float)  # a done job's output, the second its lip-sync check found worst
    error = Signal(str)

    def __init__(self, service, parent=None):
        super().__init__(parent)
        self.setObjectName("queuePanel")
        self.service = service
        self.store = service.store
        self.live: dict[int, tuple[str, str]] = {}  # running job -> (where it runs, detail)
        self.fractions: dict[int, float] = {}  # running job -> the fraction the Live bar shows
        self._thumbs: dict[str, QIcon] = {}
        self._durations: dict[str, str] = {}
        self._version = None
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.verticalHeader().hide()
        self.table.verticalHeader().setDefaultSectionSize(THUMB + 4)
        self.table.setIconSize(QSize(THUMB, THUMB))
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setAlternatingRowColors(True)
        self.table.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.table.setWordWrap(False)
        head = self.table.horizontalHeader()
        head.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        # the long columns share what is left, the output path elided in its middle (full path: tooltip)
        head.setSectionResizeMode(OUTPUT_COL, QHeaderView.ResizeMode.Stretch)
        # what it makes and the note: a width of their own (the mouse widens them; the tooltip has all),
        # given back to the output's name on a narrow table (``fit_columns``)
        for col in (SETTINGS_COL, NOTE_COL):
            head.setSectionResizeMode(col, QHeaderView.ResizeMode.Interactive)
            head.resizeSection(col, 110)
        self.table.setItemDelegateForColumn(SETTINGS_COL, _Tail(self.table))
        head.setMinimumSectionSize(36)
        self.table.setItemDelegateForColumn(OUTPUT_COL, _Elide(self.table))
        self.table.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.table.itemDoubleClicked.connect(self._open)
        self.table.itemSelectionChanged.connect(self._update_buttons)
        # the header and three whole rows always show, whatever height the dock gets
        rows = MIN_ROWS * self.table.verticalHeader().defaultSectionSize()
        self.table.setMinimumHeight(self.table.horizontalHeader().sizeHint().height() + rows + 4)

        self.start_btn = QPushButton("Start queue")
        self.start_btn.setCheckable(True)
        self.start_btn.setToolTip(
            "Render queued jobs one after another (Pause: the running job finishes, the next ones wait)"
        )
        self.start_btn.clicked.connect(self._start_clicked)
        self.retry_btn = QPushButton("Retry")
        self.enqueue_btn = QPushButton("Queue draft")
        self.hold_btn = QPushButton("Hold")
        self.resume_btn = QPushButton("Resume")
        self.up_btn = QPushButton("Up")
        self.down_btn = QPushButton("Down")
        self.cancel_btn = QPushButton("Cancel")
        self.remove_btn = QPushButton("Remove")
        self.clear_btn = QPushButton("Clear finished")
        self.retry_btn.setToolTip("Queue the selected job again (it writes a new numbered file)")
        self.hold_btn.setToolTip("Keep the selected queued job waiting (it keeps its place)")
        self.retry_btn.clicked.connect(lambda: self._emit(self.retryClicked, "to retry"))
        self.enqueue_btn.clicked.connect(self._enqueue)
        self.hold_btn.clicked.connect(lambda: self._emit(self.holdClicked, "to hold"))
        self.resume_btn.clicked.connect(lambda: self._emit(self.resumeClicked, "to resume"))
        self.up_btn.clicked.connect(lambda: self._move(-1))
        self.down_btn.clicked.connect(lambda: self._move(+1))
        self.cancel_btn.clicked.connect(lambda: self._emit(self.cancelClicked, "to cancel"))
        self.remove_btn.clicked.connect(lambda: self._emit(self.removeClicked, "to remove"))
        self.clear_btn.clicked.connect(self._clear_finished)
        self.summary = QLabel("")
        self.summary.setObjectName("dim")
        self.state_label = QLabel("stopped")
        self.state_label.setObjectName("queueState")
        # the buttons sit in a tool bar: what does not fit the dock's width goes behind its » button
        row = QToolBar("Queue")
        row.setObjectName("queueButtons")
        row.setMovable(False)
        row.setIconSize(QSize(16, 16))
        row.addWidget(self.start_btn)
        row.addWidget(self.state_label)
        row.addSeparator()
        for b in (
            self.retry_btn,
            self.enqueue_btn,
            self.hold_btn,
            self.resume_btn,
            self.up_btn,
            self.down_btn,
            self.cancel_btn,
            self.remove_btn,
            self.clear_btn,
        ):
            row.addWidget(b)
        spacer = QWidget()
        spacer.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        row.addWidget(spacer)
        row.addWidget(self.summary)
        self.buttons = row
        box = QVBoxLayout(self)
        box.setContentsMargins(6, 4, 6, 4)
        box.setSpacing(4)
        box.addWidget(row)
        box.addWidget(self.table, 1)
        self.poll = QTimer(self)
        self.poll.setInterval(1000)
        self.poll.timeout.connect(self._poll)
        self.poll.start()
        self.refresh()

    # ---- the view -----------------------------------------------------------------------

    def selected_id(self) -> int | None:
        row = self.table.currentRow()
        if row < 0 or self.table.item(row, ID_COL) is None:
            return None
        return int(self.table.item(row, ID_COL).data(Qt.ItemDataRole.UserRole))

    def selected_job(self):
        job_id = self.selected_id()
        if job_id is None:
            return None
        try:
            return self.store.get(job_id)
        except Exception:  # noqa: BLE001 - removed meanwhile
            return None

    def refresh(self) -> None:
        keep = self.selected_id()
        try:
            jobs = self.store.list()
            self._version = self.store.version()
        except Exception as exc:  # noqa: BLE001 - the store went away: say so, keep the table
            from studio.ui.workers import error_text

            self.error.emit(error_text(exc))
            return
        self.table.setRowCount(len(jobs))
        for r, job in enumerate(jobs):
            live = self.live.get(job.id) if job.state == "running" else None
            progress = job.progress
            if job.state == "running" and job.id in self.fractions:  # the store's is up to a second old:
                progress = self.fractions[job.id]  # the batch the Live bar shows now
            made, made_tip = makes(job)
            cells = [
                "",
                str(job.id),
                job.label,
                job.state,
                f"{fraction_percent(progress)} %",
                self._duration(job),
                made,
                Path(job.output).name,
                live[0] if live else window_words(job.reason) or _result_note(job),
                "",  # the check's badge: set below
            ]
            where = where_text(job)
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if c == 0:
                    icon = self._thumb(job.avatar)
                    if icon is not None:
                        item.setIcon(icon)
                if c == ID_COL:
                    item.setData(Qt.ItemDataRole.UserRole, job.id)
                if c == STATE_COL:
                    item.setForeground(QColor(STATE_COLOURS.get(job.state, "#e6e6e6")))
                tip = {SETTINGS_COL: f"{made_tip}\nSettings: {settings_text(job)}", OUTPUT_COL: job.output}.get(c, text)
                if c in (STATE_COL, NOTE_COL):
                    tip = "\n".join(x for x in (text, live[1] if live else "", where) if x)
                item.setToolTip(tip)
                if c == CHECK_COL:
                    _check_badge(item, (job.result or {}).get("check"))
                self.table.setItem(r, c, item)
            if job.id == keep:
                self.table.selectRow(r)
        counts: dict[str, int] = {}
        for j in jobs:
            counts[j.state] = counts.get(j.state, 0) + 1
        self.summary.setText(" · ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no jobs")
        self._update_buttons()
        self.fit_columns()

    OUTPUT_MIN = 170  # the output's name keeps this much of a narrow table ("astronaut_…_crf20.mp4")

    def fit_columns(self) -> None:
        """Share a narrow table: what it makes and the note shrink (to 80 px) before the output's name
        goes under ``OUTPUT_MIN``; on a wide one they take what their text needs (at most 320 px)."""
        head = self.table.horizontalHeader()
        fixed = sum(head.sectionSize(c) for c in range(len(COLUMNS)) if c not in (SETTINGS_COL, OUTPUT_COL, NOTE_COL))
        room = self.table.viewport().width() - fixed - self.OUTPUT_MIN
        want = {c: min(320, self._text_width(c) + 16) for c in (SETTINGS_COL, NOTE_COL)}
        note = min(want[NOTE_COL], max(80, room // 4))
        head.resizeSection(NOTE_COL, note)
        head.resizeSection(SETTINGS_COL, max(80, min(want[SETTINGS_COL], room - note)))

    def _text_width(self, col: int) -> int:
        fm = self.table.fontMetrics()
        texts = [self.table.item(r, col).text() for r in range(self.table.rowCount()) if self.table.item(r, col)]
        return max([fm.horizontalAdvance(COLUMNS[col]) + 12, *(fm.horizontalAdvance(t) for t in texts)])

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        super().resizeEvent(event)
        self.fit_columns()

    def set_state(self, text: str) -> None:
        """The queue's state line ("Queue: running · 2 waiting"), shown short beside Start."""
        short = text.removeprefix("Queue: ").split(":")[0].replace(" (the running job finishes)", ", finishing")
        self.state_label.setText(short)
        self.state_label.setToolTip(text)
        self.state_label.setProperty("state", text.removeprefix("Queue: ").split(" ")[0])
        self.state_label.style().unpolish(self.state_label)
        self.state_label.style().polish(self.state_label)

    def set_running(self, running: bool) -> None:
        """The queue runs (the button says Pause) or waits for Start."""
        self.start_btn.setChecked(running)
        self.start_btn.setText("Pause queue" if running else "Start queue")

    def set_progress(self, job_id: int, fraction: float) -> None:
        self.fractions[job_id] = fraction
        r = self.row_of(job_id)
        if r is not None:
            self.table.item(r, PROGRESS_COL).setText(f"{fraction_percent(fraction)} %")

    def set_live(self, job_id: int, where: str | None, detail: str = "") -> None:
        """Show where the running job ``job_id`` runs (None: it ended) and, in the tooltip, ``detail``."""
        if where is None:
            self.live.pop(job_id, None)
            self.fractions.pop(job_id, None)
            return
        self.live[job_id] = (where, detail)
        r = self.row_of(job_id)
        if r is not None:
            self.table.item(r, NOTE_COL).setText(where)
            tip = "\n".join(x for x in (where, detail) if x)
            self.table.item(r, NOTE_COL).setToolTip(tip)
            self.table.item(r, STATE_COL).setToolTip(tip)

    # ---- helpers ------------------------------------------------------------------------

    def row_of(self, job_id: int) -> int | None:
        for r in range(self.table.rowCount()):
            item = self.table.item(r, ID_COL)
            if item is not None and int(item.data(Qt.ItemDataRole.UserRole)) == job_id:
                return r
        return None

    def _poll(self) -> None:
        """Another process (``studio queue``, the server) changed the store: show it."""
        try:
            version = self.store.version()
        except Exception:  # noqa: BLE001 - reported by refresh when it matters
            return
        if version != self._version:
            self.refresh()

    def _thumb(self, avatar: str) -> QIcon | None:
        if avatar not in self._thumbs:
            icon = None
            try:
                from studio.core.avatars.library import library_dir

                path = library_dir() / avatar / "thumbnail.png" if "/" not in avatar else None
                if path is not None and path.exists():
                    pm = QPixmap(str(path))
                    if not pm.isNull():
                        icon = QIcon(
                            pm.scaled(
                                THUMB,
                                THUMB,
                                Qt.AspectRatioMode.KeepAspectRatio,
                                Qt.TransformationMode.SmoothTransformation,
                            )
                        )
            except Exception:  # noqa: BLE001 - no thumbnail, no problem
                icon = None
            self._thumbs[avatar] = icon
        return self._thumbs[avatar]

    def _duration(self, job) -> str:
        """The clip's (or the in/out range's) length as HH:MM:SS:FF at the job's frame rate."""
        from studio.core.media.timecode import timecode

        rate = job_rate(job)
        frames = (job.settings or {}).get("frames")
        if frames:
            return f"{timecode(int(frames[1]) - int(frames[0]), rate)} (range)"
        if job.result and job.result.get("frames"):
            return timecode(int(job.result["frames"]), rate)
        key = (job.audio, rate)
        if key not in self._durations:
            try:
                from studio.core.media.audio import probe

                self._durations[key] = timecode(probe(job.audio).frames_at(rate), rate)
            except Exception:  # noqa: BLE001 - a missing file: the job says so when it runs
                self._durations[key] = "—"
        return self._durations[key]

    def _update_buttons(self) -> None:
        job = self.selected_job()
        state = job.state if job else ""
        self.hold_btn.setEnabled(state == "queued")
        self.resume_btn.setEnabled(state == "held")
        self.retry_btn.setEnabled(job is not None and job.can_retry)
        self.cancel_btn.setEnabled(state in ("draft", "queued", "held", "running"))
        self.remove_btn.setEnabled(job is not None and state != "running")

    def _emit(self, signal, what: str) -> None:
        job_id = self.selected_id()
        if job_id is None:
            self.error.emit(f"select a job in the Queue {what}")
            return
        signal.emit(job_id)

    def _enqueue(self) -> None:
        job = self.selected_job()
        if job is None or job.state != "draft":
            self.error.emit(
                "select a draft in the Queue to queue it (drafts are jobs saved for later, "
                "e.g. by `studio queue add --draft`)"
            )
            return
        self.enqueueClicked.emit(job.id)

    def _move(self, step: int) -> None:
        job_id = self.selected_id()
        if job_id is None:
            self.error.emit("select a job in the Queue to move it")
            return
        r = self.row_of(job_id)
        self.moveClicked.emit(job_id, max(0, (r or 0) + step))

    def _start_clicked(self, on: bool) -> None:
        self.set_running(on)
        self.startClicked.emit(on)

    def _clear_finished(self) -> None:
        for job in self.store.list(("done", "cancelled")):
            self.removeClicked.emit(job.id)

    def _open(self, item) -> None:
        job = self.store.get(int(self.table.item(item.row(), ID_COL).data(Qt.ItemDataRole.UserRole)))
        if job.state == "done" and Path(job.output).exists():
            worst = ((job.result or {}).get("check") or {}).get("worst_second")
            if item.column() == CHECK_COL and worst is not None:  # the badge: to the worst second
                self.worstClicked.emit(job.output, float(worst))
            else:
                self.openClicked.emit(job.output)


def settings_text(job) -> str:
    """Engine and the settings an editor checks: "classic · x264 crf20 veryfast"."""
    s = job.settings or {}
    if not s:
        return ""
    parts = [s.get("engine", "auto")]
    if s.get("engine") == "musetalk" or (job.result or {}).get("engine") == "musetalk":
        parts.append(s.get("decoder", "taesd") + (" compiled" if s.get("compile") else ""))
    from studio.core.settings import DEFAULT_CRF, DEFAULT_PRESET  # the schema's defaults, as the writers'

    parts.append(f"{s.get('encoder', 'auto')} crf{s.get('crf', DEFAULT_CRF)} {s.get('preset', DEFAULT_PRESET)}")
    if s.get("codec", "h264") != "h264":
        parts.append(str(s["codec"]))
    if s.get("fps", "auto") != "auto":
        parts.append(f"{s['fps']} fps")
    if s.get("loudness") is not None:
        parts.append(f"{float(s['loudness']):g} LUFS")
    return " · ".join(str(p) for p in parts)


def where_text(job) -> str:
    """Where a job ran (its result) or will run (its settings), for tooltips."""
    from studio.service.job_requests import request_of_settings

    ran = (job.result or {}).get("ran_on")
    if ran:
        return f"rendered on {ran}"
    try:
        p = request_of_settings(job.settings or {})
    except Exception:  # noqa: BLE001 - a damaged row
        return ""
    return f"renders on {p.label}"  # the placement's name, the service's wording (as the queue shows it)


CHECK_BADGES = {"ok": ("✓ ok", "#7bd88f"), "check": ("! check", "#ffb347"), "out of sync": ("✗ out of sync", "#ff6b6b")}


def _check_badge(item, check: dict | None) -> None:
    """The Check cell: the verdict as a coloured badge, the sentence (and the worst second) as its tooltip."""
    if not check:
        item.setText("")
        item.setToolTip("")
        return
    state = check.get("state")
    if state in ("pending", "running"):
        item.setText("checking…")
        item.setToolTip("the lip-sync check runs after the render, at low priority")
        return
    if state != "done":
        item.setText("—")
        item.setToolTip(f"the check did not run: {check.get('reason') or state}")
        return
    text, colour = CHECK_BADGES.get(str(check.get("verdict")), (str(check.get("verdict")), "#e6e6e6"))
    item.setText(text)
    item.setForeground(QColor(colour))
    worst = check.get("worst_second")
    tip = str(check.get("reason") or "")
    if worst is not None:
        tip += f"\nDouble-click: play from the worst second ({int(worst) // 60}:{int(worst) % 60:02d})"
    item.setToolTip(tip)


def _result_note(job) -> str:
    return _lane(job) + _note(job)


def _lane(job) -> str:
    """A job's lane when it is not the normal one ("breaking · ", "bulk · ", "priority 70 · "), and its
    deadline ("due 15:40 · ")."""
    from studio.service.scheduler import DEFAULT_LEVEL, job_level, level_name

    s = job.settings or {}
    level = job_level(s)
    text = ""
    if level != DEFAULT_LEVEL:
        name = level_name(level)
        text = f"{name if not name.isdigit() else 'priority ' + name} · "
    if s.get("deadline") and job.state in ("queued", "running", "held"):
        text += time.strftime("due %H:%M:%S · ", time.localtime(float(s["deadline"])))
    return text


def _note(job) -> str:
    r = job.result or {}
    if not r:
        return time.strftime("added %H:%M", time.localtime(job.created))
    note = f"{r.get('engine', '?')} · {r.get('fps', 0):.1f} fps · {r.get('seconds', 0):.1f} s"
    ran = r.get("ran_on", "")
    return f"{ran} · {note}" if ran and ran != "this computer" else note

"""The Queue dock: jobs (avatar x script x settings) from ``studio.core.jobs``, with retry/cancel/remove.

The table is a view of the SQLite store; the main window runs the queue one job after another.
The Note column says where a job runs or ran ("farm (2 workers)"); while a farm job runs its
tooltip holds the per-worker fps, chunks and retries.
"""

from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

COLUMNS = ["#", "Job", "State", "Progress", "Output", "Note"]
STATE_COLOURS = {"done": "#7bd88f", "failed": "#ff6b6b", "running": "#4fa3ff", "cancelled": "#a0a4ad",
                 "queued": "#ffb347", "draft": "#a0a4ad"}


class QueuePanel(QWidget):
    retryClicked = Signal(int)
    cancelClicked = Signal(int)
    enqueueClicked = Signal(int)
    openClicked = Signal(str)
    error = Signal(str)

    def __init__(self, store, parent=None):
        super().__init__(parent)
        self.setObjectName("queuePanel")
        self.store = store
        self.live: dict[int, tuple[str, str]] = {}  # running job -> (where it runs, detail)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.verticalHeader().hide()
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setAlternatingRowColors(True)
        head = self.table.horizontalHeader()
        head.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        head.setSectionResizeMode(5, QHeaderView.ResizeMode.Stretch)
        self.table.itemDoubleClicked.connect(self._open)

        self.retry_btn = QPushButton("Retry")
        self.enqueue_btn = QPushButton("Queue draft")
        self.cancel_btn = QPushButton("Cancel")
        self.remove_btn = QPushButton("Remove")
        self.clear_btn = QPushButton("Clear finished")
        self.retry_btn.clicked.connect(lambda: self._emit(self.retryClicked))
        self.enqueue_btn.clicked.connect(lambda: self._emit(self.enqueueClicked))
        self.cancel_btn.clicked.connect(lambda: self._emit(self.cancelClicked))
        self.remove_btn.clicked.connect(self._remove)
        self.clear_btn.clicked.connect(self._clear_finished)
        self.summary = QLabel("")
        self.summary.setObjectName("dim")
        row = QHBoxLayout()
        for b in (self.retry_btn, self.enqueue_btn, self.cancel_btn, self.remove_btn, self.clear_btn):
            row.addWidget(b)
        row.addStretch(1)
        row.addWidget(self.summary)
        box = QVBoxLayout(self)
        box.setContentsMargins(6, 6, 6, 6)
        box.addLayout(row)
        box.addWidget(self.table, 1)
        self.refresh()

    def selected_id(self) -> int | None:
        row = self.table.currentRow()
        if row < 0:
            return None
        return int(self.table.item(row, 0).data(Qt.ItemDataRole.UserRole))

    def refresh(self) -> None:
        keep = self.selected_id()
        jobs = self.store.list()
        self.table.setRowCount(len(jobs))
        for r, job in enumerate(jobs):
            live = self.live.get(job.id) if job.state == "running" else None
            cells = [
                str(job.id),
                job.label,
                job.state,
                f"{100 * job.progress:.0f} %",
                Path(job.output).name,
                live[0] if live else job.reason or _result_note(job),
            ]
            where = where_text(job)
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if c == 0:
                    item.setData(Qt.ItemDataRole.UserRole, job.id)
                if c == 2:
                    from PySide6.QtGui import QColor

                    item.setForeground(QColor(STATE_COLOURS.get(job.state, "#e6e6e6")))
                tip = job.output if c == 4 else text
                if c in (2, 5):
                    tip = "\n".join(x for x in (text, live[1] if live else "", where) if x)
                item.setToolTip(tip)
                self.table.setItem(r, c, item)
            if job.id == keep:
                self.table.selectRow(r)
        counts = {}
        for j in jobs:
            counts[j.state] = counts.get(j.state, 0) + 1
        self.summary.setText(" · ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no jobs")

    def set_progress(self, job_id: int, fraction: float) -> None:
        for r in range(self.table.rowCount()):
            if int(self.table.item(r, 0).data(Qt.ItemDataRole.UserRole)) == job_id:
                self.table.item(r, 3).setText(f"{100 * fraction:.0f} %")
                return

    def set_live(self, job_id: int, where: str | None, detail: str = "") -> None:
        """Show where the running job ``job_id`` runs (None: it ended) and, in the tooltip, ``detail``."""
        if where is None:
            self.live.pop(job_id, None)
            return
        self.live[job_id] = (where, detail)
        for r in range(self.table.rowCount()):
            if int(self.table.item(r, 0).data(Qt.ItemDataRole.UserRole)) == job_id:
                self.table.item(r, 5).setText(where)
                tip = "\n".join(x for x in (where, detail) if x)
                self.table.item(r, 5).setToolTip(tip)
                self.table.item(r, 2).setToolTip(tip)
                return

    def _emit(self, signal) -> None:
        job_id = self.selected_id()
        if job_id is not None:
            signal.emit(job_id)

    def _remove(self) -> None:
        job_id = self.selected_id()
        if job_id is None:
            return
        try:
            self.store.remove(job_id)
        except Exception as exc:  # noqa: BLE001
            from studio.ui.workers import error_text

            self.error.emit(error_text(exc))
        self.refresh()

    def _clear_finished(self) -> None:
        for job in self.store.list(("done", "cancelled")):
            self.store.remove(job.id)
        self.refresh()

    def _open(self, item) -> None:
        job = self.store.get(int(self.table.item(item.row(), 0).data(Qt.ItemDataRole.UserRole)))
        if job.state == "done" and Path(job.output).exists():
            self.openClicked.emit(job.output)


def where_text(job) -> str:
    """Where a job ran (its result) or will run (its settings), for tooltips."""
    from studio.ui.render_queue import job_devices, job_farm

    ran = (job.result or {}).get("ran_on")
    if ran:
        return f"rendered on {ran}"
    farm = job_farm(job.settings or {})
    devices = job_devices(job.settings or {})
    if devices:
        return f"renders on {len(devices)} GPUs here at once"
    if farm is None:
        return "renders on this computer"
    return f"renders on the farm at {farm}" if farm else "renders on the farm started here"


def _result_note(job) -> str:
    r = job.result or {}
    if not r:
        return time.strftime("added %H:%M", time.localtime(job.created))
    note = f"{r.get('engine', '?')} · {r.get('fps', 0):.1f} fps · {r.get('seconds', 0):.1f} s"
    ran = r.get("ran_on", "")
    return f"{ran} · {note}" if ran.startswith("farm") else note

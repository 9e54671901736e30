"""The Doctor dock: the same checks as ``studio doctor``, run off the GUI thread."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QTreeWidget, QTreeWidgetItem, QVBoxLayout, QWidget

from studio.ui.workers import run_in_background

COLOURS = {"ok": "#7bd88f", "warn": "#ffb347", "fail": "#ff6b6b", "info": "#a0a4ad"}


class DoctorPanel(QWidget):
    checked = Signal(list)  # list of Check

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("doctorPanel")
        self.tree = QTreeWidget()
        self.tree.setHeaderLabels(["Check", "Status", "Detail"])
        self.tree.setRootIsDecorated(True)
        self.tree.setColumnWidth(0, 120)
        self.tree.setColumnWidth(1, 60)
        self.tree.setWordWrap(True)
        self.run_btn = QPushButton("Run checks")
        self.run_btn.clicked.connect(self.run)
        self.status = QLabel("Press Run checks to see what this machine can do")
        self.status.setObjectName("dim")
        row = QHBoxLayout()
        row.addWidget(self.run_btn)
        row.addWidget(self.status, 1)
        box = QVBoxLayout(self)
        box.setContentsMargins(6, 6, 6, 6)
        box.addLayout(row)
        box.addWidget(self.tree, 1)
        self.checks: list = []
        self.task = None

    def run(self):
        from studio.core.doctor import run_checks

        self.run_btn.setEnabled(False)
        self.status.setText("checking GPU, CUDA, NVENC, TensorRT, weights…")
        self.task = run_in_background(run_checks, include_gui=True, on_done=self._show, on_error=self._failed)
        return self.task

    def _show(self, checks) -> None:
        self.checks = list(checks)
        self.tree.clear()
        for c in checks:
            item = QTreeWidgetItem([c.name, c.status, c.detail])
            item.setForeground(1, QColor(COLOURS.get(c.status, "#e6e6e6")))
            item.setToolTip(2, c.detail)
            if c.hint and c.status != "ok":
                hint = QTreeWidgetItem(["", "fix", c.hint])
                hint.setToolTip(2, c.hint)
                for col in (1, 2):
                    hint.setForeground(col, QColor("#9aa0aa"))
                item.addChild(hint)
            self.tree.addTopLevelItem(item)
        self.tree.expandAll()
        bad = sum(c.status == "fail" for c in checks)
        warn = sum(c.status == "warn" for c in checks)
        self.status.setText(f"{len(checks)} checks: {bad} failed, {warn} warnings")
        self.run_btn.setEnabled(True)
        self.checked.emit(self.checks)

    def _failed(self, message: str) -> None:
        self.status.setText(message)
        self.run_btn.setEnabled(True)

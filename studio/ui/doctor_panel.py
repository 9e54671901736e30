"""The Doctor dock: the same checks as ``studio doctor`` (the audio output device included), run
off the GUI thread."""

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
        # offered when TensorRT and imported weights are here but engines are missing or stale
        self.trt_btn = QPushButton("Build TensorRT engines")
        self.trt_btn.setToolTip("Export the UNet and decoder to ONNX and build engines for this GPU (minutes)")
        self.trt_btn.clicked.connect(self.build_engines)
        self.trt_btn.setVisible(False)
        self.status = QLabel("Press Run checks to see what this machine can do")
        self.status.setObjectName("dim")
        row = QHBoxLayout()
        row.addWidget(self.run_btn)
        row.addWidget(self.trt_btn)
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
        by_name = {c.name: c for c in checks}
        engines = by_name.get("engine cache")
        self.trt_btn.setVisible(
            getattr(by_name.get("TensorRT"), "status", "") == "ok"
            and getattr(by_name.get("weights"), "status", "") == "ok"
            and getattr(engines, "status", "ok") != "ok"
        )
        self.checked.emit(self.checks)

    def build_engines(self):
        """Build the missing TensorRT engines off the GUI thread, progress in the status line."""
        self.trt_btn.setEnabled(False)
        self.status.setText("building TensorRT engines…")
        self.task = run_in_background(
            _build_engines,
            on_done=lambda res: self._built(res),
            on_error=self._build_failed,
            on_progress=lambda done, total, stage: self.status.setText(stage or "building TensorRT engines…"),
        )
        return self.task

    def _built(self, results) -> None:
        self.trt_btn.setEnabled(True)
        states = ", ".join(f"{r.get('component')}: {r.get('status')}" for r in results or [])
        self.status.setText(f"TensorRT engines: {states or 'nothing to build'}")
        self.run()

    def _build_failed(self, message: str) -> None:
        self.trt_btn.setEnabled(True)
        self.status.setText(message)

    def _failed(self, message: str) -> None:
        self.status.setText(message)
        self.run_btn.setEnabled(True)


def _build_engines(progress=None):
    from studio.core.engines import tensorrt_build as rt

    return rt.build(progress=(lambda msg: progress(0, 0, msg)) if progress else None)

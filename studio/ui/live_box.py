"""The Render panel's Live box: the running render's progress bar, its fps and ETA, the time per stage
(or a farm's workers), the fps plot, and the last render's lip-sync check with a jump to its worst
second. The ``RenderPanel`` owns one (``panel.live``).

    live = LiveBox()
    live.start("anna x take")        # cleared; the fps and ETA update once a second from ...
    live.update_progress(progress)   # ... the newest progress (per batch: only stored, the bar moves)
    live.stop("done", finished=True) # "took 0:12"
    live.show_check(result["check"], output)   # worstClicked(path, second) when its button is pressed

The Live bar's percentage is ``studio.core.progress.percent``, the same rule as the Queue's.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QTimer, Signal
from PySide6.QtWidgets import QGroupBox, QHBoxLayout, QLabel, QProgressBar, QPushButton, QVBoxLayout

from studio.ui.widgets import ElidedLabel

CHECK_COLOURS = {"ok": "#7bd88f", "check": "#ffb347", "out of sync": "#ff6b6b"}


class LiveBox(QGroupBox):
    worstClicked = Signal(str, float)  # a render's path, the second its check found worst

    def __init__(self, parent=None):
        super().__init__("Live", parent)
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
        lv = QVBoxLayout(self)
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
        self._latest: Any = None  # newest RenderProgress, read by the once-a-second timer
        self._t0 = 0.0
        self.fps_timer = QTimer(self)
        self.fps_timer.setInterval(1000)
        self.fps_timer.timeout.connect(self.tick)

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
        self.fps_timer.start()

    def update_progress(self, p) -> None:
        """Called per batch: only stores the newest progress and moves the bar."""
        self._latest = p
        frac = p.done / p.total if p.total else 0.0
        self.progress_bar.setValue(int(frac * 1000))
        from studio.core.progress import percent

        self.progress_bar.setFormat(f"{p.done} / {p.total} frames  ({percent(p.done, p.total)} %)")

    def stop(self, message: str, finished: bool) -> None:
        """The render ended: ``message`` on the bar; ``finished``: it wrote its file (the time it took)."""
        self.tick()
        self.fps_timer.stop()
        self.progress_bar.setFormat(message)
        self.eta_label.setText(f"took {fmt_eta(time.perf_counter() - self._t0)}" if finished else "ETA —")
        if not finished:  # cancelled or failed: no speed or time left to show
            self.fps_label.setText("— fps")
            self.stage_label.setText("")

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

    def tick(self) -> None:
        """The once-a-second update from the newest progress: fps, ETA, stages, a point of the plot."""
        p = self._latest
        if p is None:
            return
        self.fps_label.setText(f"{p.fps:.1f} fps")
        self.eta_label.setText(f"ETA {fmt_eta(p.eta_s)} · elapsed {fmt_eta(p.elapsed_s)}")
        stage_ms = getattr(p, "stage_ms", None)
        chunks = int(getattr(p, "chunks", 0) or 0)
        if getattr(p, "workers", None) is not None and chunks:  # a chunked or farm render
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


def fmt_eta(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def farm_status(p) -> str:
    """One line for a farm render's progress: per-worker fps, chunks and retries."""
    workers = " · ".join(f"{name} {fps:.1f} fps" for name, fps in sorted(p.workers.items())) or "workers starting"
    retries = f"{p.retries} retr{'y' if p.retries == 1 else 'ies'}"
    return f"farm: {workers} · chunks {p.chunks_done}/{p.chunks} · {retries}"


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

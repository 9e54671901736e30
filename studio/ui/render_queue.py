"""Runs the queue: jobs from the SQLite store, one after another, on the render worker.

``RenderQueue`` is the only place that changes job states from the GUI. It feeds the Render
panel (progress, FPS, result) and the Queue panel, and reports through signals:

    q = RenderQueue(store, worker, render_panel, queue_panel)
    q.add(avatar, script, start=True)       # -> job id; the next queued job starts when idle
    q.cancel()                               # the running one: cancelled, no file left

A job added while the panel's "Render on" says "Render farm" keeps that choice in its settings
(``render_on``/``farm_address``) and renders on the farm, also when retried later; the Queue
panel shows where each job runs or ran ("farm (2 workers)").

A job still running when the window closes is left "running" on purpose: the next start of the
app finds it and marks it interrupted (see ``studio.core.jobs``).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path

from PySide6.QtCore import QObject, QTimer, Signal

from studio.core.constants import FPS
from studio.ui.timeline import time_text
from studio.ui.workers import RenderRequest, error_text

log = logging.getLogger(__name__)


def job_devices(settings: dict) -> tuple[str, ...] | None:
    """The devices a job renders on at once ("All GPUs here"), or None."""
    if settings.get("render_on") != "gpus":
        return None
    return tuple(settings.get("devices") or ()) or None


def job_farm(settings: dict) -> str | None:
    """Where a job's settings say it renders: None (this computer), "" (the farm started here) or HOST:PORT."""
    if settings.get("render_on") != "farm":
        return None
    return str(settings.get("farm_address") or "")


class RenderQueue(QObject):
    running = Signal(bool)  # a render started (True) or ended (False)
    jobFinished = Signal(int, str)  # job id, final state
    previewFrame = Signal(object, str, int)  # RGB, caption, frame index
    status = Signal(str)
    error = Signal(str)

    def __init__(self, store, worker, render_panel, queue_panel, parent=None):
        super().__init__(parent)
        self.store, self.worker = store, worker
        self.panel, self.queue_panel = render_panel, queue_panel
        self.current: RenderRequest | None = None
        self.closing = False
        self._last_store_progress = 0.0
        self.where = ""  # where the current job runs ("this computer", "farm (2 workers)")
        worker.placed.connect(self._placed)
        worker.started.connect(lambda req: self.status.emit(f"rendering {Path(req.output).name}…"))
        worker.progress.connect(self._progress)
        worker.preview.connect(self._preview)
        worker.finished.connect(self._finished)
        worker.failed.connect(self._failed)
        worker.cancelled.connect(self._cancelled)
        queue_panel.retryClicked.connect(self.retry)
        queue_panel.cancelClicked.connect(self.cancel_job)
        queue_panel.enqueueClicked.connect(self.enqueue)

    # ---- public API ---------------------------------------------------------------------

    def add(self, avatar: str, script: str, start: bool = True) -> int | None:
        """Queue avatar x script with the Render panel's settings and output; None when refused."""
        if not avatar or not script:
            self.error.emit("choose an avatar and a script in the Library first")
            return None
        settings = dataclasses.asdict(self.panel.render_settings())
        farm, devices = self.panel.farm_address(), self.panel.render_devices()
        on = "farm" if farm is not None else "gpus" if devices else "local"
        settings.update(render_on=on, farm_address=farm or "", devices=list(devices or ()))
        output = self.panel.output_path()
        try:
            Path(output).parent.mkdir(parents=True, exist_ok=True)
            job = self.store.add(avatar, script, settings, output)
        except Exception as exc:  # noqa: BLE001
            self.error.emit(error_text(exc))
            return None
        self.queue_panel.refresh()
        if start:
            self.pump()
        return job.id

    def pump(self) -> None:
        """Start the oldest queued job when nothing is running."""
        if self.current is not None or self.closing:
            return
        job = self.store.claim_next()
        self.queue_panel.refresh()
        if job is None:
            return
        from studio.core.render import RenderSettings

        known = {f.name for f in dataclasses.fields(RenderSettings)}
        settings = RenderSettings(**{k: v for k, v in job.settings.items() if k in known})
        self.current = RenderRequest(job.avatar, job.audio, settings, job.output, job.id, farm=job_farm(job.settings),
                                     devices=job_devices(job.settings))
        self.where = ""
        self.panel.start(job.label)
        if self.current.farm is not None:
            self.panel.progress_bar.setFormat(f"connecting to the farm {self.current.farm or 'started here'}…")
        self.running.emit(True)
        self.worker.renderRequested.emit(self.current)

    def cancel(self) -> None:
        """Cancel the running render: it stops within one batch and leaves no file."""
        req = self.current
        if req is None:
            return
        if req.job_id is not None:
            try:
                self.store.cancel(req.job_id)
            except Exception:  # noqa: BLE001 - the job may have just finished
                log.debug("cancel of job %s ignored", req.job_id, exc_info=True)
        self.worker.cancel()
        self.panel.progress_bar.setFormat("cancelling…")

    def retry(self, job_id: int) -> None:
        self._safe(lambda: self.store.retry(job_id))
        self.pump()

    def enqueue(self, job_id: int) -> None:
        self._safe(lambda: self.store.enqueue(job_id))
        self.pump()

    def cancel_job(self, job_id: int) -> None:
        if self.current is not None and self.current.job_id == job_id:
            self.cancel()
            return
        self._safe(lambda: self.store.cancel(job_id))
        self.queue_panel.refresh()

    # ---- worker signals -----------------------------------------------------------------

    def _placed(self, req, where: str) -> None:
        if req is not self.current:
            return
        self.where = where
        if req.job_id is not None:
            self.queue_panel.set_live(req.job_id, where)
        if req.farm is not None:
            self.status.emit(f"rendering {Path(req.output).name} on the {where}")

    def _progress(self, req, p) -> None:
        if req is not self.current:
            return
        self.panel.update_progress(p)
        now = time.monotonic()
        if req.job_id is not None and (now - self._last_store_progress > 1.0 or p.done == p.total):
            self._last_store_progress = now
            frac = p.done / p.total if p.total else 0.0
            self.store.set_progress(req.job_id, frac)
            self.queue_panel.set_progress(req.job_id, frac)
            if getattr(p, "workers", None) is not None:  # a farm job: per-worker fps and retries
                from studio.ui.render_panel import farm_status

                self.queue_panel.set_live(req.job_id, self.where, farm_status(p))

    def _preview(self, image, index: int) -> None:
        if self.current is not None:
            self.previewFrame.emit(image, f"rendering · frame {index} · {time_text(index / FPS)}", index)

    def _finished(self, req, result) -> None:
        data = result.to_json() if hasattr(result, "to_json") else {}
        if req.farm is None and self.worker.engine_reason:
            data["engine_reason"] = self.worker.engine_reason
        data["ran_on"] = self.where or ("this computer" if req.farm is None else "farm")
        self._over(req, "done", lambda: self.store.finish(req.job_id, output=result.output, result=data))
        self.panel.stop(
            f"done · {result.frames} frames",
            result.output,
            f"{result.frames} frames in {result.seconds:.1f} s · {result.fps:.1f} fps · {result.engine} · {result.encoder}"
            + (f" · {data['ran_on']}" if req.farm is not None else ""),
        )

    def _failed(self, req, message: str) -> None:
        if req is None:  # a scrub frame, not a job
            self.error.emit(message)
            return
        self._over(req, "failed", lambda: self.store.fail(req.job_id, message))
        self.panel.stop("failed")
        self.error.emit(message)

    def _cancelled(self, req) -> None:
        def mark():
            if self.store.get(req.job_id).state == "running":
                self.store.cancel(req.job_id)

        self._over(req, "cancelled", mark)
        self.panel.stop("cancelled: nothing was written")

    def _over(self, req, state: str, update) -> None:
        if self.closing:
            return  # a job running at exit stays "running" and comes back as interrupted
        if req.job_id is not None:
            self._safe(update)
            self.queue_panel.set_live(req.job_id, None)
        self.current = None
        self.running.emit(False)
        self.queue_panel.refresh()
        self.status.emit(f"render {state}")
        if req.job_id is not None:
            self.jobFinished.emit(req.job_id, state)
        QTimer.singleShot(0, self.pump)

    def _safe(self, fn) -> None:
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - every error becomes a readable message
            self.error.emit(error_text(exc))

"""The window's queue controls: a thin view of the render service's queue (``QueueService``).

No scheduling here: the service's runner thread renders jobs; this object turns the Render panel's
choices into a ``RenderRequest``, tells the service what the editor clicked, and moves the Render
and Queue panels as the worker re-emits the service's events:

    q = RenderQueue(service, worker, render_panel, queue_panel)
    q.add(avatar, script, start=True)       # -> job id (the output numbered when taken); starts the queue
    q.cancel()                               # the running one: cancelled, no file left
    q.start() / q.pause()                    # run queued jobs / finish the running one, then wait

"Render on: Studio server" is a placement like the others: the service renders such a job on the
server (``studio.service.remote``), so its progress, preview, cancel and finished file arrive as a
local job's do; scrubbing then asks the server for the exact frame.

Queued jobs never start by themselves when the window opens: the editor starts the queue (the
window asks once and can remember the answer).
"""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import QObject, QTimer, Signal

from studio.ui.workers import error_text

log = logging.getLogger(__name__)


def job_devices(settings: dict) -> tuple[str, ...] | None:
    """The devices a job renders on at once ("All GPUs here"), or None."""
    from studio.service.job_requests import request_of_settings

    p = request_of_settings(settings)
    return (p.devices or None) if p.kind == "gpus" else None


def job_farm(settings: dict) -> str | None:
    """Where a job's settings say it renders: None (this computer), "" (the farm started here) or HOST:PORT."""
    from studio.service.job_requests import request_of_settings

    p = request_of_settings(settings)
    return p.farm if p.kind == "farm" else None


class RenderQueue(QObject):
    running = Signal(bool)  # a render started (True) or ended (False)
    jobFinished = Signal(int, str)  # job id, final state
    previewFrame = Signal(object, str, int)  # RGB, caption, frame index
    status = Signal(str)
    error = Signal(str)
    runnerChanged = Signal(bool)  # the queue runs (True) or waits for Start (False)
    stateChanged = Signal(str)  # "running", "paused" (the editor paused it) or "stopped" (not started yet)

    def __init__(self, service, worker, render_panel, queue_panel, parent=None):
        super().__init__(parent)
        self.service, self.worker = service, worker
        self.store = service.store
        self.panel, self.queue_panel = render_panel, queue_panel
        self.current = None  # the JobRun being rendered
        self.pending: int | None = None  # a job just added to an idle queue: the Live panel shows it starting
        self.closing = False
        self.where = ""
        self.state = "stopped"
        for name in ("placed", "progress", "preview", "finished", "failed", "cancelled", "checked"):
            getattr(worker, name).connect(getattr(self, f"_{name}"))  # each signal of a job to its own slot
        worker.queueChanged.connect(queue_panel.refresh)
        worker.queueChanged.connect(self.refresh_state)
        queue_panel.retryClicked.connect(self.retry)
        queue_panel.cancelClicked.connect(self.cancel_job)
        queue_panel.enqueueClicked.connect(self.enqueue)
        queue_panel.holdClicked.connect(lambda job_id: self._safe(lambda: self.service.hold(job_id)))
        queue_panel.resumeClicked.connect(self._resume)
        queue_panel.moveClicked.connect(lambda job_id, index: self._safe(lambda: self.service.move(job_id, index)))
        queue_panel.removeClicked.connect(lambda job_id: self._safe(lambda: self.service.remove(job_id)))
        queue_panel.startClicked.connect(lambda on: self.start() if on else self.pause())
        render_panel.session.events.changed.connect(
            lambda key, _b, _a: self._scrub_source() if key in ("target", "server") else None
        )
        self._scrub_source()

    # ---- public API ---------------------------------------------------------------------

    def request(self, avatar: str, script: str, frames: tuple[int, int] | None = None):
        """The session's choices for avatar x script as a ``RenderRequest`` (``frames``: this range
        instead of the in/out range)."""
        return self.panel.session.request(avatar, script, frames)

    def add(self, avatar: str, script: str, start: bool = True, frames: tuple[int, int] | None = None) -> int | None:
        """Queue avatar x script with the Render panel's settings; None when refused (one sentence)."""
        if not avatar or not script:
            self.error.emit("choose an avatar and a script in the Library first")
            return None
        try:
            req = self.request(avatar, script, frames)
            Path(req.output).parent.mkdir(parents=True, exist_ok=True)
            job = self.service.add(req)
        except Exception as exc:  # noqa: BLE001
            self.error.emit(error_text(exc))
            return None
        self.queue_panel.refresh()
        self.refresh_state()
        if start:
            if self.current is None and self.service.running_job_id is None:
                self.pending = job.id
                self.panel.start(job.label)
                self.running.emit(True)
            self.start()
        return job.id

    def start(self) -> None:
        """Run queued jobs (now and whenever more are queued) until ``pause``."""
        if self.closing:
            return
        self.service.start()
        self._set_state("running")

    def pause(self) -> None:
        """The running job finishes; the next ones wait for Start."""
        self.service.stop(timeout=None)
        self._set_state("paused")

    def _set_state(self, state: str) -> None:
        changed = state != self.state
        self.state = state
        self.queue_panel.set_running(state == "running")
        self.queue_panel.set_state(self.state_text())
        if changed:
            self.runnerChanged.emit(state == "running")
            self.stateChanged.emit(state)

    def state_text(self) -> str:
        """One line: "Queue: running · 2 waiting", "Queue: paused (the running job finishes) · 3 waiting"."""
        try:
            waiting = len(self.store.list(("queued",)))
        except Exception:  # noqa: BLE001 - the store's trouble is said elsewhere
            waiting = 0
        text = f"Queue: {self.state}"
        if self.state != "running" and self.service.running_job_id is not None:
            text += " (the running job finishes)"
        if waiting:
            text += f" · {waiting} waiting" + ("" if self.state == "running" else ": Start queue renders them")
        return text

    def refresh_state(self) -> None:
        """The number waiting changed (a job added, started or finished): say it again."""
        self.queue_panel.set_state(self.state_text())
        self.stateChanged.emit(self.state)

    def pump(self) -> None:  # kept for callers of the earlier API: starting is explicit now
        self.start()

    def cancel(self) -> None:
        """Cancel the running render: it stops within one batch and leaves no file."""
        if self.current is None and self.pending is not None:  # not started yet
            job_id, self.pending = self.pending, None
            self._safe(lambda: self.service.cancel(job_id))
            if self.service.get(job_id).state == "cancelled":
                self.panel.stop("cancelled: nothing was written")
                self.running.emit(False)
                self.jobFinished.emit(job_id, "cancelled")
            return
        if self.current is None:
            return
        self.worker.cancel()
        self.panel.live.progress_bar.setFormat("cancelling…")

    def retry(self, job_id: int) -> None:
        """Queue the job again; a paused or stopped queue stays so (as Add to queue leaves it)."""
        self._safe(lambda: self.service.retry(job_id))
        self._queued_again()

    def enqueue(self, job_id: int) -> None:
        self._safe(lambda: self.service.enqueue(job_id))
        self._queued_again()

    def _queued_again(self) -> None:
        if self.state == "running":
            self.start()  # the runner takes it in order
        else:
            self.refresh_state()
            self.status.emit(f"queued; the queue is {self.state}: Start queue renders it")

    def _resume(self, job_id: int) -> None:
        self._safe(lambda: self.service.resume(job_id))

    def cancel_job(self, job_id: int) -> None:
        if self.current is not None and self.current.job_id == job_id:
            self.cancel()
            return
        self._safe(lambda: self.service.cancel(job_id))

    def close(self) -> None:
        """The window closes: a running job stops now and comes back interrupted on the next start."""
        self.closing = True
        self.service.close()

    def _scrub_source(self) -> None:
        """Scrub frames come from the Studio server when jobs render there, else from this computer."""
        url = self.panel.server_url()
        from studio.service.remote import RemoteFrames

        self.worker.remote = RemoteFrames(url) if url else None

    # ---- the worker's signals (the service's events) --------------------------------------

    def _placed(self, run, where: str) -> None:
        started = self.pending == run.job_id
        self.current, self.where, self.pending = run, where, None
        job = self._job(run.job_id)
        if not started:  # the Live panel did not show it starting yet
            self.panel.start(job.label if job else "")
            self.running.emit(True)
        self.queue_panel.set_live(run.job_id, where)
        self.status.emit(
            f"rendering {Path(run.output).name}" + ("" if where == "this computer" else f" on the {where}")
        )

    def _progress(self, run, p) -> None:
        if self.current is None or run.job_id != self.current.job_id:
            return
        self.panel.update_progress(p)
        self.queue_panel.set_progress(run.job_id, p.fraction)
        if p.workers:  # chunks or a farm: per-worker fps and retries
            from studio.ui.live_box import farm_status

            self.queue_panel.set_live(run.job_id, self.where, farm_status(p))

    def _preview(self, image, index: int) -> None:
        if self.current is not None:
            from studio.core.media.timecode import timecode

            rate = self._rate_of(self.current)
            caption = f"rendering · {timecode(index, rate)} · frame {index} · {float(index / rate):.2f} s"
            self.previewFrame.emit(image, caption, index)

    def _rate_of(self, run):
        """The output rate of ``run``'s render (its fps setting, or its avatar's own rate), once per job."""
        cached = getattr(self, "_rate_cache", None)
        if cached is not None and cached[0] == run.job_id:
            return cached[1]
        from studio.core.media.rates import DEFAULT_RATE

        try:
            rate = run.request.output_rate  # resolved once, when the request was built
        except Exception:  # noqa: BLE001 - a caption only: an avatar that cannot be read shows 25
            rate = DEFAULT_RATE
        self._rate_cache = (run.job_id, rate)
        return rate

    def _finished(self, run, result) -> None:
        if run is None:
            return
        job = self._job(run.job_id)
        ran_on = (job.result or {}).get("ran_on", "") if job else ""
        if self._over(run, "done"):
            self.panel.stop(
                f"done · {result.frames} frames",
                result.output,
                f"{result.frames} frames in {result.seconds:.1f} s · {result.fps:.1f} fps · {result.engine} · "
                f"{result.encoder}" + (f" · {ran_on}" if ran_on and ran_on != "this computer" else ""),
            )
            self.panel.live.show_check((job.result or {}).get("check") if job else None, result.output)
            self.panel.show_loudness(getattr(result, "loudness", None))
        notes = list(getattr(result, "notes", None) or [])
        if notes and not self.closing:  # what the render says of itself reaches the status bar
            from studio.ui.words import window_words

            self.status.emit(window_words(f"render done · note: {'; '.join(notes)}"))

    def _checked(self, job_id: int, check) -> None:
        """A lip-sync check started or ended: the Live panel shows it when it is the last render's."""
        job = self._job(job_id)
        if job is not None and check is not None and job.output == self.panel.last_output:
            self.panel.live.show_check(check, job.output)

    def _failed(self, run, message: str) -> None:
        if run is None:  # a scrub frame, not a job
            self.error.emit(message)
            return
        if self._over(run, "failed"):
            self.panel.stop("failed")
        self.error.emit(message)

    def _cancelled(self, run) -> None:
        if self._over(run, "cancelled"):
            self.panel.stop("cancelled: nothing was written")

    def _over(self, run, state: str) -> bool:
        """The job ended; True when it was the one the Render panel showed."""
        shown = (self.current is not None and self.current.job_id == run.job_id) or self.pending == run.job_id
        if self.pending == run.job_id:
            self.pending = None
        self.queue_panel.set_live(run.job_id, None)
        self.queue_panel.refresh()
        if shown:
            self.current = None
            self.running.emit(False)
        if not self.closing:
            self.status.emit(f"render {state}")
            self.jobFinished.emit(run.job_id, state)
        return shown and not self.closing

    def _job(self, job_id: int):
        try:
            return self.service.get(job_id)
        except Exception:  # noqa: BLE001 - removed meanwhile
            return None

    def _safe(self, fn) -> None:
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - every error becomes a readable message
            self.error.emit(error_text(exc))
        QTimer.singleShot(0, self.queue_panel.refresh)

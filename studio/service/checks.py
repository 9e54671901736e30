"""The lip-sync check after a render (``RenderSettings.check``): ``studio check`` on the written file.

    runner = CheckRunner(on_done=lambda job_id, check: ...)
    runner.submit(job_id, request, "out.mp4")     # returns at once; one check at a time
    runner.wait()                                 # ``studio queue run``: before the process ends
    runner.close()                                # the rest are marked "stopped"

A check never slows a render: it starts only once the file is written, in a child process
(``studio check --json``) at the lowest CPU priority (nice 19), so the next job's render (at normal
priority) takes the CPU first; the queue does not wait for it. Its summary lands in the job's
result as ``result["check"]``: ``{"state": "pending"|"running"|"done"|"failed"|"stopped",
"verdict", "reason", "offset_frames", "confidence", ..., "worst_second"}``.

Every check also writes its visual report beside the video (``out.check.html``: ``studio check
--report``), listed in the job's side files as ``files["check_report"]``. A render whose settings
have a gate (``check_gate``: ``--fail-under`` limits such as ``ok,jitter=5``, which a delivery or a
watch folder sets) gets ``check["gate"] = {"limits", "met", "failures"}``: a job that misses it is
marked so (``gate_failed``) and kept with its file and report; ``gate_failures`` is the one judge,
called by the queue and by a watch folder alike.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from studio.core.env import child

log = logging.getLogger(__name__)

NICE = 19  # the child's CPU priority: any render first
TIMEOUT_S = 6 * 3600  # a check that hangs is stopped after this


REPORT_SUFFIX = ".check.html"


def report_path(output: str | os.PathLike) -> Path:
    """Where a job's visual check report goes: beside its video, ``out.check.html``."""
    out = Path(output)
    return out.with_name(out.stem + REPORT_SUFFIX)


def report_data(output: str | os.PathLike) -> dict | None:
    """The report JSON inside the visual report beside ``output`` (``out.check.html``), or None
    when there is none or it cannot be read (the window's strip under the player)."""
    try:
        text = report_path(output).read_text(encoding="utf-8")
        head = '<script id="studio-report" type="application/json">'
        start = text.index(head) + len(head)
        data = json.loads(text[start : text.index("</script>", start)].replace("<\\/", "</"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def gate_failures(check: dict, limits: str | None) -> list[str]:
    """What a finished check misses of ``limits`` (``--fail-under``'s text: ``ok,jitter=5``), one
    clause each; [] when met or when there are no limits. A check that did not run misses any gate."""
    from studio.core.limits import Limits

    lim = Limits.parse(limits)
    if lim.verdict is None and not lim.figures:
        return []
    if check.get("state") != "done":
        return [f"the check did not run ({check.get('reason') or check.get('state')})"]
    return lim.failures_of(check)


def with_gate(check: dict, limits: str | None) -> dict:
    """``check`` with its ``gate`` (``limits``, ``met``, ``failures``) when the render has limits."""
    if not limits or not str(limits).strip():
        return check
    failures = gate_failures(check, limits)
    return {**check, "gate": {"limits": str(limits), "met": not failures, "failures": failures}}


def check_command(output: str, request) -> list[str]:
    """The child's command line: ``studio check OUTPUT --json --report OUT.check.html`` with the
    render's silence settings, its avatar when this machine has it (the exact reference), and the
    range's first frame."""
    if getattr(sys, "frozen", False):  # the frozen app runs its command line with arguments
        cmd = [sys.executable, "check"]
    else:
        cmd = [sys.executable, "-m", "studio", "check"]
    s = request.settings
    cmd += [str(output), "--json", "--threshold", repr(float(s.threshold)), "--min-silence", str(int(s.min_silence))]
    cmd += ["--report", str(report_path(output))]
    avatar = _reference(request)
    if avatar is not None:
        cmd += ["--avatar", avatar]
        if request.frames:
            cmd += ["--first-frame", str(int(request.frames[0]))]
    return cmd


def _reference(request) -> str | None:
    """The avatar as the check's reference: on a canvas the presenter is scaled and moved (the face
    reframe moves it per frame), so the check takes the video's own rest frame instead."""
    s = request.settings
    if s.canvas_size is not None or s.scale != 1.0 or s.offset_x or s.offset_y:
        return None
    return _local_avatar(request.avatar)


def _local_avatar(avatar: str) -> str | None:
    """The avatar as this machine knows it (a library name or an existing file), else None."""
    if not avatar:
        return None
    if Path(avatar).expanduser().is_file():
        return avatar
    try:
        from studio.core.avatars.library import library_dir

        if (library_dir() / avatar / "meta.json").is_file():
            return avatar
    except Exception:  # noqa: BLE001 - a bad name is no reference; the check runs without it
        return None
    return None


def summary_of(report: dict) -> dict:
    """The few fields a job's result keeps of a report (``Report.summary``'s keys)."""
    keys = ("verdict", "reason", "offset_frames", "confidence", "silence_motion", "sharpness", "seam", "drift")
    out = {k: report.get(k) for k in keys}
    out.update(state="done", worst_second=report.get("worst_second"), reference=report.get("reference"))
    out["jitter"] = report.get("jitter")
    if report.get("report_files"):  # taken into the job's side files (``files``) by the queue
        out["files"] = {"check_report": report["report_files"][0]}
    return out


def run_check(output: str, request, cancel: threading.Event | None = None, timeout_s: float = TIMEOUT_S) -> dict:
    """Check ``output`` in a child process at low priority; the summary (``state`` "done"), or
    ``state`` "failed" with the child's one sentence."""
    cmd = check_command(output, request)
    env = child(STUDIO_PARENT_PID=str(os.getpid()))
    try:
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True
        )
    except OSError as exc:
        return {"state": "failed", "reason": f"the check could not start ({exc})"}
    try:
        os.setpriority(os.PRIO_PROCESS, proc.pid, NICE)
    except (OSError, AttributeError):  # another platform, or it ended already
        pass
    holder = {}

    def talk():
        holder["out"], holder["err"] = proc.communicate()

    t = threading.Thread(target=talk, name="studio-check-io", daemon=True)
    t.start()
    waited = 0.0
    while t.is_alive():
        t.join(0.2)
        waited += 0.2
        if (cancel is not None and cancel.is_set()) or waited > timeout_s:
            proc.kill()
            t.join(5)
            why = "Studio stopped before the check finished" if waited <= timeout_s else "the check took too long"
            return {"state": "stopped", "reason": why}
    out, err = holder.get("out") or "", holder.get("err") or ""
    if proc.returncode == 0:
        try:
            return with_gate(summary_of(json.loads(out.strip().splitlines()[-1])), gate_of(request))
        except (ValueError, IndexError):
            pass
    lines = [x for x in err.strip().splitlines() if x.strip()]
    reason = lines[-1].removeprefix("studio: error: ") if lines else f"the check ended with exit code {proc.returncode}"
    return {"state": "failed", "reason": reason}


def check_here(output: str, request, progress=None) -> tuple[dict, dict | None]:
    """Check ``output`` in this process (``studio render --check``: the render is over): the
    summary and the whole report (None when the check could not run: the summary says why)."""
    from studio.core.errors import StudioError
    from studio.core.quality import check_video

    s = request.settings
    avatar = _reference(request)
    try:
        report = check_video(
            output,
            None,
            avatar,
            avatar_start=int(request.frames[0]) if request.frames and avatar is not None else 0,
            threshold=float(s.threshold),
            min_silence=int(s.min_silence),
            progress=progress,
        )
    except StudioError as exc:
        return with_gate({"state": "failed", "reason": str(exc)}, gate_of(request)), None
    full = report.to_json()
    try:
        from studio.core.quality.sheet import pictures, write_report

        pics = pictures(report, output, avatar, (), int(request.frames[0]) if request.frames and avatar else 0)
        full["report_files"] = [str(write_report(report, report_path(output), pics, overwrite=False))]
    except (StudioError, OSError) as exc:  # the figures stand without their picture
        log.warning("the check report of %s was not written: %s", output, exc)
    summary = with_gate(summary_of(full), gate_of(request))
    if "gate" in summary:
        full["gate"] = summary["gate"]
    return summary, full


def gate_of(request) -> str:
    """The render's gate (its ``check_gate`` setting; "" when none)."""
    return str(getattr(request.settings, "check_gate", "") or "")


class CheckRunner:
    """Runs the checks of finished jobs one after another on a daemon thread."""

    def __init__(self, on_done: Callable[[int, dict], None], on_start: Callable[[int], None] | None = None):
        self.on_done = on_done
        self.on_start = on_start
        self._todo: list[tuple[int, object, str]] = []
        self._cond = threading.Condition()
        self._busy = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def submit(self, job_id: int, request, output: str) -> None:
        with self._cond:
            self._todo.append((job_id, request, output))
            if self._thread is None or not self._thread.is_alive():
                self._stop.clear()
                self._thread = threading.Thread(target=self._loop, name="studio-checks", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    @property
    def pending(self) -> int:
        with self._cond:
            return len(self._todo) + (1 if self._busy else 0)

    def wait(self, timeout: float | None = None) -> bool:
        """Until every submitted check is done (True), or ``timeout`` seconds passed (False)."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._todo and not self._busy, timeout)

    def close(self) -> None:
        """Stop the running check and mark it and the waiting ones "stopped"."""
        self._stop.set()
        with self._cond:
            left, self._todo = self._todo, []
            self._cond.notify_all()
        for job_id, _, _ in left:
            self._done(job_id, {"state": "stopped", "reason": "Studio stopped before the check ran"})
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(10)

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._todo and not self._stop.is_set():
                    self._cond.wait(1.0)
                if self._stop.is_set():
                    return
                job_id, request, output = self._todo.pop(0)
                self._busy = True
            if self.on_start is not None:
                try:
                    self.on_start(job_id)
                except Exception:
                    log.debug("job %s: check start not recorded", job_id, exc_info=True)
            try:
                result = run_check(output, request, self._stop)
            except Exception as exc:
                log.exception("the check of job %s failed", job_id)
                result = {"state": "failed", "reason": f"internal error ({type(exc).__name__}: {exc})"}
            self._done(job_id, result)
            with self._cond:
                self._busy = False
                self._cond.notify_all()

    def _done(self, job_id: int, result: dict) -> None:
        try:
            self.on_done(job_id, result)
        except Exception:
            log.debug("check result of job %s dropped", job_id, exc_info=True)

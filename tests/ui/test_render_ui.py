"""Renders from the window: live progress, a playable file, cancel, a responsive GUI, the queue."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt, QTimer
from ui_helpers import SLOW, clip, decode, load_demo, window  # noqa: F401 (fixture)

from studio.core.store import jobs


def _fast(window, tmp_path):
    p = window.render_panel
    p.encoder.setCurrentText("x264")
    p.preset.setCurrentText("ultrafast")
    p.folder.setText(str(tmp_path / "renders"))


def test_a_short_render_reports_progress_finishes_and_plays(window, qtbot, tmp_path):
    audio = clip(tmp_path, 2.0)
    load_demo(window, qtbot, audio=audio)
    _fast(window, tmp_path)
    expected_output = window.render_panel.output_path()
    assert Path(expected_output).name == "astronaut_clip_auto_crf20.mp4"  # the settings are in the name

    ticks = []
    heartbeat = QTimer()
    heartbeat.setInterval(20)
    heartbeat.timeout.connect(lambda: ticks.append(1))
    progress = []
    window.worker.progress.connect(lambda req, p: progress.append(p))
    previews = []
    window.worker.preview.connect(lambda img, i: previews.append(i))
    heartbeat.start()
    with qtbot.waitSignal(window.worker.finished, timeout=SLOW) as done:
        job_id = window.render_now()
        assert window.render_panel.cancel_btn.isEnabled()
        assert not window.render_panel.render_btn.isEnabled()
    heartbeat.stop()
    req, result = done.args
    seconds = result.seconds

    # the GUI thread kept running its timers during the whole render (20 ms timer)
    assert len(ticks) >= 0.25 * seconds / 0.02, (len(ticks), seconds)  # a frozen GUI would give ~0
    assert [p.done for p in progress] == sorted(p.done for p in progress)
    assert progress[-1].done == progress[-1].total == 50
    assert previews, "no preview frame reached the GUI"
    assert req.job_id == job_id and result.output == expected_output

    frames, audio_s, first = decode(result.output)
    assert frames == 50
    assert audio_s == pytest.approx(2.0, abs=0.05)
    assert first.shape == (512, 512, 3)
    qtbot.waitUntil(lambda: window.store.get(job_id).state == jobs.DONE, timeout=5000)
    qtbot.waitUntil(lambda: window.current is None, timeout=5000)  # the window took the news
    job = window.store.get(job_id)
    assert job.result["frames"] == 50 and job.progress == 1.0
    assert window.render_panel.play_btn.isEnabled()
    assert "50 frames" in window.render_panel.result_detail.text()
    window.render_panel.live.tick()  # the once-a-second update, now
    assert window.render_panel.live.fps_x, "the FPS plot has no points"
    assert (
        window.render_panel.live.fps_label.text().endswith("fps")
        and window.render_panel.live.fps_label.text() != "— fps"
    )

    # play it in the app (QtMultimedia): the player loads the file and knows its length
    window.render_panel.play_btn.click()
    player = window.player
    assert window.preview.stack.currentWidget() is player
    qtbot.waitUntil(lambda: player.player.duration() > 0, timeout=10_000)
    assert player.player.duration() == pytest.approx(2000, abs=100)
    assert player.player.hasAudio() and player.player.hasVideo()
    player.back_btn.click()
    assert window.preview.stack.currentWidget() is window.preview.graphics


def _start_long_render(window, qtbot, tmp_path):
    """A 10 s clip in batches of 4, started and past its first progress: (job id, output path)."""
    load_demo(window, qtbot, audio=clip(tmp_path, 10.0, "long.wav"))
    _fast(window, tmp_path)
    window.render_panel.batch.setValue(4)
    output = Path(window.render_panel.output_path())
    with qtbot.waitSignal(window.worker.progress, timeout=SLOW):
        job_id = window.render_now()
    qtbot.waitUntil(lambda: window.current is not None, timeout=5000)  # the window took the news
    return job_id, output


def test_cancel_stops_the_render_and_leaves_no_file(window, qtbot, tmp_path):
    job_id, output = _start_long_render(window, qtbot, tmp_path)
    # the worker's signals come from its thread, where qtbot's blocker also runs (a direct connection):
    # the window's own handlers are queued to the GUI thread, so the panel is waited for, not assumed
    with qtbot.waitSignal(window.worker.cancelled, timeout=SLOW):
        window.render_panel.cancel_btn.click()
    qtbot.waitUntil(lambda: window.current is None, timeout=5000)
    assert not output.exists()
    assert list(output.parent.iterdir()) == []  # no partial files either
    assert window.store.get(job_id).state == jobs.CANCELLED
    assert "cancelled" in window.render_panel.live.progress_bar.format()
    assert window.render_panel.render_btn.isEnabled()
    assert window.current is None


def test_the_queue_survives_a_restart_and_a_running_job_comes_back_interrupted(qtbot, studio_home, tmp_path):
    import os
    import signal
    import subprocess
    import sys

    from PySide6.QtWidgets import QMessageBox

    from studio.core.store.jobs import JobStore
    from studio.ui.app import create_app
    from studio.ui.main_window import MainWindow

    store = JobStore()
    running = store.add("astronaut", "/x/a.flac", {"engine": "classic"}, "/tmp/a.mp4")
    draft = store.add("astronaut", "/x/b.flac", {"engine": "classic"}, "/tmp/b.mp4", state=jobs.DRAFT)
    waiting = store.add("astronaut", "/x/c.flac", {"engine": "classic"}, "/tmp/c.mp4")
    # another Studio process takes the first job and is killed mid-render
    code = (
        "import os, signal, sys; from studio.core.store.jobs import JobStore; "
        "JobStore(sys.argv[1]).claim_next(); os.kill(os.getpid(), signal.SIGKILL)"
    )
    r = subprocess.run([sys.executable, "-c", code, str(store.path)], env=dict(os.environ))
    assert r.returncode == -signal.SIGKILL

    create_app([])
    w = MainWindow()  # the restart: opens the same data folder's jobs.sqlite
    qtbot.addWidget(w)
    w.show()
    assert w.store.path == store.path
    assert w.queue_panel.table.rowCount() == 3
    states = {w.queue_panel.table.item(r, 1).text(): w.queue_panel.table.item(r, 3).text() for r in range(3)}
    assert states == {str(running.id): jobs.INTERRUPTED_STATE, str(draft.id): jobs.DRAFT, str(waiting.id): jobs.QUEUED}
    assert "interrupted" in w.banner_text.text()
    assert w.store.get(running.id).reason.startswith("interrupted")
    # queued jobs do not start by themselves: the window asks
    qtbot.waitUntil(lambda: w.state.queued_box is not None and w.state.queued_box.isVisible(), timeout=5000)
    assert not w.service.started
    qtbot.wait(300)
    assert w.store.get(waiting.id).state == jobs.QUEUED
    w.state.queued_box.checkBox().setChecked(True)  # remember "no"
    qtbot.mouseClick(w.state.queued_box.button(QMessageBox.StandardButton.No), Qt.MouseButton.LeftButton)
    assert not w.service.started and w.store.get(waiting.id).state == jobs.QUEUED
    from studio.ui import settings as cfg

    assert cfg.value(w.settings, "queue/on_start", str) == "wait"
    # retry from the queue: the job runs again (and fails at once: its audio does not exist)
    w.store.hold(waiting.id)  # keep the other one out of the way
    w.queue_panel.refresh()
    w.queue_panel.table.selectRow(0)
    w.queue_panel.retry_btn.click()  # queued again; the stopped queue stays stopped (as Add to queue)
    assert not w.service.started and w.queue.state != "running"
    with qtbot.waitSignal(w.jobFinished, timeout=SLOW) as b:
        qtbot.mouseClick(w.queue_panel.start_btn, Qt.MouseButton.LeftButton)
    again = max(j.id for j in w.store.list())  # a retry is a new job; the interrupted one stays as it was
    assert b.args == [again, jobs.FAILED] and w.store.get(again).retry_of == running.id
    assert "a.flac" in w.store.get(again).reason
    assert w.store.get(running.id).state == jobs.INTERRUPTED_STATE
    assert w.store.get(draft.id).state == jobs.DRAFT  # drafts wait for "Queue draft"
    assert w.store.get(waiting.id).state == jobs.HELD


def test_closing_during_a_render_asks_leaves_no_file_and_the_job_comes_back_interrupted(window, qtbot, tmp_path):
    from PySide6.QtWidgets import QMessageBox

    from studio.core.store.jobs import JobStore

    job_id, output = _start_long_render(window, qtbot, tmp_path)
    window.close()  # asks first
    qtbot.waitUntil(lambda: window.state.close_box is not None and window.state.close_box.isVisible(), timeout=5000)
    assert window.isVisible() and window.current is not None  # not closed yet
    qtbot.mouseClick(window.state.close_box.button(QMessageBox.StandardButton.Close), Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not window.isVisible(), timeout=SLOW)
    assert not window.worker_thread.thread.isRunning()
    assert not output.exists() and list(output.parent.iterdir()) == []
    reopened = JobStore(window.store.path)  # the next start of the app
    assert reopened.get(job_id).state == jobs.INTERRUPTED_STATE
    assert reopened.get(job_id).reason.startswith("interrupted")

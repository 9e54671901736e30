"""The Queue dock as a view of the service's store: the window and `studio queue` show the same jobs;
a damaged row is shown as damaged and removable; a damaged store is said in the window; the editor's
controls (hold, resume, reorder, Queue draft with nothing selected) do what they say."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
from conftest import DEMO_AUDIO, ROOT
from PySide6.QtCore import Qt
from ui_helpers import window  # noqa: F401 (fixture)

from studio.core.store import jobs


def studio(*args):
    r = subprocess.run(
        [sys.executable, "-m", "studio", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=dict(os.environ),
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def rows(window) -> dict[str, str]:
    t = window.queue_panel.table
    return {t.item(r, 1).text(): t.item(r, 3).text() for r in range(t.rowCount())}


def test_the_window_and_the_command_line_show_the_same_queue(window, qtbot, tmp_path):
    out = studio(
        "queue", "add", "--avatar", "astronaut", "--audio", str(DEMO_AUDIO), "-o", str(tmp_path / "a.mp4"), "--draft"
    )
    cli_job = out.split()[-1]
    qtbot.waitUntil(lambda: cli_job in rows(window), timeout=5000)  # another process's job appears
    assert rows(window)[cli_job] == jobs.DRAFT
    window.queue_panel.table.selectRow(0)
    qtbot.mouseClick(window.queue_panel.hold_btn, Qt.MouseButton.LeftButton)  # a draft cannot be held
    assert not window.queue_panel.hold_btn.isEnabled()
    # the window's own job shows up in `studio queue list`
    job = window.service.add(
        window.queue.request("astronaut", str(DEMO_AUDIO)).with_(output=str(tmp_path / "b.mp4")), state=jobs.DRAFT
    )
    listed = {j["id"]: j for j in json.loads(studio("queue", "list", "--json"))}
    assert listed[job.id]["state"] == jobs.DRAFT and listed[job.id]["output"] == str(tmp_path / "b.mp4")
    qtbot.waitUntil(lambda: set(listed) == {int(k) for k in rows(window)}, timeout=5000)
    # reorder from the window, seen by the command line
    window.queue_panel.refresh()
    window.queue_panel.table.selectRow(1)
    qtbot.mouseClick(window.queue_panel.up_btn, Qt.MouseButton.LeftButton)
    order = [j["id"] for j in json.loads(studio("queue", "list", "--json"))]
    assert order == [job.id, int(cli_job)]


def test_queue_draft_with_nothing_selected_says_why(window, qtbot):
    errors = []
    window.queue_panel.error.connect(errors.append)
    window.queue_panel.table.clearSelection()
    window.queue_panel.table.setCurrentCell(-1, -1)
    qtbot.mouseClick(window.queue_panel.enqueue_btn, Qt.MouseButton.LeftButton)
    assert errors and "select a draft" in errors[-1]


def test_a_damaged_row_is_shown_damaged_and_can_be_removed(qtbot, studio_home, tmp_path):
    from studio.core.store.jobs import JobStore
    from studio.ui.app import create_app
    from studio.ui.main_window import MainWindow

    store = JobStore()
    good = store.add("astronaut", str(DEMO_AUDIO), {"engine": "classic"}, str(tmp_path / "g.mp4"), state=jobs.DRAFT)
    bad = store.add("astronaut", str(DEMO_AUDIO), {"engine": "classic"}, str(tmp_path / "b.mp4"), state=jobs.DRAFT)
    with sqlite3.connect(store.path) as db:
        db.execute("UPDATE jobs SET settings='{broken' WHERE id=?", (bad.id,))
        db.execute("UPDATE jobs SET progress='much' WHERE id=?", (good.id,))
    ok = store.add("astronaut", str(DEMO_AUDIO), {"engine": "classic"}, str(tmp_path / "o.mp4"), state=jobs.DRAFT)
    create_app([])
    w = MainWindow()
    qtbot.addWidget(w)
    w.show()
    states = rows(w)
    assert states == {str(good.id): jobs.DAMAGED, str(bad.id): jobs.DAMAGED, str(ok.id): jobs.DRAFT}
    r = [k for k in range(w.queue_panel.table.rowCount()) if w.queue_panel.table.item(k, 1).text() == str(bad.id)][0]
    assert "damaged" in w.queue_panel.table.item(r, 8).text()
    w.queue_panel.table.selectRow(r)
    qtbot.mouseClick(w.queue_panel.remove_btn, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: str(bad.id) not in rows(w), timeout=5000)
    assert w.store.get(ok.id).state == jobs.DRAFT  # the others still work


def test_a_damaged_store_is_said_in_the_window(qtbot, studio_home):
    from studio.ui.app import create_app
    from studio.ui.main_window import MainWindow

    (Path(studio_home) / "jobs.sqlite").write_bytes(b"not a database at all " * 200)
    create_app([])
    w = MainWindow()
    qtbot.addWidget(w)
    w.show()
    assert w.banner.isVisible() and "damaged" in w.banner_text.text()
    assert "temporary" in w.banner_text.text()
    job = w.service.add(
        w.queue.request("astronaut", str(DEMO_AUDIO)).with_(output=str(Path(studio_home) / "x.mp4")), state=jobs.DRAFT
    )
    assert w.store.get(job.id).state == jobs.DRAFT  # the queue still works this session


def test_scrubbing_during_a_render_shows_the_exact_frame(window, qtbot, tmp_path):
    from ui_helpers import clip, load_demo

    from studio.core.render.renderer import Renderer

    load_demo(window, qtbot, audio=clip(tmp_path, 10.0, "long.wav"))
    p = window.render_panel
    p.engine.setCurrentText("classic")
    p.encoder.setCurrentText("x264")
    p.preset.setCurrentText("ultrafast")
    p.batch.setValue(4)
    p.folder.setText(str(tmp_path / "renders"))
    got = []
    window.worker.frameReady.connect(lambda s, i, img: got.append((i, img)))
    with qtbot.waitSignal(window.worker.progress, timeout=120_000):
        job_id = window.render()
    with qtbot.waitSignal(window.scrubShown, timeout=60_000):
        window.scrub_to(3.0)
    assert window.current is not None and window.current.job_id == job_id  # still rendering
    index, image = got[-1]
    assert index == 75 and "while rendering" in window.preview.caption.text()
    settings = p.render_settings()
    expected = Renderer("astronaut", str(tmp_path / "long.wav"), settings).frame(75)
    assert np.array_equal(image, expected)
    with qtbot.waitSignal(window.jobFinished, timeout=60_000):
        p.cancel_btn.click()


def test_sigterm_closes_the_window_and_its_running_job_comes_back_interrupted(studio_home, tmp_path):
    """The app as a process: SIGTERM mid-render closes it without asking; nothing is written."""
    import signal
    import time

    from conftest import speech_pause_speech

    out = tmp_path / "out"
    out.mkdir()
    audio = speech_pause_speech(tmp_path / "long.wav", 30.0, 0.2, 30.0)
    job_id = int(
        studio(
            "queue",
            "add",
            "--avatar",
            str(ROOT / "resources" / "demo" / "astronaut.png"),
            "--audio",
            str(audio),
            "-o",
            str(out / "k.mp4"),
            "--engine",
            "classic",
        ).split()[-1]
    )
    (Path(studio_home) / "settings.ini").write_text("[General]\nversion=1\n\n[queue]\non_start=start\n")
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    app = subprocess.Popen(
        [sys.executable, "-m", "studio"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 150:
            job = {j["id"]: j for j in json.loads(studio("queue", "list", "--json"))}[job_id]
            if job["state"] == "running" and job["progress"] > 0:
                break
            assert app.poll() is None, app.stderr.read()
            time.sleep(0.5)
        else:
            raise AssertionError("the window never started the queued job")
        app.send_signal(signal.SIGTERM)
        _, err = app.communicate(timeout=60)
    finally:
        app.kill()
    assert app.returncode == 0, err
    job = {j["id"]: j for j in json.loads(studio("queue", "list", "--json"))}[job_id]
    assert job["state"] == "interrupted"
    assert list(out.iterdir()) == []  # nothing half-written


def test_two_identical_jobs_get_numbered_files_and_both_exist(window, qtbot, tmp_path):
    from ui_helpers import clip, load_demo

    load_demo(window, qtbot, audio=clip(tmp_path, 1.0, "one.wav"))
    p = window.render_panel
    p.engine.setCurrentText("classic")
    p.encoder.setCurrentText("x264")
    p.preset.setCurrentText("ultrafast")
    p.folder.setText(str(tmp_path / "renders"))
    first = Path(p.output_path())
    assert first.name.startswith("astronaut_one_")  # {avatar} is the job's own avatar
    ids = []
    for _ in range(2):
        with qtbot.waitSignal(window.jobFinished, timeout=120_000):
            ids.append(window.render())
    outputs = [Path(window.store.get(i).output) for i in ids]
    assert outputs == [first, first.with_name(first.stem + "_002.mp4")]
    assert all(o.exists() for o in outputs)
    shown = {
        window.queue_panel.table.item(r, 1).text(): window.queue_panel.table.item(r, 7).text()
        for r in range(window.queue_panel.table.rowCount())
    }
    assert shown == {str(i): str(o) for i, o in zip(ids, outputs)}  # the resolved paths, in full

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
from ui_helpers import SLOW, library_window, prepared_avatars, window  # noqa: F401 (fixture)

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
    with qtbot.waitSignal(window.worker.progress, timeout=SLOW):
        job_id = window.render_now()
    with qtbot.waitSignal(window.scrubShown, timeout=SLOW):
        window.scrub_to(3.0)
    assert window.current is not None and window.current.job_id == job_id  # still rendering
    index, image = got[-1]
    assert index == 75 and "while rendering" in window.preview.caption.text()
    settings = p.render_settings()
    expected = Renderer("astronaut", str(tmp_path / "long.wav"), settings).frame(75)
    assert np.array_equal(image, expected)
    with qtbot.waitSignal(window.jobFinished, timeout=SLOW):
        p.cancel_btn.click()


def test_sigterm_closes_the_window_and_its_running_job_comes_back_interrupted(studio_home, tmp_path):
    """The app as a process: SIGTERM mid-render closes it without asking; nothing is written."""
    import signal

    from conftest import speech_pause_speech
    from served import Hold

    out = tmp_path / "out"
    out.mkdir()
    audio = speech_pause_speech(tmp_path / "talk.wav", 0.6, 0.2, 0.6)
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
    with Hold(tmp_path / "hold") as hold:  # the job stays running (held after its first batch) until the signal
        env = dict(os.environ, QT_QPA_PLATFORM="offscreen", STUDIO_TEST_HOLD=str(hold.path))
        app = subprocess.Popen(
            [sys.executable, "-m", "studio"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            hold.wait_held(150)
            job = {j["id"]: j for j in json.loads(studio("queue", "list", "--json"))}[job_id]
            assert job["state"] == "running" and app.poll() is None
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
        with qtbot.waitSignal(window.jobFinished, timeout=SLOW):
            ids.append(window.render_now())
    outputs = [Path(window.store.get(i).output) for i in ids]
    assert outputs == [first, first.with_name(first.stem + "_002.mp4")]
    assert all(o.exists() for o in outputs)
    table = window.queue_panel.table
    shown = {table.item(r, 1).text(): (table.item(r, 7).text(), table.item(r, 7).toolTip()) for r in range(2)}
    # the resolved names, the full paths as their tooltips
    assert shown == {str(i): (o.name, str(o)) for i, o in zip(ids, outputs)}


def _fast_settings(window, tmp_path):
    p = window.render_panel
    p.engine.setCurrentText("classic")
    p.encoder.setCurrentText("x264")
    p.preset.setCurrentText("ultrafast")
    p.folder.setText(str(tmp_path / "renders"))


def _select(lst, names):
    """Ctrl-click ``names`` in a Library list (real mouse events), the first one a plain click."""
    from PySide6.QtTest import QTest

    for i, name in enumerate(names):
        row = next(r for r in range(lst.count()) if lst.item(r).data(Qt.ItemDataRole.UserRole) == name)
        rect = lst.visualItemRect(lst.item(row))
        mods = Qt.KeyboardModifier.ControlModifier if i else Qt.KeyboardModifier.NoModifier
        QTest.mouseClick(lst.viewport(), Qt.MouseButton.LeftButton, mods, rect.center())


def test_add_to_queue_waits_for_start_and_a_running_queue_takes_jobs_in_order(library_window, qtbot, tmp_path):
    from ui_helpers import clip

    w = library_window
    with qtbot.waitSignal(w.analysisReady, timeout=SLOW):
        w.load_script(str(clip(tmp_path, 1.0, "one.wav")))
    _fast_settings(w, tmp_path)
    assert w.queue_panel.state_label.text() == "stopped"
    qtbot.mouseClick(w.render_panel.queue_btn, Qt.MouseButton.LeftButton)
    (job,) = w.store.list()
    assert job.state == jobs.QUEUED and not w.service.started
    assert w.queue.state == "stopped"
    assert w.queue_state_label.text() == "Queue: stopped · 1 waiting: Start queue renders them"
    assert "1 waiting" in w.queue_panel.state_label.toolTip()
    # nothing starts by itself: no runner thread exists to claim it
    assert w.service.runner.thread is None and w.store.get(job.id).state == jobs.QUEUED and w.current is None

    with qtbot.waitSignal(w.jobFinished, timeout=SLOW) as first:
        qtbot.mouseClick(w.queue_panel.start_btn, Qt.MouseButton.LeftButton)
        assert w.queue.state == "running" and w.queue_panel.start_btn.text() == "Pause queue"
        # the menu says what it does next, without a tick beside it
        assert not w.commands["start_queue"].isCheckable() and w.commands["start_queue"].text() == "Pause queue"
        assert w.queue_state_label.text().startswith("Queue: running")
    assert first.args == [job.id, jobs.DONE]
    # the queue keeps running: a job added now renders without another Start
    with qtbot.waitSignal(w.jobFinished, timeout=SLOW) as second:
        w.add_to_queue()
    assert second.args[1] == jobs.DONE and second.args[0] != job.id
    # Pause: the queue waits again, and says so
    qtbot.mouseClick(w.queue_panel.start_btn, Qt.MouseButton.LeftButton)
    assert w.queue.state == "paused" and not w.service.started
    assert w.queue_state_label.text() == "Queue: paused"
    w.add_to_queue()
    assert [j.state for j in w.store.list()].count(jobs.QUEUED) == 1
    assert w.queue_state_label.text() == "Queue: paused · 1 waiting: Start queue renders them"


def test_a_batch_queues_every_selected_pair_with_names_that_never_collide(library_window, qtbot, tmp_path):
    from ui_helpers import clip

    w = library_window
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    one, two = clip(tmp_path / "a", 1.0, "intro.wav"), clip(tmp_path / "b", 1.5, "intro.wav")  # the same stem
    for path in (one, two):
        with qtbot.waitSignal(w.analysisReady, timeout=SLOW):
            w.load_script(str(path))
    _fast_settings(w, tmp_path)
    w.resize(1400, 900)
    _select(w.library.avatars, ["anna", "bob"])
    _select(w.library.scripts, [str(one.resolve()), str(two.resolve())])
    assert w.library.selected_avatars() == ["anna", "bob"]
    assert len(w.library.selected_scripts()) == 2
    assert w.render_panel.queue_btn.text() == "Add 4 to queue"
    qtbot.mouseClick(w.render_panel.queue_btn, Qt.MouseButton.LeftButton)
    queued = w.store.list()
    assert len(queued) == 4 and all(j.state == jobs.QUEUED for j in queued)
    assert {(j.avatar, Path(j.audio).parent.name) for j in queued} == {
        (a, f) for a in ("anna", "bob") for f in ("a", "b")
    }
    outputs = [Path(j.output) for j in queued]
    assert len(set(outputs)) == 4  # same avatar, same script name: numbered, never the same file
    assert {o.name for o in outputs} == {
        "anna_intro_classic_crf20.mp4",
        "anna_intro_classic_crf20_002.mp4",
        "bob_intro_classic_crf20.mp4",
        "bob_intro_classic_crf20_002.mp4",
    }
    assert not w.service.started
    # each job is named after its own avatar and script, and the preview of the name says the current pair
    assert w.render_panel.output_path().endswith(f"{w.library.avatar}_intro_classic_crf20.mp4")


def test_the_close_question_pauses_the_queue_while_it_is_open(library_window, qtbot, tmp_path):
    from PySide6.QtWidgets import QMessageBox
    from ui_helpers import clip

    w = library_window
    with qtbot.waitSignal(w.analysisReady, timeout=SLOW):
        w.load_script(str(clip(tmp_path, 3.0, "three.wav")))
    _fast_settings(w, tmp_path)
    w.render_panel.batch.setValue(4)
    w.add_to_queue()
    w.add_to_queue()  # a second job waits behind the first
    first, second = (j.id for j in w.store.list())
    with qtbot.waitSignal(w.worker.progress, timeout=SLOW):
        w.queue.start()
    w.close()  # asks; the queue pauses while the question is open
    qtbot.waitUntil(lambda: w.state.close_box is not None and w.state.close_box.isVisible(), timeout=SLOW)
    assert w.queue.state == "paused"
    assert "the running job finishes" in w.queue_state_label.text()
    qtbot.waitUntil(lambda: w.store.get(first).state == jobs.DONE, timeout=SLOW)  # the running one finishes
    qtbot.waitUntil(lambda: w.service.running_job_id is None, timeout=SLOW)
    assert w.store.get(second).state == jobs.QUEUED and not w.service.started  # the next did not start
    # Cancel: the window stays and the queue runs on (the first job's own news can still be on its way
    # to the GUI thread: the store is written first, so the signal for the second job is the one waited for)
    with qtbot.waitSignal(w.jobFinished, timeout=SLOW, check_params_cb=lambda job_id, _state: job_id == second) as b:
        qtbot.mouseClick(w.state.close_box.button(QMessageBox.StandardButton.Cancel), Qt.MouseButton.LeftButton)
    assert b.args == [second, jobs.DONE] and w.isVisible()
    assert w.queue.state == "running"


def test_a_jobs_lane_and_deadline_show_in_its_note(window, qtbot, tmp_path):
    """A breaking job queued from the command line (issue 48) says its lane in the Queue's note; a
    normal one says nothing of it."""
    out = studio(
        "queue", "add", "--avatar", "astronaut", "--audio", str(DEMO_AUDIO), "-o", str(tmp_path / "b.mp4"),
        "--draft", "--priority", "breaking",
    )  # fmt: skip
    urgent = out.split()[-1]
    plain = studio(
        "queue", "add", "--avatar", "astronaut", "--audio", str(DEMO_AUDIO), "-o", str(tmp_path / "n.mp4"), "--draft"
    ).split()[-1]
    qtbot.waitUntil(lambda: {urgent, plain} <= set(rows(window)), timeout=5000)
    t = window.queue_panel.table
    from studio.ui.queue_panel import NOTE_COL

    notes = {t.item(r, 1).text(): t.item(r, NOTE_COL).text() for r in range(t.rowCount())}
    assert notes[urgent].startswith("breaking · added "), notes
    assert notes[plain].startswith("added "), notes

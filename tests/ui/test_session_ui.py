"""The window as the session's views (issue 36): every setting placed, each figure at the rate that
applies, and the defects a producer met, each driven with real keys and mouse clicks."""

from __future__ import annotations

import re
from fractions import Fraction
from pathlib import Path

import pytest
from PySide6.QtCore import QMimeData, QPoint, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDragLeaveEvent
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QWidget
from test_formats_ui import choose
from test_menus_ui import menu_click
from ui_helpers import (  # noqa: F401 (fixtures)
    QUICK,
    SLOW,
    clip,
    focus_window,
    library_window,
    load_demo,
    prepared_avatars,
    window,
)

from studio.core.settings import specs
from studio.core.store import jobs


def _load(window, qtbot, tmp_path, seconds=6.0):
    with qtbot.waitSignal(window.analysisReady, timeout=SLOW):
        window.load_script(str(clip(tmp_path, seconds)))


def _type_timecode(qtbot, window, text: str) -> None:
    edit = window.timeline.timecode_edit
    QTest.mouseClick(edit, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(edit.hasFocus, timeout=QUICK)
    edit.selectAll()
    qtbot.keyClicks(edit, text)
    qtbot.keyClick(edit, Qt.Key.Key_Return)


def test_every_setting_of_the_schema_has_a_visible_widget(window):
    window.resize(1600, 900)
    missing = []
    for spec in specs("ui"):
        w = window.findChild(QWidget, f"setting_{spec.name}")
        if w is None or not w.isVisibleTo(window):
            missing.append(spec.name)
    assert missing == [], f"settings with no visible widget in the window: {missing}"
    assert window.findChild(QWidget, "setting_loudness").isVisibleTo(window)
    assert window.findChild(QWidget, "setting_true_peak").isVisibleTo(window)


@pytest.mark.parametrize("fps", ["60"])
def test_the_range_label_counts_at_the_rate_in_effect(window, qtbot, tmp_path, fps):
    window.resize(1600, 900)
    choose(qtbot, window.render_panel.fields["fps"], fps)
    _load(window, qtbot, tmp_path)
    assert window.session.grid_rate == int(fps)
    focus_window(window, qtbot)
    _type_timecode(qtbot, window, "1:00")  # 1 s
    window.timeline.plots.setFocus()
    qtbot.keyClick(window, Qt.Key.Key_I)
    _type_timecode(qtbot, window, f"4:{int(fps) - 1}")  # the last frame before 5 s
    window.timeline.plots.setFocus()
    qtbot.keyClick(window, Qt.Key.Key_O)
    assert window.session.marks.range_frames() == (int(fps), 5 * int(fps))
    assert window.render_panel.range_label.text().endswith("· 4.00 s")  # was 9.60 s (at 25 fps)
    assert window.timeline.range_label.text().endswith("(4.00 s)")


def test_the_range_only_menu_entry_is_offered_while_a_range_exists(window, qtbot, tmp_path):
    window.resize(1600, 900)
    _load(window, qtbot, tmp_path, 4.0)
    assert not window.commands["range_only"].isEnabled()
    focus_window(window, qtbot)
    window.timeline.set_frame(25)
    window.timeline.plots.setFocus()
    qtbot.keyClick(window, Qt.Key.Key_I)
    window.timeline.set_frame(74)
    qtbot.keyClick(window, Qt.Key.Key_O)
    assert window.commands["range_only"].isEnabled()
    menu_click(qtbot, window, "Render", "range_only")
    assert window.session.value("range_only") and window.render_panel.range_check.isChecked()
    assert window.session.request("anna").frames == (25, 75)
    qtbot.keyClick(window, Qt.Key.Key_X, Qt.KeyboardModifier.AltModifier)  # clear in and out
    assert not window.commands["range_only"].isEnabled() and window.session.request("anna").frames is None


def test_view_menu_hides_and_shows_each_panel(window, qtbot):
    window.resize(1600, 900)
    for dock in (window.library_dock, window.render_dock, window.queue_dock):
        key = f"view_{dock.objectName()}"
        assert window.commands[key].isEnabled(), key
        menu_click(qtbot, window, "View", key)
        qtbot.waitUntil(lambda d=dock: not d.isVisible(), timeout=QUICK)
        menu_click(qtbot, window, "View", key)
        qtbot.waitUntil(dock.isVisible, timeout=QUICK)


def test_guide_and_output_folder_say_so_without_a_launcher(window, qtbot):
    window.resize(1600, 900)  # offscreen: no program opens a folder or a document here
    menu_click(qtbot, window, "Help", "editor_guide")
    qtbot.waitUntil(
        lambda: window.window_commands.guide_box is not None and window.window_commands.guide_box.isVisible(),
        timeout=QUICK,
    )
    from PySide6.QtWidgets import QTextBrowser

    assert "Keys" in window.window_commands.guide_box.findChild(QTextBrowser).toPlainText()
    window.window_commands.guide_box.close()
    menu_click(qtbot, window, "File", "show_output")
    folder = str(Path(window.session.output_path()).parent)
    assert window.banner.isVisible() and "No program here opens folders" in window.banner_text.text()
    assert folder in window.banner_text.text() and QApplication.clipboard().text() == folder


def test_prores_has_no_crf_and_no_crf_in_its_name(window, qtbot):
    window.resize(1600, 900)
    panel = window.render_panel
    assert panel.crf.isEnabled()
    choose(qtbot, panel.fields["codec"], "prores")
    assert not panel.crf.isEnabled()
    assert panel.output_label.toolTip().endswith("_auto_prores.mov")
    assert "crf" not in Path(window.session.request("anna", "/x/take.wav").output).name
    choose(qtbot, panel.fields["codec"], "h264")
    assert panel.crf.isEnabled() and panel.output_label.toolTip().endswith("_crf20.mp4")


def test_retry_leaves_a_paused_queue_paused(window, qtbot, tmp_path):
    job = window.store.add("astronaut", "/x/a.wav", {"engine": "classic"}, str(tmp_path / "a.mp4"), state=jobs.QUEUED)
    window.store.fail(job.id, "a.wav: no such file")
    window.queue_panel.refresh()
    table = window.queue_panel.table
    row = next(r for r in range(table.rowCount()) if table.item(r, 1).text().strip() == str(job.id))
    table.selectRow(row)
    assert window.queue.state != "running"
    qtbot.mouseClick(window.queue_panel.retry_btn, Qt.MouseButton.LeftButton)
    again = lambda: [j for j in window.store.list() if j.retry_of == job.id]  # noqa: E731 (a retry is a new job)
    qtbot.waitUntil(lambda: bool(again()), timeout=QUICK)
    assert again()[0].state == jobs.QUEUED
    assert window.queue.state != "running" and window.service.running_job_id is None
    assert "Start queue" in window.statusBar().currentMessage()


def test_the_status_bar_says_what_an_undo_did(library_window, qtbot):
    w = library_window
    w.resize(1600, 900)
    qtbot.waitUntil(lambda: w.library.avatars.count() == 2, timeout=QUICK)
    w.library.avatars.setCurrentRow(0)
    name = w.library.avatar
    menu_click(qtbot, w, "Edit", "remove_avatar")
    qtbot.waitUntil(lambda: w.library.avatars.count() == 1, timeout=SLOW)
    assert "remov" in w.statusBar().currentMessage().lower()
    focus_window(w, qtbot)
    qtbot.keyClick(w, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: w.library.avatars.count() == 2, timeout=SLOW)
    assert w.statusBar().currentMessage().startswith("Undone"), w.statusBar().currentMessage()
    assert name in w.statusBar().currentMessage() or "avatar" in w.statusBar().currentMessage().lower()


def test_a_rate_change_shows_the_new_frame_not_the_old_caption(window, qtbot, tmp_path):
    window.resize(1600, 900)
    load_demo(window, qtbot, audio=clip(tmp_path, 4.0))
    focus_window(window, qtbot)
    window.timeline.plots.setFocus()
    qtbot.keyClick(window, Qt.Key.Key_Right, Qt.KeyboardModifier.ShiftModifier)
    qtbot.keyClick(window, Qt.Key.Key_Right, Qt.KeyboardModifier.ShiftModifier)
    qtbot.waitUntil(lambda: "· frame 50 ·" in window.preview.caption.text(), timeout=SLOW)
    with qtbot.waitSignal(window.analysisReady, timeout=SLOW):
        choose(qtbot, window.render_panel.fields["fps"], "30")
    # the playhead keeps its moment (2 s), counted on the new grid: frame 60 at 30 fps (issue 52)
    qtbot.waitUntil(lambda: window.preview.caption.text().startswith("00:00:02:00 · frame 60 ·"), timeout=SLOW)
    assert window.session.grid_rate == 30 and window.timeline.frames == 120 and window.timeline.frame == 60


def _video_25fps(path: Path, seconds: int) -> Path:
    import av
    import numpy as np

    with av.open(str(path), "w") as c:
        s = c.add_stream("libx264", rate=25)
        s.width, s.height, s.pix_fmt = 64, 64, "yuv420p"
        s.options = {"preset": "ultrafast"}
        for i in range(25 * seconds):
            img = np.full((64, 64, 3), i % 250, np.uint8)
            for pkt in s.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                c.mux(pkt)
        for pkt in s.encode():
            c.mux(pkt)
    return path


def test_the_worst_second_and_the_caption_are_at_the_files_rate(window, qtbot, tmp_path):
    pytest.importorskip("PySide6.QtMultimedia")
    window.resize(1600, 900)
    choose(qtbot, window.render_panel.fields["fps"], "30")
    _load(window, qtbot, tmp_path, 12.0)
    video = _video_25fps(tmp_path / "render.mp4", 12)
    panel = window.render_panel
    panel.live.show_check(
        {"state": "done", "verdict": "check", "reason": "one weak second", "worst_second": 10.0}, str(video)
    )
    qtbot.mouseClick(panel.live.worst_btn, Qt.MouseButton.LeftButton)
    # the player plays on from the worst second: what the caption and the timeline said at each frame is
    # recorded as it happens (polling for the 40 ms of frame 250 afterwards raced the playback)
    seen: list[tuple[int, str, float]] = []
    window.player.frameChanged.connect(
        lambda f: seen.append((f, window.preview.caption.text(), window.timeline.position))
    )
    qtbot.waitUntil(lambda: window.player_shown and window.player.player.duration() > 0, timeout=SLOW)
    qtbot.waitUntil(lambda: any(f >= 250 for f, _c, _p in seen), timeout=SLOW)
    assert window.controls.player_rate == Fraction(25)
    early = [f for f, _c, _p in seen if 0 < f < 250]
    assert not early, f"the seek to 10 s was lost: the file played from the start ({early[:5]}…)"
    at = [(c, p) for f, c, p in seen if f == 250]
    assert at, f"frame 250 never shown; the frames seen: {[f for f, _c, _p in seen][:10]}"
    caption, position = at[0]
    assert "00:00:10:00 · frame 250 · the rendered file" in caption, caption  # was 8.3 s
    assert position == pytest.approx(10.0, abs=1 / 30)  # the same moment on the 30 fps grid

    # another render's worst second while the player is open: the new file also starts there
    other = _video_25fps(tmp_path / "render2.mp4", 12)
    panel.live.show_check(
        {"state": "done", "verdict": "check", "reason": "one weak second", "worst_second": 6.0}, str(other)
    )
    seen.clear()
    qtbot.mouseClick(panel.live.worst_btn, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: any(f >= 150 for f, _c, _p in seen), timeout=SLOW)
    early = [f for f, _c, _p in seen if 0 < f < 150]
    assert not early, f"the seek to 6 s was lost: the second file played from the start ({early[:5]}…)"
    assert any("render2.mp4 · 00:00:06:00 · frame 150" in c for f, c, _p in seen if f == 150)


def test_fps_and_eta_go_after_a_cancel_and_loudness_is_read_out(window, qtbot, tmp_path):
    window.resize(1600, 900)
    # 30 s (750 frames): the cancel comes long before the engine's last frame (once every frame has left
    # the engine a job finishes its file: a cancel then ends "done", which a 6 s clip on a fast machine hit)
    load_demo(window, qtbot, audio=clip(tmp_path, 30.0))
    panel = window.render_panel
    panel.folder.setText(str(tmp_path / "renders"))
    focus_window(window, qtbot)
    with qtbot.waitSignal(window.jobFinished, timeout=SLOW) as ended:
        qtbot.keyClick(window, Qt.Key.Key_R, Qt.KeyboardModifier.ControlModifier)
        qtbot.waitUntil(lambda: panel.live.fps_label.text() != "— fps", timeout=SLOW)
        qtbot.keyClick(window, Qt.Key.Key_Escape)
    assert ended.args[1] == "cancelled"
    assert panel.live.fps_label.text() == "— fps" and panel.live.eta_label.text() == "ETA —"

    # loudness typed in its box: the result's before/after LUFS under Output
    box = window.findChild(QWidget, "setting_loudness")
    QTest.mouseClick(box.lineEdit(), Qt.MouseButton.LeftButton)
    box.lineEdit().selectAll()
    qtbot.keyClicks(box.lineEdit(), "-16")
    qtbot.keyClick(box.lineEdit(), Qt.Key.Key_Tab)
    assert window.session.value("loudness") == -16.0
    window.session.marks.set_range(0, 49)  # two seconds are enough
    window.session.set("range_only", True)
    focus_window(window, qtbot)
    with qtbot.waitSignal(window.jobFinished, timeout=SLOW) as ended:
        qtbot.keyClick(window, Qt.Key.Key_R, Qt.KeyboardModifier.ControlModifier)
    assert ended.args[1] == "done"
    text = panel.loudness_label.text()
    assert panel.loudness_label.isVisibleTo(window) and re.search(r"→ -1[5-6]\.\d LUFS \(target -16\)", text), text


def test_drop_targets_light_up_while_files_are_dragged(window, qtbot):
    from conftest import DEMO_AVATAR

    lib = window.library
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(DEMO_AVATAR))])
    enter = QDragEnterEvent(
        QPoint(5, 5), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier
    )
    QApplication.sendEvent(lib, enter)
    assert enter.isAccepted() and lib.drops.active
    QApplication.sendEvent(lib, QDragLeaveEvent())
    assert not lib.drops.active


def test_a_reimport_of_the_same_file_asks_and_can_reuse(library_window, qtbot):
    from conftest import DEMO_AVATAR

    w = library_window
    qtbot.waitUntil(lambda: w.library.avatars.count() == 2, timeout=QUICK)
    w.drop_files([str(DEMO_AVATAR)])  # the file "anna" and "bob" were made from
    qtbot.waitUntil(
        lambda: getattr(w.library, "reimport_box", None) is not None and w.library.reimport_box.isVisible(),
        timeout=QUICK,
    )
    box = w.library.reimport_box
    use = next(b for b in box.buttons() if b.text().startswith("Use"))
    qtbot.mouseClick(use, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not box.isVisible(), timeout=QUICK)
    assert w.library.avatars.count() == 2 and w.library.task is None  # nothing prepared, no "-2"


def test_the_queues_output_column_keeps_the_file_name_at_1280x720(window, qtbot, tmp_path):
    from studio.ui.queue_panel import OUTPUT_COL, elide_path

    window.resize(1280, 720)
    deep = tmp_path / "client-deliveries" / "2026" / "week-49" / "spring-campaign" / "renders"
    out = deep / "astronaut_a-very-long-voiceover-name_classic_crf20.mp4"
    window.store.add("astronaut", "/x/a.wav", {"engine": "classic", "loudness": -23.0}, str(out), state=jobs.DRAFT)
    window.queue_panel.refresh()
    table = window.queue_panel.table
    qtbot.waitUntil(lambda: table.rowCount() == 1, timeout=QUICK)
    item = table.item(0, OUTPUT_COL)
    assert item.toolTip() == str(out)  # the full path
    shown = elide_path(item.text(), table.fontMetrics(), table.columnWidth(OUTPUT_COL) - 12)
    # elided in the middle, the folder first: the name's start and end stay ("astronaut_…_crf20.mp4")
    assert shown.startswith("astronaut_") and shown.endswith("_crf20.mp4") and "…" in shown, shown


@pytest.mark.parametrize(("size", "plot_px"), [((1600, 900), 120), ((1280, 720), 50)])
def test_the_timeline_has_room_and_its_labels_are_whole(qtbot, tmp_path, size, plot_px):
    from PySide6.QtWidgets import QLabel

    from studio.ui.app import create_app
    from studio.ui.main_window import MainWindow

    create_app([])
    w = MainWindow()  # a first start at this size (the screenshot script's way)
    qtbot.addWidget(w)
    w.resize(*size)
    w.show()
    qtbot.waitExposed(w)
    with qtbot.waitSignal(w.analysisReady, timeout=SLOW):
        w.load_script(str(clip(tmp_path, 8.0)))
    tl = w.timeline
    tl.set_frame(25)
    tl.set_in()
    tl.set_frame(124)
    tl.set_out()
    qtbot.waitUntil(lambda: tl.wave_plot.geometry().height() >= plot_px, timeout=QUICK)
    assert tl.rms_plot.geometry().height() >= plot_px * 0.9  # the RMS plot keeps the axis under it
    for label in (tl.range_label, tl.info, tl.time_label, w.render_panel.range_label):
        shown = QLabel.text(label)
        assert "…" not in shown and shown, (label.objectName(), shown)  # a whole form of the text
    # the Library's voice-overs are in sight without scrolling
    lib = w.library
    top = lib.scripts.mapTo(w.library_dock, lib.scripts.rect().topLeft()).y()
    assert lib.scripts.isVisible() and top + 30 < w.library_dock.height()
    w.close_confirmed = True

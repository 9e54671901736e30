"""The timeline as an editor uses it, driven by real key and mouse events (pytest-qt, offscreen):
click-to-seek on the waveform and the ruler, NLE transport keys, in/out points, the typed timecode,
playback to the end and loop of the range; text fields keep their own keys."""

from __future__ import annotations

import time

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtTest import QTest
from ui_helpers import QUICK, SLOW, clip, window  # noqa: F401 (fixture)

from studio.core.constants import FPS


@pytest.fixture
def timeline_window(window, qtbot, tmp_path):
    """The window with a 6 s voice-over (no avatar: the keys and clicks need only the timeline)."""
    window.resize(1600, 1000)  # the offscreen screen is 800x600: give the plots a real width
    with qtbot.waitSignal(window.analysisReady, timeout=SLOW):
        window.load_script(str(clip(tmp_path, 6.0)))
    qtbot.waitUntil(lambda: window.timeline.wave_plot.vb.width() > 500, timeout=5000)
    window.raise_()
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=5000)
    window.timeline.plots.setFocus()
    qtbot.wait(50)
    return window


def viewport_point(tl, seconds: float, plot=None) -> QPoint:
    """Where time ``seconds`` is drawn in the plot widget's viewport (pixels)."""
    scene = tl.scene_pos_of(seconds, plot)
    return tl.plots.mapFromScene(scene)


def key(qtbot, w, k, mods=Qt.KeyboardModifier.NoModifier):
    qtbot.keyClick(w, k, mods)
    qtbot.wait(5)


def test_a_click_on_the_waveform_or_the_ruler_seeks_there(timeline_window, qtbot):
    tl = timeline_window.timeline
    assert tl.frame == 0
    QTest.mouseClick(
        tl.plots.viewport(), Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, viewport_point(tl, 2.02)
    )  # the middle of frame 50
    assert tl.frame == 50
    assert tl.position == pytest.approx(2.0)
    assert tl.playheads[0].value() == pytest.approx(2.0)
    # the RMS plot
    QTest.mouseClick(
        tl.plots.viewport(),
        Qt.MouseButton.LeftButton,
        Qt.KeyboardModifier.NoModifier,
        viewport_point(tl, 4.5, tl.rms_plot) + QPoint(0, 0),
    )
    assert tl.frame == int(4.5 * FPS)
    # the time ruler under the RMS plot
    axis = tl.rms_plot.getAxis("bottom")
    x = tl.plots.mapFromScene(tl.scene_pos_of(1.22, tl.rms_plot)).x()
    y = tl.plots.mapFromScene(axis.sceneBoundingRect().center()).y()
    with qtbot.waitSignal(tl.playheadMoved, timeout=2000) as b:
        QTest.mouseClick(tl.plots.viewport(), Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, QPoint(x, y))
    assert b.args[0] == pytest.approx(30 / FPS)
    assert tl.frame == 30
    assert "frame 30 / 150" in tl.time_label.text()
    assert tl.timecode_edit.text() == "00:00:01:05"


def test_the_playhead_is_visible_at_zero_and_at_the_last_frame(timeline_window):
    tl = timeline_window.timeline
    for frame in (0, tl.frames - 1):
        tl.set_frame(frame)
        for plot, line in zip((tl.wave_plot, tl.rms_plot), tl.playheads):
            box = plot.vb.sceneBoundingRect()
            x = plot.vb.mapViewToScene(line.pos()).x()
            assert box.left() + 1 < x < box.right() - 1, (frame, box, x)


def test_transport_keys_move_the_playhead_like_an_editor(timeline_window, qtbot):
    w = timeline_window
    tl = w.timeline
    T = tl.frames
    assert T == 150
    key(qtbot, w, Qt.Key.Key_Right)
    assert tl.frame == 1
    key(qtbot, w, Qt.Key.Key_Right, Qt.KeyboardModifier.ShiftModifier)
    assert tl.frame == 26
    key(qtbot, w, Qt.Key.Key_Left)
    assert tl.frame == 25
    key(qtbot, w, Qt.Key.Key_Left, Qt.KeyboardModifier.ShiftModifier)
    assert tl.frame == 0
    key(qtbot, w, Qt.Key.Key_Left)  # clamped at the first frame
    assert tl.frame == 0
    key(qtbot, w, Qt.Key.Key_End)
    assert tl.frame == T - 1
    key(qtbot, w, Qt.Key.Key_Home)
    assert tl.frame == 0

    # Down / Up: the next / previous silence or speech edge
    spans = tl.silent_spans
    assert spans, "the demo's first 6 s have pauses"
    edges = sorted({e for a, b in spans for e in (a, min(b, T - 1))} | {0, T - 1})
    key(qtbot, w, Qt.Key.Key_Down)
    assert tl.frame == edges[1]
    key(qtbot, w, Qt.Key.Key_Down)
    assert tl.frame == edges[2]
    key(qtbot, w, Qt.Key.Key_Up)
    assert tl.frame == edges[1]

    # keys work with the focus elsewhere in the window (a list in the Library dock)
    w.library.scripts.setFocus()
    qtbot.wait(20)
    before = tl.frame
    key(qtbot, w.library.scripts, Qt.Key.Key_Right)
    assert tl.frame == before + 1


def test_in_and_out_points_make_the_render_range(timeline_window, qtbot):
    w = timeline_window
    tl, panel = w.timeline, w.render_panel
    assert tl.range_frames() is None and not panel.range_check.isEnabled()
    tl.set_frame(25)
    key(qtbot, w, Qt.Key.Key_I)
    assert (tl.in_frame, tl.out_frame) == (25, None)
    assert tl.range_frames() == (25, 150)
    tl.set_frame(75)
    key(qtbot, w, Qt.Key.Key_O)
    assert (tl.in_frame, tl.out_frame) == (25, 75)
    assert tl.range_frames() == (25, 76)  # the out frame is included: [25, 76)
    for item in tl.range_items:
        assert item.isVisible()
        assert item.getRegion() == pytest.approx((1.0, 76 / FPS))
    assert "in 00:00:01:00 · out 00:00:03:00 (2.04 s)" == tl.range_label.text()

    assert panel.range_check.isEnabled()
    assert panel.render_range() is None  # offered, not chosen
    panel.range_check.setChecked(True)
    assert panel.render_range() == (25, 76)
    assert "00:00:01:00" in panel.range_label.text()

    key(qtbot, w, Qt.Key.Key_O, Qt.KeyboardModifier.AltModifier)
    assert tl.range_frames() == (25, 150)
    assert panel.render_range() == (25, 150)
    key(qtbot, w, Qt.Key.Key_I, Qt.KeyboardModifier.AltModifier)
    assert tl.range_frames() is None
    assert panel.render_range() is None and not panel.range_check.isEnabled()
    assert not any(item.isVisible() for item in tl.range_items)


def test_jkl_shuttle_and_space(timeline_window, qtbot):
    w = timeline_window
    t, tl = w.transport, w.timeline
    tl.set_frame(60)
    key(qtbot, w, Qt.Key.Key_L)
    assert t.speed == 1
    key(qtbot, w, Qt.Key.Key_L)
    assert t.speed == 2
    key(qtbot, w, Qt.Key.Key_L)
    assert t.speed == 4
    key(qtbot, w, Qt.Key.Key_L)
    assert t.speed == 4  # 4x is the fastest
    key(qtbot, w, Qt.Key.Key_K)
    assert t.speed == 0 and not t.playing
    qtbot.keyRelease(w, Qt.Key.Key_K)
    key(qtbot, w, Qt.Key.Key_J)
    assert t.speed == -1
    key(qtbot, w, Qt.Key.Key_J)
    assert t.speed == -2
    key(qtbot, w, Qt.Key.Key_K)
    qtbot.keyRelease(w, Qt.Key.Key_K)

    # K held: J and L step one frame
    tl.set_frame(60)
    qtbot.keyPress(w, Qt.Key.Key_K)
    key(qtbot, w, Qt.Key.Key_L)
    key(qtbot, w, Qt.Key.Key_L)
    assert tl.frame == 62 and t.speed == 0
    key(qtbot, w, Qt.Key.Key_J)
    assert tl.frame == 61
    qtbot.keyRelease(w, Qt.Key.Key_K)
    key(qtbot, w, Qt.Key.Key_L)
    assert t.speed == 1
    key(qtbot, w, Qt.Key.Key_K)
    qtbot.keyRelease(w, Qt.Key.Key_K)

    # Space plays at 1x (the playhead moves at real speed, never faster) and stops
    start = tl.frame
    t0 = time.monotonic()
    key(qtbot, w, Qt.Key.Key_Space)
    assert t.playing and "Stop" in tl.play_btn.text()
    qtbot.waitUntil(lambda: tl.frame - start >= 10, timeout=QUICK)  # however late the clock ticks
    key(qtbot, w, Qt.Key.Key_Space)
    elapsed = time.monotonic() - t0
    moved = tl.frame - start
    assert not t.playing and "Play" in tl.play_btn.text()
    assert 10 <= moved <= elapsed * FPS + 2, (moved, elapsed)


def test_playback_ends_on_the_last_frame_and_loops_the_range(timeline_window, qtbot):
    w = timeline_window
    t, tl = w.transport, w.timeline
    tl.set_frame(tl.frames - 8)
    tl.play_btn.click()
    assert t.playing
    qtbot.waitUntil(lambda: not t.playing, timeout=5000)
    assert tl.frame == tl.frames - 1  # the last frame stays, not black, not frame 0
    assert tl.play_btn.text().endswith("Play")

    tl.set_in(20)
    tl.set_out(29)
    tl.loop_btn.click()  # Loop
    assert t.loop
    seen: list[int] = []
    tl.playheadMoved.connect(lambda _s: seen.append(tl.frame))
    key(qtbot, w, Qt.Key.Key_Space)
    qtbot.waitUntil(lambda: bool(seen), timeout=QUICK)
    assert seen[0] == 20  # outside the range: starts at its in point (the clock may have moved on since)
    # it plays on past the range's end by starting again at its in point (a frame going back)
    qtbot.waitUntil(lambda: any(b < a for a, b in zip(seen, seen[1:])), timeout=QUICK)
    assert t.playing
    assert set(seen) <= set(range(20, 30)), seen
    key(qtbot, w, Qt.Key.Key_Space)


def test_typing_a_timecode_jumps_there(timeline_window, qtbot):
    w = timeline_window
    tl = w.timeline
    edit = tl.timecode_edit
    QTest.mouseClick(edit, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(edit.hasFocus, timeout=2000)
    edit.selectAll()
    qtbot.keyClicks(edit, "3:05")  # 3 s 5 frames (Premiere's partial entry)
    qtbot.keyClick(edit, Qt.Key.Key_Return)
    assert tl.frame == 80
    assert edit.text() == "00:00:03:05"
    assert not edit.hasFocus()

    edit.setFocus()
    edit.selectAll()
    qtbot.keyClicks(edit, "#100")
    qtbot.keyClick(edit, Qt.Key.Key_Enter)
    assert tl.frame == 100

    edit.setFocus()
    edit.selectAll()
    qtbot.keyClicks(edit, "-1:00")  # one second back
    qtbot.keyClick(edit, Qt.Key.Key_Return)
    assert tl.frame == 75

    edit.setFocus()
    edit.selectAll()
    qtbot.keyClicks(edit, "9999")  # 99 s 99 f: past the end, clamped to the last frame
    qtbot.keyClick(edit, Qt.Key.Key_Return)
    assert tl.frame == tl.frames - 1

    edit.setFocus()
    edit.selectAll()
    qtbot.keyClicks(edit, "soon")  # refused: the playhead stays, one sentence in the status bar
    qtbot.keyClick(edit, Qt.Key.Key_Return)
    assert tl.frame == tl.frames - 1
    assert "not a timecode" in w.statusBar().currentMessage()
    qtbot.keyClick(edit, Qt.Key.Key_Escape)  # back to the current timecode
    assert edit.text() == "00:00:05:24"

    # Ctrl+G puts the focus in the field
    w.timeline.plots.setFocus()
    qtbot.keyClick(w, Qt.Key.Key_G, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(edit.hasFocus, timeout=2000)


def test_text_fields_and_spin_boxes_keep_their_keys(timeline_window, qtbot):
    w = timeline_window
    tl, t = w.timeline, w.transport
    tl.set_frame(40)
    spin = tl.min_run_box
    spin.setFocus()
    qtbot.waitUntil(spin.hasFocus, timeout=2000)
    before = spin.value()
    qtbot.keyClick(spin, Qt.Key.Key_Up)
    assert spin.value() == before + 1
    assert tl.frame == 40  # Up stepped the spin box, not the timeline
    qtbot.keyClick(spin, Qt.Key.Key_Down)
    assert spin.value() == before

    edit = w.render_panel.pattern
    edit.setFocus()
    qtbot.waitUntil(edit.hasFocus, timeout=2000)
    edit.setCursorPosition(0)
    qtbot.keyClicks(edit, "L J ")
    qtbot.keyClick(edit, Qt.Key.Key_Right)
    qtbot.keyClick(edit, Qt.Key.Key_Home)
    assert edit.text().startswith("L J ")
    assert edit.cursorPosition() == 0
    assert not t.playing and tl.frame == 40

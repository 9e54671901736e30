"""Undo and redo (Ctrl+Z, Ctrl+Shift+Z) for the threshold and min silence, in/out, render settings
and library removals; the threshold line on a log scale with Shift for fine steps. Real keys and
real mouse drags on the offscreen window."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtTest import QTest
from ui_helpers import (  # noqa: F401 (fixtures)
    QUICK,
    SLOW,
    clip,
    focus_window,
    library_window,
    prepared_avatars,
    window,
)

CTRL, SHIFT = Qt.KeyboardModifier.ControlModifier, Qt.KeyboardModifier.ShiftModifier


@pytest.fixture
def timeline_window(window, qtbot, tmp_path):
    window.resize(1400, 760)
    with qtbot.waitSignal(window.analysisReady, timeout=SLOW):
        window.load_script(str(clip(tmp_path, 6.0)))
    qtbot.waitUntil(lambda: window.timeline.wave_plot.vb.width() > 400, timeout=QUICK)
    focus_window(window, qtbot)
    window.timeline.plots.setFocus()
    return window


def undo(qtbot, w) -> None:
    qtbot.keyClick(w, Qt.Key.Key_Z, CTRL)


def redo(qtbot, w) -> None:
    qtbot.keyClick(w, Qt.Key.Key_Z, CTRL | SHIFT)


def _line_point(tl) -> QPoint:
    """The threshold line on screen (viewport pixels), at a quarter of the clip."""
    vb = tl.rms_plot.vb
    scene = vb.mapViewToScene(QPointF(tl.frames / 25 / 4, math.log10(tl.threshold)))
    return tl.plots.mapFromScene(scene)


def _move(widget, pos: QPoint, mods, held=Qt.MouseButton.LeftButton) -> None:
    """A mouse move with the left button held (QTest.mouseMove carries no buttons)."""
    from PySide6.QtGui import QMouseEvent
    from PySide6.QtWidgets import QApplication

    local = QPointF(pos)
    ev = QMouseEvent(
        QMouseEvent.Type.MouseMove,
        local,
        QPointF(widget.mapToGlobal(pos)),
        Qt.MouseButton.NoButton,
        held,
        mods,
    )
    QApplication.sendEvent(widget, ev)


def _drag(qtbot, tl, dy: int, mods=Qt.KeyboardModifier.NoModifier) -> None:
    """Hover onto the threshold line, press, and drag it ``dy`` pixels (negative: up) one pixel a
    move, paced as a mouse is (the plots take at most 100 moves a second)."""
    vp = tl.plots.viewport()
    start = _line_point(tl)
    _move(vp, start + QPoint(0, 3), mods, Qt.MouseButton.NoButton)
    qtbot.wait(15)
    _move(vp, start, mods, Qt.MouseButton.NoButton)
    qtbot.wait(15)
    QTest.mousePress(vp, Qt.MouseButton.LeftButton, mods, start)
    step = -1 if dy < 0 else 1
    for k in range(1, abs(dy) + 1):
        qtbot.wait(15)
        _move(vp, start + QPoint(0, step * k), mods)
    QTest.mouseRelease(vp, Qt.MouseButton.LeftButton, mods, start + QPoint(0, dy))


def test_a_drag_of_the_threshold_line_moves_it_on_a_log_scale_shift_for_fine_steps(timeline_window, qtbot):
    w = timeline_window
    tl = w.timeline
    assert tl.threshold == 0.008
    rms_height = tl.rms_plot.vb.height()
    decades = tl.rms_plot.vb.viewRange()[1][1] - tl.rms_plot.vb.viewRange()[1][0]
    assert decades / rms_height > 0.01, "a short RMS plot: the pointer would move the line too fast"
    _drag(qtbot, tl, -19)  # the drag the issue measured (0.008 -> 0.15 before)
    assert 0.008 * 10**0.15 < tl.threshold < 0.008 * 10**0.25, tl.threshold  # ~x1.55, not x19
    assert w.render_panel.threshold == tl.threshold == tl.threshold_box.value()  # the field is exact
    assert tl.threshold == float(f"{tl.threshold:.3g}")
    np.testing.assert_array_equal(tl.silence_mask, w.analysis.mask(tl.threshold, tl.min_run))
    coarse = tl.threshold
    _drag(qtbot, tl, -19, SHIFT)
    assert coarse * 10**0.01 < tl.threshold < coarse * 10**0.03, tl.threshold  # ten times finer
    # each drag is one undo step
    assert w.undo_stack.count() == 2
    undo(qtbot, w)
    assert tl.threshold == coarse
    undo(qtbot, w)
    assert tl.threshold == 0.008 and tl.threshold_box.value() == 0.008
    np.testing.assert_array_equal(tl.silence_mask, w.analysis.mask(0.008, tl.min_run))
    redo(qtbot, w)
    assert tl.threshold == coarse


def test_ctrl_z_undoes_typed_threshold_min_silence_and_in_out(timeline_window, qtbot):
    w = timeline_window
    tl, panel = w.timeline, w.render_panel
    box = tl.threshold_box
    QTest.mouseClick(box.lineEdit(), Qt.MouseButton.LeftButton)
    qtbot.waitUntil(box.hasFocus, timeout=QUICK)
    box.lineEdit().selectAll()
    qtbot.keyClicks(box.lineEdit(), "0.0234")
    qtbot.keyClick(box.lineEdit(), Qt.Key.Key_Return)
    assert tl.threshold == 0.0234 == panel.threshold  # exactly what was typed
    # the min silence field: three presses of Up while it has the focus are one edit
    spin = tl.min_run_box
    spin.setFocus()
    qtbot.waitUntil(spin.hasFocus, timeout=QUICK)
    for _ in range(3):
        qtbot.keyClick(spin, Qt.Key.Key_Up)
    assert tl.min_run == 6 and panel.min_silence == 6
    tl.plots.setFocus()  # the edit ends when the field loses the focus
    qtbot.waitUntil(lambda: not spin.hasFocus(), timeout=QUICK)
    tl.set_frame(25)
    qtbot.keyClick(w, Qt.Key.Key_I)
    tl.set_frame(75)
    qtbot.keyClick(w, Qt.Key.Key_O)
    assert tl.range_frames() == (25, 76)
    assert w.commands["undo"].text() == "Undo In/out 00:00:01:00–— → 00:00:01:00–00:00:03:00"

    undo(qtbot, w)
    assert (tl.in_frame, tl.out_frame) == (25, None)
    undo(qtbot, w)
    assert tl.range_frames() is None and panel.render_range() is None
    undo(qtbot, w)
    assert tl.min_run == 3 and spin.value() == 3 and panel.min_silence == 3
    undo(qtbot, w)
    assert tl.threshold == 0.008 and box.value() == 0.008 and panel.threshold == 0.008
    assert not w.undo_stack.canUndo()
    for _ in range(4):
        redo(qtbot, w)
    assert (tl.threshold, tl.min_run, tl.range_frames()) == (0.0234, 6, (25, 76))
    # Ctrl+Y redoes too (the Windows habit); nothing is left to redo here
    assert not w.undo_stack.canRedo()


def test_undo_restores_render_settings_and_a_removed_avatar(library_window, qtbot, tmp_path):
    from studio.core.avatars.library import library_dir, load
    from studio.ui.library_trash import trash_dir

    w = library_window
    w.resize(1400, 900)
    focus_window(w, qtbot)
    p, lib = w.render_panel, w.library
    crf = p.crf
    QTest.mouseClick(crf.lineEdit(), Qt.MouseButton.LeftButton)
    qtbot.waitUntil(crf.hasFocus, timeout=QUICK)
    crf.lineEdit().selectAll()
    qtbot.keyClicks(crf.lineEdit(), "27")
    qtbot.keyClick(crf.lineEdit(), Qt.Key.Key_Tab)
    assert crf.value() == 27 and "crf27" in p.output_label.text()
    p.preset.setFocus()
    before = p.preset.currentText()
    qtbot.keyClick(p.preset, Qt.Key.Key_Down)  # the default -> the next preset
    assert p.preset.currentText() != before
    w.timeline.plots.setFocus()
    undo(qtbot, w)
    assert p.preset.currentText() == before
    undo(qtbot, w)
    assert crf.value() == 20 and "crf20" in p.output_label.text()  # one step for the typed number

    # Remove asks nothing and loses nothing: the avatar goes to the trash, Ctrl+Z brings it back
    lib.avatars.setCurrentRow([lib.avatars.item(i).data(Qt.ItemDataRole.UserRole) for i in range(2)].index("bob"))
    qtbot.mouseClick(lib.remove_avatar_btn, Qt.MouseButton.LeftButton)
    names = [lib.avatars.item(i).data(Qt.ItemDataRole.UserRole) for i in range(lib.avatars.count())]
    assert names == ["anna"] and not (library_dir() / "bob").exists()
    assert "Undo" in w.statusBar().currentMessage()
    assert w.commands["undo"].text() == "Undo Remove avatar “bob”"
    undo(qtbot, w)
    names = [lib.avatars.item(i).data(Qt.ItemDataRole.UserRole) for i in range(lib.avatars.count())]
    assert names == ["anna", "bob"] and lib.avatar == "bob"
    assert load("bob").N == 1  # prepared as it was, no second preparation
    redo(qtbot, w)
    assert lib.avatars.count() == 1 and any(trash_dir().iterdir())

    # a voice-over taken off the list comes back in its place
    with qtbot.waitSignal(w.analysisReady, timeout=SLOW):
        w.load_script(str(clip(tmp_path, 1.0, "a.wav")))
    with qtbot.waitSignal(w.analysisReady, timeout=SLOW):
        w.load_script(str(clip(tmp_path, 1.0, "b.wav")))
    lib.scripts.setCurrentRow(0)
    qtbot.mouseClick(lib.remove_script_btn, Qt.MouseButton.LeftButton)
    assert [lib.scripts.item(i).text() for i in range(lib.scripts.count())] == ["b.wav"]
    undo(qtbot, w)
    assert [lib.scripts.item(i).text() for i in range(lib.scripts.count())] == ["a.wav", "b.wav"]
    assert Path(lib.script).name == "a.wav"
    # closing ends the undo history: the trash is emptied
    w.close_confirmed = True
    w.close()
    assert not trash_dir().exists() or not any(trash_dir().iterdir())


def test_removing_an_avatar_that_queued_jobs_use_asks_first(library_window, qtbot, tmp_path):
    from PySide6.QtWidgets import QMessageBox

    from studio.core.avatars.library import library_dir

    w = library_window
    lib = w.library
    with qtbot.waitSignal(w.analysisReady, timeout=SLOW):
        w.load_script(str(clip(tmp_path, 1.0, "a.wav")))
    w.render_panel.folder.setText(str(tmp_path / "out"))
    lib.avatars.setCurrentRow(0)  # anna
    assert w.add_to_queue()  # a queued job uses anna (the queue is not started)
    qtbot.mouseClick(lib.remove_avatar_btn, Qt.MouseButton.LeftButton)
    box = lib.remove_box
    qtbot.waitUntil(box.isVisible, timeout=QUICK)
    assert "1 job(s)" in box.text() and "“anna”" in box.text()
    qtbot.mouseClick(box.button(QMessageBox.StandardButton.Cancel), Qt.MouseButton.LeftButton)
    assert (library_dir() / "anna").is_dir() and lib.avatars.count() == 2 and not w.undo_stack.canUndo()
    qtbot.mouseClick(lib.remove_avatar_btn, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lib.remove_box.isVisible, timeout=QUICK)
    qtbot.mouseClick(lib.remove_box.button(QMessageBox.StandardButton.Yes), Qt.MouseButton.LeftButton)
    assert not (library_dir() / "anna").exists() and lib.avatars.count() == 1
    undo(qtbot, w)
    assert (library_dir() / "anna").is_dir()

"""Markers: M adds one at the playhead and names it in place, Shift+M / Ctrl+Shift+M jump between
them, they show on the ruler, their menu renders from one marker to the next; in/out and markers
come back for the same voice-over (by content, wherever the file is) after a restart."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtTest import QTest
from ui_helpers import (  # noqa: F401 (fixtures)
    QUICK,
    SLOW,
    clip,
    decode,
    focus_window,
    library_window,
    prepared_avatars,
    window,
)

from studio.core.constants import FPS

SHIFT, CTRL = Qt.KeyboardModifier.ShiftModifier, Qt.KeyboardModifier.ControlModifier


def _ready(w, qtbot, audio) -> None:
    w.resize(1400, 900)
    with qtbot.waitSignal(w.analysisReady, timeout=SLOW):
        w.load_script(str(audio))
    qtbot.waitUntil(lambda: w.timeline.wave_plot.vb.width() > 400, timeout=QUICK)
    focus_window(w, qtbot)
    w.timeline.plots.setFocus()


def _double_click(widget, pos: QPoint) -> None:
    """What a real double-click delivers: press, release, double-click, release."""
    from PySide6.QtCore import QPointF
    from PySide6.QtGui import QMouseEvent
    from PySide6.QtWidgets import QApplication

    left, none = Qt.MouseButton.LeftButton, Qt.MouseButton.NoButton
    for kind, held in (
        (QMouseEvent.Type.MouseButtonPress, left),
        (QMouseEvent.Type.MouseButtonRelease, none),
        (QMouseEvent.Type.MouseButtonDblClick, left),
        (QMouseEvent.Type.MouseButtonRelease, none),
    ):
        ev = QMouseEvent(
            kind, QPointF(pos), QPointF(widget.mapToGlobal(pos)), left, held, Qt.KeyboardModifier.NoModifier
        )
        QApplication.sendEvent(widget, ev)


def _marker_x(tl, frame: int) -> QPoint:
    return tl.plots.mapFromScene(tl.scene_pos_of(frame / FPS, tl.rms_plot))


def test_m_adds_a_marker_named_in_place_and_shift_m_jumps_between_them(window, qtbot, tmp_path):
    _ready(window, qtbot, clip(tmp_path, 6.0))
    tl, w = window.timeline, window
    tl.set_frame(30)
    qtbot.keyClick(w, Qt.Key.Key_M)
    edit = tl.markers_layer.marker_edit
    qtbot.waitUntil(edit.hasFocus, timeout=QUICK)
    assert edit.isVisible() and edit.selectedText() == "Marker 1"
    qtbot.keyClicks(edit, "Intro M I O")  # letters that are keys elsewhere type into the name
    qtbot.keyClick(edit, Qt.Key.Key_Return)
    assert [(m.frame, m.name) for m in tl.markers] == [(30, "Intro M I O")]
    assert not edit.isVisible() and tl.frame == 30 and tl.range_frames() is None
    tl.set_frame(100)
    qtbot.keyClick(w, Qt.Key.Key_M)
    qtbot.waitUntil(edit.hasFocus, timeout=QUICK)
    qtbot.keyClick(edit, Qt.Key.Key_Escape)  # Esc keeps the default name
    assert [(m.frame, m.name) for m in tl.markers] == [(30, "Intro M I O"), (100, "Marker 2")]
    # on the ruler: a triangle at each marker's time, and a labelled line on the waveform
    xs, _ys = tl.markers_layer.marker_ticks.getData()
    assert list(xs) == pytest.approx([30 / FPS, 100 / FPS])
    assert tl.markers_layer.lines[0][0].label.format.strip() == "Intro M I O"
    # jumps
    tl.set_frame(0)
    qtbot.keyClick(w, Qt.Key.Key_M, SHIFT)
    assert tl.frame == 30
    qtbot.keyClick(w, Qt.Key.Key_M, SHIFT)
    assert tl.frame == 100
    qtbot.keyClick(w, Qt.Key.Key_M, SHIFT)  # none after: it stays, and says so
    assert tl.frame == 100 and "no marker after" in w.statusBar().currentMessage()
    qtbot.keyClick(w, Qt.Key.Key_M, CTRL | SHIFT)
    assert tl.frame == 30
    # a double-click on a marker renames it in place; undo takes back the rename, then the marker
    _double_click(tl.plots.viewport(), _marker_x(tl, 100))
    qtbot.waitUntil(edit.hasFocus, timeout=QUICK)
    qtbot.keyClicks(edit, "Outro")
    qtbot.keyClick(edit, Qt.Key.Key_Return)
    assert tl.markers[1].name == "Outro"
    qtbot.keyClick(w, Qt.Key.Key_Z, CTRL)
    assert tl.markers[1].name == "Marker 2"
    qtbot.keyClick(w, Qt.Key.Key_Z, CTRL)
    qtbot.keyClick(w, Qt.Key.Key_Z, CTRL)
    assert [m.frame for m in tl.markers] == [30]
    # Ctrl+Alt+M deletes the marker at (or before) the playhead
    tl.set_frame(40)
    qtbot.keyClick(w, Qt.Key.Key_M, CTRL | Qt.KeyboardModifier.AltModifier)
    assert tl.markers == []


def test_the_marker_menu_sets_in_out_and_marks_come_back_for_the_same_voice_over(window, qtbot, tmp_path):
    audio = clip(tmp_path, 6.0, "take.wav")
    _ready(window, qtbot, audio)
    tl = window.timeline
    tl.markers_layer.add_marker(25, "A", edit=False)
    tl.markers_layer.add_marker(75, "B", edit=False)
    QTest.mouseClick(tl.plots.viewport(), Qt.MouseButton.RightButton, pos=_marker_x(tl, 25))
    qtbot.waitUntil(
        lambda: tl.markers_layer.marker_menu is not None and tl.markers_layer.marker_menu.isVisible(), timeout=QUICK
    )
    texts = [a.text() for a in tl.markers_layer.marker_menu.actions() if a.text()]
    assert texts[0] == "Render from “A” to the next marker"
    use = next(a for a in tl.markers_layer.marker_menu.actions() if a.text().startswith("Set in/out"))
    QTest.mouseClick(
        tl.markers_layer.marker_menu,
        Qt.MouseButton.LeftButton,
        pos=tl.markers_layer.marker_menu.actionGeometry(use).center(),
    )
    assert tl.range_frames() == (25, 75)  # from A up to (not including) B
    assert window.render_panel.range_check.isEnabled()

    # the same recording elsewhere, after a restart: its marks come back (keyed by content)
    window.close_confirmed = True
    window.close()
    moved = tmp_path / "elsewhere" / "renamed.wav"
    moved.parent.mkdir()
    shutil.copy(audio, moved)
    from studio.ui.main_window import MainWindow

    w2 = MainWindow()
    qtbot.addWidget(w2)
    w2.show()

    def named(name):  # the analysis of that file (the restart selects the last script too)
        return lambda a: Path(a.info.path).name == name

    with qtbot.waitSignal(w2.analysisReady, timeout=SLOW, check_params_cb=named("renamed.wav")):
        w2.load_script(str(moved))
    t2 = w2.timeline
    assert [(m.frame, m.name) for m in t2.markers] == [(25, "A"), (75, "B")]
    assert t2.range_frames() == (25, 75) and w2.render_panel.range_check.isEnabled()
    assert not w2.undo_stack.canUndo()  # putting them back is no edit
    # another voice-over starts clean
    with qtbot.waitSignal(w2.analysisReady, timeout=SLOW, check_params_cb=named("other.wav")):
        w2.load_script(str(clip(tmp_path, 2.0, "other.wav")))
    assert t2.markers == [] and t2.range_frames() is None
    w2.close_confirmed = True


def test_render_from_a_marker_to_the_next_renders_those_frames(library_window, qtbot, tmp_path):
    w = library_window
    _ready(w, qtbot, clip(tmp_path, 3.0, "three.wav"))
    p, tl = w.render_panel, w.timeline
    p.engine.setCurrentText("classic")
    p.encoder.setCurrentText("x264")
    p.preset.setCurrentText("ultrafast")
    p.folder.setText(str(tmp_path / "renders"))
    tl.markers_layer.add_marker(10, "in", edit=False)
    tl.markers_layer.add_marker(35, "out", edit=False)
    tl.set_frame(20)  # the marker at or before the playhead: "in"
    with qtbot.waitSignal(w.worker.finished, timeout=SLOW) as done:
        w.commands["render_marker"].trigger()
    _run, result = done.args
    frames, audio_s, _first = decode(result.output)
    assert frames == 25 and audio_s == pytest.approx(1.0, abs=0.05)
    job = w.store.get(_run.job_id)
    assert job.settings["frames"] == [10, 35]
    assert Path(result.output).exists()

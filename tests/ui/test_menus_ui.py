"""The menu bar and the Keyboard Shortcuts window: every action sits in a menu with its key, the
menus are driven with real mouse clicks, F1 and ? open the list of keys, which is made from the
same actions (a key added to an action shows up there by itself)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from ui_helpers import QUICK, SLOW, clip, focus_window, window  # noqa: F401 (fixture)

from studio.ui.actions import MENUS


def test_the_menu_bar_has_the_six_menus_and_every_keyed_action_is_in_one(window):
    bar = window.menuBar()
    titles = [a.text().replace("&", "") for a in bar.actions()]
    assert titles == list(MENUS) == ["File", "Edit", "View", "Playback", "Render", "Help"]
    in_menus = {id(a) for m in window.commands.menus.values() for a in m.actions()}
    keyed = [a for a in window.commands.actions.values() if not a.shortcut().isEmpty()]
    assert len(keyed) >= 30
    assert all(id(a) in in_menus for a in keyed)
    # the keys an editor expects, where Premiere and Resolve agree
    keys = {text: k for _m, text, k in window.commands.rows()}
    assert keys["Play / stop"] == "Space"
    assert keys["Mark in"] == "I" and keys["Mark out"] == "O"
    assert keys["Go to in"] == "Shift+I" and keys["Go to out"] == "Shift+O"
    assert keys["Undo"] == "Ctrl+Z" and keys["Redo"].startswith("Ctrl+Shift+Z")
    assert keys["Keyboard shortcuts"] == "F1, ?"


def menu_click(qtbot, window, menu_title: str, action_key: str) -> None:
    """Open ``menu_title`` in the menu bar with the mouse and click the action's entry."""
    bar = window.menuBar()
    menu = window.commands.menus[menu_title]
    top = next(a for a in bar.actions() if a.menu() is menu)
    QTest.mouseClick(bar, Qt.MouseButton.LeftButton, pos=bar.actionGeometry(top).center())
    qtbot.waitUntil(menu.isVisible, timeout=QUICK)
    action = window.commands[action_key]
    QTest.mouseClick(menu, Qt.MouseButton.LeftButton, pos=menu.actionGeometry(action).center())
    qtbot.waitUntil(lambda: not menu.isVisible(), timeout=QUICK)


def test_menu_entries_do_what_their_keys_do(window, qtbot, tmp_path):
    window.resize(1400, 900)
    with qtbot.waitSignal(window.analysisReady, timeout=SLOW):
        window.load_script(str(clip(tmp_path, 4.0)))
    tl = window.timeline
    tl.set_frame(30)
    menu_click(qtbot, window, "Playback", "set_in")
    assert tl.in_frame == 30
    tl.set_frame(60)
    menu_click(qtbot, window, "Playback", "set_out")
    assert tl.range_frames() == (30, 61)
    menu_click(qtbot, window, "Playback", "go_in")
    assert tl.frame == 30
    # the same with the keys
    focus_window(window, qtbot)
    tl.plots.setFocus()
    qtbot.keyClick(window, Qt.Key.Key_O, Qt.KeyboardModifier.ShiftModifier)
    assert tl.frame == 60
    qtbot.keyClick(window, Qt.Key.Key_X, Qt.KeyboardModifier.AltModifier)
    assert tl.range_frames() is None
    # a checkable entry follows its box: View > Face box
    menu_click(qtbot, window, "View", "face_box")
    assert window.library.show_box.isChecked() and window.commands["face_box"].isChecked()
    window.library.show_box.setChecked(False)
    assert not window.commands["face_box"].isChecked()


def test_f1_and_question_mark_open_the_shortcuts_window_made_from_the_actions(window, qtbot):
    focus_window(window, qtbot)
    window.timeline.plots.setFocus()
    qtbot.keyClick(window, Qt.Key.Key_F1)
    dlg = window.commands.shortcuts_dialog
    qtbot.waitUntil(dlg.isVisible, timeout=QUICK)
    shown = dlg.entries()
    listed = [(m, text, keys) for m, text, keys in window.commands.rows()]
    assert [e for e in shown if e[0] != "Mouse"] == listed  # generated from the actions, all of them
    assert ("Playback", "Mark in", "I") in shown
    assert any(g == "Mouse" for g, _t, _k in shown)
    # typing filters it
    qtbot.keyClicks(dlg.filter, "clear")
    texts = {t for _g, t, _k in dlg.entries()}
    assert texts == {"Clear in", "Clear out", "Clear in and out"}
    qtbot.keyClick(dlg.filter, Qt.Key.Key_Escape)  # Esc closes it
    qtbot.waitUntil(lambda: not dlg.isVisible(), timeout=QUICK)

    # a key given to an action later shows up by itself
    window.commands["show_output"].setShortcut("Ctrl+Shift+F")
    focus_window(window, qtbot)
    window.timeline.plots.setFocus()
    qtbot.keyClick(window, "?")
    qtbot.waitUntil(dlg.isVisible, timeout=QUICK)
    assert ("File", "Show output folder", "Ctrl+Shift+F") in dlg.entries()
    dlg.close()


def test_the_timecode_field_selects_all_on_focus_and_after_an_error(window, qtbot, tmp_path):
    window.resize(1400, 900)
    with qtbot.waitSignal(window.analysisReady, timeout=SLOW):
        window.load_script(str(clip(tmp_path, 4.0)))
    tl, edit = window.timeline, window.timeline.timecode_edit
    focus_window(window, qtbot)
    tl.plots.setFocus()
    qtbot.keyClick(window, Qt.Key.Key_G, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(edit.hasFocus, timeout=QUICK)
    qtbot.waitUntil(lambda: edit.selectedText() == edit.text(), timeout=QUICK)
    qtbot.keyClicks(edit, "abc")
    qtbot.keyClick(edit, Qt.Key.Key_Return)
    assert tl.timecode_bad and edit.hasFocus()
    assert edit.selectedText() == "abc"  # the next entry replaces it, never "abc99:00"
    qtbot.keyClicks(edit, "2:00")
    qtbot.keyClick(edit, Qt.Key.Key_Return)
    assert tl.frame == 50 and not tl.timecode_bad
    # Ctrl+G while the field has the focus selects its text again
    qtbot.keyClick(window, Qt.Key.Key_G, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(edit.hasFocus, timeout=QUICK)
    qtbot.keyClicks(edit, "zz")
    qtbot.keyClick(edit, Qt.Key.Key_Return)
    assert tl.timecode_bad
    qtbot.keyClick(window, Qt.Key.Key_G, Qt.KeyboardModifier.ControlModifier)
    assert edit.selectedText() == edit.text() == "zz"
    # Esc clears the error (the red border) and shows the playhead's timecode again
    qtbot.keyClick(edit, Qt.Key.Key_Escape)
    assert not tl.timecode_bad and edit.text() == "00:00:02:00" and not edit.hasFocus()

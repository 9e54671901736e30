"""The Render panel's "Save as delivery…" and "Remove delivery" in a real offscreen window: typed
settings are saved as the user's delivery (the same file ``studio delivery save`` writes), appear at
once in the Delivery box, a clash asks before replacing, a shipped name is refused in one sentence."""

from __future__ import annotations

import json

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialogButtonBox, QLineEdit, QMessageBox
from ui_helpers import QUICK, focus_window, window  # noqa: F401 (fixtures)

LEFT = Qt.MouseButton.LeftButton


def _type(qtbot, edit, text: str) -> None:
    """Select what the field holds and type ``text`` over it, as the editor would."""
    edit.setFocus()
    qtbot.keyClick(edit, Qt.Key.Key_A, Qt.KeyboardModifier.ControlModifier)
    qtbot.keyClicks(edit, text)


def choose(qtbot, combo, title: str) -> None:
    """Pick ``title`` in a combo box as the editor does: click it open, arrow down to it, Enter."""
    qtbot.mouseClick(combo, LEFT)
    view = combo.view()
    qtbot.waitUntil(lambda: view.isVisible(), timeout=QUICK)
    qtbot.keyClick(view, Qt.Key.Key_Home)
    for _ in range(combo.findText(title)):
        qtbot.keyClick(view, Qt.Key.Key_Down)
    qtbot.keyClick(view, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: not view.isVisible(), timeout=QUICK)
    assert combo.currentText() == title


def _save_as(qtbot, row, name: str) -> None:
    qtbot.mouseClick(row.save_btn, LEFT)
    qtbot.waitUntil(lambda: row.name_box is not None and row.name_box.isVisible(), timeout=QUICK)
    box = row.name_box
    _type(qtbot, box.findChild(QLineEdit), name)
    qtbot.mouseClick(box.findChild(QDialogButtonBox).button(QDialogButtonBox.StandardButton.Ok), LEFT)
    qtbot.waitUntil(lambda: not box.isVisible(), timeout=QUICK)


def _answer(qtbot, box, button) -> None:
    qtbot.waitUntil(lambda: box is not None and box.isVisible(), timeout=QUICK)
    qtbot.mouseClick(box.button(button), LEFT)


def test_save_as_delivery_asks_a_name_lists_it_at_once_and_remove_takes_it_away(window, qtbot, studio_home):
    from studio.core.delivery import all_deliveries, resolve

    panel = window.render_panel
    row = panel.delivery_buttons
    combo = panel.fields["delivery"]
    folder = studio_home / "deliveries"
    window.resize(1400, 1000)
    focus_window(window, qtbot)
    assert not row.remove_btn.isEnabled()  # no delivery of yours is chosen

    # nothing set yet: nothing to save, in one sentence
    qtbot.mouseClick(row.save_btn, LEFT)
    assert row.name_box is None and row.note.isVisible() and "at its default" in row.note.text()

    # typed settings, saved under a name of one's own
    _type(qtbot, panel.fields["canvas"].lineEdit(), "1080x1080")
    _type(qtbot, panel.fields["crf"], "18")
    assert window.session.value("canvas") == "1080x1080" and window.session.value("crf") == 18
    _save_as(qtbot, row, "Promo square")
    saved = json.loads((folder / "promo-square.json").read_text())
    assert saved["name"] == "Promo square" and saved["settings"] == {"canvas": "1080x1080", "crf": 18}
    assert resolve("promo-square").settings == {"canvas": "1080x1080", "crf": 18}
    items = [combo.itemText(i) for i in range(combo.count())]  # every delivery by its full name
    assert items == ["None", *(d.title for d in all_deliveries().values())] and "Promo square" in items
    assert "Broadcast HD" in items and "Social vertical" in items  # in the chooser at once
    assert combo.currentText() == "Promo square" and window.session.value("delivery") == "promo-square"
    assert row.remove_btn.isEnabled() and "Saved delivery “promo-square”" in row.note.text()

    # the same name again: it asks; Cancel keeps the file, Yes replaces it
    _type(qtbot, panel.fields["crf"], "21")
    _save_as(qtbot, row, "promo square")
    _answer(qtbot, row.clash_box, QMessageBox.StandardButton.Cancel)
    assert json.loads((folder / "promo-square.json").read_text())["settings"]["crf"] == 18
    _save_as(qtbot, row, "promo square")
    assert "“promo-square”" in row.clash_box.text()
    _answer(qtbot, row.clash_box, QMessageBox.StandardButton.Yes)
    assert json.loads((folder / "promo-square.json").read_text())["settings"] == {"canvas": "1080x1080", "crf": 21}

    # a shipped delivery's name: refused in one sentence, nothing written
    _save_as(qtbot, row, "Broadcast HD")
    assert row.note.text() == "'Broadcast HD' is a delivery shipped with Studio; save yours under another name."
    assert sorted(p.name for p in folder.iterdir()) == ["promo-square.json"]

    # a shipped delivery chosen: nothing of yours to remove
    choose(qtbot, combo, "Web 720p")
    assert window.session.value("delivery") == "web-720p" and not row.remove_btn.isEnabled()

    # yours chosen again: Remove asks, then the file and the entry are gone
    choose(qtbot, combo, all_deliveries()["promo-square"].title)  # "promo square": the name saved last
    assert window.session.value("delivery") == "promo-square" and row.remove_btn.isEnabled()
    qtbot.mouseClick(row.remove_btn, LEFT)
    _answer(qtbot, row.remove_box, QMessageBox.StandardButton.Cancel)
    assert (folder / "promo-square.json").is_file()
    qtbot.mouseClick(row.remove_btn, LEFT)
    _answer(qtbot, row.remove_box, QMessageBox.StandardButton.Yes)
    assert not (folder / "promo-square.json").exists() and "promo-square" not in all_deliveries()
    assert combo.findText("promo square") < 0 and window.session.value("delivery") == ""
    assert combo.currentText() == "None"
    assert not row.remove_btn.isEnabled() and row.note.text().startswith("Removed delivery “promo-square”")
    before_undo = window.undo_stack.count()

    # Edit > Undo (Ctrl+Z) brings it back as it was, chosen again; Redo removes it again
    focus_window(window, qtbot)
    window.timeline.plots.setFocus()
    qtbot.keyClick(window, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: (folder / "promo-square.json").is_file(), timeout=QUICK)
    assert json.loads((folder / "promo-square.json").read_text())["settings"] == {"canvas": "1080x1080", "crf": 21}
    assert "promo-square" in all_deliveries() and combo.findText("promo square") >= 0
    assert window.session.value("delivery") == "promo-square" and row.remove_btn.isEnabled()
    assert combo.currentText() == "promo square"  # chosen again, shown by its name
    assert "back" in row.note.text() and window.undo_stack.count() == before_undo  # one step, not two
    qtbot.keyClick(window, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)
    qtbot.waitUntil(lambda: not (folder / "promo-square.json").exists(), timeout=QUICK)
    assert window.session.value("delivery") == "" and combo.findText("promo square") < 0

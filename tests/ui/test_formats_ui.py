"""The output frame rate in the window: the Render panel's Frame rate row, the timeline's frames and
drop-frame timecode at 29.97, typed timecode and the one-second step at that rate (real key events)."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from PySide6.QtCore import Qt
from ui_helpers import clip, window  # noqa: F401 (fixture)


def test_frame_rate_row_drives_the_timeline_and_its_drop_frame_timecode(window, qtbot, tmp_path):
    panel, tl = window.render_panel, window.timeline
    combo = panel.fields["fps"]
    assert combo.isVisible() and combo.parentWidget() is panel.encoder.parentWidget()  # beside the encoder
    assert combo.currentText() == "auto" and [combo.itemText(i) for i in range(combo.count())][1:4] == [
        "23.976",
        "24",
        "25",
    ]
    with qtbot.waitSignal(window.analysisReady, timeout=30_000):
        window.load_script(str(clip(tmp_path, 3.0)))
    assert tl.rate == 25 and tl.frames == 75 and tl.timecode_edit.text() == "00:00:00:00"

    # choose 29.97 in the list: the clip is analysed again on the 30000/1001 grid
    with qtbot.waitSignal(window.analysisReady, timeout=30_000):
        choose(qtbot, combo, "29.97")
    assert combo.currentText() == "29.97"
    assert tl.rate == Fraction(30000, 1001) and tl.frames == math.ceil(3 * 30000 / 1001) == 90
    assert tl.timecode_edit.text() == "00:00:00;00"  # drop-frame: ';' before the frames

    edit = tl.timecode_edit
    edit.setFocus()
    edit.selectAll()
    qtbot.keyClicks(edit, "2;15")
    qtbot.keyClick(edit, Qt.Key.Key_Return)
    assert tl.frame == 75 and tl.position == pytest.approx(75 * 1001 / 30000)
    assert edit.text() == "00:00:02;15"
    window.raise_()
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=5000)
    tl.plots.setFocus()
    qtbot.keyClick(tl.plots, Qt.Key.Key_Left, Qt.KeyboardModifier.ShiftModifier)  # one timecode second back
    assert tl.frame == 45 and edit.text() == "00:00:01;15"
    assert window.render_panel.render_settings().fps == "29.97"


def choose(qtbot, combo, text: str) -> None:
    """Open the combo box with a click and pick ``text`` in its list with the keyboard."""
    from PySide6.QtTest import QTest

    QTest.mouseClick(combo, Qt.MouseButton.LeftButton)
    view = combo.view()
    qtbot.waitUntil(view.isVisible, timeout=5000)
    target = combo.findText(text)
    key = Qt.Key.Key_Down if target > combo.currentIndex() else Qt.Key.Key_Up
    for _ in range(abs(target - view.currentIndex().row())):
        qtbot.keyClick(view, key)
    qtbot.keyClick(view, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: not view.isVisible(), timeout=5000)
    assert combo.currentText() == text


def test_the_codec_row_and_the_output_names_extension(window, qtbot, tmp_path):
    panel = window.render_panel
    combo = panel.fields["codec"]
    assert combo.isVisible() and combo.currentText() == "h264"
    assert panel.output_path().endswith(".mp4")
    choose(qtbot, combo, "prores4444")
    assert panel.output_path().endswith(".mov") and ".mp4" not in panel.output_path()
    assert panel.output_label.text().endswith(".mov") or ".mov" in panel.output_label.text()
    choose(qtbot, combo, "vp9")
    assert panel.output_path().endswith(".webm")
    assert panel.render_settings().codec == "vp9"


def test_a_transparent_presenter_shows_over_a_checkerboard(window, qtbot, tmp_path):
    import numpy as np
    from conftest import DEMO_AVATAR
    from PIL import Image

    from studio.ui.preview import CHECKER_GREYS

    rgb = np.asarray(Image.open(DEMO_AVATAR).convert("RGB"))
    alpha = np.full(rgb.shape[:2], 255, np.uint8)
    alpha[:100, :100] = 0
    png = tmp_path / "glass.png"
    Image.fromarray(np.dstack([rgb, alpha])).save(png)
    with qtbot.waitSignal(window.avatarLoaded, timeout=120_000):
        window.load_avatar(str(png), "glass")
    qtbot.waitUntil(lambda: window.preview.current_image is not None, timeout=10_000)
    shown, kept = window.preview.image_item.image, window.preview.current_image
    assert kept.shape == (512, 512, 4) and np.array_equal(kept[..., 3], alpha)  # the RGBA itself is kept
    assert shown.shape == (512, 512, 3)
    assert {int(shown[4, 4, 0]), int(shown[4, 20, 0])} == set(CHECKER_GREYS)  # the squares, not the pixels
    assert (shown[4, 4] == shown[4, 4, 0]).all() and np.array_equal(shown[300:310, 300:310], rgb[300:310, 300:310])

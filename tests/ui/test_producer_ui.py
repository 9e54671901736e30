"""The editor as a producer uses it (issue 52), in a real offscreen window driven by real key and mouse
events: the script box grows with its text and keeps showing it after Speak, the voice-over is named from
the script's first words (or as typed), the first layout gives the picture its room, plot axes never
overprint."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import Qt
from ui_helpers import QUICK, SLOW, clip, focus_window, window  # noqa: F401 (fixtures)

LEFT = Qt.MouseButton.LeftButton
SCRIPT = (
    "Good evening. Here is the news from the studio. The weather stays fine all week. That was the news; good night."
)


def _drawn(edit) -> int:
    """Bright pixels in a text box's viewport: its text as drawn on screen (0: nothing is drawn)."""
    img = edit.viewport().grab().toImage()
    bits = img.convertToFormat(img.Format.Format_Grayscale8)
    w, h, stride = bits.width(), bits.height(), bits.bytesPerLine()
    arr = np.frombuffer(bits.constBits(), np.uint8, count=stride * h).reshape(h, stride)[:, :w]
    return int((arr > 150).sum())


def test_the_script_box_grows_keeps_its_text_in_sight_and_names_the_voiceover(window, qtbot, studio_home):
    from studio.ui.speech import available

    if not available():
        pytest.skip("no voice here (Piper or espeak-ng)")
    window.resize(1600, 900)
    focus_window(window, qtbot)
    lib = window.library
    box = lib.text
    line = box.fontMetrics().lineSpacing()
    box.setFocus()
    qtbot.keyClicks(box, SCRIPT)
    lines = box.lines()
    assert lines >= 3  # a four-sentence script wraps over several lines at the Library's width
    assert box.height() >= box.height_for(min(lines, box.MAX_LINES)) >= box.height_for(1) + 2 * line  # all in sight
    assert box.verticalScrollBar().maximum() == 0
    assert lib.speech.name.text() == "good-evening-here-is-the"  # the first words name the voice-over
    typed = _drawn(box)
    assert typed > 300

    with qtbot.waitSignal(window.analysisReady, timeout=SLOW):
        qtbot.mouseClick(lib.speak_btn, LEFT)
    assert lib.script == str(studio_home / "scripts" / "good-evening-here-is-the.wav")
    assert window.render_panel.output_path().endswith("good-evening-here-is-the_auto_crf20.mp4")
    from studio.core.media import speech

    assert [s.text for s in speech.sentences_for(lib.script)][0] == "Good evening."  # captions keep the times
    # after speaking, the text is still there and still drawn, and so is what is typed next
    assert box.toPlainText() == SCRIPT and _drawn(box) >= typed * 0.9
    box.setFocus()
    qtbot.keyClick(box, Qt.Key.Key_End, Qt.KeyboardModifier.ControlModifier)
    qtbot.keyClicks(box, " Bye.")
    assert box.toPlainText().endswith("good night. Bye.") and _drawn(box) > typed

    # the name is the producer's once typed: the next voice-over takes it
    name = lib.speech.name
    name.setFocus()
    qtbot.keyClick(name, Qt.Key.Key_A, Qt.KeyboardModifier.ControlModifier)
    qtbot.keyClicks(name, "Evening news take 2")
    box.setFocus()
    qtbot.keyClicks(box, " Again.")
    assert name.text() == "Evening news take 2"  # not overwritten by the text's words
    with qtbot.waitSignal(window.analysisReady, timeout=SLOW):
        qtbot.mouseClick(lib.speak_btn, LEFT)
    assert lib.script == str(studio_home / "scripts" / "Evening-news-take-2.wav")
    assert (studio_home / "scripts" / "Evening-news-take-2.speech.json").is_file()
    # another script under the first name: a number, the first recording untouched
    first = (studio_home / "scripts" / "good-evening-here-is-the.wav").read_bytes()
    lib.speech.show_text("")
    box.setFocus()
    qtbot.keyClicks(box, "Good evening here is the weather.")
    assert name.text() == "good-evening-here-is-the"
    with qtbot.waitSignal(window.analysisReady, timeout=SLOW):
        qtbot.mouseClick(lib.speak_btn, LEFT)
    assert lib.script == str(studio_home / "scripts" / "good-evening-here-is-the_002.wav")
    assert (studio_home / "scripts" / "good-evening-here-is-the.wav").read_bytes() == first


def test_a_short_script_box_never_hides_its_text():
    """The Qt behaviour behind "the box looks empty": a box shorter than a line drew nothing after
    setPlainText; the script box is never that short and starts at its first line."""
    from studio.ui.app import create_app
    from studio.ui.speech import ScriptEdit

    create_app([])
    box = ScriptEdit()
    box.resize(260, 10)
    box.show()
    assert box.height() == box.height_for(ScriptEdit.MIN_LINES)  # a fixed height of four lines at least
    box.setPlainText(SCRIPT)
    assert box.verticalScrollBar().value() == 0 and box.firstVisibleBlock().blockNumber() == 0
    assert _drawn(box) > 100
    box.close()


def _labels(axis) -> list:
    """The tick labels pyqtgraph draws on ``axis`` now: (rect, flags, text) each."""
    from PySide6.QtGui import QImage, QPainter

    img = QImage(64, 64, QImage.Format.Format_ARGB32)
    p = QPainter(img)
    try:
        specs = axis.generateDrawSpecs(p)
    finally:
        p.end()
    return list(specs[2]) if specs else []


@pytest.mark.parametrize("size", [(1600, 900 - 58), (1280, 720 - 58)], ids=["1600x900", "1280x720"])
def test_the_first_layout_gives_the_picture_room_and_the_axes_never_overprint(qtbot, tmp_path, size):
    from PySide6.QtGui import QFontMetrics

    from studio.ui.app import create_app
    from studio.ui.main_window import MainWindow

    create_app([])
    w = MainWindow()  # a first start (a fresh data folder) at this size
    qtbot.addWidget(w)
    w.resize(*size)
    w.show()
    qtbot.waitExposed(w)
    with qtbot.waitSignal(w.analysisReady, timeout=SLOW):
        w.load_script(str(clip(tmp_path, 6.0)))
    split = w.splitter
    qtbot.waitUntil(lambda: split.sizes()[0] >= 0.4 * sum(split.sizes()), timeout=QUICK)
    assert split.sizes()[1] >= w.timeline.minimumHeight()

    tl = w.timeline
    total = sum(split.sizes())
    for timeline_px in (w.timeline.minimumHeight(), 240, 320, total - 130):  # the split dragged about
        split.setSizes([total - timeline_px, timeline_px])
        qtbot.wait(50)
        for plot in (tl.wave_plot, tl.rms_plot):
            axis = plot.getAxis("left")
            rects = sorted((r.top(), r.bottom(), text) for r, _flags, text in _labels(axis))
            for (_t0, b0, a), (t1, _b1, b) in zip(rects, rects[1:]):
                assert b0 <= t1 + 1, (timeline_px, a, b)  # one label above the other, never over it
            assert all(0 <= t - 2 and b <= axis.height() + 2 for t, b, _ in rects), (timeline_px, rects)
            title = QFontMetrics(axis.label.font()).horizontalAdvance(axis.labelText)
            assert axis.label.isVisible() == (axis.height() >= title + 8)
    w.close_confirmed = True

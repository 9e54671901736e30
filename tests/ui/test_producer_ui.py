"""The editor as a producer uses it (issue 52), in a real offscreen window driven by real key and mouse
events: the script box grows with its text and keeps showing it after Speak, the voice-over is named from
the script's first words (or as typed), the first layout gives the picture its room, plot axes never
overprint."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import Qt
from ui_helpers import QUICK, SLOW, clip, focus_window, library_window, prepared_avatars, window  # noqa: F401 (fixtures)

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
    # one script box: the Library's is the captions' text (the Render panel has no second one)
    assert window.session.value("script") == SCRIPT and box.objectName() == "setting_script"
    from PySide6.QtWidgets import QWidget

    assert window.findChildren(QWidget, "setting_script") == [box]

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


@pytest.mark.parametrize("size", [(1600, 900 - 58), (1280, 720 - 58)], ids=["1600x900", "1280x720"])
def test_the_queue_says_what_each_job_makes(window, qtbot, tmp_path, size):
    from studio.core.store import jobs
    from studio.ui.queue_panel import MAKES_COL, OUTPUT_COL, cut_words, elide_path

    window.resize(*size)
    out = tmp_path / "client-deliveries" / "week-49" / "astronaut_evening-news-take-2_classic_crf21.mp4"
    window.store.add(
        "astronaut",
        "/x/a.wav",
        {"engine": "classic", "delivery": "web-720p", "captions": "srt", "otio": True, "fps": "30"},
        str(out),
        state=jobs.DRAFT,
    )
    window.store.add("astronaut", "/x/b.wav", {"engine": "classic", "codec": "prores"}, str(out), state=jobs.DRAFT)
    panel = window.queue_panel
    panel.refresh()
    t = panel.table
    qtbot.waitUntil(lambda: t.rowCount() == 2, timeout=QUICK)
    made = t.item(0, MAKES_COL)
    assert made.text() == "web-720p · 1280x720 · 30 fps · H.264 · -16 LUFS · captions (SRT) · OTIO"
    tip = made.toolTip()
    for line in ("Delivery: web-720p", "Picture: 1280x720", "Frame rate: 30 fps", "Codec: H.264, CRF 21"):
        assert line in tip
    assert "Captions: captions (SRT)" in tip and "(OTIO): yes" in tip and "Settings: classic" in tip
    assert t.item(1, MAKES_COL).text().endswith("ProRes 422 HQ") and "Delivery: none" in t.item(1, MAKES_COL).toolTip()
    name = t.item(0, OUTPUT_COL)
    assert name.text() == out.name and name.toolTip() == str(out)
    fm = t.fontMetrics()
    # the Output header and the name's start and end show at both sizes; what it makes is cut at a "·"
    qtbot.waitUntil(lambda: t.columnWidth(OUTPUT_COL) >= panel.OUTPUT_MIN - 1, timeout=QUICK)
    shown = elide_path(name.text(), fm, t.columnWidth(OUTPUT_COL) - 12)
    assert shown.startswith("astronaut_") and shown.endswith("_crf21.mp4"), shown
    assert t.horizontalHeader().length() <= t.viewport().width() + 2
    cut = cut_words(made.text(), fm, t.columnWidth(MAKES_COL) - 12)
    assert cut.startswith("web-720p") and (cut == made.text() or cut.endswith(" …")), cut


def _choose(qtbot, combo, text: str) -> None:
    """Open the combo box with a click and pick ``text`` in its list with the keyboard."""
    qtbot.mouseClick(combo, LEFT)
    view = combo.view()
    qtbot.waitUntil(view.isVisible, timeout=QUICK)
    target = combo.findText(text)
    key = Qt.Key.Key_Down if target > view.currentIndex().row() else Qt.Key.Key_Up
    for _ in range(abs(target - view.currentIndex().row())):
        qtbot.keyClick(view, key)
    qtbot.keyClick(view, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: not view.isVisible(), timeout=QUICK)
    assert combo.currentText() == text


def shown_strings(window) -> list[tuple[str, str]]:
    """Every string the window can show now: texts, titles, placeholders, tooltips and status tips of
    every widget (hidden ones too), every menu entry, every list, table and combo-box item with its
    tooltip. (where, text) pairs; the values typed into fields (paths, names) are the user's and left out."""
    from PySide6.QtGui import QAction
    from PySide6.QtWidgets import (
        QAbstractButton,
        QComboBox,
        QDockWidget,
        QGroupBox,
        QLabel,
        QLineEdit,
        QListWidget,
        QMenu,
        QPlainTextEdit,
        QProgressBar,
        QTableWidget,
        QWidget,
    )

    out: list[tuple[str, str]] = []
    tip = Qt.ItemDataRole.ToolTipRole
    for w in [window, *window.findChildren(QWidget)]:
        where = f"{type(w).__name__}#{w.objectName()}"
        out += [(f"{where} tooltip", w.toolTip()), (f"{where} status tip", w.statusTip())]
        if isinstance(w, QLabel):
            out.append((where, w.text()))
        elif isinstance(w, QAbstractButton):
            out.append((where, w.text()))
        elif isinstance(w, (QLineEdit, QPlainTextEdit)):
            out.append((f"{where} placeholder", w.placeholderText()))
        elif isinstance(w, QComboBox):
            for i in range(w.count()):
                out += [(f"{where} item", w.itemText(i)), (f"{where} item tip", str(w.itemData(i, tip) or ""))]
        elif isinstance(w, (QGroupBox, QDockWidget)):
            out.append((where, w.title() if isinstance(w, QGroupBox) else w.windowTitle()))
        elif isinstance(w, QProgressBar):
            out.append((where, w.format()))
        elif isinstance(w, QMenu):
            out.append((where, w.title()))
        elif isinstance(w, QListWidget):
            for i in range(w.count()):
                out += [(f"{where} item", w.item(i).text()), (f"{where} item tip", w.item(i).toolTip())]
        elif isinstance(w, QTableWidget):
            for c in range(w.columnCount()):
                head = w.horizontalHeaderItem(c)
                out.append((f"{where} header", head.text() if head else ""))
                for r in range(w.rowCount()):
                    item = w.item(r, c)
                    if item is not None:
                        out += [(f"{where} cell", item.text()), (f"{where} cell tip", item.toolTip())]
    for a in window.findChildren(QAction):
        out += [(f"action {a.text()!r}", a.text()), (f"action {a.text()!r} tip", a.toolTip())]
        out.append((f"action {a.text()!r} status tip", a.statusTip()))
    return [(where, text) for where, text in out if text]


def _words_problems(window) -> list[str]:
    from studio.ui.words import problems

    return [f"{where}: {text!r}: {', '.join(p)}" for where, text in shown_strings(window) if (p := problems(text))]


def test_the_window_speaks_a_producers_words_and_its_banners_and_ticks_tell_the_truth(library_window, qtbot, tmp_path):
    w = library_window
    w.resize(1600, 900 - 58)
    focus_window(w, qtbot)
    assert _words_problems(w) == []  # a first look: every label, field, tooltip, menu entry, list item

    with qtbot.waitSignal(w.analysisReady, timeout=SLOW):
        w.load_script(str(clip(tmp_path, 2.0, "news.wav")))  # no script text: none beside it, not spoken
    panel = w.render_panel
    panel.folder.setText(str(tmp_path / "out"))
    _choose(qtbot, panel.fields["captions"], "srt")
    w.timeline.plots.setFocus()
    with qtbot.waitSignal(w.jobFinished, timeout=SLOW) as finished:
        qtbot.keyClick(w, Qt.Key.Key_R, Qt.KeyboardModifier.ControlModifier)  # Render now
    assert finished.args[1] == "failed"
    qtbot.waitUntil(w.banner.isVisible, timeout=QUICK)
    said = w.banner_text.text()
    assert said.startswith("captions need the script's text: fill in Script"), said
    # Range only, ticked and undone: the Edit menu and the status bar say "off" and "on"
    tl = w.timeline
    tl.set_frame(5)
    tl.set_in()
    tl.set_frame(30)
    tl.set_out()
    qtbot.mouseClick(panel.range_check, LEFT)
    assert w.commands["range_only"].isChecked() and w.session.value("range_only")
    assert w.undo_stack.undoText() == "Range only off → on"
    problems = _words_problems(w)  # the banner, the failed job in the Queue, the undo entry, the tooltips
    assert problems == [], "\n".join(problems)

    # the banner's cause goes (Captions back to off): the banner goes with it
    _choose(qtbot, panel.fields["captions"], "off")
    qtbot.waitUntil(lambda: not w.banner.isVisible(), timeout=QUICK)
    # a banner about something else stays when a setting changes
    w.show_error("2 render(s) were interrupted when Studio last closed; select them in the Queue and press Retry")
    _choose(qtbot, panel.fields["captions"], "vtt")
    assert w.banner.isVisible()
    # the menu's Start/Pause entry has no tick: its words say what it does next (Render now started it)
    start = w.commands["start_queue"]
    assert not start.isCheckable() and w.queue.state == "running" and start.text() == "Pause queue"
    focus_window(w, qtbot)
    w.timeline.plots.setFocus()
    qtbot.keyClick(w.timeline.plots, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    assert w.queue.state == "paused" and start.text() == "Start queue" and not start.isChecked()


def test_show_output_folder_and_the_guide_where_the_opener_has_no_program(window, qtbot, tmp_path, monkeypatch):
    """xdg-open exists (Qt would report success) but no program is set for folders or documents: the
    window says where the folder is and shows the guide itself, instead of nothing happening."""
    import os
    import stat

    from PySide6.QtWidgets import QApplication, QTextBrowser

    from studio.ui.window_actions import can_open

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    opened = tmp_path / "opened.txt"
    scripts = {"xdg-open": f'echo "$1" >> {opened}\nexit 3\n', "xdg-mime": 'echo ""\n'}
    for name, body in scripts.items():
        path = bin_dir / name
        path.write_text(f"#!/bin/sh\n{body}")
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert not can_open(tmp_path)
    window.resize(1600, 900)
    focus_window(window, qtbot)
    window.commands["show_output"].trigger()
    folder = str(Path(window.session.output_path()).parent)
    assert window.banner.isVisible() and folder in window.banner_text.text()
    assert QApplication.clipboard().text() == folder
    window.commands["editor_guide"].trigger()
    qtbot.waitUntil(
        lambda: window.window_commands.guide_box is not None and window.window_commands.guide_box.isVisible(),
        timeout=QUICK,
    )
    assert "Keys" in window.window_commands.guide_box.findChild(QTextBrowser).toPlainText()
    assert not opened.exists()  # the launcher was never asked: it would have failed silently
    # a desktop with a file manager: the folder is the launcher's to open
    (bin_dir / "xdg-mime").write_text('#!/bin/sh\necho "org.gnome.Nautilus.desktop"\n')
    assert can_open(tmp_path)


@pytest.mark.parametrize("size", [(1600, 900 - 58), (1280, 720 - 58)], ids=["1600x900", "1280x720"])
def test_every_visible_label_and_field_shows_its_whole_text(qtbot, tmp_path, size):
    """The text-fits walk (``text_fits.clipped``): Qt's font metrics against each widget's room, on a first
    start at this size, with the demo loaded, a delivery's long values set and a job in the Queue."""
    from conftest import DEMO_AVATAR
    from text_fits import clipped

    from studio.core.store import jobs
    from studio.ui.app import create_app
    from studio.ui.main_window import MainWindow

    create_app([])
    w = MainWindow()
    qtbot.addWidget(w)
    w.resize(*size)
    w.show()
    qtbot.waitExposed(w)
    with qtbot.waitSignal(w.avatarLoaded, timeout=SLOW):
        w.load_avatar(str(DEMO_AVATAR), "astronaut")
    with qtbot.waitSignal(w.analysisReady, timeout=SLOW):
        w.load_script(str(clip(tmp_path, 3.0, "evening-news-take-2.wav")))
    qtbot.wait(100)
    assert clipped(w) == []
    s = w.session
    for key, value in (
        ("delivery", "social-vertical"),
        ("canvas", "1080x1920"),
        ("background", "#1a2b3c"),
        ("start_tc", "10:00:00:00"),
        ("loudness", -23.0),
        ("folder", str(tmp_path / "client-deliveries" / "2026" / "week-49" / "spring-campaign")),
    ):
        s.set(key, value)
    w.store.add("astronaut", "/x/a.wav", {"delivery": "web-720p", "captions": "srt"}, "/x/out.mp4", state=jobs.DRAFT)
    w.queue_panel.refresh()
    qtbot.wait(100)
    problems = clipped(w)
    assert problems == [], "\n".join(problems)
    w.close_confirmed = True


def test_a_saved_layout_adapts_to_another_screen(tmp_path):
    """A layout left on a 1600x900 screen, opened on a 1280x720 one (it would not fit: a first window's
    layout for that screen), and back (a 1280x720 layout on 1600x900: scaled with the screen). Each start
    is a process of its own, on Qt's offscreen platform with a screen of that size."""
    import json
    import os
    import subprocess
    import sys

    home = tmp_path / "home"
    audio = str(clip(tmp_path, 3.0))
    env = {**os.environ, "STUDIO_HOME": str(home)}
    run = Path(__file__).with_name("layout_run.py")

    def start(screen: str, *extra: str) -> dict:
        done = subprocess.run(
            [sys.executable, str(run), screen, audio, *extra], env=env, capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    big = start("1600x900", "--resize", "1560x860")  # a first start; the user makes it nearly full
    assert big["restored"] == "first" and big["preview_share"] >= 0.4 and big["clipped"] == []
    small = start("1280x720")  # that layout cannot fit: started as a first window on this screen
    assert small["restored"] == "reset" and small["window"][0] <= 1280 and small["window"][1] <= 720
    assert small["preview_share"] >= 0.4 and small["clipped"] == [] and min(small["plots"]) >= 40
    again = start("1280x720")  # the same screen: as it was left
    assert again["restored"] == "same" and again["window"] == small["window"]
    back = start("1600x900")  # a 1280x720 layout on the bigger screen: scaled with it
    assert back["restored"] == "scaled" and back["clipped"] == []
    assert back["window"][0] >= round(small["window"][0] * 1600 / 1280) - 16 and back["window"][1] > small["window"][1]
    assert back["window"][0] <= 1600 and back["window"][1] <= 900 and back["preview_share"] >= 0.4


def test_a_queued_jobs_live_caption_counts_at_its_own_rate(library_window, qtbot, tmp_path):
    """A job queued at 30 fps renders while the window is at 25: its live caption counts its frames at
    30 (frame 30 is 1.00 s), never at the window's rate."""
    import re

    w = library_window
    with qtbot.waitSignal(w.analysisReady, timeout=SLOW):
        w.load_script(str(clip(tmp_path, 2.0, "two.wav")))
    p = w.render_panel
    p.engine.setCurrentText("classic")
    p.encoder.setCurrentText("x264")
    p.folder.setText(str(tmp_path / "renders"))
    with qtbot.waitSignal(w.analysisReady, timeout=SLOW):
        _choose(qtbot, p.fields["fps"], "30")
    qtbot.mouseClick(p.queue_btn, LEFT)  # queued at 30 fps, not started
    with qtbot.waitSignal(w.analysisReady, timeout=SLOW):
        _choose(qtbot, p.fields["fps"], "25")
    assert w.session.grid_rate == 25
    captions: list[str] = []
    w.queue.previewFrame.connect(lambda _img, caption, _i: captions.append(caption))
    with qtbot.waitSignal(w.jobFinished, timeout=SLOW):
        qtbot.mouseClick(w.queue_panel.start_btn, LEFT)
    assert captions
    for caption in captions:
        frame, seconds = re.search(r"frame (\d+) · ([\d.]+) s", caption).groups()
        assert abs(int(frame) / 30 - float(seconds)) < 0.006, caption
    # a frame past 0 tells 30 from 25 by the check above (how far the previews get depends on the machine)
    assert max(int(re.search(r"frame (\d+)", c).group(1)) for c in captions) > 0

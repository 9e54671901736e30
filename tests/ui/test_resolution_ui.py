"""What you see is what renders, in the window (issue 44), driven with real clicks and keys: an in/out
range keeps its time when the avatar (and with it the rate) changes; choosing a delivery fills the
settings (its full name shown), a setting changed afterwards wins, and undo takes each step back; the
preview's caption names the transport's frame; Broadcast HD is queued as a .mov that renders."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from conftest import DEMO_AVATAR
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from test_formats_ui import choose
from ui_helpers import QUICK, SLOW, clip, focus_window, window  # noqa: F401 (fixture)

CTRL = Qt.KeyboardModifier.ControlModifier


def _video_30fps(path: Path, frames: int = 12) -> Path:
    """A 30 fps video of the demo face (a video avatar whose own rate is 30)."""
    import av
    from PIL import Image

    face = np.asarray(Image.open(DEMO_AVATAR).convert("RGB").resize((256, 256)))
    with av.open(str(path), "w") as c:
        s = c.add_stream("libx264", rate=30)
        s.width, s.height, s.pix_fmt = 256, 256, "yuv420p"
        for _ in range(frames):
            for packet in s.encode(av.VideoFrame.from_ndarray(face, format="rgb24")):
                c.mux(packet)
        for packet in s.encode():
            c.mux(packet)
    return path


def _type_timecode(qtbot, window, text: str) -> None:
    focus_window(window, qtbot)  # an import's progress dialog may have had it
    edit = window.timeline.timecode_edit
    QTest.mouseClick(edit, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(edit.hasFocus, timeout=QUICK)
    edit.selectAll()
    qtbot.keyClicks(edit, text)
    qtbot.keyClick(edit, Qt.Key.Key_Return)


def _mark(qtbot, window, key, timecode: str) -> None:
    _type_timecode(qtbot, window, timecode)
    window.timeline.plots.setFocus()
    qtbot.keyClick(window, key)


def _widgets(panel) -> dict:
    f = panel.fields
    return {k: f[k].currentText() for k in ("delivery", "canvas", "fit", "fps", "codec", "loudness")}


def test_a_range_keeps_its_time_across_an_avatar_switch_a_delivery_and_undo(window, qtbot, tmp_path):
    window.resize(1600, 900)
    panel, s = window.render_panel, window.session
    with qtbot.waitSignal(window.avatarLoaded, timeout=SLOW):
        window.load_avatar(str(_video_30fps(tmp_path / "talk30.mp4")), "talk30")
    with qtbot.waitSignal(window.analysisReady, timeout=SLOW):
        window.load_script(str(clip(tmp_path, 6.0)))
    assert s.grid_rate == 30  # auto: the video avatar's own rate
    focus_window(window, qtbot)
    _mark(qtbot, window, Qt.Key.Key_I, "2:00")
    _mark(qtbot, window, Qt.Key.Key_O, "3:29")  # the last frame before 4 s at 30 fps
    assert s.marks.range_frames() == (60, 120) and panel.range_label.text().endswith("· 2.00 s")
    qtbot.mouseClick(panel.range_check, Qt.MouseButton.LeftButton)  # render the range only
    assert s.value("range_only") and s.request().frames == (60, 120)

    # the photo: 25 fps; the same two seconds, from 2.00 s (was 2.44 s from 2.40 s)
    with qtbot.waitSignal(window.analysisReady, timeout=SLOW):
        window.load_avatar(str(DEMO_AVATAR), "astro")
    qtbot.waitUntil(lambda: s.avatar == "astro" and s.grid_rate == 25, timeout=SLOW)
    assert s.marks.range_frames() == (50, 100)
    assert panel.range_label.text() == "00:00:02:00–00:00:03:24 · 2.00 s"
    assert s.request().frames == (50, 100) and s.request().rate == "25"
    # the preview's caption names the frame the transport shows
    _type_timecode(qtbot, window, "3:00")
    qtbot.waitUntil(lambda: window.preview.caption.text().startswith("00:00:03:00 · frame 75 ·"), timeout=SLOW)
    assert window.timeline.timecode_edit.text() == "00:00:03:00" and window.timeline.frame == 75

    # a delivery chosen by its full name fills the settings; the timeline follows its 30 fps
    before = _widgets(panel)
    assert before == {
        "delivery": "None",
        "canvas": "avatar",
        "fit": "fit",
        "fps": "auto",
        "codec": "h264",
        "loudness": "off",
    }
    with qtbot.waitSignal(window.analysisReady, timeout=SLOW):
        choose(qtbot, panel.fields["delivery"], "Social vertical")
    chosen = {
        "delivery": "Social vertical",
        "canvas": "1080x1920",
        "fit": "face",
        "fps": "30",
        "codec": "h264",
        "loudness": "-14",
    }
    assert _widgets(panel) == chosen
    assert s.grid_rate == 30 and s.marks.range_frames() == (60, 120) and panel.range_label.text().endswith("· 2.00 s")
    assert s.request().frames == (60, 120) and s.request().rate == "30"  # 2.00 s written (was 1.667 s)
    # the photo cannot fill 1080x1920 within Max upscale: said before any render, and Render refuses
    note = panel.resolution_note
    assert note.isVisible() and note.text().startswith("The social-vertical delivery needs the 512x512 avatar")
    assert window.render_now() is None
    banner = window.banner_text.text()  # in the window's words: its fields, no flags
    assert "(Max upscale 3.8)" in banner and "(Placement fit)" in banner and "--" not in banner
    assert window.store.list() == []

    # Placement set back to fit after the delivery: it wins (a value at its default, set on purpose)
    choose(qtbot, panel.fields["fit"], "fit")
    req = s.request()
    assert (req.settings.fit, req.settings.canvas, req.settings.delivery) == ("fit", "1080x1920", "social-vertical")
    assert "fit" in req.explicit and req.resolution.problem is None
    assert note.text().startswith("The social-vertical delivery shows the 512x512 avatar at 2x")

    # undo: the placement, then the delivery (all it filled in one step); redo chooses it again
    focus_window(window, qtbot)
    qtbot.keyClick(window, Qt.Key.Key_Z, CTRL)
    assert _widgets(panel) == chosen
    with qtbot.waitSignal(window.analysisReady, timeout=SLOW):
        qtbot.keyClick(window, Qt.Key.Key_Z, CTRL)
    assert _widgets(panel) == before and s.value("delivery") == ""
    assert s.grid_rate == 25 and s.marks.range_frames() == (50, 100)
    assert window.statusBar().currentMessage() == "Undone: Delivery none → Social vertical"  # the step undone
    with qtbot.waitSignal(window.analysisReady, timeout=SLOW):
        qtbot.keyClick(window, Qt.Key.Key_Z, CTRL | Qt.KeyboardModifier.ShiftModifier)
    assert _widgets(panel) == chosen and s.marks.range_frames() == (60, 120)


def test_broadcast_hd_is_queued_as_a_mov_and_renders_at_its_size(window, qtbot, tmp_path):
    import av

    window.resize(1600, 900)
    panel = window.render_panel
    with qtbot.waitSignal(window.avatarLoaded, timeout=SLOW):
        window.load_avatar(str(DEMO_AVATAR), "astro")
    with qtbot.waitSignal(window.analysisReady, timeout=SLOW):
        window.load_script(str(clip(tmp_path, 1.0)))
    choose(qtbot, panel.fields["delivery"], "Broadcast HD")
    assert panel.fields["delivery"].currentText() == "Broadcast HD"  # the full name, not "broa…t-hd"
    assert panel.fields["codec"].currentText() == "prores" and panel.output_label.toolTip().endswith(".mov")
    # fit at most 2x: the 512x512 photo is shown smaller than 1080 high, and the panel says so first
    assert panel.resolution_note.text().startswith("The broadcast-hd delivery shows the 512x512 avatar at 2x")
    choose(qtbot, panel.fields["engine"], "classic")
    with qtbot.waitSignal(window.queue.jobFinished, timeout=SLOW) as done:
        job_id = window.render_now()
    assert done.args == [job_id, "done"]
    out = window.store.get(job_id).output
    assert out.endswith(".mov")
    with av.open(out) as c:
        v = c.streams.video[0]
        assert (v.codec_context.name, v.codec_context.width, v.codec_context.height) == ("prores", 1920, 1080)
        assert v.average_rate == 25
    # the note the render gives reaches the status bar
    qtbot.waitUntil(lambda: "note: " in window.statusBar().currentMessage(), timeout=QUICK)
    assert "enlarged 2.1x to fit" in window.statusBar().currentMessage()

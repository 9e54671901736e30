"""The window for an editor: bad input leaves no trace, drag and drop, steady layout and inputs,
face box / blend mask overlays, faceless frames on the timeline, the audio device note.
Real events (wheel, drag enter + drop with file URLs), real files, the real engine."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import DEMO_AVATAR
from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QWheelEvent
from PySide6.QtWidgets import QApplication, QDockWidget
from ui_helpers import SLOW, clip, load_demo, window  # noqa: F401 (fixture)


def _drop(widget, paths) -> bool:
    """Drag ``paths`` over ``widget`` and drop them there, as a file manager would."""
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    pos = QPointF(widget.width() / 2, widget.height() / 2)
    actions = Qt.DropAction.CopyAction
    enter = QDragEnterEvent(pos.toPoint(), actions, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(widget, enter)
    if not enter.isAccepted():
        return False
    drop = QDropEvent(pos, actions, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(widget, drop)
    return drop.isAccepted()


def _wheel(widget, steps: int = 1) -> None:
    pos = QPointF(widget.width() / 2, widget.height() / 2)
    ev = QWheelEvent(
        pos,
        widget.mapToGlobal(pos),
        QPoint(0, 0),
        QPoint(0, 120 * steps),
        Qt.MouseButton.NoButton,
        Qt.KeyboardModifier.NoModifier,
        Qt.ScrollPhase.NoScrollPhase,
        False,
    )
    QApplication.sendEvent(widget, ev)


def test_an_unreadable_audio_file_leaves_no_trace(window, qtbot, tmp_path):
    good = clip(tmp_path, 3.0, "good.wav")
    with qtbot.waitSignal(window.analysisReady, timeout=SLOW):
        window.load_script(str(good))
    lib, tl = window.library, window.timeline
    scripts = [lib.scripts.item(i).data(Qt.ItemDataRole.UserRole) for i in range(lib.scripts.count())]
    analysis, output = window.analysis, window.render_panel.output_path()
    tl.set_frame(30)

    bad = tmp_path / "broken.wav"
    bad.write_bytes(b"RIFF\x00\x00\x00\x00WAVEjunk" * 40)
    with qtbot.waitSignal(lib.error, timeout=SLOW) as b:
        window.load_script(str(bad))
    assert "broken.wav" in b.args[0] and "\n" not in b.args[0]
    qtbot.wait(200)
    assert [lib.scripts.item(i).data(Qt.ItemDataRole.UserRole) for i in range(lib.scripts.count())] == scripts
    assert lib.script == str(good.resolve())  # the selection stayed
    assert window.analysis is analysis and tl.analysis is analysis  # so did the waveform
    assert tl.frame == 30
    assert window.render_panel.output_path() == output  # and the output name
    assert "broken.wav" in window.banner_text.text()

    # unrelated actions do not repeat it
    errors = []
    window.library.error.connect(errors.append)
    window.queue.error.connect(errors.append)
    window.banner.hide()
    tl.set_frame(40)
    window.library.show_box.setChecked(True)
    qtbot.wait(300)
    assert errors == [] and not window.banner.isVisible()
    from studio.ui import settings as cfg

    assert str(bad) not in " ".join(cfg.value(cfg.settings(), "library/scripts", list))


def test_dropping_files_imports_avatars_and_scripts(window, qtbot, tmp_path):
    lib = window.library
    a, b = clip(tmp_path, 2.0, "first.wav"), clip(tmp_path, 3.0, "second.wav")
    note = tmp_path / "notes.txt"
    note.write_text("not media")
    errors = []
    lib.error.connect(errors.append)
    with qtbot.waitSignal(lib.avatarPrepared, timeout=SLOW):
        assert _drop(lib.avatars.viewport(), [DEMO_AVATAR, a, b, note])  # several files at once, on the list
        qtbot.waitUntil(lambda: lib.scripts.count() == 2, timeout=SLOW)
    assert lib.avatar == "astronaut"
    names = {lib.scripts.item(i).text() for i in range(lib.scripts.count())}
    assert names == {"first.wav", "second.wav"}
    assert lib.script.endswith("second.wav")  # the last dropped script is selected
    assert len(errors) == 1 and "notes.txt" in errors[0]

    # the preview takes drops too
    c = clip(tmp_path, 1.0, "third.wav")
    with qtbot.waitSignal(window.analysisReady, timeout=SLOW):
        assert _drop(window.preview, [c])
    assert lib.scripts.count() == 3 and lib.script.endswith("third.wav")
    # a drag with no files is refused
    mime = QMimeData()
    mime.setText("hello")
    enter = QDragEnterEvent(
        QPoint(5, 5), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier
    )
    QApplication.sendEvent(window.preview, enter)
    assert not enter.isAccepted()


def test_wheel_over_an_unfocused_spin_box_does_not_change_it(window, qtbot):
    spin = window.library.bbox_shift
    combo = window.render_panel.preset
    window.timeline.plots.setFocus()
    qtbot.wait(20)
    v, p = spin.value(), combo.currentIndex()
    _wheel(spin, 1)
    _wheel(spin.lineEdit(), 1)
    _wheel(combo, -1)
    assert spin.value() == v and combo.currentIndex() == p
    spin.setFocus()
    qtbot.waitUntil(spin.hasFocus, timeout=2000)
    _wheel(spin, 1)
    assert spin.value() == v + 1  # focused: the wheel is the user's intent
    assert spin.focusPolicy() == Qt.FocusPolicy.StrongFocus  # and a wheel does not take the focus


def test_threshold_field_and_line_are_bound_both_ways(window, qtbot, tmp_path):
    with qtbot.waitSignal(window.analysisReady, timeout=SLOW):
        window.load_script(str(clip(tmp_path, 6.0)))
    tl = window.timeline
    with qtbot.waitSignal(tl.maskChanged, timeout=2000):
        tl.threshold_box.setValue(0.03)
    assert 10 ** tl.threshold_line.value() == pytest.approx(0.03, rel=1e-6)
    assert window.render_panel.threshold == pytest.approx(0.03, rel=1e-6)
    np.testing.assert_array_equal(tl.silence_mask, window.analysis.mask(0.03, tl.min_run))
    tl.set_threshold(0.012)  # the line (as when dragged)
    assert tl.threshold_box.value() == pytest.approx(0.012, abs=1e-4)


def test_face_box_and_blend_mask_show_separately_and_stay_on_scrub_frames(window, qtbot, tmp_path):
    load_demo(window, qtbot, audio=clip(tmp_path, 4.0))
    lib = window.library
    with qtbot.waitSignal(window.scrubShown, timeout=SLOW, check_params_cb=lambda t, i: i == 50):
        window.scrub_to(2.0)
    plain = window.preview.current_image.copy()
    with qtbot.waitSignal(window.scrubShown, timeout=SLOW):
        lib.show_box.setChecked(True)
    box_only = window.preview.current_image.copy()
    assert "face box" in window.preview.caption.text() and "blend mask" not in window.preview.caption.text()
    changed = (box_only != plain).any(axis=2)
    assert 0.001 < changed.mean() < 0.05  # a thin rectangle, no tinted area

    with qtbot.waitSignal(window.scrubShown, timeout=SLOW):
        lib.show_box.setChecked(False)
        lib.show_mask.setChecked(True)
    assert "blend mask" in window.preview.caption.text() and "face box" not in window.preview.caption.text()
    mask_only = window.preview.current_image.copy()
    assert (mask_only != plain).any(axis=2).mean() > 0.01

    # the overlay stays while its box is ticked: the next scrub frame has it too
    with qtbot.waitSignal(window.scrubShown, timeout=SLOW, check_params_cb=lambda t, i: i == 60):
        window.scrub_to(2.4)
    assert "frame 60" in window.preview.caption.text() and "blend mask" in window.preview.caption.text()
    from studio.core.render.renderer import Renderer

    raw = Renderer("astronaut", lib.script, window.render_panel.render_settings()).frame(60)
    assert (window.preview.current_image != raw).any(axis=2).mean() > 0.01
    with qtbot.waitSignal(window.scrubShown, timeout=SLOW):
        lib.show_mask.setChecked(False)
    np.testing.assert_array_equal(window.preview.current_image, raw)


def test_faceless_frames_of_a_video_avatar_are_marked_on_the_timeline(window, qtbot, tmp_path):
    import av
    from PIL import Image

    face = np.asarray(Image.open(DEMO_AVATAR).convert("RGB").resize((256, 256)))
    path = tmp_path / "turns-away.mp4"
    with av.open(str(path), "w") as c:
        s = c.add_stream("libx264", rate=25)
        s.width, s.height, s.pix_fmt = 256, 256, "yuv420p"
        for i in range(10):  # frames 6..9: no face (a grey card)
            frame = face if i < 6 else np.full_like(face, 128)
            for packet in s.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                c.mux(packet)
        for packet in s.encode():
            c.mux(packet)
    with qtbot.waitSignal(window.avatarLoaded, timeout=SLOW) as b:
        window.load_avatar(str(path))
    assets = b.args[0]
    assert not assets.face_ok.all() and assets.face_ok[:6].all()
    with qtbot.waitSignal(window.analysisReady, timeout=SLOW):
        window.load_script(str(clip(tmp_path, 2.0)))
    spans = window.timeline.faceless_spans
    expected = ~assets.face_ok[assets.cycle_index(np.arange(50))]
    marked = np.zeros(50, bool)
    for a, b in spans:
        marked[a:b] = True
    np.testing.assert_array_equal(marked, expected)
    assert spans and spans[0][0] == int(np.flatnonzero(expected)[0])
    xs, _ys = window.timeline.faceless_curve.getData()
    assert xs is not None and len(xs) == 4 * len(spans)


def test_the_layout_stays_put(window, qtbot):
    w = window
    w.resize(1400, 900)
    qtbot.wait(50)
    size, minimum = w.size(), w.minimumSizeHint()
    long = "a very long caption " * 40
    w.timeline.info.setText(long)
    w.timeline.set_audio_note(long)
    w.preview.caption.setText(long)
    w.render_panel.live.engine_label.setText(long)
    w.render_panel.output_label.setText(long)
    w.render_panel.live.stage_label.setText(long)
    w.engine_status.setText("engine: " + "x" * 300)
    qtbot.wait(100)
    assert w.size() == size
    assert w.minimumSizeHint().width() <= max(minimum.width(), 1400)

    # docks: movable, never floating; the splitter handle is easy to grab
    for dock in w.findChildren(QDockWidget):
        assert not dock.features() & QDockWidget.DockWidgetFeature.DockWidgetFloatable
        assert not dock.isFloating()
    assert w.splitter.handleWidth() >= 6


def test_the_render_panel_fits_a_1080p_screen_without_scrolling(window, qtbot):
    window.resize(1920, 1080 - 60)  # a maximised window under a 60 px panel/title bar
    qtbot.wait(100)
    area = window.render_dock.widget()
    assert area.verticalScrollBar().maximum() == 0, area.widget().minimumSizeHint()
    # Play (of a finished render) is reachable: the button is inside the visible part of the dock
    btn = window.render_panel.play_btn
    y = btn.mapTo(area.viewport(), QPoint(0, btn.height())).y()
    assert y <= area.viewport().height()
    assert window.timeline.play_btn.isVisible()


def test_no_audio_device_is_said_in_the_window_and_the_doctor(window, qtbot):
    from studio.core.doctor import audio_output

    qtbot.waitUntil(lambda: window.transport.has_audio is not None, timeout=5000)
    if audio_output() is None:
        assert "no audio device" in window.timeline.audio_note.text()
    else:
        assert window.timeline.audio_note.text() == ""
    with qtbot.waitSignal(window.doctor.checked, timeout=SLOW) as b:
        window.doctor.run()
    check = {c.name: c for c in b.args[0]}["audio output device"]
    assert check.status == ("warn" if audio_output() is None else "ok")


def test_after_a_render_the_caption_clears_and_the_player_is_the_timeline(window, qtbot, tmp_path):
    load_demo(window, qtbot, audio=clip(tmp_path, 2.0))
    p = window.render_panel
    p.encoder.setCurrentText("x264")
    p.preset.setCurrentText("ultrafast")
    p.folder.setText(str(tmp_path / "renders"))
    captions = []
    window.preview.shown.connect(lambda _i: captions.append(window.preview.caption.text()))
    with qtbot.waitSignal(window.jobFinished, timeout=SLOW):
        window.render_now()
    # no stale "rendering · frame N" once it is done: the scrub frame at the playhead comes back
    qtbot.waitUntil(lambda: "exact render preview" in window.preview.caption.text(), timeout=SLOW)
    assert any(c.startswith("rendering") for c in captions)
    assert p.live.progress_bar.format().startswith("done")

    window.play(p.last_output)
    player = window.player
    qtbot.waitUntil(lambda: player.player.duration() > 0, timeout=10_000)
    assert window.transport.media is player.player
    # the timeline's playhead follows playback, and the player stays on the last frame at the end
    qtbot.waitUntil(lambda: window.timeline.frame > 5, timeout=10_000)
    qtbot.waitUntil(lambda: not player.playing, timeout=15_000)
    assert player.player.position() >= player.player.duration() - 80
    assert player.play_btn.text() == "Play"
    assert window.timeline.frame >= 47
    assert window.timeline.play_btn.text().endswith("Play")
    # Home seeks the player through the timeline
    window.raise_()
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=5000)
    qtbot.keyClick(window, Qt.Key.Key_Home)
    qtbot.waitUntil(lambda: player.player.position() < 100, timeout=5000)
    assert window.timeline.frame == 0
    player.back_btn.click()
    assert window.transport.media is None


def test_render_in_out_range_only_renders_those_frames(window, qtbot, tmp_path):
    from ui_helpers import decode

    load_demo(window, qtbot, audio=clip(tmp_path, 3.0))
    p, tl = window.render_panel, window.timeline
    p.encoder.setCurrentText("x264")
    p.preset.setCurrentText("ultrafast")
    p.folder.setText(str(tmp_path / "renders"))
    tl.set_frame(10)
    tl.set_in()
    tl.set_frame(34)
    tl.set_out()
    p.range_check.setChecked(True)
    assert p.render_range() == (10, 35)
    with qtbot.waitSignal(window.worker.finished, timeout=SLOW) as done:
        window.render_now()
    _req, result = done.args
    frames, _audio, _first = decode(result.output)
    assert frames == 25

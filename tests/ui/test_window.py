"""The studio window, offscreen: start-up, demo import, threshold, scrubbing, settings, errors."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from ui_helpers import SLOW, clip, load_demo, window  # noqa: F401 (fixture)


def test_qt_binding_keeps_the_none_refcount():
    """PySide6 6.12.0 drops a reference to None on each void call and aborts after a few thousand."""
    from PySide6.QtCore import QObject

    o = QObject()
    before = sys.getrefcount(None)
    for _ in range(2000):
        o.setObjectName("x")
    assert abs(sys.getrefcount(None) - before) < 50


def test_first_paint_is_fast_and_loads_no_heavy_library(studio_home):
    code = textwrap.dedent("""
        import sys, time
        t0 = time.perf_counter()
        from studio.ui.app import create_app
        from studio.ui.main_window import MainWindow
        app = create_app([])
        w = MainWindow(); w.show(); app.processEvents()
        dt = time.perf_counter() - t0
        heavy = [m for m in ("torch", "mediapipe", "av", "cv2", "diffusers") if m in sys.modules]
        print(f"{dt:.3f}", ",".join(heavy))
        w.close()
    """)
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={"STUDIO_HOME": str(studio_home), "QT_QPA_PLATFORM": "offscreen", "PATH": "/usr/bin:/bin"},
    )
    assert r.returncode == 0, r.stderr
    seconds, heavy = r.stdout.split()[0], r.stdout.split()[1:] or [""]
    assert heavy == [""], f"loaded before first paint: {heavy}"
    # the speed itself (under 2 s on an idle machine) is a benchmark's figure (tests/ui/bench_ui.py
    # prints it); here only a bound no busy machine reaches unless something heavy is imported
    assert float(seconds) < 20.0


def test_demo_import_shows_avatar_waveform_and_silences(window, qtbot):
    load_demo(window, qtbot)
    assert window.library.avatars.count() == 1
    assert window.library.avatar == "astronaut"
    assert window.preview.current_image is not None
    assert window.preview.current_image.shape == (512, 512, 3)
    a = window.analysis
    assert a.frames == len(window.timeline.silence_mask) == 706  # 28.2 s at 25 fps
    np.testing.assert_array_equal(window.timeline.silence_mask, a.mask(window.render_panel.threshold, 3))
    spans = window.timeline.silent_spans
    assert len(spans) >= 3  # the demo has three clear pauses (and shorter ones)
    assert window.session.silent_spans() == spans  # the session's mask, at its threshold and min silence
    assert window.timeline.visible_regions == len(spans)
    assert "Good evening" in window.library.text.toPlainText()  # the script text beside the audio

    plain = window.preview.current_image.copy()
    window.library.show_mask.setChecked(True)  # the blend-mask overlay toggle
    assert "blend mask" in window.preview.caption.text()
    assert window.preview.current_image.shape == plain.shape
    assert (window.preview.current_image != plain).any(axis=2).mean() > 0.01
    window.library.show_mask.setChecked(False)
    np.testing.assert_array_equal(window.preview.current_image, plain)


def test_moving_the_threshold_recomputes_the_mask_live(window, qtbot, tmp_path):
    window.load_script(str(clip(tmp_path, 8.0)))
    qtbot.waitUntil(lambda: window.analysis is not None, timeout=SLOW)
    tl = window.timeline
    low = int(tl.silence_mask.sum())
    with qtbot.waitSignal(tl.maskChanged, timeout=2000) as blocker:
        tl.set_threshold(0.05)  # the same signal path as dragging the line
    high = int(blocker.args[0].sum())
    assert high > low
    np.testing.assert_array_equal(tl.silence_mask, window.analysis.mask(0.05, tl.min_run))
    assert window.render_panel.threshold == pytest.approx(0.05, rel=1e-6)
    assert window.render_panel.render_settings().threshold == pytest.approx(0.05, rel=1e-6)
    assert tl.visible_regions == len(tl.silent_spans)
    tl.set_min_run(50)
    assert int(tl.silence_mask.sum()) < high


def test_the_playhead_previews_the_exact_frame_for_its_time(window, qtbot, tmp_path):
    audio = clip(tmp_path, 6.0)
    load_demo(window, qtbot, audio=audio)
    with qtbot.waitSignal(window.scrubShown, timeout=SLOW, check_params_cb=lambda t, i: i == 80) as b:
        window.scrub_to(3.21)  # snapped to the start of frame floor(3.21 * 25) = 80
    seconds, index = b.args
    assert seconds == pytest.approx(3.2)
    assert "frame 80" in window.timeline.time_label.text()
    assert window.timeline.timecode_edit.text() == "00:00:03:05"
    assert window.preview.current_index == 80
    assert "frame 80" in window.preview.caption.text()

    from studio.core.render.renderer import Renderer

    expected = Renderer("astronaut", str(audio), window.render_panel.render_settings()).frame(80)
    np.testing.assert_array_equal(window.preview.current_image, expected)

    # a burst of requests coalesces: the newest timestamp wins and fewer frames are rendered
    before = window.worker.frames_rendered
    times = [0.5 + 0.1 * k for k in range(20)]
    with qtbot.waitSignal(window.scrubShown, timeout=SLOW, check_params_cb=lambda t, i: i == 60):
        for t in times:
            window.scrub_to(t)
    assert window.worker.frames_rendered - before < len(times)
    assert window.last_scrub == (pytest.approx(2.4), 60)

    # "." steps one frame forward: the next exact frame
    with qtbot.waitSignal(window.scrubShown, timeout=SLOW, check_params_cb=lambda t, i: i == 61):
        window.raise_()
        window.activateWindow()
        qtbot.waitUntil(window.isActiveWindow, timeout=5000)
        window.timeline.plots.setFocus()
        qtbot.keyClick(window.timeline.plots, ".")
    assert "frame 61" in window.timeline.time_label.text()


def test_new_avatar_parameters_re_prepare_the_avatar(window, qtbot, tmp_path):
    load_demo(window, qtbot, audio=clip(tmp_path, 3.0))
    lib = window.library
    assert lib.entry("astronaut")["params"]["bbox_shift"] == 0
    gen = window.worker.generation
    lib.bbox_shift.setValue(6)
    lib.feather.setValue(30)
    with qtbot.waitSignal(lib.avatarPrepared, timeout=SLOW):
        lib.apply_btn.click()
    params = lib.entry("astronaut")["params"]
    assert (params["bbox_shift"], params["feather"]) == (6, 30)
    assert lib.avatars.count() == 1 and lib.avatar == "astronaut"
    assert window.worker.generation == gen + 1  # scrub frames use the new preparation


def test_core_errors_appear_as_one_readable_line(window, qtbot, tmp_path):
    bad = tmp_path / "not-audio.wav"
    bad.write_bytes(b"RIFF....WAVEnonsense" * 10)
    window.load_script(str(bad))
    qtbot.waitUntil(lambda: window.banner.isVisible(), timeout=10_000)
    text = window.banner_text.text()
    assert "not-audio.wav" in text and "Traceback" not in text
    window.render_now()  # no avatar: refused with a sentence, nothing queued
    assert "avatar" in window.banner_text.text()
    assert window.store.list() == []


def test_layout_and_settings_survive_a_restart(qtbot, studio_home):
    from studio.ui.app import create_app
    from studio.ui.main_window import MainWindow

    create_app([])
    w = MainWindow()
    qtbot.addWidget(w)
    w.show()
    w.render_panel.crf.setValue(27)
    w.render_panel.preset.setCurrentText("medium")
    w.timeline.set_threshold(0.02)
    w.splitter.setSizes([250, 500])  # a tall timeline (the default gives the preview the most room)
    sizes = w.splitter.sizes()
    state = w.splitter.saveState()
    w.close()
    from studio.ui import settings as cfg

    assert cfg.settings().value("window/splitter") == state

    w2 = MainWindow()
    qtbot.addWidget(w2)
    w2.show()
    assert w2.render_panel.crf.value() == 27
    assert w2.render_panel.preset.currentText() == "medium"
    assert w2.render_panel.threshold == pytest.approx(0.02, rel=1e-4)
    # the restored window may be smaller (clamped to the offscreen screen); the tall timeline persists
    got = w2.splitter.sizes()
    assert got[1] > got[0], (sizes, got)
    assert (studio_home / "settings.ini").exists()

    assert int(cfg.settings().value("version")) == cfg.VERSION


def test_doctor_panel_lists_the_checks(window, qtbot):
    with qtbot.waitSignal(window.doctor.checked, timeout=SLOW) as b:
        window.doctor.run()
    names = {c.name for c in b.args[0]}
    assert {"GPU", "CUDA", "NVENC", "TensorRT", "weights", "engine cache", "engine"} <= names
    assert window.doctor.tree.topLevelItemCount() == len(b.args[0])
    # no TensorRT here: the build offer stays hidden, and building anyway says why in one line
    assert not window.doctor.trt_btn.isVisibleTo(window.doctor)
    window.doctor.build_engines()
    qtbot.waitUntil(lambda: "cannot be imported" in window.doctor.status.text(), timeout=SLOW)
    assert window.doctor.status.text().startswith("TensorRT cannot be imported")
    assert window.doctor.trt_btn.isEnabled()


def test_speak_this_text_makes_a_script(window, qtbot):
    from studio.ui.speech import available

    if not available():
        pytest.skip("espeak-ng is not installed (optional)")
    window.library.text.setPlainText("Hello from the studio.")
    with qtbot.waitSignal(window.analysisReady, timeout=SLOW):
        window.library.speak_btn.click()
    assert window.library.script.endswith(".wav")
    assert 0.5 < window.analysis.info.duration_s < 5
    from studio.core.media import speech

    if speech.piper_ready():  # the natural voice is the default: Piper's 22.05 kHz, its sentence times kept
        assert window.analysis.info.source_rate == 22050
        assert [x.text for x in speech.sentences_for(window.library.script)] == ["Hello from the studio."]


def test_uncaught_errors_are_logged_and_shown_as_one_line(window, studio_home):
    from studio.core.errors import AudioError
    from studio.ui.app import install_excepthook

    saved = sys.excepthook
    try:
        install_excepthook(window)
        try:
            raise ZeroDivisionError("division by zero in a slot")
        except ZeroDivisionError:
            sys.excepthook(*sys.exc_info())
        text = window.banner_text.text()
        assert text.startswith("internal error (ZeroDivisionError") and "studio.log" in text
        assert "Traceback" not in text
        assert "ZeroDivisionError" in (studio_home / "logs" / "studio.log").read_text()
        sys.excepthook(AudioError, AudioError("x.wav: no such file; check the path"), None)
        assert window.banner_text.text() == "x.wav: no such file; check the path"
    finally:
        sys.excepthook = saved


def test_a_video_avatar_imports_through_the_progress_dialog(window, qtbot, tmp_path):
    import av
    from conftest import DEMO_AVATAR
    from PIL import Image

    face = np.asarray(Image.open(DEMO_AVATAR).convert("RGB").resize((256, 256)))
    path = tmp_path / "presenter.mp4"
    with av.open(str(path), "w") as c:
        s = c.add_stream("libx264", rate=25)
        s.width, s.height, s.pix_fmt = 256, 256, "yuv420p"
        for i in range(12):  # a small sway: every frame differs
            frame = np.roll(face, i % 4, axis=1)
            for packet in s.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                c.mux(packet)
        for packet in s.encode():
            c.mux(packet)
    with qtbot.waitSignal(window.library.avatarPrepared, timeout=SLOW):
        window.load_avatar(str(path))  # the name comes from the file
    assert window.library.avatar == "presenter"
    assert "12 frames" in window.library.avatars.currentItem().text()
    label = window.library.progress_dialog.labelText()
    assert label.startswith("Preparing avatar “presenter”: "), label  # the dialog showed the stages
    qtbot.waitUntil(lambda: window.assets is not None and window.assets.N == 12, timeout=SLOW)


def test_render_previews_are_scaled_for_the_pane_and_drawn_without_levels(window):
    """A render's 1080p preview reaches the GUI at most 960 pixels wide (a copy, area-averaged);
    the pane draws uint8 frames as they are (pyqtgraph levels cost ~5 ms a 1080p frame)."""
    from studio.ui.workers import PREVIEW_MAX_SIDE, live_preview

    frame = np.zeros((1080, 1920, 3), np.uint8)
    frame[:, :960] = 200  # the left half bright
    small = live_preview(frame)
    assert small.shape == (540, 960, 3) and PREVIEW_MAX_SIDE == 960
    assert (small[:, :479] == 200).all() and (small[:, 481:] == 0).all()
    photo = np.full((512, 512, 3), 7, np.uint8)
    kept = live_preview(photo)
    assert np.array_equal(kept, photo) and not np.shares_memory(kept, photo)
    window.preview.show_now(small, "rendering", 3)
    assert window.preview.image_item.levels is None
    assert np.array_equal(window.preview.image_item.image, small)

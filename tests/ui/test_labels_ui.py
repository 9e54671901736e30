"""Labels that tell the truth: the output name after a restart, the caption under the player, the
Queue's percentage against the Live bar, the preview while an avatar loads, empty lists that say
what to do. Each of these said something false before (issue 30)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
from ui_helpers import (  # noqa: F401 (fixtures)
    SLOW,
    clip,
    library_window,
    prepared_avatars,
    window,
)


def _restart_with(qtbot, studio_home, prepared_avatars, **saved):
    """A window opened on a data folder holding anna and bob and the given saved settings."""
    shutil.copytree(prepared_avatars, Path(studio_home) / "avatars", dirs_exist_ok=True)
    from studio.ui import settings as cfg
    from studio.ui.app import create_app
    from studio.ui.main_window import MainWindow

    create_app([])
    s = cfg.settings()
    for key, value in saved.items():
        s.setValue(key.replace("__", "/"), value)
    s.sync()
    w = MainWindow()
    qtbot.addWidget(w)
    return w


def test_after_a_restart_the_output_name_and_the_preview_say_the_saved_avatar(
    qtbot, studio_home, prepared_avatars, tmp_path
):
    audio = str(clip(tmp_path, 1.0, "news.wav").resolve())
    w = _restart_with(
        qtbot,
        studio_home,
        prepared_avatars,
        library__selected_avatar="bob",
        library__scripts=[audio],
        library__selected_script=audio,
    )
    captions = []
    w.preview.caption.setText = _recording(w.preview.caption.setText, captions)
    assert w.library.avatar == "bob"
    assert Path(w.render_panel.output_path()).name.startswith("bob_news_")  # not "avatar_news_..."
    assert "bob_news_" in w.render_panel.output_label.text()
    assert w.preview.caption.text() == "loading avatar “bob”…"  # not "No avatar yet"
    with qtbot.waitSignal(w.avatarLoaded, timeout=SLOW):
        w.show()
    qtbot.waitUntil(lambda: w.preview.caption.text().startswith(("bob", "00:")), timeout=SLOW)
    assert not any(c.startswith("No avatar") for c in captions)
    # the job made now is named as the preview said
    w.render_panel.folder.setText(str(tmp_path / "out"))
    qtbot.waitUntil(lambda: w.analysis is not None, timeout=SLOW)
    job = w.store.get(w.add_to_queue()[0])
    assert Path(job.output).name == Path(w.render_panel.output_path()).name
    w.close_confirmed = True


def _recording(setter, into: list):
    def set_text(text):
        into.append(text)
        setter(text)

    return set_text


def test_an_avatar_being_prepared_is_said_in_the_preview_and_empty_lists_say_what_to_do(window, qtbot):
    from conftest import DEMO_AVATAR

    lib = window.library
    assert lib.avatars.count() == 0 and lib.scripts.count() == 0
    assert window.preview.caption.text().startswith("No avatar yet")
    for lst in (lib.avatars, lib.scripts):  # a hint is drawn in the empty list, not a blank box
        image = lst.viewport().grab().toImage()
        colours = {image.pixel(x, y) for x in range(0, image.width(), 3) for y in range(0, image.height(), 3)}
        assert len(colours) > 3, lst.objectName()
    assert "Import" in lib.avatars.hint and "drop" in lib.scripts.hint
    captions = []
    window.preview.caption.setText = _recording(window.preview.caption.setText, captions)
    with qtbot.waitSignal(window.avatarLoaded, timeout=SLOW):
        window.load_avatar(str(DEMO_AVATAR), "astronaut")
    assert captions[0] == "preparing avatar “astronaut”…"
    assert not any(c.startswith("No avatar") for c in captions)
    qtbot.waitUntil(lambda: window.preview.caption.text().startswith("astronaut"), timeout=SLOW)
    assert lib.avatars.count() == 1


def _small_mp4(path: Path, frames: int = 50) -> Path:
    import av

    with av.open(str(path), "w") as c:
        s = c.add_stream("libx264", rate=25)
        s.width, s.height, s.pix_fmt = 64, 64, "yuv420p"
        for i in range(frames):
            img = np.full((64, 64, 3), (i * 5) % 255, np.uint8)
            for packet in s.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                c.mux(packet)
        for packet in s.encode():
            c.mux(packet)
    return path


def test_the_caption_under_the_player_says_the_frame_that_plays(window, qtbot, tmp_path):
    with qtbot.waitSignal(window.analysisReady, timeout=SLOW):
        window.load_script(str(clip(tmp_path, 2.0)))
    window.preview.caption.setText("00:00:05:13 · frame 138 · exact render preview")  # a scrub frame's words
    video = _small_mp4(tmp_path / "render.mp4")
    window.play(str(video))
    player = window.player
    qtbot.waitUntil(lambda: player.player.duration() > 0, timeout=SLOW)
    qtbot.waitUntil(lambda: window.timeline.frame > 10, timeout=SLOW)
    text = window.preview.caption.text()
    assert "exact render preview" not in text and "render.mp4" in text and "the rendered file" in text
    qtbot.waitUntil(lambda: not player.playing, timeout=SLOW)
    frame = window.timeline.frame
    assert f"frame {frame} " in window.preview.caption.text() + " "
    player.back_btn.click()
    assert window.transport.media is None


def test_the_queue_percentage_is_the_live_bars_during_a_render(library_window, qtbot, tmp_path):
    w = library_window
    with qtbot.waitSignal(w.analysisReady, timeout=SLOW):
        w.load_script(str(clip(tmp_path, 10.0, "long.wav")))
    p = w.render_panel
    p.engine.setCurrentText("classic")
    p.encoder.setCurrentText("x264")
    p.preset.setCurrentText("ultrafast")
    p.batch.setValue(2)
    p.folder.setText(str(tmp_path / "renders"))
    seen = []
    set_progress = w.queue_panel.set_progress

    def check(job_id, fraction):  # on the GUI thread, as the Live bar moves
        set_progress(job_id, fraction)
        stored = w.store.get(job_id).progress
        w.queue_panel.refresh()  # what any queue event does (a job added, another process's change)
        cell = w.queue_panel.table.item(w.queue_panel.row_of(job_id), 4).text()
        live = p.live.progress_bar.format().split("(")[-1].rstrip(")")
        seen.append((cell, live, stored != fraction))

    w.queue_panel.set_progress = check
    with qtbot.waitSignal(w.jobFinished, timeout=SLOW):
        w.render_now()
    assert seen and any(stale for _c, _l, stale in seen)  # the store lagged the live progress at times
    wrong = [(cell, live) for cell, live, _s in seen if cell != live]
    assert not wrong, wrong
    assert w.queue_panel.table.item(0, 4).text() == "100 %"
    assert p.live.progress_bar.format().startswith("done")

"""The window as a client of `studio serve` ("Render on: Studio server"): a real server process on
127.0.0.1 with a token; the job is queued there by the window's own queue, its progress and previews
reach the Live panel, the finished MP4 is downloaded into the local output folder; cancel writes
nothing there or here; scrubbing shows the server's exact frame."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import DEMO_AVATAR, speech_pause_speech
from ui_helpers import SLOW, decode, load_demo, window  # noqa: F401 (fixture)

pytest.importorskip("fastapi")
pytest.importorskip("httpx")
from served import Server

from studio.core.store import jobs

TOKEN = "ui-link-token-0123456789"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("served_ui"), "--token", TOKEN, token=TOKEN)
    yield s
    s.stop()


@pytest.fixture
def remote_window(window, server, monkeypatch, tmp_path):
    from studio.ui.render_panel import TARGETS

    monkeypatch.setenv("STUDIO_SERVER_TOKEN", TOKEN)
    p = window.render_panel
    p.target.setCurrentText(TARGETS["server"])
    p.server_edit.setText(server.url)
    p.server_edit.editingFinished.emit()
    p.engine.setCurrentText("classic")
    p.folder.setText(str(tmp_path / "renders"))
    assert p.server_url() == server.url and p.farm_address() is None
    return window


def test_a_job_rendered_on_the_server_is_watched_and_downloaded(remote_window, qtbot, tmp_path, server):
    window = remote_window
    audio = speech_pause_speech(tmp_path / "voice.wav", 2.0, 0.4, 2.0)  # 110 frames
    load_demo(window, qtbot, audio=audio)
    output = Path(window.render_panel.output_path())
    progress, placed = [], []
    window.worker.progress.connect(lambda run, p: progress.append(p))
    window.worker.placed.connect(lambda run, where: placed.append(where))
    with qtbot.waitSignal(window.jobFinished, timeout=SLOW) as finished:
        job_id = window.render_now()
    assert finished.args == [job_id, jobs.DONE], window.store.get(job_id).reason
    assert placed == [f"Studio server {server.url}"]
    assert progress and [p.done for p in progress] == sorted(p.done for p in progress)
    assert progress[-1].finished and progress[-1].total == 110
    frames, audio_s, first = decode(output)
    assert frames == 110 and first.shape == (512, 512, 3)
    assert [p.name for p in output.parent.iterdir()] == [output.name]  # nothing half-written beside it
    job = window.store.get(job_id)
    assert job.result["ran_on"] == f"Studio server {server.url}" and job.result["frames"] == 110
    qtbot.waitUntil(lambda: window.render_panel.play_btn.isEnabled(), timeout=5000)
    # the same job again: a new numbered file, never the first one replaced
    with qtbot.waitSignal(window.jobFinished, timeout=SLOW):
        again = window.render_now()
    assert Path(window.store.get(again).output).name == output.stem + "_002.mp4"
    assert output.exists() and output.with_name(output.stem + "_002.mp4").exists()


def test_cancel_on_the_server_writes_nothing(remote_window, qtbot, tmp_path):
    window = remote_window
    load_demo(window, qtbot, audio=speech_pause_speech(tmp_path / "long.wav", 12.0, 0.4, 12.0))
    output = Path(window.render_panel.output_path())
    with qtbot.waitSignal(window.worker.progress, timeout=SLOW):
        job_id = window.render_now()
    with qtbot.waitSignal(window.jobFinished, timeout=SLOW) as finished:
        window.render_panel.cancel_btn.click()
    assert finished.args == [job_id, jobs.CANCELLED]
    assert not output.exists() and not list(output.parent.glob("*.mp4"))


def test_scrubbing_shows_the_servers_exact_frame(remote_window, qtbot, tmp_path):
    from studio.core.render.renderer import Renderer
    from studio.core.settings import RenderSettings

    window = remote_window
    audio = speech_pause_speech(tmp_path / "voice.wav", 0.6, 0.4, 0.6)
    settings = RenderSettings(engine="classic")
    assert window.worker.remote is not None
    remote = window.worker.remote.frame_at(str(DEMO_AVATAR), str(audio), settings, 0.5)
    local = Renderer(str(DEMO_AVATAR), str(audio), settings).frame_at(0.5)
    assert remote.shape == local.shape and np.array_equal(remote, local)

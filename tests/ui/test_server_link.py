"""The window as a client of `studio serve` (ServerLink): a real server process on 127.0.0.1 with a
token; a job is queued there, its progress and previews arrive as Qt signals, the finished MP4 is
downloaded into the local output folder; cancel writes nothing; scrubbing gets the server's frame."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import DEMO_AVATAR, speech_pause_speech

pytest.importorskip("fastapi")
pytest.importorskip("httpx")
from served import Server  # noqa: E402

TOKEN = "ui-link-token-0123456789"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("served_ui"), "--token", TOKEN, token=TOKEN)
    yield s
    s.stop()


@pytest.fixture
def link(qtbot, server):
    from studio.ui.server_link import ServerLink

    lk = ServerLink(server.url, TOKEN)
    yield lk
    lk.close()


def test_a_job_on_the_server_is_watched_and_downloaded(qtbot, link, server, tmp_path):
    from studio.core.render import RenderSettings
    from studio.service import RenderRequest

    audio = speech_pause_speech(tmp_path / "voice.wav", 2.0, 0.4, 2.0)  # 110 frames
    out = tmp_path / "out" / "clip.mp4"
    seen, previews = [], []
    link.progress.connect(lambda p: seen.append((p.done, p.total, p.fps)))
    link.preview.connect(lambda img, i: previews.append((img.shape, i)))
    with qtbot.waitSignal(link.finished, timeout=180_000) as done:
        link.submit(RenderRequest(str(DEMO_AVATAR), str(audio), str(out), RenderSettings(engine="classic")))
    job_id, path, result = done.args
    assert path == str(out) and out.is_file() and result["frames"] == 110
    assert seen and [d for d, _, _ in seen] == sorted(d for d, _, _ in seen) and seen[-1][:2] == (110, 110)
    assert all(shape == (512, 512, 3) and 0 <= i < 110 for shape, i in previews)
    import av

    with av.open(str(out)) as c:
        assert sum(1 for _ in c.decode(video=0)) == 110
    assert [p.name for p in out.parent.iterdir()] == ["clip.mp4"]  # nothing half-written beside it
    with qtbot.waitSignal(link.finished, timeout=180_000) as again:  # a taken name is numbered, never replaced
        link.submit(RenderRequest(str(DEMO_AVATAR), str(audio), str(out), RenderSettings(engine="classic")))
    assert again.args[1] == str(out.with_name("clip_002.mp4"))


def test_cancel_on_the_server_writes_nothing(qtbot, link, tmp_path):
    from studio.core.render import RenderSettings
    from studio.service import RenderRequest

    audio = speech_pause_speech(tmp_path / "long.wav", 6.0, 0.4, 6.0)
    out = tmp_path / "cancelled.mp4"
    link.progress.connect(lambda p: link.cancel())
    with qtbot.waitSignal(link.cancelled, timeout=180_000):
        link.submit(RenderRequest(str(DEMO_AVATAR), str(audio), str(out), RenderSettings(engine="classic")))
    assert not out.exists() and list(tmp_path.glob("*.mp4")) == []
    assert link.client.render(link.job_id)["state"] == "cancelled"


def test_scrubbing_uses_the_servers_exact_frame(link, tmp_path):
    from studio.core.render import Renderer, RenderSettings

    audio = speech_pause_speech(tmp_path / "voice.wav", 0.6, 0.4, 0.6)
    settings = RenderSettings(engine="classic")
    remote = link.frame_at(str(DEMO_AVATAR), str(audio), settings, 0.5)
    local = Renderer(str(DEMO_AVATAR), str(audio), settings).frame_at(0.5)
    assert remote.shape == local.shape and np.array_equal(remote, local)
    assert not np.array_equal(remote, link.frame_at(str(DEMO_AVATAR), str(audio), settings, 1.2))

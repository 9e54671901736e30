"""A client generated from the real server's ``/openapi.json`` (openapi-python-client, offline, into
tmp_path; 1.7 s on the 2-core machine) renders, polls and downloads with typed objects."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DEMO_AVATAR, speech_pause_speech
from served import Server

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")

TOKEN = "generated-client-token"


def _generator() -> str:
    exe = Path(sys.executable).with_name("openapi-python-client")
    if not exe.exists():
        pytest.skip("openapi-python-client is not installed (the dev extra)")
    return str(exe)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("client_home"), "--token", TOKEN, token=TOKEN)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def generated(served, tmp_path_factory):
    """The client package, generated from what the running server describes."""
    out = tmp_path_factory.mktemp("generated")
    (out / "openapi.json").write_bytes(httpx.get(f"{served.url}/openapi.json").content)
    r = subprocess.run(
        [
            _generator(),
            "generate",
            "--path",
            str(out / "openapi.json"),
            "--output-path",
            str(out / "studio_api_client"),
            "--meta",
            "none",
        ],  # no --config: the document needs no content-type overrides (issue 33 item 19)
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Warning" not in r.stdout, r.stdout  # every route and answer made it into the client
    sys.path.insert(0, str(out))
    try:
        yield importlib.import_module("studio_api_client")
    finally:
        sys.path.remove(str(out))
        for name in [m for m in sys.modules if m.startswith("studio_api_client")]:
            del sys.modules[name]


def test_a_generated_client_renders_polls_and_downloads(served, generated, tmp_path):
    import time

    import av

    api = importlib.import_module("studio_api_client.api")
    models = importlib.import_module("studio_api_client.models")
    from studio_api_client.types import File

    add_avatar = importlib.import_module("studio_api_client.api.avatars.add_avatar")
    upload_audio = importlib.import_module("studio_api_client.api.audio.upload_audio")
    create_render = importlib.import_module("studio_api_client.api.renders.create_render")
    get_render = importlib.import_module("studio_api_client.api.renders.get_render")
    get_render_video = importlib.import_module("studio_api_client.api.renders.get_render_video")
    list_renders = importlib.import_module("studio_api_client.api.renders.list_renders")
    health = importlib.import_module("studio_api_client.api.server.health")
    assert api is not None

    client = generated.AuthenticatedClient(base_url=served.url, token=TOKEN, raise_on_unexpected_status=True)
    h = health.sync(client=client)
    assert isinstance(h, models.Health) and h.ok is True  # typed, not None

    with open(DEMO_AVATAR, "rb") as fh:
        avatar = add_avatar.sync(
            client=client, body=models.AvatarForm(name="astro", file=File(payload=fh, file_name="astro.png"))
        )
    assert isinstance(avatar, models.Avatar) and avatar.name == "astro" and avatar.width == 512
    voice = speech_pause_speech(tmp_path / "voice.wav", 0.6, 0.4, 0.6)
    with open(voice, "rb") as fh:
        audio = upload_audio.sync(client=client, body=models.AudioForm(file=File(payload=fh, file_name="voice.wav")))
    assert isinstance(audio, models.AudioAnalysis) and audio.frames == 40 and audio.silent_spans

    form = models.RenderForm(avatar="astro", audio_id=audio.id, engine=models.RenderFormEngine.CLASSIC, crf=23)
    job = create_render.sync(client=client, body=form, idempotency_key="generated-1")
    assert isinstance(job, models.Job), job
    assert job.settings.engine == models.RenderSettingsEngine.CLASSIC and job.settings.crf == 23
    again = create_render.sync(client=client, body=form, idempotency_key="generated-1")
    assert again.id == job.id  # a retried submit: the same job

    deadline = time.monotonic() + 120
    while (job := get_render.sync(client=client, job_id=job.id)).state.value not in ("done", "failed"):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert job.state == models.JobState.DONE and job.result.frames == 40 and job.video == job.links.video
    video = get_render_video.sync(client=client, job_id=job.id)
    out = tmp_path / "downloaded.mp4"
    out.write_bytes(video.payload.read())
    with av.open(str(out)) as c:
        assert c.streams.audio and sum(1 for _ in c.decode(video=0)) == 40

    missing = get_render.sync(client=client, job_id=99999)
    assert isinstance(missing, models.Error) and missing.error.startswith("no render job 99999")
    page = list_renders.sync(client=client, limit=1)
    assert isinstance(page, models.JobPage) and page.renders[0].id == job.id and not page.next_
    bad = create_render.sync(client=client, body=models.RenderForm(avatar="nobody", audio_id=audio.id))
    assert isinstance(bad, models.Error) and "no avatar named 'nobody'" in bad.error

"""Several devices rendering one clip into one writer (CPU devices here; GPUs on a CUDA machine)."""

from __future__ import annotations

import threading

import av
import numpy as np
import pytest
import torch
from conftest import prepare_demo_avatar, speech_pause_speech

from studio.core.errors import Cancelled
from studio.core.render.renderer import Renderer
from studio.core.scale.multigpu import DeviceRender, split_chunks
from studio.core.settings import RenderSettings


@pytest.fixture(scope="module")
def avatar(tmp_path_factory):
    return prepare_demo_avatar(tmp_path_factory.mktemp("mgpu_home"))


@pytest.fixture(scope="module")
def voice(tmp_path_factory):
    return speech_pause_speech(tmp_path_factory.mktemp("voice") / "voice.wav", 1.0, 0.6, 0.8)


def _video_packets(path):
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        return [(p.pts, bytes(p)) for p in c.demux(s) if p.size]


def test_split_chunks_keeps_contiguous_groups():
    chunks = [(0, 10), (10, 20), (20, 30), (30, 40), (40, 50)]
    assert split_chunks(chunks, 2) == [[(0, 10), (10, 20)], [(20, 30), (30, 40), (40, 50)]]
    assert split_chunks(chunks[:1], 2) == [[(0, 10)]]  # too few chunks: fewer parts
    assert sum(split_chunks(chunks, 5), []) == chunks


def test_two_devices_write_the_same_file_as_one(tmp_path, avatar, voice):
    settings = RenderSettings(engine="classic", device="cpu", encoder="x264-parallel", preset="ultrafast")
    one = Renderer(avatar, voice, settings).render(tmp_path / "one.mp4")
    progress = list(DeviceRender(avatar, voice, settings, devices=["cpu", "cpu"]).run(tmp_path / "two.mp4"))
    last = progress[-1]
    assert last.finished and last.done == last.total == one.frames == 60
    assert [p.done for p in progress] == sorted(p.done for p in progress)
    a, b = _video_packets(tmp_path / "one.mp4"), _video_packets(tmp_path / "two.mp4")
    assert len(a) == len(b) == 60
    assert a == b  # same frames, same chunks, same encoder settings: the same stream, packet for packet
    job = DeviceRender(avatar, voice, settings, devices=["cpu", "cpu"])
    list(job.run(tmp_path / "three.mp4"))
    res = job.result
    assert (res.frames, res.silent_frames, res.engine, res.encoder) == (60, one.silent_frames, "classic", one.encoder)
    assert res.output == str(tmp_path / "three.mp4") and res.fps > 0 and "2 devices" in res.engine_reason
    with av.open(str(tmp_path / "two.mp4")) as c:
        assert c.streams.audio[0].duration is not None


def test_cancel_leaves_nothing(tmp_path, avatar, voice):
    settings = RenderSettings(engine="classic", device="cpu", encoder="x264-parallel", preset="ultrafast", batch=4)
    out = tmp_path / "cancelled.mp4"
    job = DeviceRender(avatar, voice, settings, devices=["cpu", "cpu"])
    with pytest.raises(Cancelled):
        for p in job.run(out):
            if p.done:
                threading.Thread(target=job.cancel).start()  # from another thread, as the window does
    assert not out.exists()
    assert [f.name for f in tmp_path.iterdir()] == []


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
def test_two_gpus_match_one_gpu(tmp_path, voice):
    from studio.bench.reference import synthetic_avatar
    from studio.core.engines.classic import ClassicEngine

    av_ = synthetic_avatar(tmp_path, 360, loop_frames=10)
    settings = RenderSettings(engine="classic", encoder="x264-parallel", preset="ultrafast")
    Renderer(av_, voice, settings, engine=ClassicEngine(device="cuda:0")).render(tmp_path / "one.mp4")
    engines = [ClassicEngine(device="cuda:0"), ClassicEngine(device="cuda:1")]
    list(DeviceRender(av_, voice, settings, engines=engines).run(tmp_path / "two.mp4"))
    a, b = _video_packets(tmp_path / "one.mp4"), _video_packets(tmp_path / "two.mp4")
    assert len(a) == len(b) and a == b
    assert np.all([len(x[1]) > 0 for x in b])


def test_cli_gpus_without_enough_gpus_is_one_line_and_exit_2(tmp_path, voice):
    import subprocess
    import sys

    if torch.cuda.device_count() >= 64:
        pytest.skip("this machine has 64 GPUs")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "studio",
            "render",
            "--avatar",
            "nobody",
            "--audio",
            str(voice),
            "-o",
            str(tmp_path / "o.mp4"),
            "--gpus",
            "64",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2
    assert "--gpus 64: this machine has" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o.mp4").exists()


def test_a_failing_device_fails_the_render_and_leaves_nothing(tmp_path, avatar, voice):
    from studio.core.errors import StudioError

    settings = RenderSettings(engine="classic", encoder="x264-parallel", preset="ultrafast")
    out = tmp_path / "out.mp4"
    out.write_bytes(b"previous")
    with pytest.raises(StudioError):
        list(DeviceRender(avatar, voice, settings, devices=["cpu", "cuda:7"]).run(out))
    assert out.read_bytes() == b"previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.mp4"]


def test_the_devices_share_one_loaded_clip(avatar, voice):
    from studio.core.engines.classic import ClassicEngine
    from studio.core.render.clip import Clip
    from studio.core.render.results import RenderResult

    settings = RenderSettings(engine="classic", device="cpu")
    job = DeviceRender(avatar, voice, settings, devices=["cpu", "cpu"])
    a, b = job.renderers
    assert a.clip is b.clip is job.clip and a.plan is b.plan and a.wave is b.wave and a.avatar is b.avatar
    e1, e2 = ClassicEngine(device="cpu"), ClassicEngine(device="cpu")
    assert job.clip.features(e1) is job.clip.features(e2)  # the classic controls are computed once
    clip = Clip(avatar, voice, settings)
    assert Renderer.for_clip(clip, settings.with_(crf=30)).plan is clip.plan  # encoding may differ
    with pytest.raises(ValueError):
        Renderer.for_clip(clip, settings.with_(threshold=0.2))  # another plan: not this clip
    r = RenderResult.measured(
        output="o.mp4",
        frames=50,
        silent_frames=3,
        engine="classic",
        engine_reason="x",
        encoder="libx264",
        seconds=2.0,
        width=8,
        height=6,
        stage_ms={"engine": 1.234},
    )
    assert (r.fps, r.stage_ms) == (25.0, {"engine": 1.2})
    assert RenderResult.from_json(dict(r.to_json(), ran_on="farm")) == r  # extra keys are ignored
    partial = RenderResult.from_json({"output": "o.mp4", "frames": 7})
    assert (partial.frames, partial.engine, partial.fps, partial.stage_ms, partial.finish_ms) == (7, "", 0.0, {}, {})

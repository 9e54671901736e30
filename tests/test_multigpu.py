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
from studio.core.scale.multigpu import DeviceRender, render_on_devices, split_chunks
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
    progress = list(render_on_devices(avatar, voice, tmp_path / "two.mp4", settings, devices=["cpu", "cpu"]))
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
    cancel = threading.Event()
    out = tmp_path / "cancelled.mp4"
    with pytest.raises(Cancelled):
        for p in render_on_devices(avatar, voice, out, settings, devices=["cpu", "cpu"], cancel=cancel):
            if p.done:
                cancel.set()
    assert not out.exists()
    assert [f.name for f in tmp_path.iterdir()] == []


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
def test_two_gpus_match_one_gpu(tmp_path, voice):
    from studio.core.bench import synthetic_avatar
    from studio.core.engines.classic import ClassicEngine

    av_ = synthetic_avatar(tmp_path, 360, loop_frames=10)
    settings = RenderSettings(engine="classic", encoder="x264-parallel", preset="ultrafast")
    Renderer(av_, voice, settings, engine=ClassicEngine(device="cuda:0")).render(tmp_path / "one.mp4")
    engines = [ClassicEngine(device="cuda:0"), ClassicEngine(device="cuda:1")]
    list(render_on_devices(av_, voice, tmp_path / "two.mp4", settings, engines=engines))
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
        list(render_on_devices(avatar, voice, out, settings, devices=["cpu", "cuda:7"]))
    assert out.read_bytes() == b"previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.mp4"]

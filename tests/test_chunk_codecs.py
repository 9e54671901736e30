"""Chunked renders in every codec the join takes: ProRes, DNxHR and HEVC cut into 3 segments and joined
decode to the frames of the one-process render (intra codecs: the very same frames; HEVC: each segment
starts on an IDR, so the frames differ by encoder noise only), with the container's audio muxed once."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import prepare_demo_avatar, speech_pause_speech

from studio.core.errors import InputError
from studio.core.render.renderer import Renderer
from studio.core.scale.chunks import ChunkedRender, join_segments, render_segment, segment_suffix, split
from studio.core.settings import RenderSettings

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # conftest: one intra-op thread


@pytest.fixture(scope="module")
def avatar(tmp_path_factory):
    return prepare_demo_avatar(tmp_path_factory.mktemp("chunk_codecs_home"))


@pytest.fixture(scope="module")
def voice(tmp_path_factory):
    """1.2 s (30 frames at 25 fps): speech, a pause, speech."""
    return speech_pause_speech(tmp_path_factory.mktemp("voice") / "voice.wav", 0.5, 0.2, 0.5)


def settings(codec: str) -> RenderSettings:
    return RenderSettings(engine="classic", device="cpu", codec=codec)


def decode(path):
    """Decoded video frames (RGB), their pts in seconds, the key-frame flags, and the audio codec and seconds
    (after the video stream's FourCC)."""
    import av

    with av.open(str(path)) as c:
        tag = c.streams.video[0].codec_tag
        frames = [(float(f.pts * f.time_base), f.key_frame, f.to_ndarray(format="rgb24")) for f in c.decode(video=0)]
    with av.open(str(path)) as c:
        a = c.streams.audio[0] if c.streams.audio else None
        audio = (tag, a.codec_context.name, float(a.duration * a.time_base)) if a is not None else None
    return frames, audio


def psnr(x, y) -> float:
    mse = np.mean((x.astype(np.float64) - y.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


def chunked(avatar, voice, codec: str, folder, n: int = 3):
    """The clip in ``n`` segments (one renderer, chunk by chunk), joined with the audio."""
    r = Renderer(avatar, voice, settings(codec))
    suffix = segment_suffix(codec)
    segs = [
        (a, b, render_segment(r, a, b, folder / f"seg{k}{suffix}")) for k, (a, b) in enumerate(split(r.plan.frames, n))
    ]
    return join_segments(segs, folder / f"joined{suffix}", audio=voice, fps=r.rate, codec=codec), segs


@pytest.mark.parametrize("codec", ["prores", "dnxhr", "hevc"])
def test_three_chunks_decode_to_the_one_process_render(avatar, voice, tmp_path, codec):
    suffix = segment_suffix(codec)
    single = tmp_path / f"single{suffix}"
    Renderer(avatar, voice, settings(codec)).render(single)
    out, segs = chunked(avatar, voice, codec, tmp_path)
    want, audio_want = decode(single)
    got, audio_got = decode(out)
    assert len(segs) == 3 and len(got) == len(want) == 30
    assert [f[0] for f in got] == [f[0] for f in want]  # frame t at t / 25 s
    for a, b, seg in segs:  # every segment starts on a key frame (closed GOPs; intra codecs: every frame)
        frames, _ = decode(seg)
        assert len(frames) == b - a and frames[0][1] and frames[0][0] == 0.0
    if codec == "hevc":
        worst = min(psnr(g[2], w[2]) for g, w in zip(got, want))
        assert 35 < worst < 99, worst  # encoder noise at the chunk edges only (and really lossy)
    else:  # intra-only: each frame coded on its own, so the very same frames
        assert all(np.array_equal(g[2], w[2]) for g, w in zip(got, want))
    assert audio_got is not None and audio_want is not None and audio_got[:2] == audio_want[:2]  # FourCC, audio codec
    assert abs(audio_got[2] - audio_want[2]) < 0.05  # the voice-over muxed once, whole


def test_chunked_render_in_processes_writes_prores(avatar, voice, tmp_path):
    """``--chunks 3`` (local worker processes) with ProRes: the one-process render's frames, PCM audio,
    and the segment folder gone."""
    single = tmp_path / "single.mov"
    Renderer(avatar, voice, settings("prores")).render(single)
    out = tmp_path / "local.mov"
    job = ChunkedRender(avatar, voice, settings("prores"), chunks=3, workers=2)
    last = list(job.run(out))[-1]
    assert last.finished and last.chunks == 3 and last.done == 30
    assert job.result is not None and job.result.encoder.startswith("prores_aw x3 segments")
    want, _ = decode(single)
    got, audio = decode(out)
    assert len(got) == 30 and all(np.array_equal(g[2], w[2]) for g, w in zip(got, want))
    assert audio is not None and audio[1].startswith("pcm_")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["local.mov", "single.mov"]


def test_a_codec_the_join_cannot_take_is_refused_before_any_work(avatar, voice, tmp_path):
    with pytest.raises(InputError, match="--codec vp9 renders on this computer"):
        list(ChunkedRender(avatar, voice, settings("vp9"), chunks=2).run(tmp_path / "x.webm"))
    assert not list(tmp_path.iterdir())


def video_packets(path) -> list[tuple[int, bytes]]:
    import av

    with av.open(str(path)) as c:
        return [(int(p.pts), bytes(p)) for p in c.demux(video=0) if p.size]


@pytest.mark.parametrize("codec", ["prores", "dnxhr", "hevc"])
def test_two_devices_write_the_one_device_file(avatar, voice, tmp_path, monkeypatch, codec):
    """``--gpus`` (here two CPU devices, as two GPUs would be) feeds one writer: the same packets as one device."""
    from studio.core.scale.multigpu import DeviceRender

    monkeypatch.setenv("STUDIO_X264_WORKERS", "3")  # three lanes wherever the test runs
    suffix = segment_suffix(codec)
    Renderer(avatar, voice, settings(codec)).render(tmp_path / f"one{suffix}")
    job = DeviceRender(avatar, voice, settings(codec), devices=["cpu", "cpu"])
    list(job.run(tmp_path / f"two{suffix}"))
    one, two = video_packets(tmp_path / f"one{suffix}"), video_packets(tmp_path / f"two{suffix}")
    assert len(one) == 30 and one == two
    assert job.result is not None and job.result.encoder.endswith("x3 parallel")

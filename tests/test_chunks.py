"""Chunked rendering: closed-GOP segments joined with the audio once equal the single-process render."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import prepare_demo_avatar, speech_pause_speech

from studio.core.errors import RenderError
from studio.core.render.renderer import Renderer
from studio.core.scale.chunks import ChunkedRender, join_segments, render_segment, split
from studio.core.settings import RenderSettings

LOSSLESS = RenderSettings(engine="classic", device="cpu", encoder="x264", crf=0, preset="ultrafast")


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # conftest: one intra-op thread


@pytest.fixture(scope="module")
def avatar(tmp_path_factory):
    """The demo photo prepared once for the module (its own data folder)."""
    return prepare_demo_avatar(tmp_path_factory.mktemp("chunks_home"))


@pytest.fixture(scope="module")
def voice(tmp_path_factory):
    """2 s: speech 0-0.9 s, silence 0.9-1.3 s, speech 1.3-2.0 s (50 frames)."""
    return speech_pause_speech(tmp_path_factory.mktemp("voice") / "voice.wav", 0.9, 0.4, 0.7)


@pytest.fixture(scope="module")
def single(avatar, voice, tmp_path_factory):
    """The single-process render (lossless x264: decoded frames are the pre-encode frames' NV12)."""
    out = tmp_path_factory.mktemp("single") / "single.mp4"
    Renderer(avatar, voice, LOSSLESS).render(out)
    return out


@pytest.fixture(scope="module")
def joined(avatar, voice, tmp_path_factory):
    """The same clip in 3 segments (one renderer, chunk by chunk), joined with the audio."""
    folder = tmp_path_factory.mktemp("joined")
    r = Renderer(avatar, voice, LOSSLESS)
    segs = []
    for k, (a, b) in enumerate(split(r.plan.frames, 3)):
        segs.append((a, b, render_segment(r, a, b, folder / f"seg{k}.mp4")))
    out = folder / "joined.mp4"
    join_segments(segs, out, audio=voice)
    return out, segs


def decode(path):
    """[(pts seconds, key frame, I picture, RGB array)], video duration, audio duration, audio packets."""
    import av
    from av.video.frame import PictureType

    with av.open(str(path)) as c:
        v = c.streams.video[0]
        frames = [
            (float(f.pts * f.time_base), f.key_frame, f.pict_type == PictureType.I, f.to_ndarray(format="rgb24"))
            for f in c.decode(video=0)
        ]
        v_dur = float(v.duration * v.time_base)
        a = c.streams.audio[0] if c.streams.audio else None
        a_dur = float(a.duration * a.time_base) if a is not None else None
        n_audio = len(c.streams.audio)
    with av.open(str(path)) as c:
        a_packets = [(p.pts, p.size) for p in c.demux(audio=0) if p.size] if n_audio else []
    return frames, v_dur, a_dur, n_audio, a_packets


def psnr(x, y) -> float:
    mse = np.mean((x.astype(np.float64) - y.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


def test_split_tiles_the_clip_in_near_equal_ranges():
    assert split(50, 3) == [(0, 17), (17, 33), (33, 50)]
    assert split(10, 4) == [(0, 10)]  # no chunk shorter than 8 frames
    assert split(0, 3) == []
    r = split(1001, 7)
    assert r[0][0] == 0 and r[-1][1] == 1001 and all(b == c for (_, b), (c, _) in zip(r, r[1:]))
    assert max(b - a for a, b in r) - min(b - a for a, b in r) <= 1


def test_joined_file_equals_the_single_render_frame_for_frame(single, joined):
    want, v_want, _, _, _ = decode(single)
    got, v_got, _, _, _ = decode(joined[0])
    assert len(got) == len(want) == 50
    assert [f[0] for f in got] == [f[0] for f in want] == [t / 25 for t in range(50)]  # same timestamps
    assert v_got == v_want == 2.0
    for t, (g, w) in enumerate(zip(got, want)):
        assert np.array_equal(g[3], w[3]), t  # lossless: the very pre-encode frames
    # each chunk's first frame is an IDR; the mouth moves in the speech of every chunk
    for a, _, _ in joined[1]:
        assert got[a][1] and got[a][2], a
    assert not np.array_equal(got[5][3], got[0][3]) and not np.array_equal(got[45][3], got[40][3])


def test_audio_is_muxed_once_and_stays_in_sync_across_joins(single, joined):
    _, v_want, a_want, n_want, p_want = decode(single)
    _, v_got, a_got, n_got, p_got = decode(joined[0])
    assert n_got == n_want == 1
    assert p_got == p_want  # the very same AAC packets: encoded once, from the original file
    assert abs(a_got - v_got) <= 0.04 + 0.025 and a_got == a_want


def test_segments_start_on_an_idr_with_timestamps_from_zero(joined):
    import av
    from av.video.frame import PictureType

    for a, b, path in joined[1]:
        with av.open(str(path)) as c:
            assert not c.streams.audio
            frames = list(c.decode(video=0))
        assert len(frames) == b - a
        assert frames[0].key_frame and frames[0].pict_type == PictureType.I
        assert [float(f.pts * f.time_base) for f in frames] == [t / 25 for t in range(b - a)]


def test_lossy_chunks_stay_within_encoder_noise(avatar, voice, single, tmp_path):
    r = Renderer(avatar, voice, RenderSettings(engine="classic", device="cpu", encoder="x264", crf=20))
    segs = [(a, b, str(render_segment(r, a, b, tmp_path / f"s{a}.mp4"))) for a, b in split(50, 2)]
    out = join_segments(segs, tmp_path / "lossy.mp4", audio=voice)
    want, _, _, _, _ = decode(single)
    got, _, _, _, _ = decode(out)
    assert [f[0] for f in got] == [f[0] for f in want]
    worst = min(psnr(g[3], w[3]) for g, w in zip(got, want))
    assert 35 < worst < 99  # encoder noise only (and really lossy)


def test_join_refuses_a_gap_and_leaves_nothing(joined, voice, tmp_path):
    out = tmp_path / "keep.mp4"
    out.write_bytes(b"previous render")
    a, b, c = joined[1]
    with pytest.raises(RenderError, match="do not tile"):
        join_segments([a, c], out, audio=voice)
    truncated = tmp_path / "bad.mp4"
    truncated.write_bytes(open(b[2], "rb").read()[:2000])
    with pytest.raises(Exception):  # noqa: B017 - a damaged segment: the join fails (PyAV or ours), nothing is left
        join_segments([a, (b[0], b[1], truncated), c], out, audio=voice)
    assert out.read_bytes() == b"previous render"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.mp4", "keep.mp4"]


def test_render_chunked_in_local_processes_equals_the_single_render(avatar, voice, single, tmp_path):
    out = tmp_path / "local.mp4"
    job = ChunkedRender(avatar, voice, LOSSLESS, chunks=2)
    progress = list(job.run(out))
    last = progress[-1]
    assert last.finished and last.output == str(out) and last.chunks == 2 and last.done == 50
    assert len(last.workers) == 2 and all(v > 0 for v in last.workers.values())
    one = Renderer(avatar, voice, LOSSLESS)
    r = job.result  # what the segments report: the real engine, the plan's silent frames
    assert (r.output, r.frames, r.engine, r.encoder) == (str(out), 50, "classic", "libx264 x2 segments")
    assert r.silent_frames == int(one.plan.silent.sum()) and r.width == one.avatar.width and r.fps > 0
    want, _, _, _, _ = decode(single)
    got, _, _, _, _ = decode(out)
    assert len(got) == 50 and all(np.array_equal(g[3], w[3]) for g, w in zip(got, want))
    assert [p.name for p in tmp_path.iterdir()] == ["local.mp4"]  # the segment folder is gone

"""Rolling chunks muxed as they finish (issue 16): the same file as the join after the last frame,
lossless frames and timestamps, audio encoded by a worker process, nothing left on failure."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import av
import numpy as np
import pytest
import soundfile as sf
from test_encode import H, W, talking_frames

from studio.core.errors import Cancelled, RenderError
from studio.core.media.writer import VideoWriter, open_video, rolling_chunks
from studio.core.render.composite import rgb_to_nv12
from studio.core.render.plan import stripes


@pytest.fixture
def wav(tmp_path) -> Path:
    path = tmp_path / "voice.wav"
    rate = 16000
    t = np.arange(int(2.4 * rate)) / rate  # 60 frames
    sf.write(path, (0.2 * np.sin(2 * np.pi * 220 * t) * np.sin(t * 3)).astype(np.float32), rate)
    return path


@pytest.fixture
def spill_root(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "spill"
    root.mkdir()
    monkeypatch.setenv("STUDIO_SPILL_DIR", str(root))
    return root


def _packets(path):
    with av.open(str(path)) as c:
        v = [(bytes(p), p.pts, p.dts, p.is_keyframe) for p in c.demux(video=0) if p.size]
    with av.open(str(path)) as c:
        a = [(bytes(p), p.pts, p.dts) for p in c.demux(audio=0) if p.size] if c.streams.audio else []
    return v, a


def _write_rolling(w: VideoWriter, frames, batch=6):
    for idx in stripes(len(frames), batch, w.chunks, window=w.window):
        w.write(frames[idx], indices=idx)


def test_rolling_chunks_split_and_stripes_feed_each_lane_in_turn():
    assert rolling_chunks(672, 16) == [(round(672 * k / 16), round(672 * (k + 1) / 16)) for k in range(16)]
    long = rolling_chunks(15000, 16)
    # 8 generations of 16 chunks of <= 125 frames, then a last generation of 16 short ones: what is
    # left to mux after the last frame is 16 x 24 frames at any length
    assert len(long) == 144 and max(e - s for s, e in long) <= 125 and long[-1][1] == 15000
    assert [e - s for s, e in long[-16:]] == [24] * 16 and all(e - s > 100 for s, e in long[:128])
    assert all(a[1] == b[0] for a, b in zip(long, long[1:])) and long[0][0] == 0
    chunks = rolling_chunks(60, 2, max_frames=10)  # 3 generations of 2 lanes
    assert chunks == [(0, 10), (10, 20), (20, 30), (30, 40), (40, 50), (50, 60)]
    out = stripes(60, 4, chunks, window=2)
    flat = np.concatenate(out).tolist()
    assert sorted(flat) == list(range(60)) and all(len(b) == 4 for b in out)
    lane0 = [i for i in flat if (i // 10) % 2 == 0]
    assert lane0 == [*range(0, 10), *range(20, 30), *range(40, 50)]  # a lane's chunks one after the other
    assert out[0].tolist() == [0, 1, 10, 11]  # both lanes get work from the first batch
    assert [b.tolist() for b in stripes(10, 4, [(0, 5), (5, 10)])] == [[0, 1, 5, 6], [2, 3, 7, 8], [4, 9]]


def test_streaming_mux_writes_the_same_file_as_the_join_after_the_last_frame(tmp_path, wav, spill_root):
    """Packet-identical (in fact byte-identical): the chunks go in while later ones still encode."""
    n = 60
    frames = talking_frames(0, n)
    chunks = rolling_chunks(n, 2, max_frames=10)
    outs = {}
    for stream in (True, False):
        out = tmp_path / f"{'stream' if stream else 'join'}.mp4"
        w = VideoWriter(
            out,
            W,
            H,
            audio=wav,
            name="libx264 x2 parallel",
            reason="test",
            chunks=chunks,
            crf=20,
            preset="ultrafast",
            fps=25,
            write_hook=None,
            window=2,
            stream_mux=stream,
        )
        assert w.spill_dir.parent == spill_root
        _write_rolling(w, frames)
        if stream:  # generations 0 and 1 are finished once generation 2 has frames: muxed by now
            deadline = time.monotonic() + 30
            while w.chunks_muxed < 4 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert w.chunks_muxed >= 4
            assert len(list(w.spill_dir.iterdir())) <= 3  # muxed chunks' spill files are gone
        w.close()
        left = w.close_ms["chunks_left_at_close"]
        assert left <= 2 if stream else left == 6
        outs[stream] = out
    assert outs[True].read_bytes() == outs[False].read_bytes()
    video, audio = _packets(outs[True])
    tb = 25 * 512
    assert sorted(p[1] for p in video) == [t * tb // 25 for t in range(n)]  # frame t at t/25
    assert {p[1] * 25 // tb for p in video if p[3]} == {0, 10, 20, 30, 40, 50}  # closed GOP per chunk
    data = outs[True].read_bytes()
    assert data.index(b"moov") < data.index(b"mdat")  # the index first, in its reserved space
    assert audio and list(spill_root.iterdir()) == []


def test_rolling_lossless_decodes_to_exactly_the_frames_written(tmp_path, spill_root):
    """Frame-identical at CRF 0 (x264 lossless): every frame, in order, at t/25."""
    n = 50
    nv12 = rgb_to_nv12(talking_frames(0, n))
    out = tmp_path / "lossless.mp4"
    w = VideoWriter(
        out,
        W,
        H,
        audio=None,
        name="libx264 x3 parallel",
        reason="test",
        chunks=rolling_chunks(n, 3, max_frames=8),
        crf=0,
        preset="ultrafast",
        fps=25,
        write_hook=None,
        window=3,
    )
    assert len(w.chunks) == 9
    _write_rolling(w, nv12, batch=9)
    w.close()
    with av.open(str(out)) as c:
        decoded = list(c.decode(video=0))
    assert [round(f.time * 25, 6) for f in decoded] == list(range(n))
    got = np.stack([f.to_ndarray(format="nv12") for f in decoded])
    assert np.array_equal(got, nv12)
    assert list(spill_root.iterdir()) == []


def test_audio_encoded_by_a_worker_equals_the_in_process_audio(tmp_path, wav):
    single = tmp_path / "one.mp4"
    par = tmp_path / "par.mp4"
    for out, enc in ((single, "x264"), (par, "x264-parallel")):
        with open_video(out, W, H, audio=wav, encoder=enc, workers=2, total_frames=60, rolling=True) as w:
            _write_rolling(w, talking_frames(0, 60))
    a1, a2 = _packets(single)[1], _packets(par)[1]
    assert len(a1) > 30 and a1 == a2
    with av.open(str(par)) as c:
        a = c.streams.audio[0]
        assert abs(float(a.duration * a.time_base) - 2.4) < 0.01


def test_a_lane_takes_its_chunks_in_turn(tmp_path, spill_root):
    chunks = rolling_chunks(40, 2, max_frames=10)
    w = VideoWriter(
        tmp_path / "o.mp4",
        W,
        H,
        audio=None,
        name="libx264 x2 parallel",
        reason="test",
        chunks=chunks,
        crf=20,
        preset="ultrafast",
        fps=25,
        write_hook=None,
        window=2,
    )
    w.write(talking_frames(0, 5), first_index=0)
    with pytest.raises(ValueError, match="must be complete"):
        w.write(talking_frames(20, 2), first_index=20)  # lane 0's next chunk before 0..10 is done
    w.abort()
    assert list(spill_root.iterdir()) == [] and list(tmp_path.glob("*.mp4")) == []


@pytest.mark.parametrize("how", ["abort", "disk full", "worker dies"])
def test_a_failed_or_cancelled_writer_leaves_no_file_and_no_spill(tmp_path, wav, spill_root, how):
    out = tmp_path / "out.mp4"
    out.write_bytes(b"previous render")
    written = [0]

    def hook(nbytes):
        written[0] += nbytes
        if how == "disk full" and written[0] > 30_000:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    frames = talking_frames(0, 120)
    w = VideoWriter(
        out,
        W,
        H,
        audio=wav,
        name="libx264 x2 parallel",
        reason="test",
        chunks=rolling_chunks(120, 2, 10),
        crf=20,
        preset="ultrafast",
        fps=25,
        write_hook=hook,
        window=2,
    )
    assert any(spill_root.iterdir())
    with pytest.raises((RenderError, RuntimeError)) as info:
        with w:
            for k, idx in enumerate(stripes(120, 6, w.chunks, window=w.window)):
                if how == "worker dies" and k == 6:
                    w.workers[1].proc.kill()
                w.write(frames[idx], indices=idx)
                if how == "abort" and k == 8:
                    raise RuntimeError("cancelled by the user")
            w.close()
    if how == "disk full":
        assert "disk is full" in str(info.value)
    assert out.read_bytes() == b"previous render"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.mp4", "spill", "voice.wav"]
    assert list(spill_root.iterdir()) == []


def test_cancelled_render_leaves_nothing_in_ram_or_beside_the_output(tmp_path, spill_root):
    from conftest import prepare_demo_avatar, speech_pause_speech

    from studio.core.render.renderer import Renderer
    from studio.core.settings import RenderSettings

    avatar = prepare_demo_avatar(tmp_path / "home")
    voice = speech_pause_speech(tmp_path / "voice.wav", 1.2, 0.8, 1.0)
    out = tmp_path / "render" / "keep.mp4"
    out.parent.mkdir()
    out.write_bytes(b"previous render")
    r = Renderer(avatar, voice, RenderSettings(engine="classic", device="cpu", batch=8, encoder="x264-parallel"))
    seen = []
    with pytest.raises(Cancelled):
        for p in r.run(out):
            seen.append(list(spill_root.iterdir()))
            if p.done >= 24:
                r.cancel()
    assert any(seen)  # the chunks did spill to the folder given
    assert out.read_bytes() == b"previous render"
    assert [p.name for p in out.parent.iterdir()] == ["keep.mp4"]
    assert list(spill_root.iterdir()) == []


def test_a_still_picture_with_a_changing_box_skips_the_rest_and_decodes_the_same(tmp_path, spill_root):
    """libx264 mb_info through AVVideoHint: the frames outside the box are still bit for bit, the
    output decodes to the same frames as without the hint (same quality), and it is smaller."""
    from studio.core.media.hints import hints_available

    if not hints_available():
        pytest.skip("this PyAV's FFmpeg takes no video hints")
    n, w, h = 40, 320, 256
    base = talking_frames(0, 1, w, h)[0]
    frames = np.repeat(base[None], n, axis=0)
    box = (96, 96, 200, 180)
    for t in range(n):  # only the box changes
        frames[t, 96:180, 96:200] = talking_frames(t, 1, w, h)[0, 96:180, 96:200]
    nv12 = rgb_to_nv12(frames)
    outs = {}
    for hint in (None, box):
        out = tmp_path / f"{'hint' if hint else 'plain'}.mp4"
        with open_video(
            out, w, h, encoder="x264-parallel", workers=2, total_frames=n, changing=hint, preset="ultrafast"
        ) as wr:
            assert wr.changing == (None if hint is None else ((80, 80, 144, 128),))
            for idx in stripes(n, 8, wr.chunks, window=wr.window):
                wr.write(nv12[idx], indices=idx)
        with av.open(str(out)) as c:
            outs[hint is not None] = np.stack([f.to_ndarray(format="nv12") for f in c.decode(video=0)]).astype(float)
    ref = nv12.astype(float)
    psnr = {k: 10 * np.log10(255**2 / np.mean((v - ref) ** 2)) for k, v in outs.items()}
    assert psnr[True] > 38 and abs(psnr[True] - psnr[False]) < 0.5
    assert (tmp_path / "hint.mp4").stat().st_size <= (tmp_path / "plain.mp4").stat().st_size


def test_the_mux_asks_for_the_audio_under_the_video_muxed_so_far(tmp_path):
    """The audio is encoded and muxed up to the video's time, not all of it at the first frame: the
    muxed video's time was read after the muxer had rescaled the packet to the file's time base
    (1/12800 s ticks counted as frames), so the mux asked for the whole track at once and waited for
    its encoder (5.8 s of a 15,000-frame render on the H200)."""
    import io
    from fractions import Fraction

    from studio.core.media.encoders import AudioSource, configure_x264
    from studio.core.media.mux import Muxer

    class Asked(AudioSource):  # the real source, noting what the mux asks of it
        asked: list = []

        def mux_until(self, container, seconds):
            self.asked.append(seconds)
            return super().mux_until(container, seconds)

    rate, T = 48000, 100
    x = (0.1 * np.random.default_rng(0).standard_normal((rate * 4, 2))).astype(np.float32)
    sf.write(tmp_path / "v.wav", x, rate)
    audio = Asked(tmp_path / "v.wav", cache=False)
    mux = Muxer(io.BytesIO(), 25, T, audio)
    vs = mux.open()
    configure_x264(vs.codec_context, W, H, 25, 20, "ultrafast", threads=1)
    mux.start()
    frames = rgb_to_nv12(talking_frames(0, T))
    for i in range(50):  # two seconds of video
        f = av.VideoFrame.from_ndarray(frames[i], format="nv12")
        f.pts, f.time_base = i, Fraction(1, 25)
        for pkt in vs.encode(f):
            mux.video(pkt)
    assert audio.asked and 1.0 < max(audio.asked) <= 2.1, audio.asked[-3:]

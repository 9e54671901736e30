"""Streaming MP4 encoding: round trip through PyAV, parallel x264, atomic output, faults."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import av
import numpy as np
import pytest
import soundfile as sf
import torch

from studio.core.errors import AudioError, RenderError
from studio.core.media.writer import open_video, probe_nvenc
from studio.core.render.composite import rgb_to_yuv420p

W, H = 160, 128


def talking_frames(start: int, count: int, w: int = W, h: int = H) -> np.ndarray:
    """Smooth, slowly moving content (a head-like blob whose 'mouth' opens), not noise.

    A bright bar at the top encodes the frame index so decoded frames can be identified.
    """
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    out = np.empty((count, h, w, 3), np.uint8)
    for k in range(count):
        t = start + k
        cx, cy = w / 2 + 6 * np.sin(t / 9), h / 2 + 3 * np.cos(t / 7)
        head = np.exp(-(((x - cx) / (0.22 * w)) ** 2 + ((y - cy) / (0.3 * h)) ** 2))
        mouth = np.exp(
            -(((x - cx) / (0.06 * w)) ** 2 + ((y - cy - 0.12 * h) / (0.01 * h + 0.02 * h * abs(np.sin(t / 3)))) ** 2)
        )
        bg = 60 + 30 * y / h
        lum = bg + 150 * head - 100 * mouth
        img = np.stack([lum + 20, lum, lum - 20 + 10 * x / w], -1)
        img[:6] = 0
        img[:6, 2 * (t % (w // 2)) : 2 * (t % (w // 2)) + 2] = 255  # the index marker
        out[k] = np.clip(img, 0, 255).astype(np.uint8)
    return out


@pytest.fixture
def wav(tmp_path) -> Path:
    path = tmp_path / "voice.wav"
    rate = 22050
    t = np.arange(int(2.37 * rate)) / rate  # 2.37 s -> ceil(59.25) = 60 frames
    sf.write(path, (0.2 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), rate)
    return path


def _encode(path, n=60, chunk=10, **kw):
    with open_video(path, W, H, total_frames=n, **kw) as w:
        for s in range(0, n, chunk):
            w.write(talking_frames(s, min(chunk, n - s)))
    return w


def _decode_y(path) -> np.ndarray:
    with av.open(str(path)) as c:
        return np.stack([f.to_ndarray(format="yuv420p")[:H] for f in c.decode(video=0)])


def _psnr(a, b) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255**2 / mse)


def test_round_trip_frames_rate_timestamps_audio_and_colour(tmp_path, wav):
    out = tmp_path / "out.mp4"
    w = _encode(out, audio=wav, encoder="x264")
    assert w.name == "libx264" and w.chunks == [(0, 60)]
    with av.open(str(out)) as c:
        v, a = c.streams.video[0], c.streams.audio[0]
        assert (v.codec_context.name, v.width, v.height) == ("h264", W, H)
        assert v.average_rate == 25
        cc = v.codec_context
        assert (cc.color_primaries, cc.color_trc, cc.colorspace, cc.color_range) == (1, 1, 1, 1)  # BT.709, tv
        assert a.codec_context.name == "aac" and a.sample_rate == 22050
        v_dur, a_dur = float(v.duration * v.time_base), float(a.duration * a.time_base)
        frames = list(c.decode(video=0))
    assert len(frames) == 60 and abs(v_dur - 60 / 25) < 1e-6
    assert abs(a_dur - 2.37) < 0.01 and abs(v_dur - a_dur) < 1 / 25
    assert [round(f.time * 25, 6) for f in frames] == list(range(60))  # frame t at t/25
    assert frames[0].format.name == "yuv420p"
    data = out.read_bytes()
    assert data.index(b"moov") < data.index(b"mdat")  # faststart: the index comes first
    y_ref = rgb_to_yuv420p(talking_frames(0, 60))[0]
    assert _psnr(np.stack([f.to_ndarray(format="yuv420p")[:H] for f in frames]), y_ref) > 35


def test_parallel_x264_joins_into_one_stream_close_to_the_single_encoder(tmp_path):
    single = _encode(tmp_path / "one.mp4", encoder="x264")
    par = _encode(tmp_path / "par.mp4", encoder="x264-parallel", workers=3, chunk=7)
    assert par.chunks == [(0, 20), (20, 40), (40, 60)] and "parallel" in par.name
    with av.open(str(tmp_path / "par.mp4")) as c:
        assert len(c.streams.video) == 1 and c.streams.video[0].average_rate == 25
        pkts = [p for p in c.demux(video=0) if p.size]
        times = sorted(round(float(p.pts * p.time_base) * 25, 6) for p in pkts)
        keys = [round(float(p.pts * p.time_base) * 25) for p in pkts if p.is_keyframe]
    assert times == list(range(60))
    assert {0, 20, 40} <= set(keys)  # every chunk opens with a keyframe (closed GOPs)
    a, b = _decode_y(tmp_path / "one.mp4"), _decode_y(tmp_path / "par.mp4")
    assert len(a) == len(b) == single.frames_written == 60
    assert _psnr(a, b) > 35


def test_chunks_can_be_fed_interleaved_in_any_order(tmp_path):
    out = tmp_path / "inter.mp4"
    n = 45
    with open_video(out, W, H, encoder="x264-parallel", workers=3, total_frames=n) as w:
        # chunks (0,15) (15,30) (30,45), fed 5 frames at a time: last chunk first, then round-robin
        order = [30, 35, 0, 15, 40, 5, 20, 10, 25]
        for s in order:
            w.write(talking_frames(s, 5), first_index=s)
        with pytest.raises(ValueError, match="expects frame"):
            w.write(talking_frames(0, 1), first_index=0)  # chunk 0 is already past frame 0
    y = _decode_y(out)
    ref = rgb_to_yuv420p(talking_frames(0, n))[0]
    assert len(y) == n
    # each decoded frame is closest to its own source frame (the index marker moves every frame)
    nearest = [int(np.argmin([np.mean((y[k, :6].astype(int) - r[:6]) ** 2) for r in ref])) for k in range(n)]
    assert nearest == list(range(n))


def test_striped_batches_with_indices_reach_their_chunks(tmp_path):
    from studio.core.render.plan import stripes

    out = tmp_path / "striped.mp4"
    n = 45
    frames = talking_frames(0, n)
    with open_video(out, W, H, encoder="x264-parallel", workers=3, total_frames=n) as w:
        batches = stripes(n, 6, w.chunks)  # each batch: 2 frames of each of the 3 chunks
        assert len(batches[0]) == 6
        for idx in batches:
            w.write(frames[idx], indices=idx)
        with pytest.raises(ValueError, match="expects frame"):
            w.write(frames[:1], indices=[0])
    y = _decode_y(out)
    ref = rgb_to_yuv420p(frames)[0]
    assert len(y) == n
    nearest = [int(np.argmin([np.mean((y[k, :6].astype(int) - r[:6]) ** 2) for r in ref])) for k in range(n)]
    assert nearest == list(range(n))


def test_exception_or_ctrl_c_leaves_nothing_and_keeps_an_existing_output(tmp_path, wav):
    out = tmp_path / "out.mp4"
    out.write_bytes(b"previous render")
    for exc in (RuntimeError("boom"), KeyboardInterrupt()):
        for encoder in ("x264", "x264-parallel"):
            with pytest.raises(type(exc)):
                with open_video(out, W, H, audio=wav, encoder=encoder, workers=2, total_frames=60) as w:
                    w.write(talking_frames(0, 10))
                    if encoder != "x264":
                        w.write(talking_frames(30, 5), first_index=30)  # chunk 1 spills to disk
                    raise exc
            assert out.read_bytes() == b"previous render"
            assert sorted(p.name for p in tmp_path.iterdir()) == ["out.mp4", "voice.wav"]
    w = _encode(out, n=10, audio=wav)
    assert out.read_bytes()[4:8] == b"ftyp" and w.close() == str(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.mp4", "voice.wav"]


def test_abort_deletes_temporaries(tmp_path):
    w = open_video(tmp_path / "x.mp4", W, H, encoder="x264-parallel", workers=2, total_frames=20)
    w.write(talking_frames(10, 4), first_index=10)
    assert len(list(tmp_path.iterdir())) == 1  # the hidden MP4; the chunks spill to RAM
    if Path("/dev/shm").is_dir():
        assert w.spill_dir.parent == Path("/dev/shm") and w.spill_dir.name.startswith(".x.")
    assert w.spill_dir.is_dir()
    w.abort()
    assert list(tmp_path.iterdir()) == [] and not w.spill_dir.exists()


def test_missing_frames_fail_the_close_and_leave_nothing(tmp_path):
    w = open_video(tmp_path / "x.mp4", W, H, encoder="x264-parallel", workers=2, total_frames=20)
    w.write(talking_frames(0, 10))
    with pytest.raises(RenderError, match="never written"):
        w.close()
    assert list(tmp_path.iterdir()) == []


def _read_only_folder(tmp_path) -> Path:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    for folder in (ro, Path("/sys")):  # root ignores permission bits; sysfs refuses new files
        try:
            (folder / ".probe").touch()
        except OSError:
            return folder
        (folder / ".probe").unlink()
    pytest.skip("no read-only folder available")


def test_missing_or_read_only_output_folder(tmp_path):
    from studio.core.media.writer import check_output

    for check in (lambda p: open_video(p, W, H), check_output):
        with pytest.raises(RenderError, match="does not exist"):
            check(tmp_path / "nope" / "o.mp4")
    ro = _read_only_folder(tmp_path)
    for check in (lambda p: open_video(p, W, H), check_output):
        with pytest.raises(RenderError, match="not writable"):
            check(ro / "o.mp4")
    (tmp_path / "ok.mp4").write_bytes(b"keep")
    assert check_output(tmp_path / "ok.mp4") == tmp_path / "ok.mp4"
    assert (tmp_path / "ok.mp4").read_bytes() == b"keep"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ok.mp4", "ro"]


@pytest.mark.parametrize("encoder", ["x264", "x264-parallel"])
def test_disk_full_mid_write_raises_and_leaves_nothing(tmp_path, wav, encoder):
    out = tmp_path / "out.mp4"
    out.write_bytes(b"old")
    written = [0]

    def hook(nbytes):
        written[0] += nbytes
        if written[0] > 20_000:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(RenderError, match="disk is full"):
        _encode(out, n=200, audio=wav, encoder=encoder, workers=2, write_hook=hook)
    assert written[0] > 20_000
    assert out.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.mp4", "voice.wav"]


def test_odd_size_is_padded_by_edge_replication_not_rescaled(tmp_path):
    out = tmp_path / "odd.mp4"
    frames = talking_frames(0, 10, w=W - 1, h=H - 1)
    with open_video(out, W - 1, H - 1, encoder="x264") as w:
        assert (w.enc_width, w.enc_height) == (W, H)
        w.write(torch.from_numpy(frames))  # torch input too
    y = _decode_y(out)
    assert y.shape == (10, H, W)
    ref = rgb_to_yuv420p(np.pad(frames, ((0, 0), (0, 1), (0, 1), (0, 0)), mode="edge"))[0]
    assert _psnr(y, ref) > 35


def test_nv12_input_is_encoded_as_given(tmp_path):
    from studio.core.render.composite import rgb_to_nv12

    out = tmp_path / "nv12.mp4"
    rgb = talking_frames(0, 12)
    with open_video(out, W, H, encoder="x264") as w:
        w.write(rgb_to_nv12(rgb))
    assert _psnr(_decode_y(out), rgb_to_yuv420p(rgb)[0]) > 35


def test_unusual_audio_rate_is_resampled_and_keeps_its_length(tmp_path):
    path = tmp_path / "odd_rate.wav"
    rate = 37_800
    stereo = np.stack([np.sin(np.arange(int(1.5 * rate)) / 30.0)] * 2, -1).astype(np.float32) * 0.1
    sf.write(path, stereo, rate)
    out = tmp_path / "o.mp4"
    _encode(out, n=38, audio=path)  # 1.5 s -> 38 frames
    with av.open(str(out)) as c:
        a = c.streams.audio[0]
        assert a.sample_rate == 48_000 and a.codec_context.channels == 2
        assert abs(float(a.duration * a.time_base) - 1.5) < 0.01


def test_unreadable_audio_is_an_audio_error_before_encoding(tmp_path):
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"not audio at all")
    with pytest.raises(AudioError):
        open_video(tmp_path / "o.mp4", W, H, audio=bad)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.wav"]


def test_nvenc_falls_back_to_x264_and_says_why(tmp_path):
    ok, why = probe_nvenc()
    if ok:
        pytest.skip("this machine has NVENC")
    assert why
    w = open_video(tmp_path / "o.mp4", W, H, encoder="nvenc")
    assert w.name == "libx264" and w.reason.startswith("NVENC unavailable:")
    w.abort()
    auto = open_video(tmp_path / "o.mp4", W, H, encoder="auto", total_frames=60)
    assert auto.name.startswith("libx264") and "NVENC unavailable" in auto.reason
    auto.abort()
    assert list(tmp_path.iterdir()) == []


class _X264AnnexB:
    """A real libx264 encoder producing what NVENC produces (Annex B, no B-frames, bytes per call).

    Stands in for the hardware encoder, which no test machine has, to run the NVENC writer's path
    (elementary stream on disk, then muxed with the audio at close).
    """

    def __init__(self, width, height, fps, crf, preset):
        from fractions import Fraction

        self.ctx = av.CodecContext.create("libx264", "w")
        self.ctx.width, self.ctx.height, self.ctx.pix_fmt = width, height, "nv12"
        self.ctx.time_base = Fraction(1, fps)
        self.ctx.options = {"preset": preset, "crf": str(crf), "bf": "0"}
        self.ctx.open()

    def encode(self, nv12, pts):
        vf = av.VideoFrame.from_ndarray(np.ascontiguousarray(nv12), format="nv12")
        vf.pts = pts
        return [bytes(p) for p in self.ctx.encode(vf)]

    def flush(self):
        return [bytes(p) for p in self.ctx.encode(None)]


def test_elementary_stream_path_used_by_nvenc_muxes_frames_and_audio(tmp_path, wav, monkeypatch):
    from studio.core.media import writer as encode

    monkeypatch.setitem(encode.ELEMENTARY, "annexb", _X264AnnexB)
    out = tmp_path / "nv.mp4"
    with encode.VideoWriter(
        out,
        W,
        H,
        audio=wav,
        name="annexb h264",
        reason="stand-in",
        chunks=[(0, 60)],
        crf=20,
        preset="veryfast",
        fps=25,
        write_hook=None,
    ) as w:
        for s in range(0, 60, 12):
            w.write(talking_frames(s, 12))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nv.mp4", "voice.wav"]
    with av.open(str(out)) as c:
        v, a = c.streams.video[0], c.streams.audio[0]
        assert v.average_rate == 25 and a.codec_context.name == "aac"
        assert (v.codec_context.color_primaries, v.codec_context.color_range) == (1, 1)
        v_dur, a_dur = float(v.duration * v.time_base), float(a.duration * a.time_base)
        times = [round(f.time * 25, 6) for f in c.decode(video=0)]
    assert times == list(range(60)) and abs(v_dur - 2.4) < 1e-6 and abs(v_dur - a_dur) < 1 / 25
    assert _psnr(_decode_y(out), rgb_to_yuv420p(talking_frames(0, 60))[0]) > 35


def test_bad_settings_and_frame_shapes_are_refused(tmp_path):
    with pytest.raises(RenderError, match="preset"):
        open_video(tmp_path / "o.mp4", W, H, preset="warp9")
    with pytest.raises(RenderError, match="CRF"):
        open_video(tmp_path / "o.mp4", W, H, crf=70)
    with pytest.raises(RenderError, match="encoder"):
        open_video(tmp_path / "o.mp4", W, H, encoder="ffmpeg")
    with open_video(tmp_path / "o.mp4", W, H, encoder="x264") as w:
        with pytest.raises(ValueError, match="expected RGB"):
            w.write(np.zeros((1, H, W + 2, 3), np.uint8))
        w.write(talking_frames(0, 2))
    assert w.frames_written == 2 and (tmp_path / "o.mp4").stat().st_size > 0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_frames_go_straight_to_the_encoder_processes(tmp_path):
    """GPU batches DMA'd into the workers' page-locked slots decode like the host path."""
    rgb = talking_frames(0, 48)
    host, gpu = tmp_path / "host.mp4", tmp_path / "gpu.mp4"
    for path, on_gpu in ((host, False), (gpu, True)):
        with open_video(path, W, H, encoder="x264-parallel", total_frames=48, workers=3) as w:
            if on_gpu:
                assert w.takes_gpu_frames()
            for a in range(0, 48, 8):
                batch = torch.from_numpy(rgb[a : a + 8])
                w.write(batch.cuda() if on_gpu else batch.numpy(), first_index=a)
    a, b = _decode_y(host), _decode_y(gpu)
    assert a.shape == b.shape == (48, H, W)
    assert _psnr(a, b) > 40


def test_a_worker_spills_several_frames_sent_in_one_message(tmp_path):
    """The GPU path hands a worker a run of frames in one message; the worker writes the packets."""
    from studio.core.media.x264_pool import REC, SLOTS, ProcessEncoder, worker_pool
    from studio.core.render.composite import rgb_to_nv12

    spill = tmp_path / "chunk.spill"
    enc = ProcessEncoder(worker_pool(1)[0], W, H, 25, 20, "ultrafast", path=spill)
    assert enc.extradata  # headers of the opened encoder
    nv = rgb_to_nv12(talking_frames(0, 5))
    ids = [enc.free.pop() for _ in range(5)]
    for k, slot in enumerate(ids):
        enc.slots[slot][:] = nv[k]
    enc.w.conn.send(("frames", [(slot, k) for k, slot in enumerate(ids)]))
    while len(enc.free) < SLOTS:  # every slot comes back (one answer may bring several)
        assert enc.collect(block=True) == []  # packets go to the file, not back
    assert enc.flush() == [] and enc.busy_s > 0
    recs, data = [], spill.read_bytes()
    while data:
        pts, dts, size, key = REC.unpack_from(data)
        recs.append((pts, key))
        data = data[REC.size + size :]
    assert sorted(p for p, _ in recs) == [0, 1, 2, 3, 4] and recs[0] == (0, 1)  # opens on a keyframe

"""Decoded sizes have limits of their own, read from headers before anything is decoded.

A file's size says little about what it costs: a 30 KB FLAC can declare ten hours (2.3 GB of
16 kHz samples), a 450 KB PNG 12000x12000 pixels (432 MB of RGB). Each case runs the real
``studio`` command (exit code, the one stderr line, its peak memory) or the core function the
command uses; long audio is analysed in one streaming pass, and an in/out range of a long
voice-over prepares only its stretch.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from conftest import ROOT, prepare_demo_avatar, speechlike

# ------------------------------------------------------------------------------------------------
# Helpers


def studio(home: Path, *args, env: dict | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "studio", *map(str, args)],
        capture_output=True,
        text=True,
        env={**os.environ, "STUDIO_HOME": str(home), **(env or {})},
        timeout=timeout,
        cwd=ROOT,
    )


def peak_rss_mb(home: Path, *args) -> tuple[float, subprocess.CompletedProcess]:
    """The peak resident memory of ``studio ARGS`` (a fresh parent, so no other child counts)."""
    code = (
        "import resource, subprocess, sys\n"
        "r = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "sys.stdout.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) + '\\n' + str(r.returncode)"
        " + '\\n' + r.stderr)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, sys.executable, "-m", "studio", *map(str, args)],
        capture_output=True,
        text=True,
        env={**os.environ, "STUDIO_HOME": str(home)},
        timeout=300,
        cwd=ROOT,
    )
    kb, rc, err = r.stdout.split("\n", 2)
    return int(kb) / 1024, subprocess.CompletedProcess(args, int(rc), "", err)


def one_error_line(r: subprocess.CompletedProcess, *needles: str) -> str:
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert len(lines) == 1, r.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def flac_declaring(path: Path, seconds: float, rate: int = 16_000) -> Path:
    """A 2 s FLAC whose STREAMINFO says it holds ``seconds`` (what libsndfile reports)."""
    sf.write(path, np.zeros(2 * rate, np.int16), rate, subtype="PCM_16", format="FLAC")
    data = bytearray(path.read_bytes())
    assert data[:4] == b"fLaC" and data[4] & 0x7F == 0  # the first block is STREAMINFO
    # STREAMINFO: 10 bytes of block and frame sizes, then 20 bits rate, 3 channels, 5 bits per
    # sample and 36 bits of total samples in one big-endian 64-bit field
    field = int.from_bytes(data[18:26], "big")
    field = (field & ~((1 << 36) - 1)) | int(seconds * rate)
    data[18:26] = field.to_bytes(8, "big")
    path.write_bytes(bytes(data))
    return path


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("limits_home")
    prepare_demo_avatar(home, "astro")
    return home


# ------------------------------------------------------------------------------------------------
# Audio: the duration from the header


def test_a_voice_over_over_the_limit_is_refused_from_its_header(home, tmp_path):
    ten_hours = flac_declaring(tmp_path / "ten_hours.flac", 10 * 3600)
    assert ten_hours.stat().st_size < 50_000
    peak, r = peak_rss_mb(home, "analyze", ten_hours)
    one_error_line(r, "ten_hours.flac: is 10 hours long, over the 4 hours limit", "STUDIO_MAX_AUDIO_MINUTES")
    assert peak < 400, f"{peak:.0f} MB"  # refused before decoding (it used to take 2.3 GB)
    out = tmp_path / "out"
    out.mkdir()
    r = studio(home, "render", "--avatar", "astro", "--audio", ten_hours, "-o", out / "talk.mp4", "--engine", "classic")
    one_error_line(r, "is 10 hours long")
    assert os.listdir(out) == []
    # the limit is the user's to set
    one_error_line(
        studio(home, "analyze", flac_declaring(tmp_path / "hour.flac", 3600), env={"STUDIO_MAX_AUDIO_MINUTES": "30"}),
        "is 60 minutes long, over the 30 minutes limit",
    )
    one_error_line(
        studio(home, "analyze", tmp_path / "hour.flac", env={"STUDIO_MAX_AUDIO_MINUTES": "lots"}),
        "STUDIO_MAX_AUDIO_MINUTES=lots: give a number from 0.01",
    )


def test_serve_has_its_own_audio_limit(tmp_path):
    import httpx
    from served import Server

    hour = flac_declaring(tmp_path / "hour.flac", 3600)
    two_min = tmp_path / "two_min.flac"
    sf.write(two_min, np.zeros(8_000 * 120, np.int16), 8_000, subtype="PCM_16", format="FLAC")
    with Server(tmp_path / "srv", "--max-audio-minutes", "10", "--max-upload-mb", "1") as srv:
        with open(hour, "rb") as fh:
            r = httpx.post(f"{srv.url}/v1/audio", files={"file": ("hour.flac", fh)}, timeout=60)
        assert r.status_code == 422, r.text
        detail = r.text  # one sentence, whatever the envelope
        assert "is 60 minutes long, over the 10 minutes limit" in detail and "--max-audio-minutes" in detail, detail
        with open(two_min, "rb") as fh:
            ok = httpx.post(f"{srv.url}/v1/audio", files={"file": ("two_min.flac", fh)}, timeout=60)
        assert ok.status_code in (200, 201), ok.text
    r = subprocess.run(
        [sys.executable, "-m", "studio", "serve", "--max-audio-minutes", "0"],
        capture_output=True,
        text=True,
        env={**os.environ, "STUDIO_HOME": str(tmp_path / "srv")},
        timeout=60,
    )
    one_error_line(r, "--max-audio-minutes 0: give a positive number of minutes")


def test_long_audio_is_analysed_in_bounded_memory(home, tmp_path):
    """Three hours of silence (a 0.3 MB FLAC): `studio analyze` streams it (main held 691 MB of samples)."""
    path = tmp_path / "three_hours.flac"
    zeros = np.zeros(8_000 * 600, np.int16)
    with sf.SoundFile(path, "w", 8_000, 1, "PCM_16", format="FLAC") as fh:
        for _ in range(18):
            fh.write(zeros)
    small = tmp_path / "one_second.flac"
    sf.write(small, np.zeros(8_000, np.int16), 8_000, subtype="PCM_16", format="FLAC")
    base, r0 = peak_rss_mb(home, "analyze", small)
    peak, r = peak_rss_mb(home, "analyze", path)
    assert r0.returncode == 0 and r.returncode == 0, r.stderr
    assert peak - base < 120, f"{peak:.0f} MB against {base:.0f} MB for one second"


def test_the_streaming_analysis_equals_the_whole_array_one(tmp_path):
    from studio.core.media import analysis, audio

    rng = np.random.default_rng(3)
    for rate, channels, seconds in [(44_100, 2, 13.37), (22_050, 1, 3.01), (16_000, 1, 0.3)]:
        x = (0.3 * rng.standard_normal((int(seconds * rate), channels))).astype(np.float32)
        x[: rate // 2] *= 0.001
        path = tmp_path / f"n{rate}.flac"
        sf.write(path, x, rate, subtype="PCM_16")
        whole = analysis.analysis_of(audio.load(path))
        streamed = analysis.stream_analysis(audio.probe(path))
        for k in ("rms", "env_min", "env_max"):
            assert np.array_equal(getattr(whole, k), getattr(streamed, k)), (rate, k)


# ------------------------------------------------------------------------------------------------
# Pictures: the pixel count from the header


def test_a_decompression_bomb_photo_is_one_sentence_without_pils_warning(home, tmp_path):
    import PIL.Image

    bomb = tmp_path / "bomb.png"
    PIL.Image.new("1", (12_000, 12_000), 1).save(bomb)  # 41 KB (one bit a pixel: quick to make)
    assert bomb.stat().st_size < 100_000
    peak, r = peak_rss_mb(home, "avatar", "add", "bomb", bomb)
    one_error_line(r, "bomb.png: the photo is 12000x12000 (144 megapixels), over Studio's 100-megapixel limit")
    assert "DecompressionBomb" not in r.stderr
    assert peak < 400, f"{peak:.0f} MB"  # it used to decode: 1.73 GB
    assert not (home / "avatars" / "bomb").exists()


def test_a_video_with_huge_frames_is_refused_before_a_frame_is_decoded(home, tmp_path):
    import av

    path = tmp_path / "wide.mov"
    with av.open(str(path), "w") as c:  # one black-and-white 10240x10000 PNG frame: 36 KB
        s = c.add_stream("png", rate=25)
        s.width, s.height, s.pix_fmt = 10_240, 10_000, "monob"
        frame = av.VideoFrame.from_ndarray(np.zeros((10_000, 10_240), np.uint8), format="gray").reformat(format="monob")
        for pkt in s.encode(frame):
            c.mux(pkt)
        for pkt in s.encode(None):
            c.mux(pkt)
    one_error_line(
        studio(home, "avatar", "add", "wide", path), "the video frame is 10240x10000 (102 megapixels)", "scale it down"
    )


# ------------------------------------------------------------------------------------------------
# An in/out range of a long voice-over prepares only its stretch


@pytest.fixture(scope="module")
def six_minutes(tmp_path_factory) -> Path:
    """Six minutes of speech-like sound with pauses, at 44.1 kHz (longer than a clip prepared whole)."""
    path = tmp_path_factory.mktemp("long") / "six_minutes.flac"
    x = speechlike(30.0, 44_100, seed=4)
    x[44_100 * 10 : 44_100 * 12] = 0
    with sf.SoundFile(path, "w", 44_100, 1, "PCM_16", format="FLAC") as fh:
        for i in range(12):
            fh.write(x * (0.5 + 0.05 * i))
    return path


def test_a_range_of_a_long_clip_prepares_only_its_stretch(home, six_minutes, monkeypatch):
    from studio.core.engines import classic_visemes
    from studio.core.render.renderer import Renderer
    from studio.core.settings import RenderSettings

    monkeypatch.setenv("STUDIO_HOME", str(home))
    hops: list[int] = []
    features = classic_visemes.features
    monkeypatch.setattr(classic_visemes, "features", lambda x, n: hops.append(n) or features(x, n))
    s = RenderSettings(engine="classic")
    part = Renderer("astro", six_minutes, s, frames=(6000, 6025))
    got = np.concatenate([f.cpu().numpy() for _, f in part.iter_frames([(6000, 6025)])])
    assert part.wave.window == (5250, 7500)  # 30 s each side, in whole 30 s pieces
    assert not part.wave.samples[: 5000 * 640].any()  # nothing before the stretch was decoded
    range_hops = sum(hops)
    assert range_hops <= 2250 * 4 + 30 * 125 * 4, hops  # its stretch and the 30 sampled pieces
    hops.clear()
    whole = Renderer("astro", six_minutes, s)
    want = np.concatenate([f.cpu().numpy() for _, f in whole.iter_frames([(6000, 6025)])])
    assert sum(hops) >= 9000 * 4  # the whole clip
    # the same frames as the whole render (the stretch is decoded by seeking: float rounding)
    assert np.abs(got.astype(np.int16) - want).max() <= 1
    assert (got != want).mean() < 1e-4
    assert np.array_equal(part.plan.weight[5800:6200], whole.plan.weight[5800:6200])
    # a frame outside the stretch prepares that one instead
    assert np.abs(part.frame(100).astype(np.int16) - whole.frame(100)).max() <= 1
    assert part.wave.window == (0, 1500)


def test_a_stream_without_a_length_is_counted_no_further_than_the_limit(home, tmp_path):
    """Matroska written without seeking declares no duration: its samples are counted by decoding,
    and the count stops at the limit (an endless stream is never decoded to its end)."""
    import io

    import av

    class NoSeek(io.RawIOBase):
        def __init__(self, fh):
            self.fh = fh

        def writable(self):
            return True

        def write(self, b):
            return self.fh.write(b)

    path = tmp_path / "long.mka"
    with open(path, "wb") as raw, av.open(NoSeek(raw), "w", format="matroska") as c:
        s = c.add_stream("aac", rate=16_000, layout="mono")
        for k in range(0, 16_000 * 6, 1024):
            frame = av.AudioFrame.from_ndarray(np.zeros((1, 1024), np.float32), format="fltp", layout="mono")
            frame.sample_rate, frame.pts = 16_000, k
            for pkt in s.encode(frame):
                c.mux(pkt)
        for pkt in s.encode(None):
            c.mux(pkt)
    with av.open(str(path)) as c:
        assert c.streams.audio[0].duration is None and c.duration is None  # nothing in the header
    one_error_line(
        studio(home, "analyze", path, env={"STUDIO_MAX_AUDIO_MINUTES": "0.05"}),
        "long.mka: is longer than the 0.05 minutes limit",
        "STUDIO_MAX_AUDIO_MINUTES",
    )
    assert studio(home, "analyze", path).returncode == 0

"""Loudness: BS.1770 integrated loudness streamed in blocks equals pyloudnorm's, the true-peak limiter,
--loudness through the render (AAC in MP4, PCM in .mov) within 0.5 LU of the target, the result's
before/after report, silent files and bad values."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pyloudnorm
import pytest
import soundfile as sf
from conftest import prepare_demo_avatar, speechlike

from studio.core.media import loudness
from studio.core.render.renderer import Renderer
from studio.core.settings import RenderSettings


def _speech(path, seconds: float, rate: int, channels: int = 1, gain: float = 0.5, subtype="FLOAT"):
    x = speechlike(seconds, rate, 3) * gain
    x[int(rate * 0.8) : int(rate * 1.1)] = 0  # a pause
    if channels == 2:
        x = np.stack([x, 0.6 * np.roll(x, 57)], 1)
    sf.write(path, x.astype(np.float32), rate, subtype=subtype)
    return path


def _true_peak(x: np.ndarray, rate: int) -> float:
    import soxr

    up = soxr.resample(np.asarray(x, np.float32), rate, rate * 4, quality="HQ")
    return 20 * math.log10(max(float(np.abs(up).max()), float(np.abs(x).max())))


@pytest.fixture(scope="module")
def avatar(tmp_path_factory):
    return prepare_demo_avatar(tmp_path_factory.mktemp("loud_home"))


@pytest.mark.parametrize("rate, channels, block", [(44_100, 2, 1 << 16), (48_000, 1, 1000), (22_050, 2, 777)])
def test_streamed_loudness_equals_pyloudnorm(tmp_path, monkeypatch, rate, channels, block):
    monkeypatch.setattr(loudness, "BLOCK", block)  # many blocks: the filter state and steps carry over
    path = _speech(tmp_path / "v.wav", 3.3, rate, channels)
    x, _ = sf.read(path, always_2d=True)
    lufs, tp = loudness.measure(path)
    assert lufs == pytest.approx(pyloudnorm.Meter(rate).integrated_loudness(x), abs=1e-6)
    assert tp == pytest.approx(_true_peak(x, rate), abs=0.05)


@pytest.mark.parametrize("target", [-23.0, -16.0])
def test_normalised_copy_is_at_the_target_and_under_the_peak(tmp_path, target):
    path = _speech(tmp_path / "v.flac", 4.0, 48_000, 2, gain=0.2, subtype="PCM_24")
    with loudness.normalised(path, target, -1.0) as (out, report):
        y, rate = sf.read(out, always_2d=True)
        assert sf.info(out).subtype == "PCM_24" and rate == 48_000 and y.shape[1] == 2
        assert pyloudnorm.Meter(rate).integrated_loudness(y) == pytest.approx(target, abs=0.1)
        assert _true_peak(y, rate) <= -1.0 + 0.05
    assert not os.path.exists(out)  # the temporary goes with the block
    x, _ = sf.read(path, always_2d=True)
    assert report.before_lufs == pytest.approx(pyloudnorm.Meter(48_000).integrated_loudness(x), abs=0.01)
    assert report.after_lufs == pytest.approx(target, abs=0.1) and report.target_lufs == target
    assert report.gain_db == pytest.approx(target - report.before_lufs, abs=0.5)


def test_the_limiter_holds_peaks_of_a_loud_target_and_blocks_join(tmp_path, monkeypatch):
    rate = 48_000
    t = np.arange(int(rate * 3)) / rate
    x = 0.1 * np.sin(2 * np.pi * 220 * t)
    x[::4800] += 0.9  # sharp clicks: a high crest factor
    path = tmp_path / "peaky.wav"
    sf.write(path, x.astype(np.float32), rate, subtype="FLOAT")
    with loudness.normalised(path, -12.0, -2.0) as (out, report):
        y, _ = sf.read(out)
    assert report.limited and report.after_true_peak <= -2.0 + 0.05
    assert _true_peak(y, rate) <= -2.0 + 0.05
    assert report.after_lufs == pytest.approx(-12.0, abs=0.5)
    monkeypatch.setattr(loudness, "BLOCK", 5000)  # the limiter in many overlapping blocks: the same output
    with loudness.normalised(path, -12.0, -2.0) as (out, again):
        z, _ = sf.read(out)
    assert again.gain_db == report.gain_db and np.abs(z - y).max() < 2e-6


def test_a_silent_voice_over_is_left_as_it_is_and_said(tmp_path):
    path = tmp_path / "quiet.wav"
    sf.write(path, np.zeros(48_000, np.float32), 48_000)
    with loudness.normalised(path, -23.0) as (out, report):
        assert out == str(path)
    assert report.before_lufs == report.after_lufs == -70.0 and report.gain_db == 0.0


@pytest.mark.parametrize("codec, suffix", [("h264", ".mp4"), ("prores", ".mov")])
def test_render_with_loudness_delivers_the_target_and_reports_it(avatar, tmp_path, codec, suffix):
    import av

    voice = _speech(tmp_path / "voice.wav", 1.6, 44_100, 2, gain=0.08, subtype="PCM_16")
    out = tmp_path / f"out{suffix}"
    s = RenderSettings(engine="classic", device="cpu", codec=codec, loudness=-16.0)
    r = Renderer(avatar, voice, s)
    r.render(out)
    rep = r.result.loudness
    assert rep["target_lufs"] == -16.0 and rep["after_lufs"] == pytest.approx(-16.0, abs=0.1)
    assert rep["before_lufs"] < -25 and rep["before_true_peak"] < rep["after_true_peak"] <= -1.0
    assert "loudness" in r.result.stage_ms
    with av.open(str(out)) as c:
        a = c.streams.audio[0]
        # the normalised copy is 24-bit: 24-bit PCM in the .mov
        assert a.codec_context.name == ("aac" if codec == "h264" else "pcm_s24le") and a.channels == 2
        y = np.concatenate(
            [f.to_ndarray().T if f.format.is_planar else f.to_ndarray().reshape(-1, 2) for f in c.decode(audio=0)]
        )
        rate = a.rate
    y = y.astype(np.float64) / (2.0**31 if y.dtype == np.int32 else 1.0)
    assert pyloudnorm.Meter(rate).integrated_loudness(y) == pytest.approx(-16.0, abs=0.5)
    assert [p.name for p in tmp_path.iterdir()] == ["voice.wav", out.name]  # no temporary left


def _studio(*args, home):
    env = {**os.environ, "STUDIO_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "studio", *map(str, args)], capture_output=True, text=True, env=env)


def test_cli_loudness_json_and_bad_values(avatar, tmp_path):
    home = avatar.folder.parent.parent
    voice = _speech(tmp_path / "v.wav", 1.2, 48_000, 1, gain=0.3)
    base = ("render", "--avatar", "astro", "--audio", voice, "--engine", "classic", "-o", tmp_path / "o.mp4")
    r = _studio(*base, "--loudness", "-23", "--true-peak", "-2", "--json", home=home)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["loudness"]["target_lufs"] == -23.0 and d["loudness"]["true_peak_limit"] == -2.0
    assert abs(d["loudness"]["after_lufs"] + 23.0) <= 0.1
    r = _studio(*base, "--loudness", "-3", home=home)
    assert r.returncode == 2 and "loudness must be between -70 and -5" in r.stderr and r.stderr.count("\n") == 1
    r = _studio(*base, "--loudness", "loud", home=home)
    assert r.returncode == 2 and "--loudness" in r.stderr

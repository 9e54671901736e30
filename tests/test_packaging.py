"""Desktop packaging (packaging/): the MP4 checker, the desktop entry, the frozen-app resources
path, and (only with STUDIO_PACKAGING_TEST=1) the real PyInstaller build + frozen smoke test.

The build + smoke test takes minutes on 2 cores (see docs/desktop-app.md), so it runs only with
STUDIO_PACKAGING_TEST=1, which ./dev test sets under CI (CI=true).
"""

from __future__ import annotations

import configparser
import importlib.util
import os
import shutil
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGING = ROOT / "packaging"


def _check_mp4():
    spec = importlib.util.spec_from_file_location("check_mp4", PACKAGING / "check_mp4.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _write_mp4(path: Path, frames: int, audio: bool) -> None:
    import av

    with av.open(str(path), "w") as box:
        v = box.add_stream("libx264", rate=25)
        v.width, v.height, v.pix_fmt = 64, 48, "yuv420p"
        a = box.add_stream("aac", rate=16000) if audio else None
        for i in range(frames):
            img = np.full((48, 64, 3), (i * 9) % 256, np.uint8)
            box.mux(v.encode(av.VideoFrame.from_ndarray(img, format="rgb24")))
        box.mux(v.encode(None))
        if a is not None:
            samples = (0.1 * np.sin(np.arange(frames * 640) * 0.05)).astype(np.float32)
            for k in range(0, len(samples), 1024):
                af = av.AudioFrame.from_ndarray(samples[None, k : k + 1024], format="flt", layout="mono")
                af.sample_rate, af.pts, af.time_base = 16000, k, Fraction(1, 16000)
                box.mux(a.encode(af))
            box.mux(a.encode(None))


def test_check_mp4_accepts_exact_frame_count_with_h264_and_aac(tmp_path):
    out = tmp_path / "ok.mp4"
    _write_mp4(out, 12, audio=True)
    line = _check_mp4().check(str(out), 12)
    assert "12 frames h264 64x48" in line and "aac" in line
    with pytest.raises(ValueError, match="12 video frames decoded, expected 13"):
        _check_mp4().check(str(out), 13)


def test_check_mp4_rejects_a_clip_without_audio(tmp_path):
    out = tmp_path / "mute.mp4"
    _write_mp4(out, 5, audio=False)
    with pytest.raises(ValueError, match="aac audio stream"):
        _check_mp4().check(str(out), 5)
    assert _check_mp4().main([str(out), "--frames", "5"]) == 1


def test_desktop_entry_starts_studio_with_its_icon():
    entry = configparser.ConfigParser(interpolation=None)
    entry.optionxform = str
    entry.read(PACKAGING / "studio.desktop", encoding="utf-8")
    d = entry["Desktop Entry"]
    assert d["Type"] == "Application" and d["Exec"] == "studio" and d["Icon"] == "studio"
    assert d["Terminal"] == "false" and "AudioVideo" in d["Categories"].split(";")
    assert (ROOT / "resources" / "icons" / "studio.svg").is_file()


@pytest.mark.skipif(shutil.which("desktop-file-validate") is None, reason="needs desktop-file-utils")
def test_desktop_entry_passes_desktop_file_validate():
    r = subprocess.run(["desktop-file-validate", str(PACKAGING / "studio.desktop")], capture_output=True, text=True)
    assert r.returncode == 0 and not r.stdout.strip(), r.stdout + r.stderr


def test_frozen_app_finds_resources_in_the_bundle(monkeypatch, tmp_path):
    from studio.core.env import repo_resources

    assert (repo_resources() / "demo" / "voiceover.flac").is_file()  # the checkout's resources/
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "_MEIPASS", str(tmp_path), raising=False)
    assert repo_resources() == tmp_path / "resources"


def test_spec_bundles_every_resource_the_app_reads():
    spec = (PACKAGING / "studio.spec").read_text(encoding="utf-8")
    for needed in ('"demo"', '"icons"', '"style.qss"', "studio_entry.py", '"hooks"'):
        assert needed in spec
    hooks = {p.name for p in (PACKAGING / "hooks").glob("hook-*.py")}
    assert {"hook-studio.py", "hook-mediapipe.py", "hook-studio.ui.py"} <= hooks


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("STUDIO_PACKAGING_TEST") != "1",
    reason="builds the frozen app (minutes): set STUDIO_PACKAGING_TEST=1",
)
def test_frozen_app_builds_and_renders_the_demo():
    build = subprocess.run([str(PACKAGING / "build.sh")], cwd=ROOT, capture_output=True, text=True, timeout=3600)
    assert build.returncode == 0, build.stderr[-4000:]
    assert (ROOT / "dist" / "studio" / "studio").is_file()
    smoke = subprocess.run([str(PACKAGING / "smoke_test.sh")], cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert smoke.returncode == 0, smoke.stderr[-4000:]
    assert "smoke: OK" in smoke.stderr
    assert smoke.stderr.count("706 frames h264") == 3  # demo x264, demo parallel x264, --chunks 2

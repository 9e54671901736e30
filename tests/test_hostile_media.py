"""Issue 33, round three (media and stops): damaged alpha repaired, odd but legal inputs (FLAC of
unknown length, strict JSON, a 254-byte name, mattes, signals at worker start), a killed run's AAC
temporary, a server stopping while it prepares a long voice-over, ``studio check``'s memory bound."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT
from hostile import one_line, studio, wait_job

# --------------------------------------------------------------------------------------------
# 15. A damaged alpha.npy is repaired; truncated is not an internal error; --force fixes it


@pytest.fixture
def glass_home(tmp_path, monkeypatch):
    from conftest import DEMO_AVATAR
    from PIL import Image

    home = tmp_path / "home"
    monkeypatch.setenv("STUDIO_HOME", str(home))
    rgba = np.dstack([np.asarray(Image.open(DEMO_AVATAR).convert("RGB")), np.full((512, 512), 255, np.uint8)])
    rgba[:128, :128, 3] = 0
    src = tmp_path / "glass.png"
    Image.fromarray(rgba).save(src)
    r = studio("avatar", "add", "glass", str(src), env={"STUDIO_HOME": str(home)})
    assert r.returncode == 0, r.stderr
    return home, src, rgba[..., 3]


def _scribble(path: Path) -> None:
    b = bytearray(path.read_bytes())
    b[len(b) // 2 : len(b) // 2 + 100] = b"\x07" * 100
    path.write_bytes(bytes(b))


@pytest.mark.parametrize("harm", ["scribbled", "truncated"])
def test_a_damaged_alpha_is_rebuilt_from_the_source(glass_home, harm):
    from studio.core.avatars import library

    home, _src, alpha = glass_home
    npy = home / "avatars" / "glass" / "alpha.npy"
    if harm == "scribbled":
        _scribble(npy)
    else:
        os.truncate(npy, 100_000)
    for _ in range(2):  # repaired the first time, and stays repaired
        a = library.load("glass")
        assert np.array_equal(np.asarray(a.alpha[0]), alpha)
    assert library.list_avatars()[0]["damaged"] is False


def test_avatar_add_force_repairs_a_damaged_alpha(glass_home):
    from studio.core.avatars import library

    home, src, alpha = glass_home
    npy = home / "avatars" / "glass" / "alpha.npy"
    _scribble(npy)
    r = studio("avatar", "add", "glass", str(src), "--force", env={"STUDIO_HOME": str(home)})
    assert r.returncode == 0, r.stderr
    from studio.core.avatars.builder import rebuild
    from studio.core.avatars.cache import open_assets, read_meta

    folder = home / "avatars" / "glass"
    opened = open_assets(folder, read_meta(folder), rebuild=rebuild)  # a damaged block read is rebuilt
    assert np.array_equal(np.asarray(opened.alpha[0]), alpha)  # every block checked
    assert np.array_equal(np.asarray(library.load("glass").alpha[0]), alpha)


# --------------------------------------------------------------------------------------------
# 16. Unknown-length FLAC, strict JSON, a 254-byte name that exists, signals at worker start, mattes


def unknown_length_flac(path: Path, seconds: float = 15.0, rate: int = 16_000) -> Path:
    """A FLAC whose STREAMINFO says 0 samples (unknown), as ``flac -`` and recorders write it."""
    import soundfile as sf

    x = (np.sin(np.arange(int(seconds * rate)) * 2 * np.pi * 220 / rate) * 0.3).astype(np.float32)
    sf.write(path, x, rate, format="FLAC")
    b = bytearray(path.read_bytes())
    assert b[:4] == b"fLaC" and b[4] & 0x7F == 0  # the first block is STREAMINFO
    field = int.from_bytes(b[18:26], "big") & ~((1 << 36) - 1)  # its 36-bit total-samples field: 0
    b[18:26] = field.to_bytes(8, "big")
    path.write_bytes(bytes(b))
    return path


def test_a_flac_of_unknown_length_is_decoded_to_its_real_length(tmp_path):
    import json

    flac = unknown_length_flac(tmp_path / "piped.flac")
    import soundfile as sf

    assert sf.info(str(flac)).frames > 2**62  # what libsndfile says: "unknown"
    r = studio("analyze", "--json", str(flac), env={"STUDIO_HOME": str(tmp_path / "home")})
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["duration_s"] == 15.0 and got["frames"] == 375


def test_json_output_is_strict_json_without_infinities(tmp_path):
    import json

    import soundfile as sf
    from conftest import DEMO_AVATAR

    silent = tmp_path / "silent.wav"
    sf.write(silent, np.zeros(16_000, np.float32), 16_000)
    out = tmp_path / "s.mp4"
    r = studio(
        "render", "--avatar", str(DEMO_AVATAR), "--audio", str(silent), "-o", str(out), "--json", "--loudness", "-16",
        env={"STUDIO_HOME": str(tmp_path / "home")},
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "Infinity" not in r.stdout and "NaN" not in r.stdout
    got = json.loads(r.stdout.strip().splitlines()[-1], parse_constant=lambda c: pytest.fail(f"{c} in --json"))
    assert got["loudness"]["before_true_peak"] is None


def test_a_254_byte_name_that_exists_is_refused_up_front(tmp_path):
    from conftest import DEMO_AVATAR, speech_pause_speech

    voice = speech_pause_speech(tmp_path / "v.wav", 0.3, 0.1, 0.3)
    taken = tmp_path / ("a" * 250 + ".mp4")
    taken.write_bytes(b"mine")
    env = {"STUDIO_HOME": str(tmp_path / "home")}
    for args in (
        ["queue", "add", "--avatar", str(DEMO_AVATAR), "--audio", str(voice), "-o", str(taken)],
        ["render", "--avatar", str(DEMO_AVATAR), "--audio", str(voice), "-o", str(taken)],
    ):
        r = studio(*args, env=env)
        assert r.returncode == 2, (args, r.stderr)
        line = one_line(r.stderr)
        assert "exists and is kept" in line and "--overwrite" in line
        assert "engine:" not in r.stdout + r.stderr  # refused before the render, not after it
    assert taken.read_bytes() == b"mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["v.wav", taken.name, "home"])  # nothing half-written


def test_a_stop_signal_waits_for_a_deferred_step():
    import signal

    from studio.core import signals

    assert signals.handle_stop_signals()
    try:
        done = []
        with pytest.raises(signals.Interrupted) as caught:
            with signals.deferred():
                os.kill(os.getpid(), signal.SIGTERM)
                done.append("the step ran to its end")
        assert done and caught.value.signo == signal.SIGTERM
    finally:
        for s in signals.STOP_SIGNALS:
            signal.signal(s, signal.SIG_DFL if s != signal.SIGINT else signal.default_int_handler)


def test_matte_mistakes_name_the_matte(tmp_path):
    from conftest import DEMO_AVATAR
    from PIL import Image

    black = tmp_path / "black.png"
    Image.fromarray(np.zeros((512, 512), np.uint8)).save(black)
    env = {"STUDIO_HOME": str(tmp_path / "home")}
    r = studio("avatar", "add", "m", str(DEMO_AVATAR), "--matte", str(black), env=env)
    assert r.returncode == 2 and "the matte is black everywhere" in one_line(r.stderr), r.stderr
    r = studio("avatar", "add", "m", str(DEMO_AVATAR), "--matte", "/dev/zero", env=env)
    assert r.returncode == 2, r.stderr
    line = one_line(r.stderr)
    assert "is a device, not a file" in line and "no such file" not in line


# --------------------------------------------------------------------------------------------
# 17. A SIGKILLed run's AAC-cache temporary is removed by the next command


def test_a_killed_runs_aac_cache_temporary_is_swept_by_the_next_command(tmp_path):
    from conftest import speech_pause_speech

    home = tmp_path / "home"
    voice = speech_pause_speech(tmp_path / "v.wav", 0.5, 0.1, 0.5)
    code = (
        "import os, signal\n"
        "from studio.core.media.encoders import AudioSource\n"
        f"src = AudioSource({str(voice)!r})\n"
        "src._open_local()  # a local encode starts: its packets go to a tee file in the AAC cache\n"
        "assert src._tee is not None\n"
        "print(src._tee[1], flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    env = dict(os.environ, STUDIO_HOME=str(home), PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == -9, r.stderr
    tee = Path(r.stdout.strip())
    assert tee.is_file() and tee.parent == home / "cache" / "aac"
    r = studio("queue", "list", env={"STUDIO_HOME": str(home)})
    assert r.returncode == 0, r.stderr
    assert not tee.exists() and os.listdir(home / "cache" / "aac") == []


@pytest.mark.slow
def test_the_server_stops_within_10_s_while_a_job_prepares_a_long_voice_over(tmp_path):
    import signal
    import time

    import soundfile as sf

    httpx = pytest.importorskip("httpx")
    from conftest import DEMO_AVATAR, speech_pause_speech
    from served import Server

    rate = 48_000  # resampled to 16 kHz as it is decoded: the slow part of preparing it
    long = tmp_path / "long.wav"
    with sf.SoundFile(long, "w", rate, 1, subtype="PCM_16") as f:
        minute = (np.sin(np.arange(rate * 60) * 2 * np.pi * 180 / rate) * 0.3).astype(np.float32)
        for _ in range(30):
            f.write(minute)
    short = speech_pause_speech(tmp_path / "short.wav", 0.3, 0.1, 0.3)
    avatar = tmp_path / "astro.png"
    avatar.write_bytes(Path(DEMO_AVATAR).read_bytes())
    srv = Server(tmp_path / "home", "--allow-paths", str(tmp_path))
    try:
        with httpx.Client(base_url=srv.url, timeout=300) as c:
            form = {"avatar_path": str(avatar), "engine": "classic"}
            warm = c.post("/v1/renders", data={**form, "audio_path": str(short)}).json()  # libraries loaded
            assert wait_job(c, warm["id"])["state"] == "done"
            job = c.post("/v1/renders", data={**form, "audio_path": str(long)}).json()
            deadline = time.monotonic() + 60
            while c.get(f"/v1/renders/{job['id']}").json()["state"] != "running" and time.monotonic() < deadline:
                time.sleep(0.05)
        time.sleep(1.0)  # it is decoding the voice-over now (about 10 s of work here)
        t0 = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        srv.proc.wait(30)
        took = time.monotonic() - t0
        assert took < 10, f"studio serve took {took:.1f} s to stop"
        assert "Traceback" not in srv.log_tail(4000)
        import sqlite3

        with contextlib.closing(sqlite3.connect(srv.home / "jobs.sqlite")) as db:  # as the server left it
            state = db.execute("SELECT state FROM jobs WHERE id=?", (job["id"],)).fetchone()[0]
        assert state == "interrupted"  # its preparation stopped, and the job says so (Retry runs it)
    finally:
        srv.stop()


# --------------------------------------------------------------------------------------------
# 2. studio check: the render's header limits, and memory flat in the voice-over's length


def _peak_rss_mb(*args: str, env: dict) -> tuple[subprocess.CompletedProcess, float]:
    """``studio *args`` in a child of a fresh interpreter that reports its children's peak RSS."""
    code = (
        "import resource, subprocess, sys\n"
        "r = subprocess.run([sys.executable, '-m', 'studio', *sys.argv[1:]], capture_output=True, text=True)\n"
        "sys.stdout.write(r.stdout); sys.stderr.write(r.stderr)\n"
        "print('PEAK', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)\n"
        "sys.exit(r.returncode)\n"
    )
    full = dict(os.environ, PYTHONPATH=str(ROOT), **env)
    r = subprocess.run([sys.executable, "-c", code, *args], env=full, capture_output=True, text=True, timeout=300)
    peak = int(r.stderr.rsplit("PEAK", 1)[1].split()[0]) / 1024
    r.stderr = r.stderr.rsplit("PEAK", 1)[0]
    return r, peak


@pytest.mark.slow
def test_check_keeps_the_header_limit_and_flat_memory_for_a_long_voice_over(tmp_path):
    import soundfile as sf
    from conftest import DEMO_AVATAR, speech_pause_speech

    home = tmp_path / "home"
    env = {"STUDIO_HOME": str(home)}
    voice = speech_pause_speech(tmp_path / "v.wav", 0.4, 0.1, 0.4)
    video = tmp_path / "good.mp4"
    r = studio("render", "--avatar", str(DEMO_AVATAR), "--audio", str(voice), "-o", str(video), env=env)
    assert r.returncode == 0, r.stderr
    long = tmp_path / "three-hours.flac"  # 3 h of near-silence: 300 KB of FLAC, 690 MB decoded at 16 kHz
    with sf.SoundFile(long, "w", 8000, 1, format="FLAC") as f:
        ten_minutes = np.zeros(8000 * 600, np.float32)
        for _ in range(18):
            f.write(ten_minutes)
    assert long.stat().st_size < 2_000_000
    r, peak = _peak_rss_mb("check", str(video), "--audio", str(long), env=env)
    assert r.returncode == 0, r.stderr
    assert "The voice lasts 10800.0 s" in r.stdout + r.stderr
    assert peak < 600, f"studio check peaked at {peak:.0f} MB for a 3-hour voice-over"  # before: 4.9 GB
    r, _ = _peak_rss_mb("check", str(video), "--audio", str(long), env={**env, "STUDIO_MAX_AUDIO_MINUTES": "60"})
    assert r.returncode == 2 and "over the 60 minutes limit" in one_line(r.stderr), r.stderr

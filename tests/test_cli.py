"""The ``studio`` command as a user runs it: a real subprocess, real files."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf
from conftest import DEMO_AUDIO


def studio(*args, env=None, check=False):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "studio", *map(str, args)], capture_output=True, text=True, env=e)


def test_version_and_help_do_not_import_torch():
    code = (
        "import sys\n"
        "from studio.cli import main\n"
        "for argv in (['--help'], ['--version'], ['analyze', '--help']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit as e:\n"
        "        assert e.code == 0, e.code\n"
        "heavy = [m for m in ('torch', 'PySide6', 'av', 'mediapipe', 'cv2') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "studio" in r.stdout and "analyze" in r.stdout


def test_analyze_json_on_the_demo():
    r = studio("analyze", DEMO_AUDIO, "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    for key in (
        "duration_s",
        "sample_rate",
        "channels",
        "frames",
        "fps",
        "silence_threshold",
        "silent_frames",
        "silent_mask",
    ):
        assert key in d
    assert d["frames"] == math.ceil(d["duration_s"] * 25)
    assert len(d["silent_mask"]) == d["frames"] and set(d["silent_mask"]) <= {0, 1}
    assert d["silent_frames"] == sum(d["silent_mask"])
    assert d["fps"] == 25 and d["sample_rate"] == 16_000


def test_analyze_human_output_and_threshold(tone_silence_noise):
    path, _ = tone_silence_noise
    r = studio("analyze", path)
    assert r.returncode == 0
    assert "frames:          100" in r.stdout
    assert "silent frames:   37" in r.stdout  # 25 + 12 (frame 87 holds tone)
    assert "longest silence: 25 frames" in r.stdout
    r2 = studio("analyze", path, "--threshold", "0", "--json")
    assert json.loads(r2.stdout)["silent_frames"] == 0


@pytest.mark.parametrize("kind", ["missing", "directory", "empty", "corrupt", "unreadable-format"])
def test_bad_inputs_exit_2_with_one_line(tmp_path, kind):
    if kind == "missing":
        path = tmp_path / "nope.wav"
    elif kind == "directory":
        path = tmp_path
    elif kind == "empty":
        path = tmp_path / "empty.wav"
        sf.write(path, np.zeros(0, np.float32), 16_000)
    elif kind == "corrupt":
        path = tmp_path / "corrupt.flac"
        good = tmp_path / "good.flac"
        sf.write(good, np.random.default_rng(0).standard_normal(16_000).astype(np.float32) * 0.1, 16_000)
        data = bytearray(good.read_bytes())
        data[:4] = b"XXXX"
        path.write_bytes(bytes(data))
    else:  # a real media file of a format soundfile cannot decode: an MP4 container
        path = tmp_path / "clip.m4a"
        path.write_bytes(b"\x00\x00\x00\x18ftypM4A \x00\x00\x02\x00isomiso2" + os.urandom(4000))
    r = studio("analyze", path)
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("studio: error: ")
    assert "Traceback" not in r.stderr


def test_internal_bug_exits_1_and_logs_traceback(tmp_path, studio_home):
    code = (
        "import studio.cli.analyze as a\n"
        "def boom(args): raise ZeroDivisionError('x')\n"
        "a.run = boom\n"
        "from studio.cli import main\n"
        "raise SystemExit(main(['analyze', 'whatever.wav']))\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "STUDIO_HOME": str(studio_home)},
    )
    assert r.returncode == 1
    assert "internal error" in r.stderr and "Traceback" not in r.stderr
    log = (studio_home / "logs" / "studio.log").read_text()
    assert "ZeroDivisionError" in log and "Traceback" in log


def test_a_reader_that_leaves_early_is_a_quiet_exit_0(tmp_path):
    """`studio analyze --json x | head -c 10`: stdout's reader is gone, which is no error."""
    p = subprocess.Popen(
        [sys.executable, "-m", "studio", "analyze", str(DEMO_AUDIO), "--json", "--no-cache"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    p.stdout.close()  # before the command writes anything
    err = p.stderr.read()
    assert p.wait(60) == 0, err
    assert err == ""


def test_a_broken_pipe_that_is_not_stdout_is_an_error_not_exit_0(tmp_path):
    """An encoder process's socket breaking used to end the command with exit 0 and no word."""
    code = (
        "import sys\n"
        "import studio.cli.analyze as a\n"
        "def run(args):\n"
        "    raise BrokenPipeError(32, 'Broken pipe')\n"
        "a.run = run\n"
        "from studio.cli import main\n"
        "sys.exit(main(['analyze', 'x.wav']))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 1, r.stderr
    assert r.stderr.startswith("studio: internal error (BrokenPipeError")


@pytest.mark.parametrize("size", [True, False], ids=["a terminal window", "no size"])
def test_the_progress_bar_draws_on_a_terminal_and_stays_silent_elsewhere(tmp_path, size):
    """``studio render`` on a real pseudo-terminal draws tqdm's bar on stderr; through a pipe, nothing
    but the result lines."""
    import pty
    import select

    voice = tmp_path / "v.wav"
    t = np.arange(int(1.2 * 16000)) / 16000
    sf.write(voice, (0.2 * np.sin(2 * np.pi * 180 * t)).astype(np.float32), 16000)
    from conftest import DEMO_AVATAR

    argv = [sys.executable, "-m", "studio", "render", "--avatar", str(DEMO_AVATAR), "--audio", str(voice)]
    argv += ["--engine", "classic", "--device", "cpu", "--preset", "ultrafast", "--batch", "4"]
    env = dict(os.environ, COLUMNS="100")
    piped = subprocess.run([*argv, "-o", str(tmp_path / "piped.mp4")], capture_output=True, text=True, env=env)
    assert piped.returncode == 0, piped.stderr
    assert "render" not in piped.stderr.replace("engine:", "") and "\r" not in piped.stderr  # no bar
    main, child = pty.openpty()
    if size:  # a terminal window of 100 x 30 (a bare pseudo-terminal reports none)
        import fcntl
        import struct
        import termios

        fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
    proc = subprocess.Popen(
        [*argv, "-o", str(tmp_path / "tty.mp4")], stdin=child, stdout=subprocess.PIPE, stderr=child, env=env
    )
    os.close(child)
    seen = b""
    while True:
        ready, _, _ = select.select([main], [], [], 120)
        if not ready:
            break
        try:
            chunk = os.read(main, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    out, _ = proc.communicate(timeout=120)
    os.close(main)
    assert proc.returncode == 0, seen.decode(errors="replace")
    text = seen.decode(errors="replace")
    assert "render" in text and "30/30" in text and "fps" in text  # tqdm's line, with our fps and ETA
    assert out.decode().startswith(f"wrote {tmp_path / 'tty.mp4'}: 30 frames")

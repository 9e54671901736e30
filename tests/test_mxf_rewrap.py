"""``studio rewrap``: an MXF delivery re-wrapped by bmx (issue 49 item 2's optional strict RDD9 / AS-11
re-wrap). bmx is not installed here, so a stand-in ``bmxtranswrap`` on PATH (a small program that checks
its arguments as bmx takes them and copies the file) plays it; the MXF is a real one (PyAV's MXF muxer).
Without bmx: one sentence naming it, exit 2. A failing bmx: its last line, nothing left behind; an
existing output is kept (a numbered name) unless --overwrite; the input is never the output."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

STAND_IN = """#!{python}
import shutil, sys
args = sys.argv[1:]
open({log!r}, "a").write(" ".join(args) + "\\n")
assert args[0] == "-t" and args[2] == "-o" and len(args) == 5, args
if args[1] not in ("rdd9", "as11op1a", "op1a"):
    sys.exit("unknown clip type")
if {fail!r}:
    sys.stderr.write("Failed to read partition pack\\n")
    open(args[3], "wb").write(b"half")
    sys.exit(1)
shutil.copyfile(args[4], args[3])
"""


def real_mxf(path: Path) -> Path:
    import av

    with av.open(str(path), "w", format="mxf") as c:
        s = c.add_stream("mpeg2video", rate=25)
        s.width, s.height, s.pix_fmt = 320, 240, "yuv422p"
        s.time_base = Fraction(1, 25)
        for i in range(12):
            f = av.VideoFrame.from_ndarray(np.full((240, 320, 3), 20 * i, np.uint8), format="rgb24")
            for p in s.encode(f.reformat(format="yuv422p")):
                c.mux(p)
        for p in s.encode(None):
            c.mux(p)
    return path


def stand_in(folder: Path, fail: bool = False) -> tuple[Path, Path]:
    folder.mkdir(exist_ok=True)
    log = folder / "calls.txt"
    exe = folder / "bmxtranswrap"
    exe.write_text(STAND_IN.format(python=sys.executable, log=str(log), fail=fail))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe, log


def studio(home: Path, path_dirs: list[Path], *args) -> subprocess.CompletedProcess:
    env = dict(os.environ, STUDIO_HOME=str(home), PATH=os.pathsep.join([*map(str, path_dirs), "/usr/bin", "/bin"]))
    return subprocess.run([sys.executable, "-m", "studio", "rewrap", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=120)  # fmt: skip


@pytest.fixture
def news(tmp_path) -> Path:
    (tmp_path / "out").mkdir()
    return real_mxf(tmp_path / "news.mxf")


def test_without_bmx_one_sentence_and_nothing_written(tmp_path, news):
    r = studio(tmp_path / "home", [], news, "-o", tmp_path / "out" / "strict.mxf")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "bmxtranswrap is not installed" in r.stderr, r.stderr
    assert os.listdir(tmp_path / "out") == []


def test_bmx_rewraps_into_a_new_file_and_keeps_an_existing_one(tmp_path, news):
    bin_dir = tmp_path / "bin"
    _, log = stand_in(bin_dir)
    out = tmp_path / "out" / "strict.mxf"
    r = studio(tmp_path / "home", [bin_dir], news, "-o", out, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"output": str(out), "as": "rdd9"}
    assert out.read_bytes() == news.read_bytes()
    call = log.read_text().split()
    assert call[:2] == ["-t", "rdd9"] and call[-1] == str(news) and Path(call[3]).parent == out.parent
    r = studio(tmp_path / "home", [bin_dir], news, "-o", out, "--as", "as11")
    assert r.returncode == 0 and "strict_002.mxf" in r.stdout, r.stdout  # the first file is kept
    assert log.read_text().splitlines()[-1].split()[1] == "as11op1a"
    assert sorted(os.listdir(out.parent)) == ["strict.mxf", "strict_002.mxf"]


def test_a_failing_bmx_says_why_and_leaves_nothing(tmp_path, news):
    bin_dir = tmp_path / "bin"
    stand_in(bin_dir, fail=True)
    r = studio(tmp_path / "home", [bin_dir], news, "-o", tmp_path / "out" / "strict.mxf")
    assert r.returncode == 2 and "Failed to read partition pack" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert os.listdir(tmp_path / "out") == []  # bmx's half-written file went with the temporary


def test_the_input_is_never_the_output(tmp_path, news):
    bin_dir = tmp_path / "bin"
    stand_in(bin_dir)
    before = news.read_bytes()
    r = studio(tmp_path / "home", [bin_dir], news, "-o", news, "--overwrite")
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert news.read_bytes() == before

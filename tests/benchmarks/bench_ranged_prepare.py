"""What an in/out range of a long voice-over costs: `studio render --in/--out` of 10 s (250 frames)
of a 2-hour voice-over, its wall time and peak memory, against the same render of a 10 s file
(the floor: start-up, engine, encoder) and, with ``--whole``, against preparing the whole clip
(what every range cost before: the whole file decoded and featured).

    .venv/bin/python tests/benchmarks/bench_ranged_prepare.py [--hours 2] [--whole] [--engine classic]

Each run is a fresh ``studio`` process (its own peak RSS, from ``getrusage`` of a fresh parent).
The 2-hour FLAC (44.1 kHz mono speech-like sound, ~200 MB) is made once in the temp folder.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

RUN = (
    "import resource, subprocess, sys, time\n"
    "t = time.perf_counter()\n"
    "r = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
    "print(r.returncode, round(time.perf_counter() - t, 2), resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    "sys.stderr.write(r.stderr[-2000:] if r.returncode else '')\n"
)


def voice(path: Path, seconds: float) -> Path:
    import numpy as np
    import soundfile as sf
    from conftest import speechlike

    if path.exists():
        return path
    minute = speechlike(60.0, 44_100, seed=7)
    minute[44_100 * 20 : 44_100 * 23] = 0  # a pause a minute
    with sf.SoundFile(path, "w", 44_100, 1, "PCM_16", format="FLAC") as fh:
        for i in range(int(seconds // 60)):
            fh.write(minute * np.float32(0.5 + 0.3 * ((i * 7919) % 10) / 10))
    return path


def run(home: Path, *args) -> tuple[int, float, float]:
    env = {**os.environ, "STUDIO_HOME": str(home), "PYTHONPATH": str(ROOT)}
    r = subprocess.run(
        [sys.executable, "-c", RUN, sys.executable, "-m", "studio", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=3600,
    )
    rc, seconds, kb = r.stdout.split()
    if int(rc):
        print(r.stderr, file=sys.stderr)
    return int(rc), float(seconds), int(kb) / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hours", type=float, default=2.0)
    ap.add_argument("--whole", action="store_true", help="also prepare the whole clip (the old cost)")
    ap.add_argument("--engine", default="classic")
    a = ap.parse_args()
    tmp = Path(tempfile.gettempdir()) / "studio-bench-ranged"
    tmp.mkdir(exist_ok=True)
    home = tmp / "home"
    if not (home / "avatars" / "astro").exists():
        from conftest import prepare_demo_avatar

        prepare_demo_avatar(home, "astro")
    long = voice(tmp / f"voice-{a.hours:g}h.flac", a.hours * 3600)
    short = voice(tmp / "voice-1min.flac", 60)
    mid = a.hours * 3600 / 2
    common = ("--avatar", "astro", "--engine", a.engine, "--overwrite")
    env_minutes = {"STUDIO_MAX_AUDIO_MINUTES": str(a.hours * 60 + 1)}
    os.environ.update(env_minutes)
    rows = [
        ("10 s range of a 1-minute voice-over", short, 20.0),
        (f"10 s range of a {a.hours:g}-hour voice-over", long, mid),
    ]
    print(f"studio render --in/--out, engine {a.engine}, {os.cpu_count()} cores")
    for label, audio, at in rows:
        rc, s, mb = run(home, "render", *common, "--audio", audio, "-o", tmp / "out.mp4", "--in", at, "--out", at + 10)
        print(f"  {label:45s} {s:7.2f} s  peak {mb:7.0f} MB  (exit {rc})")
    if a.whole:
        rc, s, mb = run(
            home,
            "frame",
            "--avatar",
            "astro",
            "--engine",
            a.engine,
            "--audio",
            long,
            "-t",
            mid,
            "-o",
            tmp / "frame.png",
            "--overwrite",
        )
        print(f"  {'one frame of it (its stretch only)':45s} {s:7.2f} s  peak {mb:7.0f} MB  (exit {rc})")
        code = (
            "import sys, time, resource\n"
            "from studio.core.render.renderer import Renderer\n"
            "from studio.core.settings import RenderSettings\n"
            "t = time.perf_counter()\n"
            f"r = Renderer('astro', sys.argv[1], RenderSettings(engine={a.engine!r}))\n"
            "r.ready()\n"
            "print(round(time.perf_counter() - t, 2), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)\n"
        )
        t = subprocess.run(
            [sys.executable, "-c", code, str(long)],
            capture_output=True,
            text=True,
            env={**os.environ, "STUDIO_HOME": str(home), "PYTHONPATH": str(ROOT)},
            timeout=3600,
        )
        s, mb = t.stdout.split()[-2:] if t.returncode == 0 else ("?", "?")
        print(f"  {'whole clip prepared (what a range used to do)':45s} {s:>7} s  peak {mb:>7} MB")


if __name__ == "__main__":
    main()

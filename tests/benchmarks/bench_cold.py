"""Issue 48 items 6 and 7 alone: cold ``studio render`` commands (with their timelines, preload on
and off, the heaviest imports) and an evicted engine's memory seen from another process.

    python tests/benchmarks/bench_cold.py --device cuda --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--height", type=int, default=1080)
    p.add_argument("--workdir", default=None)
    p.add_argument("--json", default=None)
    p.add_argument("--no-eviction", action="store_true")
    p.add_argument("--classic-only", action="store_true", help="no MuseTalk weights: the classic rows alone")
    a = p.parse_args()
    work = Path(a.workdir or tempfile.mkdtemp(prefix="bench-cold-"))
    os.environ["STUDIO_HOME"] = str(work / "home")
    env = dict(os.environ)
    from studio.bench import user as bench_user
    from studio.service import bench, bench_serve

    say = lambda text: print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)  # noqa: E731
    out: dict = {"device": a.device}
    import signal

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(124))  # `timeout`: the rows so far are written
    try:
        if not a.classic_only:
            out["import"] = bench.import_official(work / "random", env, tiny=not a.device.startswith("cuda"), note=say)
        out["avatars"] = bench_user.add_avatars(work / "user", a.height)
        voice = bench_user.voice_file(work / "clips", "wav48", 375, seed=1)
        engines = ("classic",) if a.classic_only else ("musetalk", "classic")
        out["cold"] = bench.cold_rows(work / "cold", env, a.device, voice, note=say, engines=engines)
        if not a.no_eviction and not a.classic_only:
            short = bench_user.voice_file(work / "clips", "wav48", 100, seed=99)
            out["eviction"] = bench_serve.eviction_rows(work / "evict", env, short, note=say)
    finally:
        if a.json:
            Path(a.json).write_text(json.dumps(out, indent=1))
    from studio.cli.bench import print_cold, print_eviction

    print_cold(out.get("cold") or {})
    print_eviction(out.get("eviction") or {})
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The server-as-a-service figures of issue 38, alone (the same rows ``studio bench --user`` prints).

    python tests/benchmarks/bench_service.py --device cuda --json out.json     # the H200 run
    python tests/benchmarks/bench_service.py --device cpu --frames 50 --clip-frames 40 --clients 2,4

In a fresh work folder: random weights in the official layout (real sizes on CUDA, tiny on a CPU)
imported with ``studio models import``, the bench's photo avatar (1080p, from a JPEG) added to the
library, then the cold ``studio render`` rows (``service.bench.cold_rows``) and the service rows
(``service.bench_serve.service_rows``: fresh server, cache bound, clients at once with batching on
and off).
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
    p.add_argument("--frames", type=int, default=672, help="the single request's clip (default 672)")
    p.add_argument("--clip-frames", type=int, default=375, help="each concurrent client's clip (default 375: 15 s)")
    p.add_argument("--clients", default="8,16", help="client counts (default 8,16)")
    p.add_argument("--height", type=int, default=1080)
    p.add_argument("--workdir", default=None)
    p.add_argument("--no-cold", action="store_true")
    p.add_argument("--json", default=None)
    p.add_argument("--no-cache", action="store_true", help="leave out the 14 requests of the cache row")
    p.add_argument("--no-handoff", action="store_true", help="leave out the handed-off `studio render` rows")
    p.add_argument(
        "--variants",
        default=None,
        help="the concurrent rows' other servers: 'LABEL:ARGS;...' (ARGS: serve options and NAME=VALUE "
        "environment), e.g. 'two:--jobs-per-device 2;short:STUDIO_WARM_RENDER=short' (default: 4 jobs a "
        "device, merged and not)",
    )
    p.add_argument(
        "--trace-dir",
        default=None,
        help="every request its own new voice-over, each server's fresh-server row, the stage trace "
        "(STUDIO_STAGE_TRACE) of every server and py-spy of each first burst (tests/benchmarks/trace_service.py reads them)",
    )
    a = p.parse_args()
    work = Path(a.workdir or tempfile.mkdtemp(prefix="bench-service-"))
    home = work / "home"
    os.environ["STUDIO_HOME"] = str(home)
    env = dict(os.environ, STUDIO_HOME=str(home))
    from studio.bench import user as bench_user
    from studio.service import bench, bench_serve

    say = lambda text: print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)  # noqa: E731
    out: dict = {"device": a.device}
    out["import"] = bench.import_official(work / "random", env, tiny=not a.device.startswith("cuda"), note=say)
    out["avatars"] = bench_user.add_avatars(work / "user", a.height)
    clients = [int(x) for x in a.clients.split(",")]
    voices = [bench_user.voice_file(work / "clips", "wav48", a.clip_frames, seed=s) for s in range(1, max(clients) + 1)]
    voice = bench_user.voice_file(work / "clips", "wav48", a.frames)
    if not a.no_cold:
        out["cold"] = bench.cold_rows(work / "cold", env, a.device, voices[0], note=say)
        say(json.dumps(out["cold"]))
    short = bench_user.voice_file(work / "clips", "wav48", 100, seed=99)
    kw_breaking = bench_user.voice_file(work / "clips", "wav48", 125, seed=77)  # a 5 s breaking clip in each burst
    fresh = [bench_user.voice_file(work / "clips", "wav48", a.frames, seed=s) for s in range(100, 106)]
    kw: dict = {"cache": not a.no_cache, "handoff": not a.no_handoff, "breaking": kw_breaking}
    if a.variants is not None:
        kw["variants"] = parse_variants(a.variants)
    if a.trace_dir:
        kw["trace_dir"] = Path(a.trace_dir)
        kw["voice_for"] = lambda frames, seed: bench_user.voice_file(work / "clips", "wav48", frames, seed=seed)
    import signal

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(124))  # `timeout`: the rows so far are written
    out["service"] = {}
    try:
        bench_serve.service_rows(
            work / "service", env, voice, voices, note=say, short=short, counts=clients, fresh=fresh,
            out=out["service"], **kw,
        )  # fmt: skip
    finally:
        if a.json:
            Path(a.json).write_text(json.dumps(out, indent=1))
    from studio.cli.bench import print_cold, print_service

    print_cold(out.get("cold") or {})
    print_service(out["service"])
    return 0


def parse_variants(text: str) -> list[tuple[str, tuple[str, ...], dict]]:
    """'LABEL:ARGS;...' -> [(label, serve arguments, environment)]; NAME=VALUE words are environment."""
    out = []
    for part in (x.strip() for x in text.split(";")):
        if not part:
            continue
        label, _, rest = part.partition(":")
        words = rest.split()
        env = dict(w.split("=", 1) for w in words if "=" in w and not w.startswith("-"))
        out.append((label.strip(), tuple(w for w in words if "=" not in w or w.startswith("-")), env))
    return out


if __name__ == "__main__":
    sys.exit(main())

"""How much scrubbing during a render slows the render (issue 20 item 9): figures, not a test.

    python tests/benchmarks/bench_scrub_during_render.py [--engine classic] [--device cpu|cuda] [--rate 5]

In one process, on the same warm engine pool: the demo clip rendered alone, then again while a
second thread asks for the exact frame at a random timestamp ``--rate`` times a second (an editor
dragging the playhead; the window coalesces requests, so a few per second reach the engine). Each
scrub frame takes its turn on the shared engine between two of the render's batches. Prints the
render's frames/s both ways, their ratio, and the scrub frames' latency. Runs alternate
(alone, with, alone, with) so a busy machine hits both alike.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", default="classic")
    ap.add_argument("--device", default=None)
    ap.add_argument("--rate", type=float, default=5.0, help="scrub requests per second")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    import os

    os.environ.setdefault("STUDIO_HOME", tempfile.mkdtemp(prefix="bench-scrub-"))
    from studio.core.env import repo_resources
    from studio.core.media.audio import probe
    from studio.core.settings import RenderSettings
    from studio.service.pool import EnginePool

    demo = repo_resources() / "demo"
    avatar, audio = str(demo / "astronaut.png"), str(demo / "voiceover.flac")
    try:  # the demo photo needs the face tracker; a GPU host without mediapipe uses the bench's 1080p loop
        import mediapipe  # noqa: F401
    except ImportError:
        from studio.bench.reference import synthetic_avatar

        avatar = synthetic_avatar(Path(tempfile.mkdtemp(prefix="bench-scrub-avatar-")), 1080)
    duration = probe(audio).duration_s
    settings = RenderSettings(engine=args.engine, device=args.device, preset="ultrafast")
    pool = EnginePool()
    out = Path(tempfile.mkdtemp(prefix="bench-scrub-out-"))
    pool.frame_at(avatar, audio, settings, 1.0)  # warm: engine, avatar, features

    def render_once(tag: str, scrub: bool) -> dict:
        stop = threading.Event()
        latencies: list[float] = []

        def scrubber():
            rng = random.Random(1)
            while not stop.is_set():
                t0 = time.perf_counter()
                pool.frame_at(avatar, audio, settings, rng.uniform(0, duration - 0.1))
                latencies.append(time.perf_counter() - t0)
                stop.wait(max(0.0, 1.0 / args.rate - (time.perf_counter() - t0)))

        th = threading.Thread(target=scrubber, daemon=True) if scrub else None
        r = pool.renderer(avatar, audio, settings)  # what the driver's "this computer" placement runs
        if th:
            th.start()
        t0 = time.perf_counter()
        for _ in r.run(out / f"{tag}.mp4"):
            pass
        seconds = time.perf_counter() - t0
        stop.set()
        if th:
            th.join()
        return {
            "fps": r.result.frames / seconds,
            "seconds": seconds,
            "scrubs": len(latencies),
            "scrub_ms_median": 1e3 * statistics.median(latencies) if latencies else None,
            "scrub_ms_max": 1e3 * max(latencies) if latencies else None,
        }

    render_once("warm", False)
    alone, with_scrub = [], []
    for k in range(args.rounds):
        alone.append(render_once(f"alone{k}", False))
        with_scrub.append(render_once(f"scrub{k}", True))
    a = statistics.median(x["fps"] for x in alone)
    b = statistics.median(x["fps"] for x in with_scrub)
    lat = [x["scrub_ms_median"] for x in with_scrub if x["scrub_ms_median"] is not None]
    report = {
        "engine": args.engine,
        "device": str(settings.device or "auto"),
        "rate_per_s": args.rate,
        "avatar": avatar if isinstance(avatar, str) else "synthetic 1080p loop",
        "alone": alone,
        "with_scrub": with_scrub,
        "fps_alone": a,
        "fps_with_scrub": b,
        "ratio": b / a if a else None,
        "scrub_latency_ms_median": statistics.median(lat) if lat else None,
    }
    runs_a = ", ".join(f"{x['fps']:.1f}" for x in alone)
    runs_b = ", ".join(f"{x['fps']:.1f}" for x in with_scrub)
    print(f"render alone        {a:7.1f} frames/s  ({runs_a})")
    print(
        f"render + scrubbing  {b:7.1f} frames/s  ({runs_b}), "
        f"{args.rate:g} scrub frames/s asked, {sum(x['scrubs'] for x in with_scrub)} served"
    )
    print(
        f"ratio {b / a:.3f} (slowdown {100 * (1 - b / a):.1f} %); scrub frame latency median "
        f"{report['scrub_latency_ms_median']:.0f} ms during the render"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

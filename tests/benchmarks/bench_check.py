"""``studio check`` speed at 1080p: frames per second against the video's own frame rate.

    .venv/bin/python tests/benchmarks/bench_check.py [--seconds 20] [--cores 2] [--runs 2]

Renders a 1080p clip first (the classic engine on the CPU: ``studio bench``'s swaying presenter,
a video avatar whose head moves, speaking the demo voice-over), then times the check of that MP4
(decode, face mesh on the face box, every figure, the report), with the avatar as the reference
and without it (the video's own rest frame), with the process's CPU time per frame (all its threads),
which a busy machine does not change. The process is pinned to ``--cores`` CPU cores
(``sched_setaffinity``) when the machine has more. The machine's load average is printed before
and after: on a shared machine the figures are lower bounds.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--seconds",
        type=float,
        default=20.0,
        help="clip length (default 20 s of the voice-over)",
    )
    ap.add_argument("--cores", type=int, default=2, help="CPU cores to run on (default 2)")
    ap.add_argument(
        "--runs",
        type=int,
        default=2,
        help="timed checks per reference (the best is kept)",
    )
    ap.add_argument("--height", type=int, default=1080)
    args = ap.parse_args()
    have = sorted(os.sched_getaffinity(0))
    if len(have) > args.cores:
        os.sched_setaffinity(0, have[: args.cores])
    cores = len(os.sched_getaffinity(0))
    work = Path(tempfile.mkdtemp(prefix="bench_check_"))
    os.environ.setdefault("STUDIO_HOME", str(work / "home"))

    import soundfile as sf

    from studio.bench.reference import synthetic_avatar
    from studio.core.media.audio import load
    from studio.core.quality import check_video, measure_video, speech_of
    from studio.core.quality.video import probe_video
    from studio.core.render.renderer import Renderer
    from studio.core.settings import RenderSettings

    voice = load(ROOT / "resources" / "demo" / "voiceover.flac").samples[: int(args.seconds * 16_000)]
    wav = work / "voice.wav"
    sf.write(wav, voice, 16_000, subtype="PCM_16")
    avatar = synthetic_avatar(work, args.height, loop_frames=50)
    out = work / "clip.mp4"
    t0 = time.monotonic()
    for _ in Renderer(avatar, wav, RenderSettings(engine="classic", device="cpu")).run(out):
        pass
    info = probe_video(out)
    print(
        f"clip: {info.width}x{info.height}, {info.frames} frames at {info.fps:g} fps "
        f"(rendered in {time.monotonic() - t0:.1f} s)"
    )
    print(f"cores: {cores} of {os.cpu_count()}; load average before: {_load()}")
    _, silent = speech_of(voice, info.frames or 0, info.fps)
    for name, ref in (("avatar reference", avatar), ("own-frame reference", None)):
        best = 0.0
        for _ in range(args.runs):
            t, cpu = time.monotonic(), time.process_time()
            m = measure_video(out, silent, ref)
            measure_s = time.monotonic() - t
            r = check_video(out, None, ref, measurements=m)
            total_s, cpu_s = time.monotonic() - t, time.process_time() - cpu
            fps = m.frames / total_s
            best = max(best, fps)
            print(
                f"  {name}: {m.frames} frames in {total_s:.2f} s (measuring {measure_s:.2f} s) = "
                f"{fps:.1f} frames/s, {fps / info.fps:.2f}x real time; CPU {1000 * cpu_s / m.frames:.1f} ms "
                f"per frame, all threads (one idle core's worth: {m.frames / cpu_s:.0f} frames/s); verdict {r.verdict}"
            )
        print(f"{name}: best {best:.1f} frames/s = {best / info.fps:.2f}x the video's {info.fps:g} fps")
    print(f"load average after: {_load()}")
    return 0


def _load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


if __name__ == "__main__":
    raise SystemExit(main())

"""The work after the last frame: the join after the last frame against rolling chunks muxed as they finish.

    .venv/bin/python tests/benchmarks/bench_finish.py [--size 640x360] [--frames 3000] [--workers N]

Feeds the writer NV12 frames from memory (striped like a render: ``render.stripes``), with a
voice-over of the clip's length, in three modes measured in one run: "join" (one contiguous chunk
per worker, every chunk muxed after the last frame, as before issue 16), "contiguous" (the same
chunks, the mux thread: they still all finish at the end) and "rolling" (chunks of <= 125
frames, each muxed as soon as it and those before it are done). Prints wall time, frames/s and
the finish breakdown (``VideoWriter.close_ms``). Not collected by pytest.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from studio.core.media.writer import VideoWriter, open_video, rolling_chunks
from studio.core.render.composite import rgb_to_nv12
from studio.core.render.plan import stripes


def run(mode: str, nv12: np.ndarray, frames: int, w: int, h: int, workers: int, audio: Path, folder: str) -> dict:
    path = Path(folder) / f"{mode}.mp4"
    t0 = time.perf_counter()
    probe = open_video(path, w, h, encoder="x264-parallel", total_frames=frames, workers=workers)
    chunks, window, name = probe.chunks, probe.window, probe.name
    probe.abort()
    if mode == "rolling":
        chunks = rolling_chunks(frames, window)
    wr = VideoWriter(
        path,
        w,
        h,
        audio=audio,
        name=name,
        reason=mode,
        chunks=chunks,
        crf=20,
        preset="ultrafast",
        fps=25,
        write_hook=None,
        window=window,
        stream_mux=mode != "join",
    )
    t0 = time.perf_counter()
    n = len(nv12)
    for idx in stripes(frames, 64, wr.chunks, window=wr.window):
        wr.write(nv12[idx % n], indices=idx)
    t1 = time.perf_counter()
    wr.close()
    t2 = time.perf_counter()
    return {
        "mode": mode,
        "chunks": len(chunks),
        "seconds": round(t2 - t0, 3),
        "fps": round(frames / (t2 - t0), 1),
        "after_last_frame_s": round(t2 - t1, 3),
        "close_ms": {k: round(v, 1) for k, v in wr.close_ms.items()},
        "bytes": path.stat().st_size,
        "spill": str(wr.spill_dir.parent),
    }


def main() -> None:
    import soundfile as sf

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_encode import synthetic_clip

    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="640x360")
    ap.add_argument("--frames", type=int, default=3000)
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    w, h = map(int, args.size.split("x"))
    nv12 = rgb_to_nv12(synthetic_clip(50, w, h))
    out = {"cpu_count": os.cpu_count(), "size": args.size, "frames": args.frames, "runs": []}
    with tempfile.TemporaryDirectory() as folder:
        audio = Path(folder) / "voice.wav"
        t = np.arange(args.frames * 640) / 16000
        sf.write(audio, (0.2 * np.sin(2 * np.pi * 180 * t) * np.sin(t)).astype(np.float32), 16000)
        for mode in ("join", "contiguous", "rolling"):
            r = run(mode, nv12, args.frames, w, h, args.workers, audio, folder)
            out["runs"].append(r)
            print(
                f"{mode:11s} {r['chunks']:4d} chunks {r['seconds']:7.2f} s {r['fps']:7.1f} fps  "
                f"after the last frame {r['after_last_frame_s']:.3f} s  {r['close_ms']}",
                flush=True,
            )
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()

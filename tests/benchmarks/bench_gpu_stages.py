"""Per-stage ceilings on a CUDA machine: engine batches, compositing, NV12 + copy, x264 encoders.

    python tests/benchmarks/bench_gpu_stages.py [--models DIR]     (run after `studio bench --workdir W`)

Prints frames/s of each stage alone, so the end-to-end figure can be read against its bounds.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch


def timed(fn, n=5):
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", required=True, help="a model store folder (studio bench --workdir W: W/store)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    from studio.bench.reference import synthetic_avatar
    from studio.core.engines.musetalk import MuseTalkEngine
    from studio.core.media.writer import open_video
    from studio.core.render.composite import Compositor, rgb_to_nv12

    out = {}
    work = Path(tempfile.mkdtemp())
    av_ = synthetic_avatar(work, 1080)
    for dec in ("taesd", "sd-vae"):
        eng = MuseTalkEngine(device="cuda", precision="fp16", decoder=dec, models_dir=args.models)
        lat = torch.randn(av_.N, 8, 32, 32, device="cuda", dtype=torch.float16)
        run = eng.networks()["run"]
        for b in (8, 32, 64):
            x = lat[torch.arange(b, device="cuda") % av_.N].contiguous(memory_format=torch.channels_last)
            a = torch.randn(b, 50, 384, device="cuda", dtype=torch.float16)
            with torch.inference_mode():
                s = timed(lambda: run(x, a))
            out[f"{dec}_b{b}_fps"] = round(b / s, 1)
            print(f"UNet+{dec} batch {b}: {1e3 * s:.1f} ms, {b / s:.0f} frames/s", flush=True)
        eng.close()
    comp = Compositor(av_.frames, av_.boxes, av_.masks, device="cuda")
    faces = torch.randint(0, 255, (32, 256, 256, 3), dtype=torch.uint8, device="cuda")
    idx = np.arange(32) % av_.N
    s = timed(lambda: comp.paste(faces, idx))
    out["paste_b32_fps"] = round(32 / s, 1)
    frames = comp.paste(faces, idx)
    s2 = timed(lambda: rgb_to_nv12(frames))
    nv = rgb_to_nv12(frames)
    s3 = timed(lambda: nv.cpu())
    pinned = torch.empty(nv.shape, dtype=torch.uint8, pin_memory=True)
    s4 = timed(lambda: pinned.copy_(nv))
    out.update(
        nv12_b32_fps=round(32 / s2, 1), d2h_pageable_b32_fps=round(32 / s3, 1), d2h_pinned_b32_fps=round(32 / s4, 1)
    )
    print(
        f"paste 1080p b32: {32 / s:.0f} fps; NV12 {32 / s2:.0f} fps; D2H pageable {32 / s3:.0f} fps, "
        f"pinned {32 / s4:.0f} fps",
        flush=True,
    )
    nv12 = rgb_to_nv12(comp.background(np.arange(av_.N))).cpu().numpy()
    T = 672
    from studio.core.render.plan import stripes

    for enc, preset in (
        ("x264", "veryfast"),
        ("x264-parallel", "veryfast"),
        ("x264", "ultrafast"),
        ("x264-parallel", "ultrafast"),
        ("x264-parallel", "superfast"),
    ):
        for _rep in range(2):  # the first run starts the worker processes
            path = work / f"{enc}.mp4"
            t0 = time.perf_counter()
            with open_video(path, av_.width, av_.height, encoder=enc, total_frames=T, preset=preset) as w:
                for idx in stripes(T, 64, w.chunks):
                    w.write([nv12[i % av_.N] for i in idx], indices=idx)
            dt = time.perf_counter() - t0
        out[f"{enc}_{preset}_fps"] = round(T / dt, 1)
        print(f"{enc} {preset} ({w.name}): {T / dt:.0f} fps", flush=True)
    print(json.dumps(out))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    os.system(f"rm -rf {work}")


if __name__ == "__main__":
    main()

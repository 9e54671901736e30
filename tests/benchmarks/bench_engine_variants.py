"""The MuseTalk engine call alone, in variants, on a CUDA machine: where a faster GPU loop can come from.

    python tests/benchmarks/bench_engine_variants.py --models DIR [--compile] [--json out.json]

For each decoder, one process times ``engine.generate``'s network part (UNet + decoder + uint8
faces, batch 64, fp16) as: eager; CUDA graphs (the default); graphs with cuDNN's benchmark mode
(it times every convolution algorithm once per shape and keeps the fastest); and with
``--compile`` also ``torch.compile`` in its default mode under the graphs (compile time
printed). Median of 15 calls each, after warm-up; ratios against eager of the same run.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch


def per_call(fn, reps: int = 15) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    return float(np.median(ts))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", required=True)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--decoders", default="taesd,sd-vae")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    from studio.core.engines.musetalk import MuseTalkEngine

    b = args.batch
    out = {}
    variants = [("eager", dict(cuda_graphs=False), False), ("graphs", {}, False), ("graphs+cudnn-benchmark", {}, True)]
    if args.compile:
        variants.append(("graphs+compile", dict(compile=True), True))
    for dec in args.decoders.split(","):
        base = None
        for name, kw, bench_mode in variants:
            torch.backends.cudnn.benchmark = bench_mode
            t0 = time.perf_counter()
            eng = MuseTalkEngine(device="cuda", precision="fp16", decoder=dec, batch=b, models_dir=args.models, **kw)
            nets = eng.networks()
            load_s = time.perf_counter() - t0
            run = nets["run"]
            lat = torch.randn(b, 8, 32, 32, device="cuda", dtype=torch.float16).contiguous(
                memory_format=torch.channels_last
            )
            aud = torch.randn(b, 50, 384, device="cuda", dtype=torch.float16)
            with torch.inference_mode():
                ms = per_call(lambda: run(lat, aud))  # noqa: F821 - run is deleted after the call, not before
            base = base or ms
            row = {
                "ms_per_batch": round(ms, 2),
                "faces_per_s": round(b * 1e3 / ms, 1),
                "vs_eager": round(base / ms, 3),
                "load_s": round(load_s, 1),
            }
            out[f"{dec}/{name}"] = row
            print(
                f"{dec:7s} {name:24s} {ms:7.2f} ms/batch {b}  {row['faces_per_s']:8.1f} faces/s  "
                f"x{row['vs_eager']:.2f} vs eager  (load + warm-up {load_s:.1f} s)",
                flush=True,
            )
            eng.close()
            del nets, run
            torch.cuda.empty_cache()
    torch.backends.cudnn.benchmark = False
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()

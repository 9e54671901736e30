"""Where the end-to-end time of the reference workload goes (CUDA machine).

    python tests/benchmarks/profile_pipeline.py --workdir W [--json OUT]

Prints, each measured alone in this process: the x264 worker pool (1..N single-threaded encoders
on contiguous chunks, frames already in host memory), the parallel writer from host frames, the
GPU render loop without encoding (interleaved and plain batch orders), and full renders with a
timeline (elapsed time at each progress) and the writer's close breakdown.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import torch


def pool_fps(nv12: np.ndarray, total: int, n: int, preset: str, crf: int = 20) -> float:
    """Aggregate frames/s of ``n`` encoder processes on contiguous chunks of ``total`` frames."""
    from studio.core.media.lanes import split as _split
    from studio.core.media.x264_pool import ProcessEncoder, worker_pool

    h2, w = nv12.shape[1:]
    h = h2 * 2 // 3
    chunks = _split(total, n)
    workers = worker_pool(n)
    ends = [0.0] * n
    busy = [0.0] * n

    def one(k):
        enc = ProcessEncoder(workers[k], w, h, 25, crf, preset)
        s, e = chunks[k]
        for i in range(s, e):
            enc.encode(nv12[i % len(nv12)], i - s)
        enc.flush()
        ends[k] = time.perf_counter()
        busy[k] = enc.busy_s

    t0 = time.perf_counter()
    threads = [threading.Thread(target=one, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = max(ends) - t0
    print(
        f"  pool of {n}: x264 busy {100 * sum(busy) / (n * wall):.0f} % of the wall time, "
        f"{sum(busy) / total * 1e3:.1f} ms of x264 per frame",
        flush=True,
    )
    return total / wall


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--json", default=None)
    ap.add_argument("--preset", default="ultrafast")
    ap.add_argument("--no-encoders", action="store_true", help="skip the encoder-only figures")
    args = ap.parse_args()
    from studio.bench.reference import bench_models, reference_audio, synthetic_avatar
    from studio.core.engines.classic import ClassicEngine
    from studio.core.engines.musetalk import MuseTalkEngine
    from studio.core.render.composite import pad_even, rgb_to_nv12
    from studio.core.render.plan import stripes
    from studio.core.render.renderer import Renderer
    from studio.core.settings import RenderSettings

    out: dict = {"cpu_count": os.cpu_count(), "affinity": len(os.sched_getaffinity(0))}
    try:
        out["lscpu"] = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except Exception:  # noqa: BLE001 - deliberate: any failure here is reported, not fatal
        pass
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    T = 672
    audio = reference_audio(work, T)
    av_ = synthetic_avatar(work, 1080)
    ncores = os.cpu_count() or 1

    def say(k, v):
        out[k] = v
        print(f"{k}: {v}", flush=True)

    # -- encoders alone ---------------------------------------------------------------------
    if not args.no_encoders:
        nv12 = rgb_to_nv12(pad_even(torch.from_numpy(av_.frames).cuda())).cpu().numpy()
        pool_fps(nv12, 32, 1, args.preset)  # start a worker
        say("x264_1proc_fps", round(pool_fps(nv12, 84, 1, args.preset), 1))
        for n in sorted({ncores // 2, ncores, ncores + ncores // 2}):
            pool_fps(nv12, T, n, args.preset)  # start the workers
            say(f"x264_pool{n}_fps", round(pool_fps(nv12, T, n, args.preset), 1))
        for crf in (23, 26):
            say(f"x264_pool{ncores}_crf{crf}_fps", round(pool_fps(nv12, T, ncores, args.preset, crf), 1))
        wide = synthetic_avatar(work / "wide", 1080, spread=(0.22, 0.35))  # the motion field before 2026-11-30
        nv_wide = rgb_to_nv12(pad_even(torch.from_numpy(wide.frames).cuda())).cpu().numpy()
        say("x264_1proc_wide_sway_fps", round(pool_fps(nv_wide, 84, 1, args.preset), 1))
        say(f"x264_pool{ncores}_wide_sway_fps", round(pool_fps(nv_wide, T, ncores, args.preset), 1))
        del wide, nv_wide
        from studio.core.media.writer import open_video

        for _rep in range(2):
            t0 = time.perf_counter()
            with open_video(
                work / "host.mp4", av_.width, av_.height, encoder="x264-parallel", total_frames=T, preset=args.preset
            ) as w:
                for idx in stripes(T, 64, w.chunks):
                    w.write([nv12[i % av_.N] for i in idx], indices=idx)
            dt = time.perf_counter() - t0
        say("writer_host_fps", round(T / dt, 1))
        say("writer_host_close_ms", {k: round(v, 1) for k, v in w.close_ms.items()})

    # -- the GPU loop without encoding --------------------------------------------------------
    store, _ = bench_models(work, tiny=False, note=print)
    settings = RenderSettings(device="cuda", engine="musetalk", decoder="taesd", preset=args.preset)
    for dec in ("taesd",):
        eng = MuseTalkEngine(device="cuda", precision="fp16", decoder=dec, models_dir=store)
        Renderer(av_, audio, settings.with_(decoder=dec), engine=eng).render(work / "warm.mp4")
        r = Renderer(av_, audio, settings.with_(decoder=dec), engine=eng)
        t0 = time.perf_counter()
        r.ready()
        say(f"{dec}_ready_ms", round((time.perf_counter() - t0) * 1e3, 1))
        chunks16 = [(round(T * k / ncores), round(T * (k + 1) / ncores)) for k in range(ncores)]
        for name, batches in (
            ("plain64", stripes(T, 64, [(0, T)])),
            ("stripes", stripes(T, 64, chunks16)),
            ("stripes_nv12", stripes(T, 64, chunks16)),
        ):
            for _rep in range(2):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _, frames in r.iter_batches(batches, nv12=name.endswith("nv12")):
                    if frames.ndim == 4:
                        rgb_to_nv12(pad_even(frames))
                torch.cuda.synchronize()
                dt = time.perf_counter() - t0
            say(f"{dec}_gpu_loop_{name}_fps", round(T / dt, 1))
            say(f"{dec}_gpu_loop_{name}_calls", len(batches))
        speech = np.flatnonzero(r.plan.weight > 0)
        idx = r.plan.avatar_idx[speech]
        for b in (32, 64):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for i in range(0, len(speech), b):
                eng.generate(r.prepared, idx[i : i + b], speech[i : i + b])
            torch.cuda.synchronize()
            say(f"{dec}_engine_only_b{b}_fps_over_speech", round(len(speech) / (time.perf_counter() - t0), 1))
        say("speech_frames", int(len(speech)))

        # -- full renders with a timeline -----------------------------------------------------
        import sys

        from studio.core.media.x264_pool import shutdown_pool

        variants = [
            ("nice5_w16", {"STUDIO_X264_NICE": "5", "STUDIO_X264_WORKERS": str(ncores)}),
            (
                "nice5_w16_copythread",
                {"STUDIO_X264_NICE": "5", "STUDIO_X264_WORKERS": str(ncores), "STUDIO_GPU_DIRECT": "0"},
            ),
        ]
        for label, env in variants:
            if os.environ.get("STUDIO_X264_NICE") != env["STUDIO_X264_NICE"]:
                shutdown_pool()  # workers read their priority when they start
            os.environ.pop("STUDIO_GPU_DIRECT", None)
            os.environ.update(env)
            sys.setswitchinterval(0.0005 if "switch" in label else 0.005)
            Renderer(av_, audio, settings.with_(decoder=dec), engine=eng).render(work / "warm.mp4")
            r = Renderer(av_, audio, settings.with_(decoder=dec), engine=eng)
            t0, c0 = time.perf_counter(), time.process_time()
            line = []
            for p in r.run(work / f"{dec}_{label}.mp4"):
                line.append((round(time.perf_counter() - t0, 3), p.done))
            dt = time.perf_counter() - t0
            say(f"{dec}_render_{label}_fps", round(T / dt, 1))
            say(f"{dec}_render_{label}_parent_cpu_s", round(time.process_time() - c0, 2))
            say(f"{dec}_render_{label}_stage_ms", r.result.stage_ms)
            say(f"{dec}_render_{label}_finish_ms", r.result.finish_ms)
            nw = int(env["STUDIO_X264_WORKERS"])
            say(
                f"{dec}_render_{label}_x264_busy_pct",
                round(100 * r.result.finish_ms.get("x264_busy", 0) / 1e3 / (nw * dt), 1),
            )
            say(f"{dec}_render_{label}_timeline", line)
        os.environ.pop("STUDIO_GPU_DIRECT", None)
        os.environ["STUDIO_X264_WORKERS"] = str(ncores)
        eng.close()
    eng = ClassicEngine(device="cuda")
    Renderer(av_, audio, settings.with_(engine="classic"), engine=eng).render(work / "warm.mp4")
    r = Renderer(av_, audio, settings.with_(engine="classic"), engine=eng)
    t0 = time.perf_counter()
    line = [(round(time.perf_counter() - t0, 3), p.done) for p in r.run(work / "classic.mp4")]
    say("classic_render_fps", round(T / (time.perf_counter() - t0), 1))
    say("classic_render_stage_ms", r.result.stage_ms)
    say("classic_render_finish_ms", r.result.finish_ms)
    say("classic_render_timeline", line)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()

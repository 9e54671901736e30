"""``studio bench``: the reference workload, ours against a reproduction of the official loop."""

from __future__ import annotations

import sys


def register(sub) -> None:
    p = sub.add_parser("bench", help="time the reference workload against the official MuseTalk loop")
    p.add_argument("--device", default=None, help="cuda (default when present) or cpu (a short smoke version)")
    p.add_argument("--frames", type=int, default=None, help="clip length (default 672 on CUDA, 48 on CPU)")
    p.add_argument("--height", type=int, default=None, help="avatar height (default 1080 on CUDA, 360 on CPU)")
    p.add_argument("--decoders", default="taesd,sd-vae", help="comma-separated MuseTalk decoders to time")
    p.add_argument(
        "--official-frames",
        type=int,
        default=None,
        metavar="N",
        help="time the official loop on the first N frames (default: all)",
    )
    p.add_argument("--encoder", default="auto", choices=["auto", "x264", "x264-parallel", "nvenc"])
    p.add_argument(
        "--preset",
        default="ultrafast",
        help="x264 preset of our runs (default ultrafast, as the "
        "reference write-up; the official loop keeps ffmpeg's medium)",
    )
    p.add_argument("--crf", type=int, default=20, help="x264 CRF of our runs (default 20)")
    p.add_argument("--batch", type=int, default=0, help="frames per batch (default: the engine's choice)")
    p.add_argument("--compile", action="store_true", help="torch.compile the UNet and decoder (default mode)")
    p.add_argument("--no-classic", action="store_true", help="skip the classic engine run")
    p.add_argument(
        "--gpus",
        type=int,
        default=1,
        metavar="N",
        help="also time each MuseTalk run on N GPUs of this machine (contiguous parts, one mux)",
    )
    p.add_argument("--no-official", action="store_true", help="skip the official-loop reproduction (no ratios)")
    p.add_argument(
        "--long",
        type=int,
        default=0,
        metavar="FRAMES",
        help="also time the first decoder on a clip of FRAMES frames (e.g. 15000: 10 minutes)",
    )
    p.add_argument("--photo", action="store_true", help="also time the first decoder on a photo avatar (a still frame)")
    p.add_argument(
        "--cold",
        action="store_true",
        help="also time fresh processes rendering 15 s of a photo avatar (classic and MuseTalk)",
    )
    p.add_argument(
        "--codecs",
        default="h264,hevc,prores,prores4444,dnxhr,vp9",
        help="a classic-engine row per delivery codec (frames/s end to end); 'none' to skip",
    )
    p.add_argument("--workdir", default=None, help="keep inputs and outputs here (default: a temp folder)")
    p.add_argument("--json", metavar="OUT", default=None, help="write all figures to this JSON file")
    p.set_defaults(func=run)


def run(args) -> int:
    import json
    import tempfile
    from pathlib import Path

    from studio.core.bench import run_bench
    from studio.core.store.fsutil import atomic_write_bytes

    def note(text):
        print(f"bench: {text}", file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="studio-bench-") as tmp:
        work = Path(args.workdir or tmp)
        res = run_bench(
            work,
            device=args.device,
            frames=args.frames,
            height=args.height,
            decoders=tuple(d for d in args.decoders.split(",") if d),
            official_frames=args.official_frames,
            encoder=args.encoder,
            preset=args.preset,
            crf=args.crf,
            batch=args.batch,
            compile=args.compile,
            classic=not args.no_classic,
            gpus=args.gpus,
            official=not args.no_official,
            long_frames=args.long,
            photo=args.photo,
            cold=args.cold,
            codecs=tuple(c for c in args.codecs.split(",") if c and c != "none"),
            note=note,
        )
    m = res["machine"]
    print(
        f"{m.get('gpu', 'CPU')} | {m['cpu_count']} CPU cores | torch {m.get('torch')} | "
        f"{res['frames']} frames at {res['height']}p, {100 * res['silent_fraction']:.0f} % silent, weights {res['weights']}, "
        f"x264 {res['preset']} crf {res['crf']}"
    )
    print(f"{'run':<18}{'frames/s':>10}{'seconds':>10}{'x official':>12}  encoder / stages")
    for name, r in res["runs"].items():
        ratio = res.get("ratios", {}).get(name, float("nan"))
        stages = r.get("stage_ms") or {k: round(v * 1e3) for k, v in r.get("stage_s", {}).items()}
        st = ", ".join(f"{k} {v / 1e3:.2f}s" for k, v in stages.items())
        if "error" in r:
            print(f"{name:<18} failed: {r['error'].strip().splitlines()[-1] if r['error'].strip() else '?'}")
            continue
        print(f"{name:<18}{r['fps']:>10.1f}{r['seconds']:>10.2f}{ratio:>12.1f}  {r.get('encoder', '')} | {st}")
        f = r.get("finish_ms") or {}
        if f:  # the work after the last batch: encoders catching up, chunks not yet muxed, index + fsync
            print(
                f"{'':<18}finish: encoders' tail {f.get('flush', 0) / 1e3:.3f}s, chunks muxed after the last frame "
                f"{f.get('chunks_left_at_close', '-')}/{f.get('chunks', 1)} in {f.get('join', 0) / 1e3:.3f}s, "
                f"index + fsync {f.get('file', 0) / 1e3:.3f}s"
            )
        if "import_s" in r:
            lm = ", ".join(f"{k} {v / 1e3:.2f}s" for k, v in (r.get("load_ms") or {}).items())
            print(
                f"{'':<18}cold: python start {r.get('python_start_s', 0):.2f}s, import {r['import_s']:.2f}s "
                f"(torch {r.get('import_torch_s', 0):.2f}s), engine object {r.get('engine_object_s', 0):.2f}s, "
                f"render {r['render_s']:.2f}s, exit {r.get('exit_s', 0):.2f}s"
                + (f", loading: {lm}" if lm else "")
                + (f"; imported {', '.join(r['modules'])}" if r.get("modules") else "")
            )
        for s in r.get("stacks") or []:  # STUDIO_STACKS: where the render thread was
            print(f"{'':<18}{100 * s['share']:5.1f}%  " + " < ".join(s["stack"]))
    if args.json:
        atomic_write_bytes(args.json, json.dumps(res, indent=2).encode())
    return 0

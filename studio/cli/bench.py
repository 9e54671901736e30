"""``studio bench``: the reference workload, ours against a reproduction of the official loop."""

from __future__ import annotations

import sys


def register(sub) -> None:
    p = sub.add_parser("bench", help="time the reference workload against the official MuseTalk loop")
    p.add_argument("--device", default=None, help="cuda (default when present) or cpu (a short smoke version)")
    p.add_argument("--frames", type=int, default=None, help="clip length (default 672 on CUDA, 48 on CPU)")
    p.add_argument("--height", type=int, default=None, help="avatar height (default 1080 on CUDA, 360 on CPU)")
    p.add_argument("--decoders", default="taesd,sd-vae", help="comma-separated MuseTalk decoders to time")
    p.add_argument("--official-frames", type=int, default=None, metavar="N",
                   help="time the official loop on the first N frames (default: all)")
    p.add_argument("--encoder", default="auto", choices=["auto", "x264", "x264-parallel", "nvenc"])
    p.add_argument("--preset", default="ultrafast", help="x264 preset of our runs (default ultrafast, as the "
                   "reference write-up; the official loop keeps ffmpeg's medium)")
    p.add_argument("--crf", type=int, default=20, help="x264 CRF of our runs (default 20)")
    p.add_argument("--batch", type=int, default=0, help="frames per batch (default: the engine's choice)")
    p.add_argument("--compile", action="store_true", help="torch.compile the UNet and decoder (default mode)")
    p.add_argument("--no-classic", action="store_true", help="skip the classic engine run")
    p.add_argument("--gpus", type=int, default=1, metavar="N",
                   help="also time each MuseTalk run on N GPUs of this machine (contiguous parts, one mux)")
    p.add_argument("--no-official", action="store_true", help="skip the official-loop reproduction (no ratios)")
    p.add_argument("--workdir", default=None, help="keep inputs and outputs here (default: a temp folder)")
    p.add_argument("--json", metavar="OUT", default=None, help="write all figures to this JSON file")
    p.set_defaults(func=run)


def run(args) -> int:
    import json
    import tempfile
    from pathlib import Path

    from studio.core.bench import run_bench
    from studio.core.fsutil import atomic_write_bytes

    def note(text):
        print(f"bench: {text}", file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="studio-bench-") as tmp:
        work = Path(args.workdir or tmp)
        res = run_bench(work, device=args.device, frames=args.frames, height=args.height,
                        decoders=tuple(d for d in args.decoders.split(",") if d),
                        official_frames=args.official_frames, encoder=args.encoder, preset=args.preset,
                        crf=args.crf, batch=args.batch,
                        compile=args.compile, classic=not args.no_classic, gpus=args.gpus,
                        official=not args.no_official, note=note)
    m = res["machine"]
    print(f"{m.get('gpu', 'CPU')} | {m['cpu_count']} CPU cores | torch {m.get('torch')} | "
          f"{res['frames']} frames at {res['height']}p, {100 * res['silent_fraction']:.0f} % silent, weights {res['weights']}, "
          f"x264 {res['preset']} crf {res['crf']}")
    print(f"{'run':<18}{'frames/s':>10}{'seconds':>10}{'x official':>12}  encoder / stages")
    for name, r in res["runs"].items():
        ratio = res.get("ratios", {}).get(name, float("nan"))
        stages = r.get("stage_ms") or {k: round(v * 1e3) for k, v in r.get("stage_s", {}).items()}
        st = ", ".join(f"{k} {v / 1e3:.2f}s" for k, v in stages.items())
        print(f"{name:<18}{r['fps']:>10.1f}{r['seconds']:>10.2f}{ratio:>12.1f}  {r.get('encoder', '')} | {st}")
    if args.json:
        atomic_write_bytes(args.json, json.dumps(res, indent=2).encode())
    return 0

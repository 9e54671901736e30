"""``studio engines build|list|clean``: TensorRT engines for the imported MuseTalk weights."""

from __future__ import annotations

import sys


def register(sub) -> None:
    from studio.cli._common import runs

    p = sub.add_parser("engines", help="build, list or clean the TensorRT engines (NVIDIA GPUs)")
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)

    b = verbs.add_parser("build", help="export the UNet and decoder(s) to ONNX and build TensorRT engines")
    b.add_argument(
        "--precision",
        choices=("fp16", "fp8", "fp32"),
        default="fp16",
        help="fp16 (default); fp8 quantizes the UNet's linears with NVIDIA ModelOpt, "
        "accepted only if it stays close to fp16",
    )
    b.add_argument(
        "--profile",
        default=None,
        metavar="MIN,OPT,MAX",
        help="batch sizes of the optimization profile, or a name from engines/profiles.json "
        "(default: its 'default', 1,32,64)",
    )
    b.add_argument(
        "--decoder",
        choices=("taesd", "sd-vae", "both"),
        default="both",
        help="which decoder engine(s) to build besides the UNet (default both)",
    )
    b.add_argument("--force", action="store_true", help="rebuild even when a valid engine is cached")
    runs(b, run_build)

    runs(verbs.add_parser("list", help="cached engines: valid, stale (and why) or unchecked"), run_list)

    c = verbs.add_parser("clean", help="delete stale engines and leftover exports")
    c.add_argument("--all", action="store_true", help="delete every engine and the timing caches too")
    runs(c, run_clean)


def run_build(args) -> int:
    from studio.cli._common import emit_json
    from studio.core.engines import runtime_tensorrt as rtt
    from studio.core.engines.tensorrt_build import build

    profile = rtt.load_profile(args.profile)
    rtt.current_target()  # refuses at once, in one line, without TensorRT or a GPU
    decoders = ["taesd", "sd-vae"] if args.decoder == "both" else [args.decoder]
    say = None if args.json else (lambda msg: print(f"studio engines: {msg}", file=sys.stderr, flush=True))
    results = build(["unet", *decoders], args.precision, profile, force=args.force, progress=say)
    if args.json:
        emit_json({"cache": str(rtt.cache_dir()), "profile": profile.label, "engines": results})
    else:
        for r in results:
            print(f"{r['component']:7s} {r['status']:9s} {r['file']}\n          {r['reason']}")
    return 0 if all(r["status"] != "rejected" for r in results) else 1


def run_list(args) -> int:
    from studio.cli._common import emit_json
    from studio.core.engines import runtime_tensorrt as rtt

    rows = rtt.list_engines()
    if args.json:
        emit_json({"cache": str(rtt.cache_dir()), "engines": rows})
        return 0
    print(f"engine cache: {rtt.cache_dir()}")
    if not rows:
        print("no engines built (studio engines build, on a machine with TensorRT and an NVIDIA GPU)")
    for r in rows:
        print(f"{r['status']:9s} {r['file']} ({r['size'] / 2**20:.1f} MiB)")
        for why in r["reasons"]:
            print(f"          {why}")
    return 0


def run_clean(args) -> int:
    from studio.cli._common import emit_json
    from studio.core.engines import runtime_tensorrt as rtt

    removed = rtt.clean(everything=args.all)
    if args.json:
        emit_json({"cache": str(rtt.cache_dir()), "removed": removed})
    else:
        print(f"removed {len(removed)} file(s) from {rtt.cache_dir()}" + "".join(f"\n  {n}" for n in removed))
    return 0

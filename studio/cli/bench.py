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
        "--user",
        action="store_true",
        help="also the user's path: weights imported from official-layout files, library avatars from a JPEG "
        "and an MP4, 48 kHz stereo WAV / MP3 / AAC voice-overs, default settings and ultrafast, the x264 "
        "preset comparison, the queue (serial vs pipelined), cold `studio render` commands and a real "
        "`studio serve` (POST /generate, concurrent clients)",
    )
    p.add_argument("--presets", default="ultrafast,superfast,veryfast", help="--user: the presets compared")
    p.add_argument("--clients", type=int, default=8, metavar="N", help="--user: concurrent clients (default 8)")
    p.add_argument(
        "--clip-frames", type=int, default=375, metavar="N", help="--user: each client's clip (default 375: 15 s)"
    )
    p.add_argument("--repeats", type=int, default=3, metavar="N", help="--user: POST /generate repeats (default 3)")
    p.add_argument("--no-serve", action="store_true", help="--user: skip the `studio serve` rows")
    p.add_argument(
        "--no-service",
        action="store_true",
        help="--user: skip the server-as-a-service rows (fresh server, cache bound, --clients and twice as many at once)",
    )
    p.add_argument(
        "--table",
        action="store_true",
        help="--user: only issue 48's table (cold commands, warm POST /generate, --clients and twice as many at "
        "once with a breaking clip, GPU memory after an eviction; about 5 minutes on an H100)",
    )
    p.add_argument(
        "--trace-dir",
        default=None,
        metavar="DIR",
        help="--user --table: the server's stage trace and GPU samples there (tests/benchmarks/trace_service.py reads them)",
    )
    p.add_argument("--no-cold-cli", action="store_true", help="--user: skip the cold `studio render` rows")
    p.add_argument("--no-queue", action="store_true", help="--user: skip the queue rows")
    p.add_argument(
        "--codecs",
        default="h264,hevc,prores,prores4444,dnxhr,vp9",
        help="a classic-engine row per delivery codec (frames/s end to end); 'none' to skip",
    )
    p.add_argument("--workdir", default=None, help="keep inputs and outputs here (default: a temp folder)")
    p.add_argument(
        "--live",
        type=int,
        default=0,
        metavar="N",
        help="instead: N live sessions on a fresh `studio serve`, watched over WebRTC (docs/live.md)",
    )
    p.add_argument("--live-seconds", type=float, default=12.0, help="--live: seconds of voice per session")
    p.add_argument("--live-viewers", type=int, default=2, help="--live: sessions watched by a WebRTC receiver")
    p.add_argument("--live-engine", default=None, help="--live: classic or musetalk (default: musetalk on CUDA)")
    p.add_argument("--json", metavar="OUT", default=None, help="write all figures to this JSON file")
    p.set_defaults(func=run)


def run(args) -> int:
    import json
    import tempfile
    from pathlib import Path

    if args.live:
        return run_live(args)
    if args.user and args.table:
        return run_table(args)

    from studio.bench.reference import run_bench
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
        if args.user:
            from studio.service.bench import user_path

            if args.json:  # what there is so far: a run cut short still leaves its figures
                atomic_write_bytes(args.json, json.dumps(res, indent=2).encode())

            def part(user):
                if args.json:
                    atomic_write_bytes(args.json, json.dumps({**res, "user": user}, indent=2).encode())

            user = user_path(
                work,
                device=args.device,
                frames=res["frames"],
                long_frames=args.long,
                height=res["height"],
                presets=tuple(x for x in args.presets.split(",") if x),
                clients=args.clients,
                clip_frames=args.clip_frames,
                repeats=args.repeats,
                queue=not args.no_queue,
                cold=not args.no_cold_cli,
                serve=not args.no_serve,
                service=not args.no_service,
                note=note,
                on_part=part,
            )
            res["runs"].update(user.pop("runs"))
            res["user"] = user
            if "official" in res["runs"]:
                base = res["runs"]["official"]["fps"]
                res["ratios"] = {
                    k: round(v["fps"] / base, 1) for k, v in res["runs"].items() if k != "official" and "fps" in v
                }
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
    if "user" in res:
        print_user(res)
    if args.json:
        atomic_write_bytes(args.json, json.dumps(res, indent=2).encode())
    return 0


def print_user(res: dict) -> None:
    """The user's-path figures: each row against its baseline measured in the same run."""
    from studio.service.bench import generate_line

    u = res["user"]
    runs = res["runs"]
    first = next((k for k in runs if k.startswith("musetalk-") and k.count("-") == 1), None)
    print()
    print(
        f"user's path: weights imported from official-layout files in {u['import']['import_s']:.1f} s "
        f"(fast layout: {len(u['import'].get('fast') or [])} files); "
        f"avatars {u['avatars']['photo_size']} from a JPEG, {u['avatars']['video_size']} from an MP4 "
        f"(faces: {u['avatars']['faces']}); default preset {u['default_preset']}"
    )
    if first:
        print(f"baseline: {first} (bench avatar, 16 kHz mono, ultrafast) {runs[first]['fps']:.1f} frames/s")
    print(f"{'run':<32}{'frames/s':>9}{'seconds':>9}{'x base':>8}  audio (waited)  finish, preset")
    for k, r in runs.items():
        if not k.startswith("user-"):
            continue
        ratio = r["fps"] / runs[first]["fps"] if first else float("nan")
        finish = (r.get("stage_ms") or {}).get("finish", 0) / 1e3
        print(
            f"{k:<32}{r['fps']:>9.1f}{r['seconds']:>9.3f}{ratio:>8.2f}  {r['audio']:<8}({r['audio_wait_ms']:>5.0f} ms)"
            f"  {finish:.3f} s, {r['preset']}"
        )
    for kind, table in (u.get("presets") or {}).items():
        print(f"presets, {kind} avatar ({table['frames']} frames {table['size']}, crf {table['crf']}, hints on):")
        print(
            f"  {'preset':<10}{'enc fps':>9}{'x264 ms/f':>10}{'MB':>8}{'PSNR-Y':>8}{'PSNR':>7}{'SSIM-Y':>8}{'SSIM':>8}"
        )
        for name, r in table.items():
            if not isinstance(r, dict):
                continue
            ms = r.get("x264_ms_per_frame")
            print(
                f"  {name:<10}{r['fps']:>9.1f}{(ms if ms is not None else float('nan')):>10.2f}{r['bytes'] / 1e6:>8.2f}"
                f"{r['psnr_y']:>8.2f}{r['psnr']:>7.2f}{r['ssim_y']:>8.4f}{r['ssim']:>8.4f}"
            )
    q = u.get("queue")
    if q:
        print(
            f"queue, {q['jobs']} jobs on one warm engine: serial {q['serial']['fps']:.1f} frames/s, pipelined "
            f"{q['pipelined']['fps']:.1f} ({q['pipelined_over_serial']:.2f}x), same files: {q['same_files']}"
        )
    print_cold(u.get("cold") or {})
    sv = u.get("serve") or {}
    if sv.get("generate"):
        print("warm POST /generate of 672 frames: goal <= 0.8 s")
    for key, rows in (sv.get("generate") or {}).items():
        print(generate_line(key, rows, audio=True))
    b = sv.get("concurrent")
    if b:
        print(
            f"serve: {b['clients']} clients at once: {b['fps']:.1f} frames/s together ({b['frames']} frames in {b['seconds']:.2f} s)"
        )
    print_service(u.get("service") or {})
    print_eviction(u.get("eviction") or {})
    print_table(u)


def print_cold(c: dict) -> None:
    """The cold ``studio render`` rows (``studio.service.bench.cold_rows``), with issue 48's goals and
    each command's timeline (seconds from the process's start)."""
    if not c:
        return
    print(f"cold `studio render` of a 15 s voice-over (import torch alone {c.get('import_torch_s', 0):.2f} s):")
    for k, r in c.items():
        if not isinstance(r, dict):
            continue
        if "error" in r:
            print(f"  {k:<30} failed: {r['error'].splitlines()[-1] if r['error'] else '?'}")
            continue
        print(f"  {k:<30}{r['seconds']:>7.2f} s wall, render {r['render_s']:.2f} s, rest {r['outside_render_s']:.2f} s")
        if r.get("timeline"):
            print("      at " + ", ".join(f"{name} {t:.2f}" for name, t in r["timeline"].items()))
    print("  goals (issue 48): MuseTalk <= 5 s, classic <= 3 s, cold")
    if c.get("imports"):
        print("  heaviest imports of a cold command (STUDIO_PRELOAD=0; cumulative, own):")
        for name, cum, own in c["imports"][:10]:
            print(f"      {name:<44}{cum:>7.3f} s {own:>7.3f} s")


def print_table(u: dict) -> None:
    """Issue 48's table (``service.bench.issue_table``): what, measured, goal, met or missed."""
    from studio.service.bench import issue_table

    rows = issue_table(u)
    print()
    print("issue 48's table:")
    w = max(len(r[0]) for r in rows)
    m = max(len(r[1]) for r in rows)
    for what, measured, goal, verdict in rows:
        print(f"  {what:<{w}}  {measured:<{m}}  goal {goal:<24} {verdict}")


def print_eviction(e: dict) -> None:
    """``bench_serve.eviction_rows``: device memory in use after each engine change."""
    if not e:
        return
    print("GPU memory, one warm engine kept (STUDIO_MAX_ENGINES=1); in use as another process sees it:")
    for r in e.get("requests") or []:
        print(
            f"  {str(r.get('settings')):<44} nvidia-smi used {r.get('used_gb')} GB, free to a new process "
            f"{r.get('free_gb_other_process')} GB, server reserved {r.get('gpu_reserved_gb')} GB, "
            f"evictions {r.get('engine_evictions_total')}" + (f"  ERROR {r['error']}" if r.get("error") else "")
        )
    if "met" in e:
        print(
            f"  after the larger engine's eviction: {e['after_eviction_gb']} GB in use against {e['one_engine_gb']} GB "
            f"with the same one engine before (larger engine: {e['larger_engine_gb']} GB): "
            + ("returned" if e["met"] else "NOT returned")
        )


def print_service(sv: dict) -> None:
    """The server-as-a-service rows (``studio.service.bench_serve``)."""
    f = sv.get("fresh")
    if f:
        print(
            f"serve, fresh data folder: /v1/ready 200 after {f['ready_s']:.1f} s; first three requests "
            + ", ".join(f"{r['request_s']:.3f}" for r in f["requests"][:3])
            + " s = "
            + ", ".join(f"{x:.2f}x" for x in f["first_three_vs_warm"])
            + " of a warm one"
        )
        warm = sorted(r["request_s"] for r in f["requests"][3:])
        if warm:
            print(
                f"serve, one warm POST /generate of {f['requests'][-1].get('frames')} frames: "
                f"{warm[len(warm) // 2]:.3f} s (median of {len(warm)}; goal <= 0.8 s for 672)"
            )
    c = sv.get("cache")
    if c:
        last = (c["requests"] or [{}])[-1]
        print(
            f"serve, {len(c['requests'])} requests varying batch/decoder/precision: {c['answered']} answered, "
            f"at most {c['max_engines']:.0f} engines held, {c['max_gpu_reserved_gb']} GB GPU memory reserved at most, "
            f"{last.get('gpu_reserved_gb')} GB after the last (goal: an evicted engine's memory returned)"
        )
    goals = {8: 1000, 16: 1100}  # issue 48's goals, frames/s together
    for key in [k for k in sv if k.startswith("concurrent_")]:
        for b in sv.get(key) or []:
            goal = goals.get(b["clients"]) if key == "concurrent_default" else None
            walls = b.get("request_s") or [0]
            print(
                f"serve, {b['clients']} clients at once ({key.removeprefix('concurrent_')}): {b['fps']:.1f} frames/s"
                + (f" (goal >= {goal:,})" if goal else "")
                + f"; the fastest client {min(walls):.2f} s, the slowest {max(walls):.2f} s"
            )
            u = b.get("breaking")
            if u:
                print(
                    f"  a 5 s breaking clip posted into it: first frame {u.get('first_frame_s')} s after its submission "
                    f"(goal <= 0.25 s), answered in {u['answered'] - u['sent']:.2f} s"
                )


def run_table(args) -> int:
    """``studio bench --user --table`` (``studio.service.bench.table_path``)."""
    import json
    import tempfile
    from pathlib import Path

    from studio.bench.reference import machine_info
    from studio.core.store.fsutil import atomic_write_bytes
    from studio.service.bench import table_path

    def note(text):
        print(f"bench: {text}", file=sys.stderr, flush=True)

    m = machine_info()

    def part(u):
        if args.json:
            atomic_write_bytes(args.json, json.dumps({"machine": m, "user": u}, indent=2).encode())

    import signal

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(124))  # `timeout`: the rows so far are printed
    so_far: dict = {}

    def keep(u):
        so_far["u"] = u  # the same dict the rows go on filling
        part(u)

    try:
        with tempfile.TemporaryDirectory(prefix="studio-bench-") as tmp:
            table_path(
                Path(args.workdir or tmp),
                device=args.device,
                frames=args.frames or 672,
                height=args.height or 1080,
                clients=args.clients,
                clip_frames=args.clip_frames,
                note=note,
                on_part=keep,
                trace_dir=Path(args.trace_dir) if args.trace_dir else None,
            )
    finally:
        print_all(m, so_far.get("u") or {})
        part(so_far.get("u") or {})
    return 0


def print_all(m: dict, u: dict) -> None:
    """``run_table``'s output: the machine, every part's rows, issue 48's table."""
    print(f"{m.get('gpu', 'CPU')} | {m['cpu_count']} CPU cores | torch {m.get('torch')}")
    print_cold(u.get("cold") or {})
    print_service(u.get("service") or {})
    print_eviction(u.get("eviction") or {})
    print_table(u)


def run_live(args) -> int:
    """``studio bench --live N`` (``studio.service.bench_live``)."""
    import json
    import tempfile
    from pathlib import Path

    from studio.service.bench_live import live_rows

    device = args.device or ("cuda" if _cuda() else "cpu")
    engine = args.live_engine or ("musetalk" if device.startswith("cuda") else "classic")
    height = args.height or (1080 if device.startswith("cuda") else 600)
    with tempfile.TemporaryDirectory(prefix="studio-bench-live-") as tmp:
        res = live_rows(
            args.live,
            Path(args.workdir or tmp),
            device,
            engine,
            height,
            args.live_seconds,
            args.live_viewers,
            note=lambda text: print(text, file=sys.stderr, flush=True),
        )
    print(json.dumps(res, indent=1))
    return 0


def _cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())

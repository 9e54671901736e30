"""``studio render``, ``studio frame`` and ``studio demo``: the product's main job from the command line."""

from __future__ import annotations

import sys
from pathlib import Path

from studio.core.constants import DEFAULT_MIN_SILENCE_FRAMES, DEFAULT_SILENCE_THRESHOLD


def register(sub) -> None:
    p = sub.add_parser("render", help="render an avatar speaking a voice-over to an MP4")
    p.add_argument("--avatar", required=True, help="avatar NAME from the library, or an image/video path")
    p.add_argument("--audio", required=True, help="voice-over file (WAV, FLAC, OGG, MP3)")
    p.add_argument("-o", "--output", required=True, help="output MP4 path")
    _render_options(p)
    _scale_options(p)
    p.add_argument("--json", action="store_true", help="print one JSON object with the result")
    p.set_defaults(func=run_render)

    f = sub.add_parser("frame", help="write the exact frame a render shows at a timestamp")
    f.add_argument("--avatar", required=True, help="avatar NAME from the library, or an image/video path")
    f.add_argument("--audio", required=True, help="voice-over file")
    f.add_argument("-t", "--time", type=float, required=True, metavar="SECONDS", help="timestamp in seconds")
    f.add_argument("-o", "--output", required=True, help="output PNG path")
    _render_options(f, encoder=False)
    f.set_defaults(func=run_frame)

    d = sub.add_parser("demo", help="render the bundled demo clip (astronaut + news voice-over)")
    d.add_argument("-o", "--output", default="demo.mp4", help="output MP4 path (default demo.mp4)")
    _render_options(d)
    d.add_argument("--json", action="store_true", help="print one JSON object with the result")
    d.set_defaults(func=run_demo)


def _render_options(p, encoder: bool = True) -> None:
    p.add_argument("--engine", default="auto", choices=["auto", "classic", "musetalk"], help="lip-sync engine (default auto)")
    p.add_argument("--device", default=None, help="torch device, e.g. cpu, cuda, cuda:1 (default: cuda when present)")
    p.add_argument("--precision", default="auto", choices=["auto", "fp32", "fp16", "bf16"], help="MuseTalk precision")
    p.add_argument("--decoder", default="taesd", choices=["taesd", "sd-vae"], help="MuseTalk decoder (speed vs quality)")
    p.add_argument("--runtime", default="auto", choices=["auto", "torch", "tensorrt"],
                   help="MuseTalk runtime: TensorRT engines when built and valid (auto), or force one")
    p.add_argument("--batch", type=int, default=0, help="frames per batch (default: the engine's choice)")
    p.add_argument("--threshold", type=float, default=DEFAULT_SILENCE_THRESHOLD, help="silence RMS threshold")
    p.add_argument("--min-silence", type=int, default=DEFAULT_MIN_SILENCE_FRAMES, metavar="N", help="shortest silence in frames")
    if encoder:
        p.add_argument("--encoder", default="auto", choices=["auto", "x264", "x264-parallel", "nvenc"], help="video encoder")
        p.add_argument("--crf", type=int, default=20, help="x264/NVENC quality, lower is better (default 20)")
        p.add_argument("--preset", default="veryfast", help="x264 preset (default veryfast)")


def _scale_options(p) -> None:
    p.add_argument("--farm", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="render in chunks on a Ray farm: HOST:PORT, or none for the one `studio farm up` "
                        "started here (else a local one on 127.0.0.1)")
    p.add_argument("--chunks", type=int, default=0, metavar="N",
                   help="segments to render in parallel (farm default: one per worker; without --farm: "
                        "N local processes)")
    p.add_argument("--gpus", default=None, metavar="N|all",
                   help="render on N GPUs of this machine at once (contiguous parts, one writer, one mux)")


def _settings(args):
    from studio.core.errors import InputError
    from studio.core.render import RenderSettings

    if args.threshold < 0:
        raise InputError("--threshold must be 0 or more (an RMS level such as 0.008)")
    if args.min_silence < 1:
        raise InputError("--min-silence must be at least 1 frame")
    if args.batch < 0:
        raise InputError("--batch must be a positive number of frames (or 0 for automatic)")
    kw = dict(engine=args.engine, device=args.device, precision=args.precision, decoder=args.decoder,
              runtime=args.runtime, batch=args.batch, threshold=args.threshold, min_silence=args.min_silence)
    if hasattr(args, "encoder"):
        if not 0 <= args.crf <= 51:
            raise InputError("--crf must be between 0 and 51")
        kw.update(encoder=args.encoder, crf=args.crf, preset=args.preset)
    return RenderSettings(**kw)


def _render(avatar, audio, output, args) -> int:
    from studio.cli._common import ProgressBar, emit_json, fmt_seconds
    from studio.core.audio import probe
    from studio.core.render import Renderer

    settings = _settings(args)
    probe(audio)  # bad audio fails before any avatar work
    if getattr(args, "farm", None) is not None or getattr(args, "chunks", 0):
        from studio.cli.farm import render_scaled

        return render_scaled(avatar, audio, output, settings, args)
    if getattr(args, "gpus", None):  # the same run / result API, over several GPUs
        renderer = _gpu_renderer(avatar, audio, settings, args.gpus)
    else:
        renderer = Renderer(avatar, audio, settings)
    bar = ProgressBar("render")
    said = args.json  # name the engine once the render has really started (bad input says one line)
    try:
        for p in renderer.run(output):
            if not said:
                print(f"engine: {renderer.engine.name} ({renderer.engine_reason})", file=sys.stderr)
                said = True
            if not p.finished:
                bar.update(p.done, p.total, f"{p.fps:6.1f} fps  ETA {fmt_seconds(p.eta_s)}")
    finally:
        bar.close()
    r = renderer.result
    if args.json:
        emit_json(r.to_json())
    else:
        print(f"wrote {r.output}: {r.frames} frames ({r.silent_frames} silent), {r.width}x{r.height}, "
              f"{r.engine} + {r.encoder}, {r.seconds:.1f} s ({r.fps:.1f} fps)")
    return 0


def _gpu_renderer(avatar, audio, settings, gpus: str):
    from studio.core.errors import InputError
    from studio.core.multigpu import DeviceRender, cuda_devices

    have = cuda_devices()
    n = len(have) if gpus == "all" else int(gpus) if str(gpus).isdigit() else 0
    if n < 1:
        raise InputError(f"--gpus {gpus}: give a number of GPUs or 'all'")
    if n > len(have):
        raise InputError(f"--gpus {n}: this machine has {len(have)} CUDA GPU(s)")
    return DeviceRender(avatar, audio, settings, devices=have[:n])


def run_render(args) -> int:
    return _render(args.avatar, args.audio, args.output, args)


def run_demo(args) -> int:
    from studio.core.paths import repo_resources

    demo = repo_resources() / "demo"
    return _render(str(demo / "astronaut.png"), str(demo / "voiceover.flac"), args.output, args)


def run_frame(args) -> int:
    import PIL.Image

    from studio.core.audio import probe
    from studio.core.errors import InputError
    from studio.core.fsutil import atomic_path
    from studio.core.render import Renderer, frame_index

    info = probe(args.audio)
    if args.time < 0 or frame_index(args.time) >= info.frames:
        raise InputError(f"-t {args.time} is outside the voice-over (0 to {info.duration_s:.2f} s)")
    out = Path(args.output)
    if not out.parent.exists():
        raise InputError(f"{out.parent}: the output folder does not exist")
    renderer = Renderer(args.avatar, args.audio, _settings(args))
    img = renderer.frame_at(args.time)
    with atomic_path(out) as tmp:
        PIL.Image.fromarray(img).save(tmp, format="PNG")
    idx = frame_index(args.time)
    print(f"wrote {out}: frame {idx} ({idx / 25:.2f} s), {'silent' if renderer.plan.silent[idx] else 'speech'}, "
          f"engine {renderer.engine.name}")
    return 0

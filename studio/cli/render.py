"""``studio render``, ``studio frame`` and ``studio demo``: the product's main job from the command line."""

from __future__ import annotations

import os
import re
import sys


def register(sub) -> None:
    from studio.cli._common import JSON_RESULT, runs

    p = sub.add_parser("render", help="render an avatar speaking a voice-over to an MP4")
    job_options(p, "output MP4 path")
    from studio.cli.remote import add_option

    add_option(p)  # --server URL: render on a running `studio serve` (studio/cli/remote.py)
    p.add_argument(
        "--local",
        action="store_true",
        help="render in this process even when a studio serve runs on this data folder (by default the job "
        "goes to it: its engine is warm)",
    )
    priority_option(p)
    runs(p, run_render, json=JSON_RESULT)

    f = sub.add_parser("frame", help="write the exact frame a render shows at a timestamp")
    f.add_argument("--avatar", required=True, help="avatar NAME from the library, or an image/video path")
    f.add_argument("--audio", required=True, help="voice-over file")
    f.add_argument("-t", "--time", type=float, required=True, metavar="SECONDS", help="timestamp in seconds")
    f.add_argument("-o", "--output", required=True, help="output PNG path")
    overwrite_option(f)
    render_options(f, encoder=False)
    f.set_defaults(func=run_frame)

    d = sub.add_parser("demo", help="render the bundled demo clip (astronaut + news voice-over)")
    d.add_argument("-o", "--output", default="demo.mp4", help="output MP4 path (default demo.mp4)")
    overwrite_option(d)
    render_options(d)
    runs(d, run_demo, json=JSON_RESULT)


def job_options(p, output_help: str) -> None:
    """What a render is: avatar, voice-over, output, settings, where it runs and which frames
    (``studio render`` and ``studio queue add`` take the same)."""
    p.add_argument("--avatar", required=True, help="avatar NAME from the library, or an image/video path")
    p.add_argument(
        "--audio", required=True, help="voice-over file (WAV, FLAC, OGG, MP3, M4A/AAC, or a video with sound)"
    )
    p.add_argument("-o", "--output", required=True, help=output_help)
    overwrite_option(p)
    render_options(p)
    _scale_options(p)
    _range_options(p)


def priority_option(p) -> None:
    """``--priority`` of ``studio render`` and ``studio queue add``."""
    p.add_argument(
        "--priority",
        default=None,
        metavar="LANE",
        help="breaking, normal (default), bulk, or 0-100: higher lanes are served first where a scheduler runs the "
        "queue (studio serve); a lane below still gets at least 10 %% of the frames",
    )


def overwrite_option(p) -> None:
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing file at the output path (default: keep it and write NAME_002, NAME_003 ...)",
    )


def render_options(p, encoder: bool = True) -> None:
    """One option per render setting, made from the schema (``studio.core.settings``); ``frame`` has no
    encoder settings (a PNG is not encoded)."""
    from studio.core.settings import specs

    for spec in specs("cli", None if encoder else ("engine", "silence")):
        if spec.name == "script":  # the command line names a file (settings_from_args reads it)
            p.add_argument(
                "--script",
                dest="script_file",
                metavar="SCRIPT.txt",
                help="the voice-over's text for --captions, a UTF-8 .txt file (default: the text it was spoken "
                "from, or a .txt beside the voice-over)",
            )
            continue
        kw: dict = {"dest": spec.name, "default": None}
        if spec.kind is bool:
            import argparse

            kw.update(
                action=argparse.BooleanOptionalAction, help=f"{spec.help} (default {'on' if spec.default else 'off'})"
            )
        else:
            shown = spec.auto_label if spec.default is None else spec.default
            kw.update(type=_typed(spec), help=f"{spec.help} (default {shown})")
            if spec.choices:
                kw["choices"] = spec.choices
            elif spec.kind is not str:
                kw["metavar"] = "N" if spec.kind is int else "X"
        p.add_argument(spec.option, **kw)


def _typed(spec):
    """argparse's type for a setting: the schema's own parser (one sentence for a bad value)."""
    import argparse

    def parse(text):
        from studio.core.errors import InputError

        try:
            return spec.parse(text)
        except InputError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = spec.kind.__name__
    return parse


def _scale_options(p) -> None:
    p.add_argument(
        "--farm",
        nargs="?",
        const="",
        default=None,
        metavar="ADDRESS",
        help="render in chunks on a Ray farm: HOST:PORT, or none for the one `studio farm up` "
        "started here (else a local one on 127.0.0.1)",
    )
    p.add_argument(
        "--chunks",
        type=int,
        default=0,
        metavar="N",
        help="segments to render in parallel (farm default: one per worker; without --farm: N local processes)",
    )
    p.add_argument(
        "--gpus",
        metavar="N|all",
        help="render on N GPUs of this machine at once (contiguous parts, one writer, one mux)",
    )


def _range_options(p) -> None:
    p.add_argument(
        "--in",
        dest="range_in",
        default=None,
        metavar="TIME",
        help="render from this point: seconds (12.5), a timecode (00:00:12:12, fields from the right) "
        "or a frame (#312)",
    )
    p.add_argument(
        "--out",
        dest="range_out",
        default=None,
        metavar="TIME",
        help="render up to (not including) this point; same forms as --in",
    )


def given_settings(args) -> dict:
    """The settings typed on the command line (their names are the explicit ones: they win over a
    delivery's), parsed."""
    from studio.core.settings import SCHEMA

    given = {n: getattr(args, n) for n in SCHEMA if getattr(args, n, None) is not None}
    if getattr(args, "script_file", None):  # --script SCRIPT.txt: a file here; the setting holds its text
        from studio.cli.speak import read_script

        given["script"] = read_script(args.script_file)
    return given


def settings_from_args(args, avatar=None):
    """The settings the command line gave, resolved (``render.resolve``: the delivery's values under the
    options typed, the schema's defaults for the others), checked."""
    from studio.core.render.resolve import resolve

    given = given_settings(args)
    return resolve(given, set(given), avatar).settings


def _placement(args):
    from studio.core.errors import InputError
    from studio.service.request import Placement

    if getattr(args, "server", None):  # studio render --server URL (checked by check_server_args)
        return Placement("server", server=args.server, priority=getattr(args, "priority", None))
    chunks = getattr(args, "chunks", 0) or 0
    if chunks < 0:
        raise InputError("--chunks must be a positive number of segments (or 0 for one per worker)")
    if getattr(args, "farm", None) is not None:
        return Placement("farm", chunks=chunks, farm=args.farm)
    if chunks:
        return Placement("chunks", chunks=chunks)
    gpus = getattr(args, "gpus", None)
    if gpus:
        from studio.service.queue import gpus_here

        have = gpus_here()
        n = len(have) if gpus == "all" else int(gpus) if str(gpus).isdigit() else 0
        if n < 1:
            raise InputError(f"--gpus {gpus}: give a number of GPUs or 'all'")
        if n > len(have):
            raise InputError(f"--gpus {n}: this machine has {len(have)} CUDA GPU(s)")
        return Placement("gpus", devices=tuple(have[:n]))
    return Placement()


def frames_from_args(args, req):
    """``--in``/``--out`` as a frame range at ``req``'s output rate (None: the whole clip; the rate is
    asked for only then: a server's own avatar cannot be read here)."""
    a, b = getattr(args, "range_in", None), getattr(args, "range_out", None)
    if a is None and b is None:
        return None
    rate = req.output_rate
    from studio.core.errors import InputError
    from studio.core.media.audio import probe
    from studio.core.media.timecode import TimecodeError, parse_jump

    total = probe(args.audio).frames_at(rate)

    def frame(text, default):
        if text is None:
            return default
        text = str(text).strip()
        if re.fullmatch(r"\d+(\.\d+)?", text):  # a plain number is seconds, as in ffmpeg's -ss
            from studio.core.render.plan import frame_index

            return frame_index(float(text), rate)
        try:
            return parse_jump(text, 0, rate)
        except TimecodeError as exc:
            raise InputError(str(exc)) from None

    return frame(a, 0), frame(b, total)


def request_from_args(avatar, audio, output, args):
    """The ``RenderRequest`` that ``studio render`` and ``studio queue add`` build from their options."""
    from studio.service.request import RenderRequest

    given = given_settings(args)
    req = RenderRequest(
        avatar,
        audio,
        output,
        settings_from_args(args),
        _placement(args),
        overwrite=bool(getattr(args, "overwrite", False)),
        explicit=tuple(sorted(given)),  # the options typed win over the delivery's values
    )
    frames = frames_from_args(args, req)  # timecodes count the output's frames (the rate resolved once)
    return req if frames is None else req.with_(frames=frames)


def _render(avatar, audio, output, args) -> int:
    from studio.cli._common import ProgressBar, emit_json, fmt_seconds
    from studio.service.driver import Render

    req = request_from_args(avatar, audio, output, args)
    check_output_args(output, avatar, audio, "video", req.settings.codec)  # the delivery's codec, if one is named
    render = Render(req, in_process_farm=True)
    bar = ProgressBar("render")
    said = args.json  # name the engine/placement once the render has really started

    def started(where):
        nonlocal said
        if said:
            return
        said = True
        engine = f"engine: {render.engine_name} ({render.engine_reason})" if render.engine_reason else ""
        print(engine if where == "this computer" else f"{where}{'; ' + engine if engine else ''}", file=sys.stderr)

    render.on_started = started
    stamp("request")
    try:
        for p in render.run():
            if p.done and "first_frame" not in STAMPS:
                stamp("first_frame")
            if not p.finished:
                extra = f"  {len(p.workers)} worker(s)" if p.workers else ""
                bar.update(p.done, p.total, f"{p.fps:6.1f} fps{extra}  ETA {fmt_seconds(p.eta_s)}")
    finally:
        bar.close()
    r = render.finished_result()
    stamp("rendered")
    check = check_after(r.output, req, args.json) if req.settings.checked else None
    if check is not None and check.get("worst_second") is not None:
        from studio.service.sidecars import add_worst_second

        add_worst_second(r, req, check["worst_second"])  # the check's worst second as a marker in the .otio
    if args.json:
        out = r.to_json()
        out["ran_on"] = render.where
        if render.last is not None and render.last.chunks:  # local chunks, the farm
            out.update(chunks=render.last.chunks, retries=render.last.retries, workers=sorted(render.last.workers))
        out["timeline"] = timeline()
        if check is not None:
            out["check"] = check
            if check.get("report_files"):  # its visual report, beside the video
                out["files"] = {**(out.get("files") or {}), "check_report": check["report_files"][0]}
        emit_json(out)
    else:
        print(
            f"wrote {r.output}: {r.frames} frames ({r.silent_frames} silent), {r.width}x{r.height}, "
            f"{r.engine} + {r.encoder}, {r.seconds:.1f} s ({r.fps:.1f} fps)"
            + ("" if render.where == "this computer" else f", {render.where}")
            + kept_note(output, r.output)
        )
        if r.loudness:
            ld = r.loudness
            print(
                f"loudness: {ld['before_lufs']:.1f} LUFS -> {ld['after_lufs']:.1f} LUFS (target {ld['target_lufs']:g}), "
                f"true peak {ld['after_true_peak']:.1f} dBTP (limit {ld['true_peak_limit']:g})"
                + (", limited" if ld.get("limited") else "")
            )
        for kind, path in r.files.items():
            print(f"wrote {path} ({kind})")
        for n in r.notes:
            print(f"note: {n}", file=sys.stderr)
        note = ALPHA_NOTES.get(r.alpha, "")
        if note:
            print(note.format(codec=req.settings.codec), file=sys.stderr)
        if check is not None:
            print(
                f"check: {check['verdict']}: {check['reason']}"
                if check.get("state") == "done"
                else f"check: could not run: {check.get('reason')}"
            )
    return 0


ALPHA_NOTES = {
    "opaque": "note: --codec {codec} has an alpha channel and this avatar has no transparency, so it is "
    "opaque everywhere (a PNG with alpha, a ProRes 4444 / VP9 video with alpha or --matte gives one)",
    "dropped": "note: this avatar is transparent but --codec {codec} has no alpha channel; render with "
    "--codec prores4444 or vp9 to keep it",
}


def kept_note(asked, wrote) -> str:
    """What to add to the "wrote" line when the name asked for was taken (a file is never replaced
    without --overwrite)."""
    from pathlib import Path

    if Path(os.path.abspath(asked)) == Path(os.path.abspath(wrote)):
        return ""
    return f" ({Path(asked).name} exists and was kept; --overwrite replaces it)"


def check_after(output, req, quiet: bool) -> dict:
    """``--check``: the lip-sync check of the written file (the render is over, so it slows nothing):
    the whole report with ``state`` "done", or ``state`` "failed" and the reason."""
    from studio.cli._common import ProgressBar
    from studio.service.checks import check_here

    bar = ProgressBar("check", enabled=False if quiet else None)
    try:
        summary, full = check_here(output, req, progress=lambda d, t: bar.update(d, t))
    finally:
        bar.close()
    return summary if full is None else {"state": "done", **full}


def check_output_args(output, avatar, audio, kind: str, codec: str | None = None):
    """An output that is an input, a folder, a wrong extension or an unwritable folder: one sentence, before any work."""
    from studio.core.render.outputs import check_output, render_inputs

    return check_output(output, render_inputs(avatar, audio), kind, codec=codec)


STAMPS: dict[str, float] = {}  # epoch seconds of a command's stages (``timeline``)


def stamp(name: str) -> None:
    import time

    STAMPS.setdefault(name, time.time())


def timeline() -> dict[str, float]:
    """Seconds from this process's start to each stage of the command (``--json``'s ``timeline``: what a
    cold start spends where): ``command`` (Python started, studio imported, options parsed), ``placed``
    (a warm server looked for), ``torch``/``nets``/``cuda`` (the preload thread's steps), ``request``
    (settings resolved, inputs checked), ``first_frame`` (progress reported its first frames),
    ``rendered`` (the file finished)."""
    from studio.core.engines import preload

    try:  # the process's start, from /proc (clock ticks since boot)
        import os

        with open("/proc/self/stat") as f:
            ticks = float(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat") as f:
            boot = next(float(x.split()[1]) for x in f if x.startswith("btime"))
        born = boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        born = min(STAMPS.values(), default=0.0)
    out = {k: round(v - born, 3) for k, v in STAMPS.items()}
    if preload.started_at:
        out.update({k: round(preload.started_at + v - born, 3) for k, v in preload.timeline.items()})
    return dict(sorted(out.items(), key=lambda kv: kv[1]))


def run_render(args) -> int:
    stamp("command")
    if getattr(args, "priority", None) is not None:
        from studio.service.scheduler import parse_priority

        parse_priority(args.priority)  # a bad lane: one sentence before any work
    if getattr(args, "server", None) and getattr(args, "local", False):
        from studio.core.errors import InputError

        raise InputError("--local renders in this process and --server on that server: give one of them")
    if not getattr(args, "server", None):
        from studio.cli.serve import local_server

        args.server, why, passed_over = local_server(args)  # a warm `studio serve` on this data folder: no cold start
        if args.server:
            print(
                f"render: handed to the studio serve running on this data folder ({args.server}, "
                "engine warm); --local renders in this process",
                file=sys.stderr,
                flush=True,
            )
        else:
            lane = "; --priority orders jobs on a server only" if getattr(args, "priority", None) else ""
            if lane or passed_over:  # the plain case stays quiet: a refused input keeps its one line
                print(f"render: in this process ({why}){lane}", file=sys.stderr, flush=True)
            from studio.core.engines import preload

            preload.start(getattr(args, "engine", None), getattr(args, "device", None))  # torch while inputs load
        stamp("placed")
    if getattr(args, "server", None):
        from studio.cli.remote import check_server_args

        check_server_args(args)
    return _render(args.avatar, args.audio, args.output, args)


def run_demo(args) -> int:
    from studio.core.env import repo_resources

    demo = repo_resources() / "demo"
    return _render(str(demo / "astronaut.png"), str(demo / "voiceover.flac"), args.output, args)


def run_frame(args) -> int:
    import math

    import PIL.Image

    from studio.core.errors import InputError
    from studio.core.media.audio import probe
    from studio.core.render.plan import frame_index
    from studio.core.render.renderer import Renderer
    from studio.core.store.fsutil import atomic_output

    if not math.isfinite(args.time):
        raise InputError(f"-t {args.time}: give the time as a number of seconds, such as 12.48")
    out = check_output_args(args.output, args.avatar, args.audio, "image")
    info = probe(args.audio)
    settings = settings_from_args(args, args.avatar)
    if settings.device is not None:
        from studio.service.preflight import check_device

        check_device(settings.device)  # cuda without CUDA: one sentence, not an internal error
    renderer = Renderer(args.avatar, args.audio, settings)
    rate = renderer.rate
    if args.time < 0 or frame_index(args.time, rate) >= info.frames_at(rate):
        raise InputError(f"-t {args.time} is outside the voice-over (0 to {info.duration_s:.2f} s)")
    at = frame_index(args.time, rate)
    renderer.focus((at, at + 1))  # a long clip: its stretch only
    img = renderer.frame_at(args.time)
    from studio.core.store.files import write_error

    try:
        with atomic_output(out, overwrite=args.overwrite) as written:
            PIL.Image.fromarray(img).save(written.tmp, format="PNG")
    except OSError as exc:  # a full disk, a name too long for a numbered copy: one sentence
        raise write_error(exc, out) from None
    idx = frame_index(args.time, rate)
    from studio.core.media.rates import rate_text

    print(
        f"wrote {written.final}: frame {idx} ({float(idx / rate):.2f} s at {rate_text(rate)} fps), "
        f"{'silent' if renderer.plan.silent[idx] else 'speech'}, engine {renderer.engine.name}"
        + kept_note(out, written.final)
    )
    return 0

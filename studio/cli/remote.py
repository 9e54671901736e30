"""``studio render --server URL``: the same render on a running ``studio serve`` (see studio.service.client).

The voice-over is uploaded once (by content), the avatar is a library name on the server or a local
image/video (uploaded), the job goes into the server's queue, the progress bar follows its events,
and the finished MP4 is downloaded to ``-o`` (written beside it, renamed when complete). Ctrl-C
cancels the job on the server. The last line (or ``--json``) is what a local render prints.
"""

from __future__ import annotations

import sys

SETTINGS = (
    "engine",
    "decoder",
    "encoder",
    "precision",
    "runtime",
    "crf",
    "preset",
    "batch",
    "threshold",
    "min_silence",
)


def register(sub) -> None:
    """No sub-command of its own: ``studio render`` takes ``--server`` (``add_option``) and calls
    ``render_remote``."""


def add_option(p) -> None:
    p.add_argument(
        "--server",
        default=None,
        metavar="URL",
        help="render on a running `studio serve` (http://HOST:PORT; token from $STUDIO_SERVER_TOKEN)",
    )


def render_remote(args) -> int:
    from studio.cli._common import ProgressBar, emit_json, fmt_seconds
    from studio.core.errors import InputError
    from studio.core.media.audio import probe

    if getattr(args, "farm", None) is not None or getattr(args, "chunks", 0) or getattr(args, "gpus", None):
        raise InputError("--server renders where the server runs: leave out --farm, --chunks and --gpus")
    if getattr(args, "device", None):
        raise InputError("--server picks the device on the server: leave out --device")
    from studio.cli.render import _check_output, _frames  # what a local render checks, read the same way

    _check_output(args.output, args.avatar, args.audio, "video")
    probe(args.audio)  # bad audio fails here, before any upload
    try:
        from studio.service.client import StudioClient
    except ImportError as exc:
        raise InputError(
            f"--server needs the serve extra ({exc.name} is missing): pip install 'studio[serve]'"
        ) from None
    settings = {k: getattr(args, k) for k in SETTINGS if hasattr(args, k)}
    frames = _frames(args)
    if frames is not None:
        settings.update(frame_start=frames[0], frame_end=frames[1])
    from studio.core import env

    with StudioClient(args.server, token=env.get("STUDIO_SERVER_TOKEN") or None) as client:
        job = client.submit(args.avatar, audio=args.audio, settings=settings)
        bar = ProgressBar("render")
        try:
            final = client.wait(
                job["id"],
                lambda kind, d: (
                    kind == "progress"
                    and bar.update(d["done"], d["total"], f"{d['fps']:6.1f} fps  ETA {fmt_seconds(d['eta_s'])}")
                ),
            )
        except KeyboardInterrupt:
            client.cancel(job["id"])
            raise
        finally:
            bar.close()
        if final["state"] != "done":
            from studio.core.errors import RenderError

            raise RenderError(f"the server's render job {final['id']} {final['state']}: {final['reason']}")
        wrote = client.download(final["id"], args.output, overwrite=bool(getattr(args, "overwrite", False)))
    r = dict(final["result"], output=str(wrote))
    if getattr(args, "check", None):  # the lip-sync check of the downloaded file, here
        from studio.cli.render import _check_after, request_from_args

        r["check"] = _check_after(str(wrote), request_from_args(args.avatar, args.audio, str(wrote), args), args.json)
    if args.json:
        emit_json(r)
    else:
        print(f"engine: {r.get('engine')} ({r.get('engine_reason')}) on {args.server}", file=sys.stderr)
        print(
            f"wrote {r['output']}: {r['frames']} frames ({r['silent_frames']} silent), {r['width']}x{r['height']}, "
            f"{r['engine']} + {r['encoder']}, {r['seconds']:.1f} s ({r['fps']:.1f} fps)"
        )
        c = r.get("check")
        if c is not None:
            print(f"check: {c['verdict']}: {c['reason']}" if c.get("state") == "done" else f"check: {c.get('reason')}")
    return 0

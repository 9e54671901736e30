"""``studio serve``: the HTTP render API on this machine's warm render service (see studio.api)."""

from __future__ import annotations

import sys

DEFAULT_MAX_AUDIO_MINUTES = 60.0  # an hour of voice-over: 230 MB decoded (the CLI's own default is 240)


def register(sub) -> None:
    from studio.api.options import DEFAULT_HOST, DEFAULT_MAX_QUEUED, DEFAULT_MAX_UPLOAD_MB, DEFAULT_PORT

    p = sub.add_parser("serve", help="serve the render API over HTTP (POST /generate, /v1/renders, /docs)")
    p.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help=f"address to listen on (default {DEFAULT_HOST}; any other than loopback needs --token)",
    )
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"TCP port (default {DEFAULT_PORT})")
    p.add_argument(
        "--token",
        default=None,
        help="require 'Authorization: Bearer TOKEN' (default: "
        "$STUDIO_SERVER_TOKEN; prefer that, a command line is visible to other users)",
    )
    p.add_argument(
        "--allow-paths",
        default="",
        metavar="DIR[,DIR...]",
        help="let clients name files on this machine (avatar_path, audio_path, output) under these folders only",
    )
    p.add_argument(
        "--max-upload-mb",
        type=float,
        default=DEFAULT_MAX_UPLOAD_MB,
        metavar="N",
        help=f"largest uploaded file in MB (default {DEFAULT_MAX_UPLOAD_MB})",
    )
    p.add_argument(
        "--max-queued",
        type=int,
        default=DEFAULT_MAX_QUEUED,
        metavar="N",
        help=f"queued jobs before new ones get 429 (default {DEFAULT_MAX_QUEUED})",
    )
    p.add_argument(
        "--max-audio-minutes",
        type=float,
        default=DEFAULT_MAX_AUDIO_MINUTES,
        metavar="N",
        help="longest voice-over accepted, read from the file's header before it is decoded "
        f"(default {DEFAULT_MAX_AUDIO_MINUTES:g}: an upload's decoded size, not its file size, is what it costs)",
    )
    p.set_defaults(func=run_serve)


def run_serve(args) -> int:
    from studio.core.errors import InputError, StudioError

    try:
        import fastapi  # noqa: F401 - say which extra is missing before anything starts
        import uvicorn  # noqa: F401

        from studio.api.options import ServeOptions
        from studio.api.server import serve
    except ImportError as exc:
        raise InputError(
            f"studio serve needs the serve extra ({exc.name} is missing): pip install 'studio[serve]'"
        ) from None
    from studio.core import env
    from studio.core.media.audio import set_max_audio_minutes

    try:
        set_max_audio_minutes(args.max_audio_minutes, "this server's --max-audio-minutes")
    except StudioError:
        raise InputError(f"--max-audio-minutes {args.max_audio_minutes:g}: give a positive number of minutes") from None
    token = args.token if args.token is not None else env.get("STUDIO_SERVER_TOKEN") or None
    options = ServeOptions(
        host=args.host,
        port=args.port,
        token=token,
        allow_paths=args.allow_paths,  # "a,b": split and checked by ServeOptions.check
        max_upload_mb=args.max_upload_mb,
        max_queued=args.max_queued,
    ).check()
    serve(
        options,
        on_listening=lambda url: print(
            f"studio: serving on {url} (docs at {url}/docs; token {'required' if token else 'off'}); Ctrl-C stops",
            file=sys.stderr,
            flush=True,
        ),
    )
    return 0

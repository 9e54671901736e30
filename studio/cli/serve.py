"""``studio serve``: the HTTP render API on this machine's warm render service (see studio.api)."""

from __future__ import annotations

import sys


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
        action="store_true",
        help="let clients name files on this machine (avatar_path, audio_path, output)",
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
    p.set_defaults(func=run_serve)


def run_serve(args) -> int:
    from studio.core.errors import InputError

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

    token = args.token if args.token is not None else env.get("STUDIO_SERVER_TOKEN") or None
    options = ServeOptions(
        host=args.host,
        port=args.port,
        token=token,
        allow_paths=args.allow_paths,
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

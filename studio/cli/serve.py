"""``studio serve``: the HTTP render API on this machine's warm render service (see studio.api)."""

from __future__ import annotations

import sys

DEFAULT_MAX_AUDIO_MINUTES = 60.0  # an hour of voice-over: 230 MB decoded (the CLI's own default is 240)


def register(sub) -> None:
    from studio.api.options import (
        DEFAULT_HOST,
        DEFAULT_MAX_QUEUED,
        DEFAULT_MAX_RETRIES,
        DEFAULT_MAX_UPLOAD_MB,
        DEFAULT_PORT,
    )

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
        "--clients",
        default=None,
        metavar="FILE",
        help="named clients, each with its own token and scopes (submit, read, admin), in a TOML file; a "
        "client sees and changes only its own jobs (docs/server.md; --token stays the admin)",
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
        "--read-token",
        default=None,
        metavar="TOKEN",
        help="a second token that may only read (GET: job lists, events, videos, /metrics), for dashboards "
        "(default: $STUDIO_READ_TOKEN)",
    )
    p.add_argument(
        "--webhook-secret",
        default=None,
        metavar="SECRET",
        help='sign webhook calls with this key: X-Studio-Signature: t=<time>,sha256=<HMAC-SHA256 of "<time>." + body> '
        "(default: $STUDIO_WEBHOOK_SECRET)",
    )
    p.add_argument(
        "--webhook-allow",
        default="",
        metavar="HOST[:PORT][,...]",
        help="the only destinations a job's webhook may call: host (its default port only), host:port, "
        "host:* (any port); never this server itself (default: none; another destination is 422)",
    )
    p.add_argument(
        "--max-retries",
        type=int,
        default=DEFAULT_MAX_RETRIES,
        metavar="N",
        help=f"times a job may be rendered again (POST .../retry, retries of retries included) before 409 "
        f"(default {DEFAULT_MAX_RETRIES})",
    )
    p.add_argument(
        "--keep-renders",
        default=None,
        metavar="DURATION",
        help="remove renders and uploads older than this (7d, 12h, 30m); their jobs stay, expired "
        "(default: $STUDIO_KEEP_RENDERS, else kept)",
    )
    p.add_argument(
        "--max-storage-gb",
        type=float,
        default=None,
        metavar="N",
        help="remove the oldest renders and uploads while they hold more than N GB (default: $STUDIO_MAX_STORAGE_GB)",
    )
    p.add_argument(
        "--cors-origin",
        default="",
        metavar="ORIGIN[,ORIGIN...]",
        help="let web pages from these origins call the API (default: none; other sites' requests that "
        "change anything get 403)",
    )
    p.add_argument(
        "--allowed-hosts",
        default="",
        metavar="HOST[,HOST...]",
        help="host names clients reach this server by, beside its own (localhost, --host; a name behind a "
        "proxy: studio.example, .example for a domain, * any); other Host headers get 400 (DNS rebinding)",
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
    from studio.service.retention import parse_duration

    try:
        set_max_audio_minutes(args.max_audio_minutes, "this server's --max-audio-minutes")
    except StudioError:
        raise InputError(f"--max-audio-minutes {args.max_audio_minutes:g}: give a positive number of minutes") from None
    token = args.token if args.token is not None else env.get("STUDIO_SERVER_TOKEN") or None
    read_token = args.read_token if args.read_token is not None else env.get("STUDIO_READ_TOKEN") or None
    secret = args.webhook_secret if args.webhook_secret is not None else env.get("STUDIO_WEBHOOK_SECRET") or None
    options = ServeOptions(
        host=args.host,
        port=args.port,
        token=token,
        allow_paths=args.allow_paths,  # "a,b": split and checked by check()
        max_upload_mb=args.max_upload_mb,
        max_queued=args.max_queued,
        read_token=read_token,
        webhook_secret=secret,
        webhook_allow=args.webhook_allow,  # "a,b": split by check()
        max_retries=args.max_retries,
        clients_file=args.clients,
        keep_renders_s=parse_duration(args.keep_renders) if args.keep_renders else None,
        max_storage_gb=args.max_storage_gb,
        cors_origins=args.cors_origin,
        allowed_hosts=args.allowed_hosts,  # "a,b": split by check()
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

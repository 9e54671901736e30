"""``studio serve``: the HTTP render API on this machine's warm render service (see studio.api)."""

from __future__ import annotations

import argparse
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
        "--max-live",
        type=lambda v: max(0, int(v)),
        default=8,
        metavar="N",
        help="live sessions open at once (POST /v1/live) before new ones get 429 (default 8; docs/live.md)",
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
    p.add_argument(
        "--warm",
        action="append",
        default=[],
        metavar="NAME=VALUE[,...]",
        help="also load and warm the engine for these settings before the server says it is ready "
        "(such as decoder=sd-vae; repeat for more; the default settings' engine is always warmed)",
    )
    p.add_argument(
        "--gpus",
        default="",
        metavar="all|N|LIST",
        help="spread jobs over these devices, each job to the least busy one, with warm engines on each "
        "(all, a count, or a list such as 0,1 or cuda:0,cuda:2; default: one device)",
    )
    p.add_argument(
        "--jobs-per-device",
        type=int,
        default=None,
        metavar="N",
        help="jobs rendering at once on each device, their frames sharing the engine's batches: 2 or more "
        "lets a short job finish beside a long one (default: $STUDIO_JOBS_PER_DEVICE, else 1, the most "
        "frames/s measured for equal jobs)",
    )
    p.add_argument(
        "--farm",
        nargs="?",
        const="",
        default=None,
        metavar="HOST:PORT",
        help="render the jobs on a Ray cluster's warm actors (one per GPU, or per CPU, of every node; "
        "--jobs-per-device jobs at once on each); the API, the queue and the files stay here. Without "
        "HOST:PORT the farm `studio farm up` started here, else a local one (docs/farm.md)",
    )
    p.add_argument(
        "--no-batching",
        action="store_true",
        help="jobs running at once on one device call the engine in turn (default: they share its batches)",
    )
    p.add_argument(
        "--header-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="close a connection that has not sent a whole request head within SECONDS (default 10)",
    )
    p.add_argument(
        "--body-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="close a connection whose request body sends nothing for SECONDS (default 30)",
    )
    p.add_argument(
        "--max-client-connections",
        type=int,
        default=64,
        metavar="N",
        help="open connections one client address may hold; more get 503 (default 64)",
    )
    p.add_argument(
        "--open-probes",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="answer /v1/health and /v1/ready without the token, with no job data (default: on when "
        "listening on loopback)",
    )
    p.add_argument(
        "--watch",
        metavar="IN_DIR",
        action="append",
        default=[],
        help="also watch this folder (repeatable): its studio.toml names the avatar and delivery; each "
        "voice-over or .txt dropped in becomes a clip in IN_DIR/out or its out (studio watch)",
    )
    p.set_defaults(func=run_serve)


def parse_gpus(text: str) -> tuple[str, ...]:
    """``all`` -> every CUDA GPU, ``2`` -> the first two, ``0,1`` / ``cuda:0,cuda:2`` / ``cpu,cpu``
    (test devices) -> those; one sentence when the machine has fewer."""
    from studio.core.errors import InputError
    from studio.service.queue import gpus_here as cuda_devices

    text = text.strip()
    if not text:
        return ()
    have = cuda_devices()
    if text == "all" or text.isdigit():
        n = len(have) if text == "all" else int(text)
        if not have or n < 1 or n > len(have):
            raise InputError(
                f"--gpus {text}: this machine has {len(have)} CUDA GPU(s); give all, 1..{len(have)} or a list"
            )
        return tuple(have[:n])
    out = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name = f"cuda:{part}" if part.isdigit() else part
        if name != "cpu" and name not in have:
            raise InputError(f"--gpus {text}: no device {name} here (CUDA GPUs: {', '.join(have) or 'none'})")
        out.append(name)
    return tuple(out)


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
    from studio.api.options import is_loopback
    from studio.core import env
    from studio.core.media.audio_info import set_max_audio_minutes
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
        max_live=args.max_live,
        read_token=read_token,
        webhook_secret=secret,
        webhook_allow=args.webhook_allow,  # "a,b": split by check()
        max_retries=args.max_retries,
        clients_file=args.clients,
        keep_renders_s=parse_duration(args.keep_renders) if args.keep_renders else None,
        max_storage_gb=args.max_storage_gb,
        cors_origins=args.cors_origin,
        allowed_hosts=args.allowed_hosts,  # "a,b": split by check()
        warm=tuple(args.warm),
        gpus=parse_gpus(args.gpus),
        jobs_per_device=jobs_per_device(args.jobs_per_device, args.gpus),
        batching=not args.no_batching and env.flag("STUDIO_CROSS_JOB_BATCHING"),
        open_probes=args.open_probes,
        farm=args.farm,
        header_timeout_s=args.header_timeout,
        body_timeout_s=args.body_timeout,
        max_client_connections=args.max_client_connections,
    ).check()
    from studio.api.warmup import parse_warm

    for w in options.warm:
        parse_warm(w)  # a bad --warm is one sentence before anything starts

    watchers = []
    if args.watch:  # watch folders in this process (studio.toml in each names its avatar and delivery)
        from studio.service.watch import WatchFolder

        watchers = [WatchFolder(folder) for folder in args.watch]  # a bad folder: one sentence, before serving
    stop_watching = start_watching(watchers)

    def listening(url: str) -> None:
        print(
            f"studio: serving on {url} (docs at {url}/docs; token {'required' if token else 'off'}); Ctrl-C stops",
            file=sys.stderr,
            flush=True,
        )
        if is_loopback(options.host):
            advertise(url, bool(token))

    try:
        serve(options, on_listening=listening)
    finally:
        stop_watching()
        withdraw()
    return 0


def start_watching(watchers):
    """Each watch folder polled by a thread of its own (its renders one at a time, in this process, not
    through the server's queue); returns the function that stops them after their current file."""
    import threading

    stop = threading.Event()
    threads = [
        threading.Thread(target=w.run, kwargs={"stop": stop.is_set}, name=f"watch {w.in_dir}", daemon=True)
        for w in watchers
    ]
    for t in threads:
        t.start()
        print(f"studio: watching {t.name[6:]}", file=sys.stderr, flush=True)

    def done() -> None:
        stop.set()

    return done


def jobs_per_device(given: int | None, gpus: str) -> int:
    """``--jobs-per-device``, else ``$STUDIO_JOBS_PER_DEVICE``, else ``DEFAULT_JOBS_PER_DEVICE``."""
    from studio.core import env
    from studio.core.errors import InputError

    if given is not None and given < 1:
        raise InputError(f"--jobs-per-device {given}: give at least 1")
    n = given if given is not None else env.get_int("STUDIO_JOBS_PER_DEVICE")
    return n if n >= 1 else DEFAULT_JOBS_PER_DEVICE


# One job at a time (pipelined): on the H200, 8 clients posting 15 s at once got 688 frames/s so,
# against 624 with 4 jobs at once (and 539 with their batches merged into calls of 128 frames);
# docs/speed.md. More than one is for mixed lengths: a short job then finishes beside a long one.
DEFAULT_JOBS_PER_DEVICE = 1


# -- a local server for `studio render` ---------------------------------------------------------

ADVERT = "serve.json"  # in the data folder: where a loopback `studio serve` of this folder listens


def advertise(url: str, token: bool) -> None:
    """Say in the data folder that this process serves it at ``url`` (for ``local_server``)."""
    import json
    import os

    from studio.core.env import data_dir
    from studio.core.store.fsutil import atomic_write_bytes

    atomic_write_bytes(data_dir() / ADVERT, json.dumps({"url": url, "pid": os.getpid(), "token": token}).encode())


def withdraw() -> None:
    """This server stops: its advertisement goes (only its own)."""
    import json
    import os

    from studio.core.env import data_dir

    path = data_dir() / ADVERT
    try:
        if json.loads(path.read_text()).get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError):
        pass


def local_server(args) -> tuple[str | None, str, bool]:
    """``(URL, "", True)`` of a ``studio serve`` running on this data folder on loopback that can take this
    render (its engine is warm: no cold start here), else ``(None, why this process renders it,
    worth saying)``: worth a line when a server was passed over, not when none runs or an option
    chose the place. The reasons:
    ``--local`` or ``STUDIO_LOCAL_SERVER=0``, options that pick where it renders (``--device``,
    ``--gpus``, ``--chunks``, ``--farm``), no server, a stale ``serve.json`` (its process gone, not a
    ``studio serve``, not ready), or one that needs a token we do not have."""
    import json
    import os
    import urllib.request

    from studio.core import env
    from studio.core.env import data_dir

    if getattr(args, "local", False):
        return None, "--local", True
    if not env.flag("STUDIO_LOCAL_SERVER"):
        return None, "STUDIO_LOCAL_SERVER=0", True
    for option in ("device", "gpus", "chunks"):
        if getattr(args, option, None):
            return None, f"--{option} picks where it renders", False
    if getattr(args, "farm", None) is not None:
        return None, "--farm picks where it renders", False
    from studio.core.errors import StudioError
    from studio.core.store.small_files import read_small

    try:
        advert = json.loads(read_small(data_dir() / ADVERT, ADVERT, most=4096))
    except (OSError, ValueError, StudioError):
        return None, "no studio serve runs on this data folder", False
    try:
        url, pid = loopback_url(str(advert["url"])), int(advert["pid"])
        os.kill(pid, 0)  # the process is there
    except (OSError, ValueError, KeyError, TypeError):
        return None, f"{ADVERT} names no running studio serve", True
    if url is None or not is_studio_serve(pid):
        return None, f"{ADVERT} names no loopback studio serve", True  # not trusted: no job, no token
    if advert.get("token") and not env.get("STUDIO_SERVER_TOKEN"):
        return None, "the studio serve of this data folder needs a token (STUDIO_SERVER_TOKEN)", True
    try:
        with urllib.request.urlopen(f"{url}/v1/ready", timeout=1.0) as r:  # our own loopback URL
            if r.status != 200 or json.loads(r.read(4096)).get("ready") is not True:
                return None, "the studio serve of this data folder is not ready", True
    except (OSError, ValueError, AttributeError):
        return None, "the studio serve of this data folder did not answer", True
    return url, "", True


def loopback_url(text: str) -> str | None:
    """``http://127.0.0.1:PORT`` (or ``[::1]``, ``localhost``) as ``serve.json`` may name it, else None:
    no other host, no user, path or query."""
    from urllib.parse import urlsplit

    try:
        u = urlsplit(text)
        port = u.port
    except ValueError:
        return None
    if u.scheme != "http" or u.hostname not in ("127.0.0.1", "::1", "localhost") or not port:
        return None
    if u.username or u.password or u.path not in ("", "/") or u.query or u.fragment:
        return None
    host = "[::1]" if u.hostname == "::1" else u.hostname
    return f"http://{host}:{port}"


def is_studio_serve(pid: int) -> bool:
    """Whether process ``pid`` is a ``studio serve`` (its command line, where /proc says it)."""
    from pathlib import Path

    cmdline = Path(f"/proc/{pid}/cmdline")
    if not Path("/proc/self").exists():
        return True  # no /proc: the loopback URL and the ready answer are the checks
    try:
        args = cmdline.read_bytes().split(b"\0")
    except OSError:
        return False
    return b"serve" in args and any(b"studio" in a for a in args)

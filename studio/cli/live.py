"""``studio live``: a live presenter on a running ``studio serve``, fed from a file or stdin in real time.

    studio live --avatar anna --audio voice.flac [--push rtmp://HOST/app/KEY] [--server URL]
    arecord -f S16_LE -r 16000 -c 1 | studio live --avatar anna --audio - --rate 16000

Prints the session's WHEP link (watch it in the web page's Live view or any WHEP player), plays the
voice over the session's audio socket, then prints the session's figures and ends it (docs/live.md).
"""

from __future__ import annotations

from studio.core import env


def register(sub) -> None:
    from studio.cli._common import runs

    p = sub.add_parser("live", help="a live presenter on `studio serve`: a voice file or stdin PCM, in real time")
    p.add_argument("--avatar", required=True, help="a library avatar on the server")
    p.add_argument("--audio", metavar="FILE|-", help="a voice file, or - for s16le mono PCM on stdin (--rate)")
    p.add_argument("--rate", type=int, default=16_000, help="stdin's sample rate in Hz (8000-48000; default 16000)")
    p.add_argument("--push", metavar="URL", help="also push to rtmp://, rtmps:// or srt://")
    p.add_argument("--fps", type=int, choices=(25, 30), default=25, help="frames per second (default 25)")
    p.add_argument("--engine", help="the engine (default: the server's auto choice)")
    p.add_argument("--seconds", type=float, help="without --audio: keep the session open this long (default: Ctrl-C)")
    p.add_argument(
        "--server",
        metavar="URL",
        default=env.get("STUDIO_SERVER") or "http://127.0.0.1:8321",
        help="the `studio serve` (default $STUDIO_SERVER or http://127.0.0.1:8321; token from $STUDIO_SERVER_TOKEN)",
    )
    runs(p, run_live)


def run_live(args) -> int:
    import importlib.util

    from studio.cli._common import emit_json
    from studio.core.errors import InputError

    if importlib.util.find_spec("websockets") is None:
        raise InputError("studio live needs the serve extra (websockets is missing): pip install 'studio[serve]'")
    if not 8_000 <= args.rate <= 48_000:
        raise InputError("--rate must be from 8000 to 48000 Hz")
    if args.audio not in (None, "-"):
        from studio.core.media.audio import probe

        probe(args.audio)  # one sentence for a file that does not decode, before the session opens
    if args.push:
        from studio.service.live_push import check_url

        check_url(args.push)
    from studio.service.client import StudioClient
    from studio.service.live_client import play

    settings = {"rate": args.fps, **({"engine": args.engine} if args.engine else {})}
    with StudioClient(args.server, token=env.get("STUDIO_SERVER_TOKEN") or None) as c:
        say = (lambda line: None) if args.json else print
        figures = play(c, args.avatar, args.audio, args.push, args.rate, settings, on_line=say, hold_s=args.seconds)
    if args.json:
        emit_json(figures)
    return 0

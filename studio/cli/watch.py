"""``studio watch IN_DIR --delivery NAME [--out OUT_DIR] [--avatar NAME]``: a watch folder (``service.watch``)."""

from __future__ import annotations

import sys


def register(sub) -> None:
    from studio.cli._common import runs

    p = sub.add_parser(
        "watch",
        help="watch a folder: each voice-over (or .txt script) dropped in becomes a finished clip in OUT_DIR",
    )
    p.add_argument("in_dir", metavar="IN_DIR", help="the folder to watch (its studio.toml, if any, sets the rest)")
    p.add_argument("--delivery", default="", help="the delivery of every clip (studio delivery list)")
    p.add_argument("--out", metavar="OUT_DIR", default=None, help="where the clips go (default IN_DIR/out)")
    p.add_argument("--avatar", default="", help="the avatar: a library name or a file")
    p.add_argument("--voice", default="", help="the voice a .txt script is spoken with (studio speak --list-voices)")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between looks at the folder (default 1)")
    p.add_argument(
        "--settle", type=float, default=2.0, help="seconds a file must stop changing before it is taken (default 2)"
    )
    p.add_argument("--once", action="store_true", help="take what has settled, render it, and stop")
    runs(p, run_watch, json="print one JSON line per file handled")


def run_watch(args) -> int:
    import json
    import math
    import time

    from studio.core.errors import InputError
    from studio.service.watch import WatchFolder

    for name in ("interval", "settle"):
        v = getattr(args, name)
        if not (math.isfinite(v) and 0 < v <= 3600):
            raise InputError(f"--{name} {v}: give a number of seconds between 0 and 3600")
    w = WatchFolder(args.in_dir, delivery=args.delivery, out=args.out, avatar=args.avatar, voice=args.voice)
    w.settle_s = float(args.settle)

    def say(outcomes) -> None:
        for o in outcomes:
            if args.json:
                print(json.dumps(o.__dict__), flush=True)
            elif o.state == "done":
                print(f"done {o.source} -> {o.output}", flush=True)
            else:
                print(f"failed {o.source}: {o.reason}", file=sys.stderr, flush=True)

    print(f"watching {w.in_dir} -> {w.out_dir} (delivery {w.delivery or 'none'}, avatar {w.avatar})", file=sys.stderr)
    say(w.recover())
    if args.once:
        deadline = time.monotonic() + w.settle_s + 2 * args.interval
        while time.monotonic() < deadline:
            say(w.poll())
            time.sleep(args.interval)
        say(w.poll())
        return 0
    try:
        while True:
            say(w.poll())
            time.sleep(args.interval)
    except KeyboardInterrupt:
        return 0

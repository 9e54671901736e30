"""``studio doctor [--json]``: GPU, CUDA, NVENC, TensorRT, weights and engine, each with a fix hint."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("doctor", help="check GPU, CUDA, NVENC, TensorRT, weights and the engine in use")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--no-gui", action="store_true", help="skip the Qt and playback checks")
    p.set_defaults(func=run)


MARK = {"ok": "ok  ", "warn": "warn", "fail": "FAIL", "info": "info"}


def run(args) -> int:
    from studio.cli._common import emit_json
    from studio.core.doctor import report

    r = report(include_gui=not args.no_gui)
    if args.json:
        emit_json(r)
    else:
        width = max(len(c["name"]) for c in r["checks"])
        for c in r["checks"]:
            print(f"[{MARK[c['status']]}] {c['name']:<{width}}  {c['detail']}")
            if c["hint"] and c["status"] != "ok":
                print(f"       {'':<{width}}  fix: {c['hint']}")
    return 0 if r["ok"] else 1

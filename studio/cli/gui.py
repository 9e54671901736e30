"""``studio gui``: open the studio window (the same as ``studio`` with no command)."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("gui", help="open the studio window (the default with no command)")
    p.set_defaults(func=run)


def run(args) -> int:
    from studio.cli import _open_gui

    return _open_gui()

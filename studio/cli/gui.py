"""``studio gui``: open the studio window (the same as ``studio`` with no command)."""

from __future__ import annotations

import sys


def register(sub) -> None:
    p = sub.add_parser("gui", help="open the studio window (the default with no command)")
    p.set_defaults(func=run)


def run(args) -> int:
    return open_window()


def open_window() -> int:
    """The studio window (``studio`` with no command too); exit code 2 with one sentence without the GUI extra."""
    try:
        from studio.ui.app import main as gui_main
    except ImportError as exc:
        print(f"studio: the window needs the GUI extra ({exc}); run a command instead, see --help", file=sys.stderr)
        return 2
    return gui_main()

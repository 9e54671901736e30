"""Shared CLI helpers: a command's ``--json`` switch, JSON output and a terminal progress bar (tqdm's)."""

from __future__ import annotations

import json
import sys
from typing import Any

JSON_HELP = "print one JSON object"
JSON_RESULT = "print one JSON object with the result"


def runs(parser, func, json: str | None = JSON_HELP):
    """``parser`` (a command or a subcommand, its own options already added) runs ``func``, with a last
    ``--json`` switch (its help: ``json``; None: no switch). Answers the parser."""
    if json is not None:
        parser.add_argument("--json", action="store_true", help=json)
    parser.set_defaults(func=func)
    return parser


def emit_json(obj) -> None:
    """``obj`` as one line of strict JSON: a value that is not a number (a silent file's loudness is
    -inf LUFS, NaN) is ``null``, never ``-Infinity``/``NaN``, which JSON parsers refuse."""
    json.dump(finite(obj), sys.stdout, indent=None, separators=(",", ":"), allow_nan=False)
    sys.stdout.write("\n")
    sys.stdout.flush()


def finite(obj):
    """``obj`` with every float that is not finite replaced by None (dicts, lists and tuples walked)."""
    import math

    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    if hasattr(obj, "item") and getattr(obj, "ndim", None) == 0:  # a numpy scalar
        return finite(obj.item())
    return obj


def fmt_seconds(s: float) -> str:
    s = max(0.0, float(s))
    if s >= 3600:
        return f"{int(s // 3600)}:{int(s % 3600 // 60):02d}:{int(s % 60):02d}"
    return f"{int(s // 60)}:{s % 60:04.1f}"


class ProgressBar:
    """A one-line progress bar on stderr, drawn by tqdm; silent when stderr is not a terminal.

    ``update(done, total, extra)`` moves it (``extra``: our own fps and ETA, which know the render's
    stages better than tqdm's rate); ``close()`` ends the line, and a later ``update`` starts a new bar
    (with ``label`` as it is then: ``studio avatar add`` shows one bar per stage).
    """

    def __init__(self, label: str, enabled: bool | None = None, stream=None):
        self.stream = stream or sys.stderr
        self.enabled = _isatty(self.stream) if enabled is None else enabled
        self.label = label
        self._bar: Any = None  # a tqdm, once drawn

    def update(self, done: int, total: int, extra: str = "", force: bool = False) -> None:
        if not self.enabled:
            return
        if self._bar is None or done < self._bar.n:
            from tqdm import tqdm

            self.close()
            self._bar = tqdm(
                total=total,
                desc=self.label,
                file=self.stream,
                mininterval=0.1,
                # a terminal that reports no size (a bare pseudo-terminal): 80 x 24, else tqdm hides the bar
                ncols=None if _columns(self.stream) else 80,
                nrows=None if _columns(self.stream) else 24,
                dynamic_ncols=bool(_columns(self.stream)),
                bar_format="{desc} {bar} {n_fmt}/{total_fmt} {postfix}",
            )
        bar = self._bar
        if total != bar.total:
            bar.total = total
        bar.set_postfix_str(extra, refresh=False)
        bar.update(done - bar.n)
        if force or done >= total:
            bar.refresh()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def _columns(stream) -> int:
    """The terminal's width (0 when it does not say)."""
    import os

    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, ValueError, OSError):
        return 0


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False

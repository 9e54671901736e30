"""Shared CLI helpers: JSON output and a terminal progress bar."""

from __future__ import annotations

import json
import sys
import time


def emit_json(obj) -> None:
    json.dump(obj, sys.stdout, indent=None, separators=(",", ":"))
    sys.stdout.write("\n")
    sys.stdout.flush()


def fmt_seconds(s: float) -> str:
    s = max(0.0, float(s))
    if s >= 3600:
        return f"{int(s // 3600)}:{int(s % 3600 // 60):02d}:{int(s % 60):02d}"
    return f"{int(s // 60)}:{s % 60:04.1f}"


class ProgressBar:
    """A one-line progress bar on a terminal (stderr); silent when stderr is not a terminal."""

    def __init__(self, label: str, enabled: bool | None = None, stream=None):
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.label = label
        self._last = 0.0

    def update(self, done: int, total: int, extra: str = "", force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._last < 0.1 and done < total:
            return
        self._last = now
        frac = done / total if total else 1.0
        width = 28
        fill = int(frac * width)
        bar = "#" * fill + "-" * (width - fill)
        self.stream.write(f"\r{self.label} [{bar}] {done}/{total} {extra}\x1b[K")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()

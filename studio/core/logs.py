"""Log lines that cannot be forged, and a log file that cannot fill the disk.

    handler.setFormatter(SafeFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    fh = log_file_handler(path)       # logs/studio.log, rotated (STUDIO_LOG_MAX_MB, STUDIO_LOG_BACKUPS)
    escape("a\\nb", cap=200)           # 'a\\\\nb': one line, at most ``cap`` characters and a marker

Whatever a request brings (a path with ``%0A`` in it, a header, a file or avatar name) ends up in a
message; ``SafeFormatter`` writes every message as one line: control characters (newlines, escape
sequences that would drive a terminal, C1 codes, Unicode line and paragraph separators, the bidi
overrides that reorder what a reader sees) become visible escapes (``\\n``, ``\\x1b``, ``\\u202e``),
and a message longer than ``MAX_MESSAGE`` characters is cut with the number of characters left
out. A traceback (``exc_info``) is Studio's own text and keeps its lines. The file handler is the
standard library's ``RotatingFileHandler`` (size and backups), nothing written here by hand but the
escape table, which no logging library provides.
"""

from __future__ import annotations

import logging
import logging.handlers
import re
from pathlib import Path

MAX_MESSAGE = 4000  # characters of one message (a request's own values are capped shorter by the caller)
DEFAULT_MAX_MB = 10.0
DEFAULT_BACKUPS = 5

# C0 and C1 control characters, DEL, the Unicode line/paragraph separators and the bidi controls
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(m: re.Match) -> str:
    ch = m.group(0)
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape(text: object, cap: int = MAX_MESSAGE) -> str:
    """``text`` as one printable line (backslashes doubled first, so an escape cannot be forged
    either), cut to ``cap`` characters with ``...[N more]`` after."""
    s = str(text)
    if len(s) > cap:
        s = s[:cap] + f"...[{len(s) - cap} more]"
    return _UNSAFE.sub(_escaped, s.replace("\\", "\\\\"))


class SafeFormatter(logging.Formatter):
    """A ``logging.Formatter`` whose message is ``escape``d (the traceback, Studio's own, is not)."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        saved = record.message
        record.message = escape(saved)
        try:
            return super().formatMessage(record)
        finally:
            record.message = saved


class QuietRotatingHandler(logging.handlers.RotatingFileHandler):
    """A log file that cannot be written (a read-only data folder, a full disk) is left alone: no
    "--- Logging error ---" traceback on stderr for a command that succeeds; the handler stops trying."""

    def handleError(self, record) -> None:  # noqa: N802 - logging's name
        self.setLevel(logging.CRITICAL + 1)


def log_file_handler(path: str | Path, level: int = logging.INFO) -> logging.Handler:
    """``path`` written through a rotating handler: at ``STUDIO_LOG_MAX_MB`` (default 10) it becomes
    ``path.1`` (the older ones ``.2`` ... up to ``STUDIO_LOG_BACKUPS``, default 5, the oldest dropped)."""
    from studio.core import env

    max_mb = env.get_float("STUDIO_LOG_MAX_MB", DEFAULT_MAX_MB)
    backups = env.get_int("STUDIO_LOG_BACKUPS", DEFAULT_BACKUPS)
    fh = QuietRotatingHandler(
        path, maxBytes=max(1, int(max_mb * 2**20)), backupCount=max(1, backups), encoding="utf-8", delay=True
    )
    fh.setFormatter(SafeFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    fh.setLevel(level)
    return fh

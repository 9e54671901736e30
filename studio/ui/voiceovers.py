"""What the editor remembers per voice-over across restarts: its in/out points and markers.

    memory = VoiceoverMemory()                     # <data>/editor/voiceovers.json
    key = content_key("take3.flac")                # the SHA-256 of the file's bytes (moved or renamed: same key)
    memory.put(key, in_frame=25, out_frame=99, markers=[(40, "Intro"), (310, "Chorus")])
    memory.get(key)  -> {"in": 25, "out": 99, "markers": [[40, "Intro"], [310, "Chorus"]], "name": "take3.flac"}
    memory.get(key, rate=30)                       # the same moments on a 30 fps grid (frames are saved with their rate)

Keyed by content, not by path: the same recording copied elsewhere keeps its marks, and a file
re-recorded under the same name starts clean. The file is written atomically (a temporary file,
then a rename); a damaged or foreign one is set aside as ``voiceovers.json.damaged`` and the editor
starts with nothing remembered rather than failing.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from pathlib import Path

log = logging.getLogger(__name__)

VERSION = 1
_keys: dict[tuple, str] = {}  # (resolved path, size, mtime) -> content key, for this process
_keys_lock = threading.Lock()


def content_key(path: str | os.PathLike) -> str:
    """SHA-256 of the file's bytes (hex), cached per path, size and modification time."""
    p = Path(path).resolve()
    st = p.stat()
    ident = (str(p), st.st_size, st.st_mtime_ns)
    with _keys_lock:
        known = _keys.get(ident)
    if known:
        return known
    with open(p, "rb") as fh:
        digest = hashlib.file_digest(fh, "sha256").hexdigest()
    with _keys_lock:
        _keys[ident] = digest
    return digest


class VoiceoverMemory:
    def __init__(self, path: str | os.PathLike | None = None):
        if path is None:
            from studio.core.env import sub_dir

            path = sub_dir("editor") / "voiceovers.json"
        self.path = Path(path)
        self._data: dict[str, dict] = self._read()

    def get(self, key: str, rate: float | None = None) -> dict:
        """The marks of ``key``; with ``rate``, their frames moved to that frame rate's grid (marks
        made at 25 fps land on the same moments at 30 fps)."""
        entry = self._data.get(key) or {}
        scale = 1.0
        saved = entry.get("rate")
        if rate and isinstance(saved, (int, float)) and saved > 0 and abs(saved - float(rate)) > 1e-6:
            scale = float(rate) / float(saved)

        def f(v):
            return None if v is None else int(round(int(v) * scale))

        return {
            "in": f(entry.get("in")),
            "out": f(entry.get("out")),
            "markers": [[f(m[0]), str(m[1])] for m in entry.get("markers") or []],
            "name": entry.get("name", ""),
        }

    def put(self, key: str, *, name: str | None = None, rate: float | None = None, **fields) -> None:
        """Update ``in_frame``, ``out_frame`` and/or ``markers`` of ``key`` and write the file."""
        if not key:
            return
        entry = dict(self._data.get(key) or {})
        if "in_frame" in fields:
            entry["in"] = _frame(fields["in_frame"])
        if "out_frame" in fields:
            entry["out"] = _frame(fields["out_frame"])
        if "markers" in fields:
            entry["markers"] = [[int(f), str(n)] for f, n in fields["markers"]]
        if name:
            entry["name"] = name
        if rate:
            entry["rate"] = float(rate)
        if entry.get("in") is None and entry.get("out") is None and not entry.get("markers"):
            self._data.pop(key, None)
        else:
            self._data[key] = entry
        self._write()

    # ---- the file ---------------------------------------------------------------------

    def _read(self) -> dict[str, dict]:
        if not self.path.exists():
            return {}
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
            if (
                not isinstance(raw, dict)
                or raw.get("version") != VERSION
                or not isinstance(raw.get("voiceovers"), dict)
            ):
                raise ValueError("not a voice-over memory of this version")
            return {str(k): v for k, v in raw["voiceovers"].items() if isinstance(v, dict)}
        except (OSError, ValueError) as exc:
            bad = self.path.with_name(self.path.name + ".damaged")
            log.warning("%s is unreadable (%s); set aside as %s, starting empty", self.path, exc, bad.name)
            try:
                os.replace(self.path, bad)
            except OSError:
                pass
            return {}

    def _write(self) -> None:
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps({"version": VERSION, "voiceovers": self._data}, indent=1), encoding="utf-8")
            os.replace(tmp, self.path)
        except OSError as exc:  # a full or read-only disk: the marks stay for this session
            log.warning("could not save in/out and markers to %s: %s", self.path, exc)
            try:
                tmp.unlink()
            except OSError:
                pass


def _frame(v) -> int | None:
    return None if v is None else int(v)

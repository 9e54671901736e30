"""Retention: old renders and uploads go, the jobs stay (``expired``): ``Retention`` and ``sweep``.

    r = Retention(keep_s=parse_duration("7d"), max_bytes=gb(50))     # or Retention.from_env()
    swept = sweep(store, r)                  # Swept(jobs=[expired jobs], removed=[paths], freed=bytes)
    sweeper = Sweeper(store, r, emitter)     # the queue's: every minute and after each job (``maybe``)

Only files Studio recorded writing in its data folder are ever removed: the outputs of its jobs in
``renders/`` (``studio serve``'s) and the uploads in ``uploads/audio`` and ``uploads/avatars`` under the
names the upload store gives them (16 hex digits of the content's SHA-256, then the format's
extension). Nothing is removed through a symbolic link: a ``renders/`` or ``uploads/`` that is a link,
or whose real path lies outside the data folder, is left alone (a warning says so), and links inside
them are skipped. Any other file (one a user put there, one of a job that is gone) stays. A file a user named (the window's output, ``studio queue add -o``,
an ``--allow-paths`` output) is never touched, whatever its age. A done job whose video is removed
becomes ``expired`` (its figures stay; the server answers 410 for its video). An upload is kept while
a job that has not finished uses it, and while a library avatar was made from it (its source).

``keep_s``: renders finished longer ago than this, and uploads not used for this long, go.
``max_bytes``: while ``renders/`` and ``uploads/`` together hold more, the oldest go first.
The window and ``studio queue`` read ``STUDIO_KEEP_RENDERS`` / ``STUDIO_MAX_STORAGE_GB``;
``studio serve --keep-renders / --max-storage-gb`` override them for the server.
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from studio.core.errors import InputError

log = logging.getLogger(__name__)

OWNED = ("renders", "uploads")  # the data folder's sub-folders whose files retention may remove
VIDEO_SUFFIXES = (".mp4", ".mov", ".mkv", ".webm", ".mxf")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


@dataclass(frozen=True)
class Retention:
    keep_s: float | None = None
    max_bytes: int | None = None

    @property
    def active(self) -> bool:
        return self.keep_s is not None or self.max_bytes is not None

    @classmethod
    def from_env(cls, strict: bool = True) -> Retention:
        """``STUDIO_KEEP_RENDERS`` / ``STUDIO_MAX_STORAGE_GB``; a bad value is one ``InputError``, or
        with ``strict=False`` (a queue opening: the window must still start) a warning and no retention."""
        from studio.core import env

        keep = env.get("STUDIO_KEEP_RENDERS")
        size = env.get("STUDIO_MAX_STORAGE_GB")
        try:
            return cls(
                parse_duration(keep, "STUDIO_KEEP_RENDERS") if keep else None,
                gb(parse_gb(size, "STUDIO_MAX_STORAGE_GB")) if size else None,
            )
        except InputError as exc:
            if strict:
                raise
            log.warning("%s; retention is off", exc)
            return cls()

    def describe(self) -> str:
        parts = []
        if self.keep_s is not None:
            parts.append(f"renders and uploads older than {format_duration(self.keep_s)}")
        if self.max_bytes is not None:
            parts.append(f"the oldest beyond {self.max_bytes / 2**30:g} GB")
        return " and ".join(parts) if parts else "nothing (no retention)"


@dataclass
class Swept:
    jobs: list = field(default_factory=list)  # the jobs now expired
    removed: list[str] = field(default_factory=list)  # every file removed
    freed: int = 0  # bytes


def parse_duration(text: str, option: str = "--keep-renders") -> float:
    """``"7d"``, ``"12h"``, ``"30m"``, ``"90s"``, ``"2w"``, ``"1d12h"`` or plain seconds -> seconds."""
    t = str(text).strip().lower().replace(" ", "")
    if re.fullmatch(r"\d+(\.\d+)?", t):
        seconds = float(t)
    else:
        parts = re.findall(r"(\d+(?:\.\d+)?)([smhdw])", t)
        if not parts or "".join(a + b for a, b in parts) != t:
            raise InputError(f"{option} {text!r}: give a duration such as 7d, 12h, 30m or 90s")
        seconds = sum(float(a) * _UNITS[b] for a, b in parts)
    if not math.isfinite(seconds) or seconds <= 0:
        raise InputError(f"{option} {text!r}: give a duration of more than 0 (such as 7d)")
    return seconds


def parse_gb(text: str, option: str = "--max-storage-gb") -> float:
    try:
        v = float(text)
    except (TypeError, ValueError):
        raise InputError(f"{option} {text!r}: give a number of gigabytes, such as 50") from None
    if not math.isfinite(v) or v <= 0:
        raise InputError(f"{option} {text!r}: give a number of gigabytes of more than 0")
    return v


def gb(value: float) -> int:
    return int(value * 2**30)


def format_duration(seconds: float) -> str:
    for unit in ("w", "d", "h", "m"):
        if seconds >= _UNITS[unit] and seconds % _UNITS[unit] == 0:
            return f"{int(seconds // _UNITS[unit])}{unit}"
    return f"{seconds:g}s"


def owned_dirs() -> list[Path]:
    from studio.core.env import sub_dir

    return [sub_dir(name) for name in OWNED]


UPLOAD_NAME = re.compile(r"^[0-9a-f]{16}\.[A-Za-z0-9]{1,8}$")  # what api/uploads.py names a stored upload


def _inside_data(folder: Path) -> bool:
    """Whether ``folder`` is a real folder of the data folder (not a link, not reached through one)."""
    import os

    from studio.core.env import data_dir

    if folder.is_symlink():
        log.warning("retention: %s is a link (to %s); nothing in it is removed", folder, os.readlink(folder))
        return False
    home = os.path.realpath(data_dir())
    real = os.path.realpath(folder)
    if os.path.commonpath([home, real]) != home:
        log.warning("retention: %s lies outside the data folder (%s); nothing in it is removed", folder, real)
        return False
    return True


def sweep(store, retention: Retention, now: float | None = None) -> Swept:
    """Apply ``retention`` to the queue's store (a ``JobStore``) and the data folder's owned files."""
    out = Swept()
    if not retention.active:
        return out
    from studio.core.store import jobs as J

    now = time.time() if now is None else now
    renders, uploads = owned_dirs()
    safe = {d: _inside_data(d) for d in (renders, uploads)}
    jobs = store.list()
    active = {J.DRAFT, J.QUEUED, J.HELD, J.RUNNING}
    in_use = {str(Path(p)) for j in jobs if j.state in active for p in (j.avatar, j.audio, j.output)}
    sources = _avatar_sources()
    last_used: dict[str, float] = {}
    for j in jobs:
        for p in (j.avatar, j.audio):
            last_used[p] = max(last_used.get(p, 0.0), j.updated)
    outputs = {str(Path(j.output)): j for j in jobs}

    # candidates, each (when it became old, size, path, the done job it expires or None)
    candidates: list[tuple[float, int, Path, J.Job | None]] = []
    for f in _files(renders) if safe[renders] else []:
        job = outputs.get(str(f))
        if str(f) in in_use or f.name.startswith(".") or f.suffix.lower() not in VIDEO_SUFFIXES:
            continue  # a running job's file, a temporary (.x.part.mp4), or not a video Studio wrote
        if job is None or job.state != J.DONE:
            continue  # no job of this queue wrote it (a user's file, another queue's): never removed
        candidates.append((job.updated, _size(f), f, job))
    for f in _files(uploads) if sources is not None and safe[uploads] else []:
        if str(f) in in_use or str(f) in (sources or ()) or f.name.startswith(".") or f.suffix == ".json":
            continue
        if f.parent.parent != uploads or f.parent.name not in ("audio", "avatars") or not UPLOAD_NAME.match(f.name):
            continue  # not a file the upload store wrote
        candidates.append((max(_mtime(f), last_used.get(str(f), 0.0)), _size(f), f, None))
    caches = _upload_caches(uploads) if sources is not None and safe[uploads] else []
    for folder, source, size, when in caches:  # an uploaded avatar's prepared cache (GBs for a video)
        if source in in_use or source in (sources or ()):
            continue
        candidates.append((max(when, last_used.get(source, 0.0)), size, folder, None))
    candidates.sort(key=lambda c: c[0])

    total = sum(_size(f) for d in (renders, uploads) if safe[d] for f in _files(d))
    total += sum(size for _, _, size, _ in caches)
    cache_of = {source: folder for folder, source, _, _ in caches}
    for when, size, path, job in candidates:
        too_old = retention.keep_s is not None and when < now - retention.keep_s
        too_big = retention.max_bytes is not None and total > retention.max_bytes
        if not (too_old or too_big):
            continue
        if not path.exists() or not _remove(path):  # (a cache may have gone with its upload)
            continue
        out.removed.append(str(path))
        out.freed += size
        total -= size
        if path.parent.name == "audio" and path.parent.parent == uploads:
            _remove(path.with_suffix(".json"))
        cache = cache_of.pop(str(path), None)
        if cache is not None and cache.exists() and _remove(cache):  # an upload goes with its cache
            out.removed.append(str(cache))
            freed = next(c[2] for c in caches if c[0] == cache)
            out.freed += freed
            total -= freed
        if job is not None:
            why = "older than the retention" if too_old else "the storage limit was reached"
            with contextlib.suppress(InputError):  # removed or changed meanwhile
                out.jobs.append(store.expire(job.id, f"expired: its video was removed ({why})"))
    if out.removed:
        log.info("retention removed %d file(s), %.1f MB", len(out.removed), out.freed / 2**20)
    return out


class Sweeper:
    """When the queue applies its retention: ``apply`` now, ``maybe`` (the runner's loop: once a
    minute), ``again`` (a job ended, a new file: the next ``maybe`` looks at once). The jobs it expires
    are told (``state`` events) through ``emitter`` (the queue's ``Emitter``)."""

    EVERY_S = 60.0

    def __init__(self, store, retention: Retention, emitter) -> None:
        self.store = store
        self.retention = retention
        self._emitter = emitter
        self._swept = float("-inf")  # monotonic time of the last sweep

    def apply(self, now: float | None = None) -> Swept:
        self._swept = time.monotonic()
        swept = sweep(self.store, self.retention, now)
        for job in swept.jobs:
            self._emitter.emit("state", job.id, job)
        return swept

    def maybe(self) -> None:
        if self.retention.active and time.monotonic() - self._swept >= self.EVERY_S:
            try:
                self.apply()
            except Exception:
                log.exception("retention sweep failed")

    def again(self) -> None:
        self._swept = float("-inf")


def _upload_caches(uploads: Path) -> list[tuple[Path, str, int, float]]:
    """``(folder, source, bytes, last change)`` of each avatar cache (``<data>/cache/avatars``) made from
    an upload: what ``--max-storage-gb`` counts and prunes with the uploads (a 184 KB upload of a 20 s
    1080p video made a 3.1 GB cache). Caches of a user's own files are never counted or removed."""
    import json

    from studio.core.env import data_dir

    root = data_dir() / "cache" / "avatars"
    if not root.is_dir() or not _inside_data(root):
        return []
    out = []
    for folder in root.iterdir():
        if folder.is_symlink() or not folder.is_dir():
            continue
        try:
            source = str(json.loads((folder / "meta.json").read_text()).get("source") or "")
        except (OSError, ValueError, AttributeError):
            continue
        p = Path(source)
        if p.parent.parent != uploads or p.parent.name != "avatars" or not UPLOAD_NAME.match(p.name):
            continue
        files = _files(folder)
        out.append((folder, source, sum(_size(f) for f in files), max((_mtime(f) for f in files), default=0.0)))
    return out


def _avatar_sources() -> set[str] | None:
    """Uploads that library avatars were made from (their repair needs the source); None when the
    library cannot be listed (every upload is kept this time)."""
    try:
        from studio.core.avatars.library import list_avatars

        return {str(Path(a["source"])) for a in list_avatars() if a.get("source")}
    except Exception:
        log.warning("retention: the avatar library cannot be listed; uploads are kept", exc_info=True)
        return None


def _files(folder: Path) -> list[Path]:
    """Regular files under ``folder``, links neither followed nor listed."""
    import os

    if not folder.is_dir() or folder.is_symlink():
        return []
    out = []
    for root, _dirs, names in os.walk(folder, followlinks=False):
        for name in names:
            p = Path(root) / name
            if not p.is_symlink() and p.is_file():
                out.append(p)
    return out


def _mtime(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:
        return 0.0


def _size(p: Path) -> int:
    try:
        return p.stat().st_size
    except OSError:
        return 0


def _remove(p: Path) -> bool:
    import os

    from studio.core.env import data_dir

    home = os.path.realpath(data_dir())
    if p.is_symlink() or os.path.commonpath([home, os.path.realpath(p.parent)]) != home:
        log.warning("retention: %s is a link or reached through one now; kept", p)
        return False
    try:
        if p.is_dir():
            import shutil

            shutil.rmtree(p)  # links inside are removed, never followed
        else:
            p.unlink()
        return True
    except FileNotFoundError:
        return False
    except OSError as exc:
        log.warning("retention could not remove %s: %s", p, exc)
        return False

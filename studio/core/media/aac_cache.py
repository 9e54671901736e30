"""Voice-overs encoded to AAC once: a bounded, damage-safe cache in the data folder.

    key = entry_key(path, settings)        # the file's content (SHA-256) + the encoder's settings
    hit = lookup(key, root)                # a verified entry (its packets' bytes), or None
    store(key, records_file, root)         # after an encode: kept for the next render of that file

The window and a server render the same script many times; each render used to encode its AAC
track again (the same work, the same bytes). An entry holds the encoded packets as the writer's
``AREC`` records (pts, dts, size, duration, bytes), followed by a trailer with the record count
and the SHA-256 of everything before it. ``lookup`` checks the trailer and the hash: a truncated
or altered entry is removed and reported as a miss (the track is encoded again), never used.
The key covers everything that changes the bytes: the file's content (not its name or time, so a
copy or a re-upload hits), the AAC settings and the FFmpeg build (``libavcodec``'s version).
Entries are written atomically; the folder is kept under ``MAX_BYTES`` by removing the entries
used longest ago (a hit refreshes an entry's time).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import struct
from pathlib import Path

log = logging.getLogger(__name__)

VERSION = 1
TRAILER = struct.Struct("<8sQ32s")  # magic, records, SHA-256 of the records
MAGIC = b"STAAC\x00\x00\x01"
MAX_BYTES = 512 << 20  # the cache's size on disk at most (a 10-minute stereo track is ~14 MB)
SUFFIX = ".aac.rec"


def default_root() -> Path:
    """``<data>/cache/aac`` (created)."""
    from studio.core.env import sub_dir

    return sub_dir("cache/aac")


def content_sha256(path: str | os.PathLike) -> str:
    from studio.core.store.fsutil import file_sha256

    return file_sha256(path)


def entry_key(path: str | os.PathLike, settings: dict) -> str:
    """The entry name for ``path``'s content encoded with ``settings`` (a JSON-able dict)."""
    import av

    blob = json.dumps(
        {
            "v": VERSION,
            "content": content_sha256(path),
            "settings": settings,
            "lavc": list(av.library_versions.get("libavcodec", ())),
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:40]


def lookup(key: str, root: str | os.PathLike | None = None) -> tuple[Path, int] | None:
    """``(entry, records_bytes)`` when a sound entry exists (its time is refreshed), else None
    (a damaged entry is removed on the way)."""
    path = Path(root or default_root()) / f"{key}{SUFFIX}"
    try:
        size = path.stat().st_size
    except OSError:
        return None
    body = size - TRAILER.size
    problem = None
    try:
        with open(path, "rb") as fh:
            h = hashlib.sha256()
            left = body
            while left > 0 and (chunk := fh.read(min(left, 1 << 20))):
                h.update(chunk)
                left -= len(chunk)
            tail = fh.read(TRAILER.size)
        if body <= 0 or left or len(tail) != TRAILER.size:
            problem = "truncated"
        else:
            magic, _count, digest = TRAILER.unpack(tail)
            if magic != MAGIC:
                problem = "not an entry of this version"
            elif digest != h.digest():
                problem = "its checksum does not match"
    except OSError as exc:
        problem = f"unreadable ({exc.strerror or exc})"
    if problem:
        log.warning("AAC cache entry %s is damaged (%s); encoding the track again", path.name, problem)
        with contextlib.suppress(OSError):
            path.unlink()
        return None
    with contextlib.suppress(OSError):
        os.utime(path)  # used now: evicted last
    return path, body


def store(key: str, records: str | os.PathLike, root: str | os.PathLike | None = None, count: int = 0) -> Path | None:
    """Keep ``records`` (a complete ``AREC`` file) as the entry ``key``; None when it could not be
    written (a full or read-only disk only costs the next render an encode)."""
    from studio.core.store.fsutil import atomic_path

    folder = Path(root or default_root())
    target = folder / f"{key}{SUFFIX}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with atomic_path(target) as tmp, open(records, "rb") as src, open(tmp, "wb") as dst:
            h = hashlib.sha256()
            while chunk := src.read(1 << 20):
                h.update(chunk)
                dst.write(chunk)
            dst.write(TRAILER.pack(MAGIC, int(count), h.digest()))
    except OSError as exc:
        log.warning("AAC cache entry %s not written: %s", target, exc)
        return None
    evict(folder)
    return target


def evict(root: str | os.PathLike | None = None, max_bytes: int | None = None) -> list[Path]:
    """Remove the entries used longest ago until the folder holds at most ``max_bytes``."""
    folder = Path(root or default_root())
    limit = MAX_BYTES if max_bytes is None else max_bytes
    entries = []
    for p in folder.glob(f"*{SUFFIX}"):
        with contextlib.suppress(OSError):
            st = p.stat()
            entries.append((st.st_mtime_ns, st.st_size, p))
    total = sum(e[1] for e in entries)
    removed = []
    for _, size, p in sorted(entries):
        if total <= limit:
            break
        with contextlib.suppress(OSError):
            p.unlink()
            removed.append(p)
            total -= size
    return removed


def clear(root: str | os.PathLike | None = None) -> int:
    """Remove every entry (``studio bench`` times first-time encodes); the count removed."""
    return len(evict(root, max_bytes=-1))

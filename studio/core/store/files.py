"""What a file name and its folder allow, for any file Studio writes (an output, a frame, a cache).

    check_folder("out/talk.mp4")     # the folder exists and takes a new file (one is made and removed)
    check_name_length(Path(name))    # one sentence for a name longer than the file system takes
    write_error(exc, path)           # the one sentence for a failed write (disk full, quota, rights)
    same_file(a, b), inside(p, d)    # one file by device and inode; a path inside a folder
    numbered_names("out.mp4")        # out.mp4, out_002.mp4, out_003.mp4 ...

The policy of where a render's output may go (not onto an input, not into the data folder, the
extensions Studio writes) is ``studio.core.render.outputs.check_output``, which builds on these.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterator
from pathlib import Path

from studio.core.errors import InputError, RenderError


def _name_bytes_and_limit(name: str, folder: Path) -> tuple[int, int]:
    """A file name's length in bytes and the most its folder's file system takes (255 where unknown)."""
    try:
        limit = os.pathconf(folder if folder.is_dir() else ".", "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = 255
    return len(name.encode("utf-8", "surrogateescape")), limit


def check_name_length(out: Path) -> None:
    """One sentence for a file name longer than its file system takes (255 bytes on most)."""
    n, limit = _name_bytes_and_limit(out.name, out.parent)
    if n > limit:
        raise InputError(
            f"{out.name[:40]}...{out.suffix}: the file name is {n} bytes long, but the file system takes at most "
            f"{limit}; choose a shorter name."
        )


def check_kept_name(out: str | os.PathLike) -> None:
    """Where an existing output is kept (no ``--overwrite``), the numbered name the new file gets
    (``out_002.mp4``) must fit the file system too: one sentence now, not a failure after the whole
    render (a legal 254-byte name that exists has no room for ``_002``)."""
    out = Path(os.path.expanduser(os.fspath(out)))
    check_name_length(out)
    try:
        if not out.exists():
            return
    except OSError:
        return
    n, limit = _name_bytes_and_limit(Path(numbered(out, 2)).name, out.parent)
    if n > limit:
        raise InputError(
            f"{out.name[:40]}...{out.suffix}: a file of that name exists and is kept, but the numbered name the new "
            f"file would get is {n} bytes long and the file system takes at most {limit}; choose a shorter name, "
            "or pass --overwrite to replace that file."
        )


def write_error(exc: OSError, path: str | os.PathLike):
    """One sentence (``RenderError``) for a write that failed: a full disk or quota names the
    folder, a name too long says so; anything else with its reason and folder."""
    path = Path(path)
    folder = Path(exc.filename).parent if isinstance(getattr(exc, "filename", None), str) else path.parent
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        why = "no space left on device" if exc.errno == errno.ENOSPC else "disk quota exceeded"
        return RenderError(
            f"The disk is full ({why} in {folder}) while writing {path.name}: free some space and try again."
        )
    if exc.errno == errno.ENAMETOOLONG:
        return RenderError(
            f"{path.name[:40]}...: the file name is too long for the file system; choose a shorter name."
        )
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return RenderError(f"{path.name} cannot be written in {folder} ({exc.strerror}): choose another folder.")
    return RenderError(f"Writing {path.name} failed ({exc.strerror or exc}, in {folder}): check the output folder.")


def inside(path: str | os.PathLike, folder: str | os.PathLike) -> bool:
    """Whether ``path`` (resolved, links followed) lies in ``folder`` (resolved)."""
    try:
        p, f = Path(os.path.realpath(path)), Path(os.path.realpath(folder))
    except (OSError, ValueError):
        return False
    return p != f and f in p.parents


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether ``a`` and ``b`` name one file: same device and inode (links followed), or the same
    resolved path. False when either does not exist."""
    try:
        sa, sb = os.stat(a), os.stat(b)
    except (OSError, ValueError):
        return False
    if (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino):
        return True
    try:
        return os.path.realpath(a) == os.path.realpath(b)
    except (OSError, ValueError):
        return False


def check_folder(out: str | os.PathLike) -> Path:
    """Raise unless ``out``'s folder exists and accepts a new file (one is created and removed)."""
    from studio.core.store.temps import release_temp, temp_file

    out = Path(out)
    folder = out.parent
    if not folder.exists():
        raise RenderError(f"The output folder {folder} does not exist: create it or choose another.")
    if not folder.is_dir():
        raise RenderError(f"{folder} is not a folder, so {out.name} cannot be written there: choose another path.")
    try:
        probe = temp_file(folder, f".{out.stem}.", ".part.probe")
    except OSError as exc:
        why = "the disk is full" if exc.errno == errno.ENOSPC else (exc.strerror or str(exc))
        raise RenderError(f"The output folder {folder} is not writable ({why}): choose another folder.") from None
    try:
        probe.unlink()
    finally:
        release_temp(probe)
    return out


_NUMBERED = re.compile(r"^(.*)_(\d{3,})$")


def numbered(path: str | os.PathLike, n: int) -> str:
    """``out.mp4`` -> ``out_002.mp4`` (n=2); an already numbered stem is renumbered."""
    p = Path(path)
    m = _NUMBERED.match(p.stem)
    stem = m.group(1) if m else p.stem
    return str(p.with_name(f"{stem}_{n:03d}{p.suffix}"))


def numbered_names(path: str | os.PathLike, limit: int = 100_000) -> Iterator[Path]:
    """``path``, then the numbered names after it: ``out.mp4``, ``out_002.mp4``, ``out_003.mp4`` ...
    (``out_007.mp4``: ``out_007.mp4``, ``out_008.mp4`` ...)."""
    yield Path(path)
    m = _NUMBERED.match(Path(path).stem)
    n = int(m.group(2)) + 1 if m else 2
    for k in range(n, n + limit):
        yield Path(numbered(path, k))

"""Atomic outputs: write beside the target, rename on success, leave nothing on failure.

A new file gets the user's umask (created with mode 0666 & ~umask, as ``open`` would), a replaced
file keeps the mode of the file it replaces.

    with atomic_output("talk.mp4", overwrite=False) as out:   # the final name is claimed at the end
        write(out.tmp)
    out.final                                                  # talk.mp4, or talk_002.mp4 if taken

With ``overwrite=False`` the name is claimed when the finished file is moved into place, never
before: the temporary is hard-linked to the name (``link`` fails when the name exists, atomically,
whoever made it) and a taken name gets the next number (``_002``, ``_003`` ...). Where the file
system has no hard links (FAT, some network shares) the claim is an existence check and a rename
under a lock in the data folder (``claims.lock``), which every Studio process of that folder takes.

The temporary is registered (``store.temps``), so even a killed process leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from studio.core.store.temps import release_temp, temp_file, tmp_records_dir

log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------------
# Inputs are never outputs

_INPUTS: dict[tuple[int, int], str] = {}  # (device, inode) -> how the user named it


def protect_inputs(named: dict[str, object]) -> None:
    """Record the files a command reads (``{"--script": "out/b.srt", ...}``, values that are not
    existing regular files are ignored): no ``atomic_output`` of this process may then replace one of
    them, with or without ``--overwrite``, whatever the output (a side file: captions, sentence times)."""
    for how, value in named.items():
        for v in value if isinstance(value, (list, tuple)) else (value,):
            if not isinstance(v, (str, os.PathLike)) or not str(v) or len(str(v)) > 4096:
                continue
            try:
                st = os.stat(v)
            except (OSError, ValueError):
                continue
            if stat.S_ISREG(st.st_mode):
                _INPUTS[(st.st_dev, st.st_ino)] = f"{how} {v}"


def clear_inputs() -> None:
    _INPUTS.clear()


def refuse_input(target: str | os.PathLike) -> None:
    """One sentence when ``target`` is (links followed, hard links included) a file this command reads."""
    if not _INPUTS:
        return
    try:
        st = os.stat(target)
    except (OSError, ValueError):
        return
    named = _INPUTS.get((st.st_dev, st.st_ino))
    if named is not None:
        from studio.core.errors import InputError

        raise InputError(f"{target} is this command's input ({named}); write the output to another name")


# ------------------------------------------------------------------------------------------------
# Atomic outputs


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike, suffix: str | None = None) -> Iterator[Path]:
    """Yield a temporary path in the target's folder; rename it onto ``target`` on success.

    On any exception (including KeyboardInterrupt) the temporary file is removed and an existing
    ``target`` is left untouched. The temporary is registered (see the module docstring), so even
    a killed process leaves nothing a later ``studio`` command does not remove. The new file's
    mode is the user's umask applied to 0666; a replaced file's mode is kept.
    """
    with atomic_output(target, suffix) as out:
        yield out.tmp


class atomic_output:  # noqa: N801 - used as a context manager, like open()
    """``atomic_path`` that says where the file went: ``.tmp`` while writing, ``.final`` after.

    ``overwrite=True``: the file replaces ``target`` (its mode kept). ``overwrite=False``: an
    existing ``target`` is never replaced; the name is claimed when the file is complete
    (``claim``), and a taken name gets the next number (``final`` says which)."""

    def __init__(self, target: str | os.PathLike, suffix: str | None = None, *, overwrite: bool = True):
        self.target = Path(target)
        self.suffix = self.target.suffix if suffix is None else suffix
        self.overwrite = overwrite
        self.tmp: Path = Path()
        self.final: Path | None = None

    def __enter__(self) -> atomic_output:
        refuse_input(self.target)  # before any work: an input is never replaced, --overwrite or not
        self.tmp = temp_file(self.target.parent, f".{self.target.stem}.", f".part{self.suffix}")
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None:
                with open(self.tmp, "rb+") as fh:
                    os.fsync(fh.fileno())
                self.final = claim(self.tmp, self.target, overwrite=self.overwrite)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                self.tmp.unlink()
            raise
        finally:
            if exc_type is not None:
                with contextlib.suppress(FileNotFoundError):
                    self.tmp.unlink()
            release_temp(self.tmp)


def claim(tmp: str | os.PathLike, target: str | os.PathLike, *, overwrite: bool) -> Path:
    """Move the finished file ``tmp`` to its final name and return that name.

    ``overwrite``: ``target`` is replaced (``os.replace``, the replaced file's mode kept).
    Otherwise ``target`` if no file has that name at this moment, else the first free numbered
    name (``numbered``): decided atomically, so two writers (threads, processes, another program)
    never end on one name, and an existing file is never replaced."""
    from studio.core.store.files import numbered_names

    tmp, target = Path(tmp), Path(target)
    if overwrite:
        refuse_input(target)  # and again at the end (the name may have been linked to an input since)
        keep_mode(tmp, target)
        os.replace(tmp, target)
        return target
    for name in numbered_names(target):
        try:
            os.link(tmp, name)
        except FileExistsError:
            continue
        except OSError as exc:
            if exc.errno not in _NO_LINKS:
                raise
            return _claim_locked(tmp, target)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        return name
    raise FileExistsError(f"no free name like {target.name} in {target.parent}")


def _claim_locked(tmp: Path, target: Path) -> Path:
    """``claim`` where hard links are not supported: check and rename under the data folder's lock."""
    import fcntl

    from studio.core.store.files import numbered_names

    folder = tmp_records_dir()
    lock_path = (folder.parent if folder is not None else tmp.parent) / "claims.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        for name in numbered_names(target):
            if not os.path.lexists(name):
                os.rename(tmp, name)
                return name
    finally:
        os.close(fd)
    raise FileExistsError(f"no free name like {target.name} in {target.parent}")


_NO_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK, errno.ENOSYS, errno.EACCES}


def keep_mode(tmp: str | os.PathLike, target: str | os.PathLike) -> None:
    """Give ``tmp`` the permission bits of the regular file ``target`` it is about to replace.

    Not when ``tmp`` is a hard link to someone else's file (``nlink > 1``: chmod would change
    that file too), nor when ``target`` does not exist (``tmp`` keeps 0666 & ~umask)."""
    try:
        st = os.stat(target)
        if not stat.S_ISREG(st.st_mode) or os.stat(tmp).st_nlink > 1:
            return
        os.chmod(tmp, stat.S_IMODE(st.st_mode))
    except OSError:
        return


def atomic_write_bytes(target: str | os.PathLike, data: bytes) -> None:
    with atomic_path(target) as tmp:
        tmp.write_bytes(data)


def save_checked_npy(path: str | os.PathLike, array) -> None:
    """Write a cache array (``.npy``, atomically) with its CRC-32 in ``<path>.crc`` beside it, so
    that ``load_checked_npy`` notices any damaged byte, its header included."""
    import zlib

    import numpy as np

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)  # a repair may have emptied the folder meanwhile
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        np.save(fh, array)
    data = path.read_bytes()
    atomic_write_bytes(path.with_name(path.name + ".crc"), json.dumps([len(data), zlib.crc32(data)]).encode())


def load_checked_npy(path: str | os.PathLike):
    """The array ``save_checked_npy`` wrote, or None (with the reason logged) when it is missing,
    has no checksum, or any byte differs (the header too: numpy never parses a damaged one)."""
    import zlib

    import numpy as np

    path = Path(path)
    try:
        data = path.read_bytes()
        size, crc = json.loads(path.with_name(path.name + ".crc").read_bytes())
        if len(data) != size or zlib.crc32(data) != crc:
            log.warning("cache %s is damaged (checksum); computing it again", path)
            return None
        import io

        return np.load(io.BytesIO(data), allow_pickle=False)
    except FileNotFoundError:
        return None
    except Exception as exc:  # noqa: BLE001 - any damage means: compute it again
        log.warning("cache %s is unreadable (%s); computing it again", path, type(exc).__name__)
        return None


def file_sha256(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def quick_file_key(path: str | os.PathLike) -> str:
    """A cheap identity for cache keys: resolved path, size and modification time."""
    p = Path(path).resolve()
    st = p.stat()
    return hashlib.sha256(f"{p}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:24]

"""The temporary-file registry: no temporary outlives its run.

The registry makes sure no temporary outlives its run, even when the process is killed
(SIGKILL, OOM killer, power cut), so that no later command trips over multi-hundred-MB
``.part``/``.tmp`` leftovers::

    tmp = temp_file(folder, ".out.", ".part.mp4")   # registered, then created (O_EXCL, 0666 & ~umask)
    d = temp_dir(folder, ".out.", ".part.chunks")    # the same for a folder (removed as a whole)
    register_temp(path)                              # a name someone else creates (a worker's spill file)
    release_temp(tmp)                                # renamed into place or deleted: forget it
    sweep_dead_temps()                               # at the start of every `studio` command

Each process that registers a temporary owns one record file ``<data folder>/tmp/<pid>-<token>.rec``
(one JSON line per registration or release, fsync'd before the temporary is created) and holds an
``flock`` on it for as long as it lives; the kernel drops the lock when the process dies, however
it dies. ``sweep_dead_temps`` lists that folder and tries each lock without blocking: a lock it can
take belongs to a dead process, whose registered paths are removed, then the record. With no
records this is one directory listing (microseconds). Hand-written because no library keeps
crash-surviving temporaries: ``tempfile`` only cleans up in a process that exits normally.

Safety: only names that look like our temporaries are ever registered or removed (a hidden name,
``.`` first, containing ``.part`` or ``.tmp``); a registered file is removed only if it is still a
file (or link), a registered folder only if it is still a real folder; records that do not parse
are skipped line by line; paths already gone are fine. And only what this data folder's own
processes recorded is removed: every line carries an HMAC of its path under the data folder's
secret (``tmp/records.key``, 32 random bytes, mode 0600, made by the first process that records),
and a record file must belong to this user; a record planted by anyone or anything else (copied
from another machine, written by another program or user) deletes nothing.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import hashlib
import hmac
import json
import logging
import os
import secrets
import shutil
import stat
import threading
from pathlib import Path

from studio.core.signals import on_forced_exit

log = logging.getLogger(__name__)

RECORD_SUFFIX = ".rec"
_NEW_SUFFIX = ".new"  # a record being created (renamed to .rec once locked)
_TOKEN_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_"


# ------------------------------------------------------------------------------------------------
# Temporaries: creation


def temp_file(folder: str | os.PathLike, prefix: str, suffix: str) -> Path:
    """Create an empty temporary file ``folder/prefix<random>suffix`` (registered first).

    Created with ``O_EXCL`` and mode 0666 (the umask applies). Raises the ``OSError`` of the
    creation (``FileNotFoundError`` for a missing folder, ``PermissionError``...), registering
    nothing then.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    return _new_temp(folder, prefix, suffix, "file", lambda path: os.close(os.open(path, flags, 0o666)))


def temp_dir(folder: str | os.PathLike, prefix: str, suffix: str = ".part") -> Path:
    """Create a temporary folder ``folder/prefix<random>suffix`` (registered first; removed as a whole)."""
    return _new_temp(folder, prefix, suffix, "dir", lambda path: os.mkdir(path, 0o777))


def _new_temp(folder: str | os.PathLike, prefix: str, suffix: str, kind: str, make) -> Path:
    """Register a free name in ``folder``, then ``make(path)`` it (failing if it exists: another name
    is tried); a failure releases the name and is raised."""
    folder = Path(folder)
    for _ in range(100):
        path = folder / _temp_name(prefix, _token(), suffix)
        register_temp(path, kind=kind)
        try:
            make(path)
        except FileExistsError:
            release_temp(path)
            continue
        except BaseException:
            release_temp(path)
            raise
        return path
    raise FileExistsError(f"no free temporary name in {folder}")


NAME_MAX = 255  # bytes in one file name on every common file system


def _temp_name(prefix: str, token: str, suffix: str) -> str:
    """``prefix + token + suffix``, its prefix shortened in the middle when the whole would not fit
    in ``NAME_MAX`` bytes: a legal 254-byte output name still gets a temporary beside it."""
    name = f"{prefix}{token}{suffix}"
    over = len(name.encode("utf-8", "surrogateescape")) - NAME_MAX
    if over <= 0:
        return name
    head, tail = prefix[:1], prefix[-1:] if len(prefix) > 1 else ""
    raw = prefix[1 : len(prefix) - len(tail)].encode("utf-8", "surrogateescape")
    middle = raw[: max(0, len(raw) - over)].decode("utf-8", "ignore")
    return f"{head}{middle}{tail}{token}{suffix}"


def is_temp_name(name: str) -> bool:
    """Whether ``name`` (a file name) looks like one of our temporaries: only those are registered."""
    return name.startswith(".") and (".part" in name or ".tmp" in name)


def register_temp(path: str | os.PathLike, kind: str = "file") -> Path:
    """Record ``path`` (``kind`` "file" or "dir") as a temporary of this process, durably.

    Call it before the path is created. Best effort: if the data folder cannot hold a record, the
    temporary is still removed by the normal paths (and at exit), only not after a crash.
    """
    path = Path(os.path.abspath(path))
    if kind not in ("file", "dir"):
        raise ValueError(f"kind must be 'file' or 'dir', not {kind!r}")
    if not is_temp_name(path.name):
        raise ValueError(f"{path.name!r} is not a temporary's name (a leading '.' and '.part' or '.tmp')")
    with _LOCK:
        _OWN[str(path)] = kind
        rec = _record()
        if rec is not None:
            rec.append(["+d" if kind == "dir" else "+f", str(path)], sync=True)
    return path


def release_temp(path: str | os.PathLike) -> None:
    """Forget ``path``: it was renamed into place or deleted (it is no longer removed at exit)."""
    key = os.path.abspath(path)
    with _LOCK:
        if _OWN.pop(key, None) is None:
            return
        rec = _RECORDS.get(_records_dir_key())
        if rec is not None:
            rec.append(["-", key], sync=False)


def drop_temp(path: str | os.PathLike) -> None:
    """Remove a temporary this process made (a file, or a folder and all in it; one already gone is
    fine) and forget it: what an abandoned write does with its parts."""
    p = Path(path)
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            p.unlink()
    release_temp(p)


def own_temps() -> dict[str, str]:
    """This process's registered temporaries: ``{path: kind}``."""
    with _LOCK:
        return dict(_OWN)


def remove_own_temps() -> list[str]:
    """Remove every temporary this process still has registered (at exit, after a cancel)."""
    with _LOCK:
        items = list(_OWN.items())
    removed = [p for p, kind in sorted(items, key=lambda kv: kv[1] == "dir") if _remove(p, kind)]
    for p, _ in items:
        release_temp(p)
    return removed


# ------------------------------------------------------------------------------------------------
# Temporaries: the sweep


def tmp_records_dir() -> Path | None:
    """``<data folder>/tmp`` (not created here); None where the data folder cannot be found."""
    try:
        from studio.core import env

        home = env.get("STUDIO_HOME")
        if home:
            return Path(home).expanduser() / "tmp"
        from studio.core.env import data_dir

        return data_dir() / "tmp"
    except Exception:  # noqa: BLE001 - a sweep must never stop a command
        return None


def sweep_dead_temps(records_dir: str | os.PathLike | None = None) -> list[str]:
    """Remove the temporaries of dead processes (records whose lock can be taken); return them.

    Never raises: a sweep that cannot run leaves things for the next one.
    """
    import fcntl

    folder = Path(records_dir) if records_dir is not None else tmp_records_dir()
    if folder is None:
        return []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    removed: list[str] = []
    with _LOCK:
        mine = {os.path.basename(r.path) for r in _RECORDS.values()}
    for entry in entries:
        name = entry.name
        if name in mine or not (name.endswith(RECORD_SUFFIX) or name.endswith(_NEW_SUFFIX)):
            continue
        try:
            fd = os.open(entry.path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # alive (or a lock we cannot take): not ours to touch
            if name.endswith(RECORD_SUFFIX):
                removed += _remove_recorded(fd, folder)
            with contextlib.suppress(OSError):
                os.unlink(entry.path)
        except Exception as exc:  # noqa: BLE001
            log.debug("temporary record %s not swept: %s", entry.path, exc)
        finally:
            os.close(fd)
    if removed:
        log.info("removed %d temporary file(s) left by a killed run: %s", len(removed), ", ".join(removed))
    return removed


def _remove_recorded(fd: int, folder: Path) -> list[str]:
    """Remove what a dead process's record lists, where each line's HMAC proves that a process of
    this data folder wrote it (and the record file is this user's)."""
    key = record_key(folder, create=False)
    if key is None or os.fstat(fd).st_uid != os.getuid():
        return []
    with os.fdopen(os.dup(fd), "rb") as fh:
        data = fh.read()
    live: dict[str, str] = {}
    for raw in data.split(b"\n")[1:]:  # the first line is the header; a torn last line is skipped
        try:
            op, path, mac = json.loads(raw)
        except (ValueError, TypeError):
            continue
        if (
            not isinstance(path, str)
            or not isinstance(mac, str)
            or not hmac.compare_digest(mac, record_mac(key, op, path))
        ):
            continue
        if op == "-":
            live.pop(path, None)
        elif op in ("+f", "+d") and isinstance(path, str):
            live[path] = "dir" if op == "+d" else "file"
    # files first, then folders (a folder may hold registered files)
    return [p for p, kind in sorted(live.items(), key=lambda kv: kv[1] == "dir") if _remove(p, kind)]


def _remove(path: str, kind: str) -> bool:
    """Remove one registered temporary if it still is what was registered; True if removed."""
    if not is_temp_name(os.path.basename(path)) or not os.path.isabs(path):
        return False
    try:
        st = os.lstat(path)
    except OSError:
        return False
    try:
        if kind == "dir":
            if not stat.S_ISDIR(st.st_mode):
                return False
            shutil.rmtree(path)
        else:
            if stat.S_ISDIR(st.st_mode):
                return False
            os.unlink(path)
    except OSError as exc:
        log.debug("could not remove temporary %s: %s", path, exc)
        return False
    return True


# ------------------------------------------------------------------------------------------------
# This process's record


class _Record:
    """An open, flock'ed record file; appends are single ``write`` calls of whole lines."""

    def __init__(self, folder: Path):
        import fcntl

        folder.mkdir(parents=True, exist_ok=True)
        key = record_key(folder, create=True)
        if key is None:
            raise OSError(f"cannot keep a records key in {folder}")
        self.key = key
        for _ in range(10):
            base = f"{os.getpid()}-{_token()}"
            new = folder / f".{base}{_NEW_SUFFIX}"
            fd = os.open(new, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                os.write(fd, json.dumps({"studio_temps": 1, "pid": os.getpid()}).encode() + b"\n")
                self.path = str(folder / f"{base}{RECORD_SUFFIX}")
                os.rename(new, self.path)  # a sweeper may have taken the unlocked .new: try again
                self.fd = fd
                return
            except OSError:
                os.close(fd)
                with contextlib.suppress(OSError):
                    os.unlink(new)
        raise OSError(f"cannot create a temporary record in {folder}")

    def append(self, item, sync: bool) -> None:
        op, path = item
        try:
            os.write(self.fd, json.dumps([op, path, record_mac(self.key, op, path)]).encode() + b"\n")
            if sync:
                os.fsync(self.fd)
        except OSError as exc:
            log.debug("temporary record %s: %s", self.path, exc)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        with contextlib.suppress(OSError):
            os.close(self.fd)


_LOCK = threading.RLock()
_OWN: dict[str, str] = {}  # path -> "file" | "dir"
_RECORDS: dict[str, _Record] = {}  # one per data folder this process registered temporaries in
_FAILED: set[str] = set()
_ATEXIT = False


def _records_dir_key() -> str:
    folder = tmp_records_dir()
    return str(folder) if folder is not None else ""


def _record() -> _Record | None:
    global _ATEXIT
    key = _records_dir_key()
    rec = _RECORDS.get(key)
    if rec is None and key and key not in _FAILED:
        try:
            rec = _RECORDS[key] = _Record(Path(key))
        except OSError as exc:
            _FAILED.add(key)
            # a read-only data folder is said once, by whatever needs to write there (paths.read_only_error)
            level = logging.INFO if exc.errno == errno.EROFS else logging.WARNING
            log.log(level, "temporaries are not recorded (%s): a killed run may leave some behind", exc)
            return None
        if not _ATEXIT:
            atexit.register(_at_exit)
            _ATEXIT = True
    return rec


def _at_exit() -> None:
    remove_own_temps()
    with _LOCK:
        for rec in _RECORDS.values():
            rec.close()
        _RECORDS.clear()


def _after_fork_in_child() -> None:
    """A forked child shares the parent's record fd (and lock): drop it, start afresh if needed."""
    global _LOCK
    _LOCK = threading.RLock()
    for rec in _RECORDS.values():
        with contextlib.suppress(OSError):
            os.close(rec.fd)
    _RECORDS.clear()
    _OWN.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
on_forced_exit(remove_own_temps)  # a second stop signal exits at once (no atexit): remove them then


KEY_NAME = "records.key"


def record_mac(key: bytes, op: str, path: str) -> str:
    """The signature of one record line (``op``, ``path``) with the data folder's key."""
    return hmac.new(key, f"{op}\0{path}".encode("utf-8", "surrogateescape"), hashlib.sha256).hexdigest()[:32]


def record_key(folder: Path, create: bool) -> bytes | None:
    """The data folder's records key (``folder/records.key``): 32 random bytes only this user can
    read, made once (atomically: two processes starting together agree on one); None when it
    cannot be read or made, or is not this user's own private file."""
    path = folder / KEY_NAME
    for _ in range(2):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0))
        except FileNotFoundError:
            if not create:
                return None
            new = folder / f".{KEY_NAME}.{os.getpid()}.{_token()}.tmp"
            try:
                nfd = os.open(new, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
                try:
                    os.write(nfd, secrets.token_bytes(32))
                    os.fsync(nfd)
                finally:
                    os.close(nfd)
                try:
                    os.link(new, path)  # the first one wins; the others read it
                except FileExistsError:
                    pass
                except OSError:  # no hard links here: a rename (a race may pick either key once)
                    if not os.path.lexists(path):
                        os.rename(new, path)
            except OSError:
                return None
            finally:
                with contextlib.suppress(OSError):
                    os.unlink(new)
            continue
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
                return None
            key = os.read(fd, 64)
        finally:
            os.close(fd)
        return key if len(key) == 32 else None
    return None


def _token(n: int = 10) -> str:
    return "".join(secrets.choice(_TOKEN_CHARS) for _ in range(n))

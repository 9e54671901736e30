"""Small files a user or another process names (config, scripts, records): bounded by type and size
before a byte is read.

    data = read_small("clients.toml", "--clients", most=1 << 20)     # bytes; InputError otherwise
    text = read_small_text("script.txt", "the script")               # UTF-8 text

Checked from ``os.stat`` before opening: a folder, a FIFO (opening one waits for a writer forever), a
device (``/dev/zero`` never ends) or a socket is one sentence; so is a file over ``most`` bytes, and a
file that grows past it while read (at most ``most + 1`` bytes are ever read). The file is opened
with ``O_NONBLOCK`` so that one swapped for a FIFO between the check and the open does not hang.
"""

from __future__ import annotations

import os
import stat

from studio.core.errors import InputError

DEFAULT_MOST = 1 << 20


def kind_problem(path: str | os.PathLike) -> str | None:
    """Why ``path`` is not a regular file to read ("no such file", "a folder" ...), or None."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return "no such file"
    except NotADirectoryError:
        return "no such file"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if stat.S_ISDIR(st.st_mode):
        return "is a folder, not a file"
    if stat.S_ISFIFO(st.st_mode):
        return "is a pipe (FIFO), not a file"
    if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
        return "is a device, not a file"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    return None


def read_small(path: str | os.PathLike, what: str, most: int = DEFAULT_MOST) -> bytes:
    """The bytes of the regular file ``path`` of at most ``most`` bytes; one sentence (``what``
    names it: "--clients clients.toml") otherwise."""
    problem = kind_problem(path)
    if problem:
        raise InputError(f"{what}: {problem}")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise InputError(f"{what}: cannot be read ({exc.strerror or exc})") from None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InputError(f"{what}: is not a regular file")
        try:
            data = fh.read(most + 1)
        except OSError as exc:
            raise InputError(f"{what}: cannot be read ({exc.strerror or exc})") from None
    if len(data) > most:
        raise InputError(f"{what}: is over {most / 2**20:g} MB; this is not the file meant")
    return data


def read_small_text(path: str | os.PathLike, what: str, most: int = DEFAULT_MOST) -> str:
    try:
        return read_small(path, what, most).decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{what}: is not UTF-8 text") from None

"""The frame rings an encoder process reads from: memory reserved in full before the first frame.

A ring used to be a ``multiprocessing.shared_memory`` block, which ``ftruncate`` only sizes: its
pages were found the first time a frame was written, so a container's 64 MB ``/dev/shm`` killed the
render (and ``studio serve`` with it) by SIGBUS in the middle of a frame copy. A ring here is a file
in the shared-memory folder (``STUDIO_SHM_DIR``, default ``/dev/shm``) whose pages are reserved with
``posix_fallocate`` before it is used, so a shortage is an ``OSError`` at allocation. Where it does
not fit, the ring is a file in the temporary folder (memory-mapped; the page cache backs it), then
fewer slots in either; where nothing fits, one sentence (``RenderError``). The file is unlinked as soon
as it is reserved and reaches the worker as a file descriptor over the worker's socket
(``multiprocessing.reduction.send_handle``), so a killed process leaves no ring behind.

    ring = allocate(frame_bytes, SLOTS)      # ring.buf (mmap), ring.slots, ring.fd, ring.where
    send(conn, ring)                          # the worker: ring = receive(conn, size)
    ring.close()
"""

from __future__ import annotations

import errno
import itertools
import logging
import mmap
import os
import tempfile
from pathlib import Path

from studio.core import env
from studio.core.errors import RenderError

log = logging.getLogger(__name__)

MIN_SLOTS = 2  # fewer and a lane would wait for its worker on every frame
_TOKENS = itertools.count(1)
_SHORT = (errno.ENOSPC, errno.ENOMEM, errno.EDQUOT, errno.EFBIG)


def shm_dir() -> Path:
    """Where rings (and small spill folders) live in RAM: ``STUDIO_SHM_DIR`` or ``/dev/shm``."""
    return Path(env.get("STUDIO_SHM_DIR") or "/dev/shm")


class Ring:
    """``slots`` frames of ``frame_bytes`` in one mapping (``buf``) backed by ``fd``."""

    def __init__(self, fd: int, frame_bytes: int, slots: int, where: Path):
        self.fd, self.frame_bytes, self.slots, self.where = fd, frame_bytes, slots, where
        self.size = frame_bytes * slots
        self.buf = mmap.mmap(fd, self.size)
        self.token = next(_TOKENS)  # a worker that has this ring already is not sent it again

    def close(self) -> None:
        try:
            self.buf.close()
        except BufferError:  # a view still exported: the mapping goes with the last view
            pass
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _reserve(folder: Path, size: int) -> int:
    """A descriptor of an unlinked file in ``folder`` with ``size`` bytes reserved; OSError if not."""
    fd, name = tempfile.mkstemp(prefix=".studio-ring-", dir=folder)
    try:
        os.unlink(name)
        try:
            if not hasattr(os, "posix_fallocate"):  # macOS: the pages are written instead
                raise OSError(errno.ENOSYS, "no posix_fallocate")
            os.posix_fallocate(fd, 0, size)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                raise
            block = b"\0" * (1 << 20)  # a file system without fallocate: write the pages instead
            done = 0
            while done < size:
                done += os.write(fd, block[: min(len(block), size - done)])
        return fd
    except BaseException:
        os.close(fd)
        raise


def _free_mb(folder: Path) -> str:
    try:
        st = os.statvfs(folder)
        return f"{st.f_bavail * st.f_frsize / 1e6:.0f} MB free"
    except OSError as exc:
        return exc.strerror or "not usable"


def allocate(frame_bytes: int, slots: int) -> Ring:
    """A ring of ``slots`` frames (fewer, down to ``MIN_SLOTS``, when memory is short), in RAM when it
    fits, else file-backed in the temporary folder; ``RenderError`` (one sentence) when nothing fits."""
    places = [shm_dir(), Path(tempfile.gettempdir())]
    tries = [(p, n) for n in dict.fromkeys((slots, min(slots, 4), MIN_SLOTS)) for p in places]
    last: OSError | None = None
    for where, n in tries:
        try:
            fd = _reserve(where, frame_bytes * n)
        except FileNotFoundError as exc:
            last = exc
            continue
        except OSError as exc:
            if exc.errno not in _SHORT + (errno.EACCES, errno.EROFS, errno.EPERM, errno.ENOTDIR):
                raise
            last = exc
            continue
        if (where, n) != tries[0]:
            log.warning(
                "encoder ring of %d frames (%.0f MB) in %s: %s had no room for %d frames",
                n,
                frame_bytes * n / 1e6,
                where,
                tries[0][0],
                slots,
            )
        return Ring(fd, frame_bytes, n, where)
    need = frame_bytes * MIN_SLOTS / 1e6
    raise RenderError(
        f"There is no room for an encoder's frame buffers ({need:.0f} MB per encoder; {shm_dir()}: "
        f"{_free_mb(shm_dir())}, {places[1]}: {_free_mb(places[1])}; last error: "
        f"{getattr(last, 'strerror', None) or last}): enlarge /dev/shm (docker run --shm-size=1g), set "
        "STUDIO_SHM_DIR to a larger memory folder, or render with fewer encoders (STUDIO_X264_WORKERS)."
    )


def send(conn, ring: Ring, pid: int) -> None:
    """Hand ``ring``'s descriptor to the worker at the other end of ``conn`` (after a message that
    tells it one follows)."""
    from multiprocessing import reduction

    reduction.send_handle(conn, ring.fd, pid)


def receive(conn, frame_bytes: int, slots: int) -> Ring:
    """The worker's side of ``send``: the same pages, mapped here."""
    from multiprocessing import reduction

    fd = reduction.recv_handle(conn)
    return Ring(fd, frame_bytes, slots, Path("<received>"))

"""libx264 encoders in worker processes, fed through shared memory.

PyAV holds the GIL while libx264 encodes a frame, so encoders in threads of one process take
turns (16 threads on a 16-core host reached ~213 fps at 1080p, about what two encoders give).
Each chunk of a parallel encode therefore runs in its own process: the parent puts an NV12 frame
into a slot of the worker's shared-memory ring (a host copy, or one DMA from the GPU: the ring is
CUDA-registered), sends ``(slot, pts)`` down a socket, and gets the slot back when it is encoded.
With a spill ``path`` the worker writes the packets there itself (``REC`` records) and the parent
only moves frames; without one the packets' bytes come back with the slot. Workers are fresh
interpreters started with ``python -m studio.core.media.x264_worker FD`` (no inherited CUDA context or
threads, and no re-import of the caller's ``__main__`` as multiprocessing's spawn would do), kept
for later renders, at a lower CPU priority than the render thread that feeds them. This module is
the parent's side (the pool, the leases, the encoders that feed a worker); ``x264_worker`` is the
worker's loop.

    pool = worker_pool(n)                   # processes start on first use, then stay
    enc = ProcessEncoder(pool[k], width, height, fps, crf, preset, path=spill)
    enc.encode(nv12, pts)                    # [] with a spill path, else av.Packet objects
    enc.flush()                              # the spill file is complete after this
"""

from __future__ import annotations

import atexit
import logging
import os
import struct
import threading
import time
from fractions import Fraction
from typing import Any

import numpy as np

from studio.core.env import child as child_env
from studio.core.env import get

log = logging.getLogger(__name__)

SLOTS = 8  # frames in flight per worker
# One encoded packet in a chunk's spill file: pts, dts, size, keyframe, then the bytes. Written
# by the workers (``ProcessEncoder(path=...)``) and by ``encoders.PacketFile``; read back at close.
REC = struct.Struct("<qqIB")


# ---------------------------------------------------------------------------------------------
# Parent side


class _Worker:
    def __init__(self, nice: int | None = None):
        """``nice``: the worker's CPU priority (default ``x264_worker.NICE``, or ``$STUDIO_X264_NICE``)."""
        import socket
        import subprocess
        import sys
        from multiprocessing.connection import Connection

        parent, child = socket.socketpair()
        fd = child.fileno()
        if getattr(sys, "frozen", False):  # a frozen app: its own executable knows the flag
            cmd = [sys.executable, WORKER_FLAG, str(fd)]
        else:
            cmd = [sys.executable, "-m", "studio.core.media.x264_worker", str(fd)]
        env = child_env(OMP_NUM_THREADS="1", STUDIO_PARENT_PID=str(os.getpid()))  # dies with us
        if nice is not None:
            env["STUDIO_X264_NICE"] = str(nice)
        self.proc = subprocess.Popen(cmd, pass_fds=(fd,), env=env, stdin=subprocess.DEVNULL)
        child.close()
        self.conn = Connection(os.dup(parent.fileno()))
        parent.close()
        self.shm: Any = None  # the ring (rings.Ring) the worker reads frames from
        self._sent = 0  # the token of the ring the worker has
        self.pinned = None
        self.lock = threading.Lock()  # one encoder at a time per worker
        self.owner = None  # the writer that leased it (lease_workers)
        self._poller: Any = None

    def ensure_shm(self, nbytes: int):
        """This worker's ring, with room for ``SLOTS`` frames of ``nbytes`` (fewer where memory is
        short: ``rings.allocate``); its pages are reserved before any frame is written."""
        from studio.core.media import rings

        if self.shm is None or self.shm.size < nbytes * SLOTS:
            self._free_shm()
            self.shm = rings.allocate(nbytes, SLOTS)
            self.shm.slots = self.shm.size // nbytes
        return self.shm

    def ring_message(self) -> tuple:
        """What an ``open`` message says about the ring: ``(token, size, follows)``; when ``follows``,
        the ring's descriptor is sent right after the message (``send_ring``)."""
        ring = self.shm
        return (ring.token, ring.size, self._sent != ring.token)

    def send_ring(self, described: tuple) -> None:
        from studio.core.media import rings

        if described[2]:
            rings.send(self.conn, self.shm, self.proc.pid)
            self._sent = self.shm.token

    def pinned_view(self):
        """The shared ring as a CUDA-registered (page-locked) uint8 tensor, so GPU frames are
        copied straight into the worker's slots; None where CUDA is not in use."""
        if self.pinned is None:
            import ctypes

            import torch

            if not torch.cuda.is_available() or not torch.cuda.is_initialized():
                return None
            size = self.shm.size
            addr = ctypes.addressof(ctypes.c_char.from_buffer(self.shm.buf))
            err = torch.cuda.cudart().cudaHostRegister(addr, size, 1)  # portable: pinned for every GPU
            if int(err) != 0:
                log.warning("cudaHostRegister failed (%s): GPU frames go through host copies", err)
                return None
            self.pinned = torch.frombuffer(self.shm.buf, dtype=torch.uint8, count=size)
            self._pinned_addr = addr
        return self.pinned

    def _free_shm(self) -> None:
        if self.pinned is not None:
            try:
                import torch

                torch.cuda.cudart().cudaHostUnregister(self._pinned_addr)
            except Exception:  # noqa: BLE001 - deliberate: any failure here is reported, not fatal
                pass
            self.pinned = None
        if self.shm is not None:
            try:
                self.shm.close()
            except OSError:
                pass
            self.shm = None

    def ready(self) -> bool:
        """Whether an answer is waiting (a reused ``select.poll``: ``Connection.poll`` builds a
        selector per call, ~0.1 ms each, once per frame)."""
        if self._poller is None:
            import select

            self._poller = select.poll()
            self._poller.register(self.conn.fileno(), select.POLLIN)
        return bool(self._poller.poll(0))

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """Stop a worker busy with a long job (an audio encode) at once; the pool replaces it."""
        self.proc.kill()
        self.close()

    def close(self) -> None:
        import subprocess

        try:
            if self.alive():
                self.conn.send(("exit",))  # a second one (after shutdown_pool's) is harmless
                self.proc.wait(timeout=2)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            pass
        if self.alive():
            self.proc.kill()
        try:
            self.conn.close()
        except OSError:
            pass
        self._free_shm()


_POOL: list[_Worker] = []
_POOL_LOCK = threading.Lock()


WORKER_FLAG = "__studio_x264_worker__"


def worker_pool(n: int) -> list[_Worker]:
    """At least ``n`` live encoder processes (started on first use, reused afterwards)."""
    with _POOL_LOCK:
        _POOL[:] = [w for w in _POOL if w.alive()]
        while len(_POOL) < n:
            _POOL.append(_Worker())
        return _POOL[:n]


def lease_workers(n: int, owner) -> list[_Worker]:
    """``n`` live encoder processes no other writer holds, for ``owner`` until ``release_workers``.

    Two writers at once (a queued job rendering while the previous one's encoders drain) get
    different processes, so neither waits for the other's chunks; the pool grows to what is used
    at once (two sets when jobs are pipelined) and keeps them for later renders."""
    with _POOL_LOCK:
        _POOL[:] = [w for w in _POOL if w.alive()]
        free = [w for w in _POOL if getattr(w, "owner", None) is None]
        while len(free) < n:
            w = _Worker()
            _POOL.append(w)
            free.append(w)
        got = free[:n]
        for w in got:
            w.owner = owner
        return got


def release_workers(owner) -> None:
    """Give back what ``lease_workers`` lent ``owner``."""
    with _POOL_LOCK:
        for w in _POOL:
            if getattr(w, "owner", None) is owner:
                w.owner = None


def prestart(n: int, audio: bool = True) -> None:
    """Start ``n`` encoder processes (and an audio one) now, so the first render does not wait for
    interpreters to start (a server or a queue runner calls it when it starts)."""
    with _POOL_LOCK:
        _POOL[:] = [w for w in _POOL if w.alive()]
        while len(_POOL) < n:
            _POOL.append(_Worker())
        _AUDIO[:] = [w for w in _AUDIO if w.alive()]
        if audio and not _AUDIO:
            _AUDIO.append(_Worker(nice=0))


_AUDIO: list[_Worker] = []  # processes that prepare a writer's audio (``("aac", src, out, cache)``)


def audio_worker() -> _Worker:
    """A live worker for one audio encode, its ``lock`` held (released by the caller when the
    answer has come): kept apart from the x264 pool, so no chunk encoder waits for it."""
    with _POOL_LOCK:
        _AUDIO[:] = [w for w in _AUDIO if w.alive()]
        for w in _AUDIO:
            if w.lock.acquire(blocking=False):
                return w
        w = _Worker(nice=0)  # the mux waits for its packets: not behind the encoders
        w.lock.acquire()
        _AUDIO.append(w)
        return w


@atexit.register
def shutdown_pool() -> None:
    """Stop every worker: all are told to exit first, then each is waited for (one by one, 16
    workers took ~0.5 s of a cold command's exit)."""
    with _POOL_LOCK:
        workers = _POOL + _AUDIO
        for w in workers:
            try:
                if w.alive():
                    w.conn.send(("exit",))
            except (OSError, ValueError):
                pass
        for w in workers:
            w.close()
        _POOL.clear()
        _AUDIO.clear()


class ProcessEncoder:
    """One libx264 encoder (single-threaded, closed GOP) living in a worker process."""

    def __init__(
        self, worker: _Worker, width: int, height: int, fps, crf: int, preset: str, path=None, changing=None, gop=0
    ):
        """``path``: the worker writes the packets there (``REC`` records) and returns none, so
        the parent only moves frames; None: packets come back from ``encode``/``flush``.
        ``gop``: a keyframe at least every ``gop`` frames (0: x264's own)."""
        if not worker.lock.acquire(timeout=60):
            raise RuntimeError("x264 worker is busy")
        self.w = worker
        self.fps = fps
        self.frame_bytes = width * height * 3 // 2
        self.shape: tuple[int, ...] = (height * 3 // 2, width)
        shm = _ring_or_release(worker, self.frame_bytes)
        self.n_slots = min(SLOTS, shm.size // self.frame_bytes)
        self.slots = np.ndarray((self.n_slots, *self.shape), np.uint8, buffer=shm.buf)
        self.free = list(range(self.n_slots))
        self.closed = False
        self.busy_s = 0.0  # seconds the worker spent inside x264 for this encoder (set by flush)
        self.trace = None  # STUDIO_TRACE: per frame (pts, message received, encode start, end), by flush
        self.waits = {"worker": 0.0, "gpu": 0.0}  # the feeding thread's waits: free slot, frames copied
        self._extradata: bytes | None = None
        ring = worker.ring_message()
        worker.conn.send(
            (
                "open",
                ring,
                self.n_slots,
                width,
                height,
                fps,
                crf,
                preset,
                None if path is None else str(path),
                changing,
                bool(get("STUDIO_TRACE")),
                int(gop),
            )
        )  # the parent's setting, even if set after our start
        worker.send_ring(ring)

    @property
    def extradata(self) -> bytes:
        """The stream headers (waits for the worker's answer to ``open``, so opening many
        encoders first and reading their headers afterwards overlaps their start-up)."""
        if self._extradata is None:
            self._extradata = self._recv()[1]
        return bytes(self._extradata or b"")

    def encode(self, nv12: np.ndarray, pts: int) -> list:
        _ = self.extradata
        out = []
        while not self.free:
            out += self.collect(block=True)
        slot = self.free.pop()
        np.copyto(self.slots[slot], nv12)
        self.w.conn.send(("frame", slot, int(pts)))
        out += self.collect(block=False)
        return out

    def gpu_slots(self):
        """``[SLOTS, H*3//2, W]`` page-locked view of the ring (None: host copies only)."""
        view = self.w.pinned_view()
        if view is None:
            return None
        return view[: self.n_slots * self.frame_bytes].view(self.n_slots, *self.shape)

    def encode_gpu(self, frames, first: int, stream, slots) -> list:
        """Encode CUDA NV12 frames ``[B,H*3//2,W]`` (pts ``first``...): DMA as many as there are
        free slots on ``stream``, one wait, then hand them over; no host memcpy."""
        _ = self.extradata
        out = []
        i, n = 0, len(frames)
        while i < n:
            if not self.free:
                t0 = time.perf_counter()
                out += self.collect(block=True)
                self.waits["worker"] += time.perf_counter() - t0
            ids = [self.free.pop() for _ in range(min(len(self.free), n - i))]
            t0 = time.perf_counter()
            for k, slot in enumerate(ids):
                slots[slot].copy_(frames[i + k], non_blocking=True)
            wait_blocking(stream)
            self.waits["gpu"] += time.perf_counter() - t0
            self.w.conn.send(("frames", [(slot, int(first + i + k)) for k, slot in enumerate(ids)]))
            i += len(ids)
            out += self.collect(block=False)
        return out

    def flush(self) -> list:
        self.w.conn.send(("flush",))
        out = []
        while True:
            msg = self._recv()
            if msg[0] == "flushed":
                out += self._packets(msg[1])
                self.busy_s = msg[2]
                self.trace = msg[3] if len(msg) > 3 else None
                break
            self.free.append(msg[1])
            out += self._packets(msg[2])
        self.release()
        return out

    def release(self) -> None:
        if not self.closed:
            self.closed = True
            self.w.lock.release()

    def abort(self) -> None:
        """Drop the encoder: the worker is restarted (its state is unknown)."""
        if not self.closed:
            self.w.close()
            self.release()

    def collect(self, block: bool) -> list:
        """The packets of the batches the worker has answered (their slots are free again);
        ``block``: wait for one answer first."""
        out = []
        while block or self.w.ready():
            msg = self._recv()
            self.free.append(msg[1])
            out += self._packets(msg[2])
            block = False
        return out

    def _recv(self):
        msg = self.w.conn.recv()
        if msg[0] == "error":
            if len(msg) > 2 and msg[2]:  # an OSError (e.g. the disk is full while spilling): errno and file
                import os

                raise OSError(msg[2], os.strerror(msg[2]), *(msg[3:4] if len(msg) > 3 and msg[3] else ()))
            raise RuntimeError(f"x264 worker failed: {msg[1]}")
        return msg

    def _packets(self, records) -> list:
        if not records:  # none, or written to the spill file by the worker
            return []
        import av

        tb = 1 / Fraction(self.fps)
        out = []
        for data, pts, dts, key in records:
            pkt = av.Packet(data)
            pkt.pts, pkt.dts = pts, dts
            pkt.time_base = tb
            pkt.is_keyframe = key
            out.append(pkt)
        return out


class CodecProcessEncoder(ProcessEncoder):
    """A delivery codec's encoder (``codecs``: ProRes, DNxHR, HEVC) in a worker process: RGB(A) frames
    go into the worker's ring, the worker converts and encodes them and spills the packets to ``path``.
    ``encode``/``flush``/``abort``/``extradata``/``busy_s`` are ``ProcessEncoder``'s."""

    def __init__(self, worker: _Worker, width, height, channels, fps, codec, crf, preset, alpha, path):
        if not worker.lock.acquire(timeout=60):
            raise RuntimeError("encoder worker is busy")
        self.w = worker
        self.fps = fps
        self.shape = (height, width, channels)
        self.frame_bytes = width * height * channels
        shm = _ring_or_release(worker, self.frame_bytes)
        self.n_slots = min(SLOTS, shm.size // self.frame_bytes)
        self.slots = np.ndarray((self.n_slots, *self.shape), np.uint8, buffer=shm.buf)
        self.free = list(range(self.n_slots))
        self.closed = False
        self.busy_s = 0.0
        self.trace = None
        self.waits = {"worker": 0.0, "gpu": 0.0}
        self._extradata = None
        ring = worker.ring_message()
        worker.conn.send(
            ("open_codec", ring, self.n_slots, width, height, channels, fps, codec, crf, preset, alpha, str(path))
        )
        worker.send_ring(ring)

    def gpu_slots(self):
        return None


def _ring_or_release(worker: _Worker, frame_bytes: int):
    """The worker's ring for frames of ``frame_bytes``; where none can be had (``rings.allocate``'s
    sentence), the worker's lock is given back, so the next render can use the worker."""
    try:
        return worker.ensure_shm(frame_bytes)
    except BaseException:
        worker.lock.release()
        raise


def wait_blocking(stream) -> None:
    """Wait for ``stream`` without spinning: a plain synchronize busy-waits a CPU core (CUDA's
    default when there are fewer contexts than cores), and with one thread per encoder those
    spins take the cores the encoders need. A blocking-sync event sleeps instead."""
    import torch

    ev = torch.cuda.Event(blocking=True)
    ev.record(stream)
    ev.synchronize()

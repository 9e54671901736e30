"""The worker process of ``x264_pool``: one libx264 (or delivery codec) encoder fed through a
shared-memory ring.

    python -m studio.core.media.x264_worker FD     # what ``x264_pool`` starts; serves socket FD

The parent sends ``open``/``open_codec`` (the ring's descriptor follows), then ``frame``/``frames``
(slot, pts) and ``flush``; the worker answers ``opened``, ``done`` per slot (with the packets, or
none when it writes them to its spill file as ``x264_pool.REC`` records), ``flushed`` and, for a
failure, ``error`` (then waits for the next open). ``aac`` encodes the writer's audio track.
"""

from __future__ import annotations

import os
import time
from fractions import Fraction

import numpy as np

from studio.core.env import get, get_int
from studio.core.media.hints import hints_available, video_hint
from studio.core.media.x264_pool import REC

_BT709, _RANGE_MPEG = 1, 1


def _worker_main(conn) -> None:  # noqa: C901 - one loop over the pool's message kinds

    import av

    shm = ctx = slots = spill = changing = convert = None

    def encode(frame):
        nonlocal busy
        t0 = time.perf_counter()
        pk = ctx.encode(frame)
        t1 = time.perf_counter()
        busy += t1 - t0
        if trace is not None and frame is not None:  # STUDIO_TRACE: arrival, encode start, end
            trace.append((frame.pts, t_msg, t0, t1))
        if spill is None:
            return _records(pk)
        for p in pk:
            data = bytes(p)
            spill.write(REC.pack(p.pts, p.dts, len(data), 1 if p.is_keyframe else 0) + data)
        return None

    def frame(slot, pts):
        if convert is not None:  # a delivery codec: RGB(A) converted here (codec_writer.open_codec_writer)
            from studio.core.media.codecs import to_video_frame

            vf = to_video_frame(av, slots[slot], convert[0], convert[1])
        else:
            vf = av.VideoFrame.from_numpy_buffer(slots[slot], format="nv12")
            vf.color_range, vf.colorspace = _RANGE_MPEG, _BT709
        vf.pts = pts
        if changing is not None:  # still but for these rectangles: x264 skips the rest
            video_hint(vf, changing)
        conn.send(("done", slot, encode(vf)))

    busy = 0.0
    trace: list | None = None
    t_msg = None
    try:
        while True:
            msg = conn.recv()
            t_msg = time.perf_counter()  # CLOCK_MONOTONIC: comparable with the parent's clock
            kind = msg[0]
            if kind == "exit":
                return
            try:
                if kind == "open_codec":  # ("open_codec", shm, n, width, height, channels, fps, codec, crf,
                    # preset, alpha, path): a delivery codec in this lane (codec_writer.CodecWriter)
                    from studio.core.media.codecs import configure, pix_fmt_of

                    name, n, width, height, channels, fps, codec, crf, preset, alpha, path = msg[1:12]
                    shm = _attach(conn, shm, name)  # first: its descriptor follows the message
                    if spill is not None:
                        spill.close()
                    spill = open(path, "wb") if path else None
                    slots = np.ndarray((n, height, width, channels), np.uint8, buffer=shm.buf)
                    changing = None
                    convert = ("rgba" if channels == 4 else "rgb24", pix_fmt_of(codec, alpha))
                    from studio.core.media.codecs import encoder_for
                    from studio.core.media.codecs import spec as codec_spec

                    ctx = av.CodecContext.create(encoder_for(codec, preset), "w")
                    if codec_spec(codec).container in ("mp4", "mov"):
                        ctx.flags |= av.codec.context.Flags.global_header
                    configure(ctx, codec, width, height, fps, crf, preset, alpha, 1)
                    ctx.open()
                    busy = 0.0
                    trace = None
                    conn.send(("opened", bytes(ctx.extradata or b"")))
                elif kind == "open":
                    convert = None
                    name, n, width, height, fps, crf, preset, path = msg[1:9]
                    changing = msg[9] if len(msg) > 9 and msg[9] and hints_available() else None
                    shm = _attach(conn, shm, name)  # first: its descriptor follows the message
                    if spill is not None:
                        spill.close()
                    spill = open(path, "wb") if path else None
                    slots = np.ndarray((n, height * 3 // 2, width), np.uint8, buffer=shm.buf)
                    from studio.core.media.encoders import x264_params

                    ctx = av.CodecContext.create("libx264", "w")
                    ctx.flags |= av.codec.context.Flags.global_header
                    ctx.width, ctx.height, ctx.pix_fmt = width, height, "nv12"
                    ctx.time_base = 1 / Fraction(fps)  # exact: fps may be 30000/1001
                    ctx.framerate = Fraction(fps)
                    ctx.color_primaries = ctx.color_trc = ctx.colorspace = _BT709
                    ctx.color_range = _RANGE_MPEG
                    ctx.thread_count = 1
                    ctx.options = {
                        "preset": str(preset),
                        "crf": str(crf),
                        "x264-params": x264_params(msg[11] if len(msg) > 11 else 0),
                        **({"mb_info": "1"} if changing is not None else {}),
                    }
                    ctx.open()
                    busy = 0.0
                    trace = [] if (msg[10] if len(msg) > 10 else get("STUDIO_TRACE")) else None
                    conn.send(("opened", bytes(ctx.extradata or b"")))
                elif kind == "aac":  # the writer's audio track, prepared while the video renders
                    from studio.core.media.encoders import encode_aac_file

                    t0 = time.perf_counter()
                    n, how = encode_aac_file(msg[1], msg[2], msg[3] if len(msg) > 3 else "")
                    conn.send(("aac_done", n, how, t0, time.perf_counter()))
                elif kind == "frame":
                    frame(msg[1], msg[2])
                elif kind == "frames":
                    for slot, pts in msg[1]:
                        frame(slot, pts)
                elif kind == "flush":
                    records = encode(None)
                    ctx = None
                    if spill is not None:
                        spill.close()  # flushed to the OS: the parent reads it next
                        spill = None
                    conn.send(("flushed", records, busy, trace))
            except Exception as exc:  # noqa: BLE001 - report and wait for the next open
                ctx = None
                where = getattr(exc, "filename", None) or (spill.name if spill is not None else None)
                if spill is not None:
                    try:  # closing flushes: on a full disk that fails too, and must not end the worker
                        spill.close()
                    except OSError:
                        pass
                    spill = None
                conn.send(("error", f"{type(exc).__name__}: {exc}", getattr(exc, "errno", None), where))
    except (EOFError, KeyboardInterrupt, OSError):
        return
    finally:
        if shm is not None:
            slots = None
            try:
                shm.close()
            except Exception:  # noqa: BLE001 - deliberate: any failure here is reported, not fatal
                pass


def _attach(conn, ring, described):
    """The parent's ring ``described`` (``(token, size, follows)``): ``ring`` when it is that one
    already, else the descriptor that follows the message, mapped here."""
    from studio.core.media import rings

    token, size, follows = described
    if not follows and ring is not None:
        return ring
    if ring is not None:
        ring.close()
    ring = rings.receive(conn, size, 1)
    ring.token = token
    return ring


def _records(packets) -> list:
    return [(bytes(p), p.pts, p.dts, bool(p.is_keyframe)) for p in packets]


NICE = 5  # encoder processes yield the CPU to the render thread that feeds them (STUDIO_X264_NICE)


def run_worker(fd: int) -> None:
    """Entry point of a worker process: serve the parent on socket ``fd`` until it exits.

    The worker lowers its priority: with one encoder per core, a render thread at the same
    priority waits for a time slice before each GPU launch, and the GPU (the encoders' only
    source of frames) idles meanwhile."""
    import contextlib
    import signal
    import sys
    from multiprocessing.connection import Connection

    from studio.core.signals import die_with_parent

    # Pooled workers outlive the thread that started them: no PDEATHSIG, the parent watch only
    # (a SIGKILL'd parent leaves no encoder behind, even one busy with a long job).
    die_with_parent(pdeathsig=False)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the parent stops us
    try:
        os.nice(get_int("STUDIO_X264_NICE", NICE))
    except (OSError, ValueError, AttributeError):
        pass

    _worker_main(Connection(fd))
    # The parent asked us to exit and everything is closed: skip the interpreter's teardown
    # (freeing every module's objects took 0.1-0.3 s, which a command's own exit then waited for).
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(0)


if __name__ == "__main__":
    import sys

    run_worker(int(sys.argv[1]))

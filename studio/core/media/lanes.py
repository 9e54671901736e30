"""The one chunked lane pipeline every video writer runs: the clip cut into chunks, each lane a thread
with a bounded queue taking its chunks in turn, the first failure of any lane raised once in the
caller's thread (a full disk as one sentence naming the folder), the streaming mux of spilled chunks,
abort and clean-up. A writer (``writer.VideoWriter``: H.264 through x264 or NVENC;
``codec_writer.CodecWriter``: HEVC, ProRes, DNxHR, VP9) is this pipeline plus its encoders:

    class Writer(LaneWriter):
        def _start(self):            # the container (``self._mux``), ``self._chunks``, first encoders
        def _open_chunk(self, ch):   # a lane reached chunk ``ch``: its encoder (and sink) ready
        def _accept(self, frames):   # the caller's frames as the lanes take them (host or CUDA)

Chunk ``k`` goes to lane ``k % window``; a chunk's packets go to ``ch.sink`` (the container for one
in-process encoder) or to its spill file (written by a worker process of ``x264_pool``, whose frames
cross in the shared-memory rings of ``rings``), appended to the file in order by the mux thread as
soon as the chunk and all before it are encoded. ``split`` and ``rolling_chunks`` cut a clip.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import logging
import os
import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from studio.core import env
from studio.core.errors import RenderError

log = logging.getLogger(__name__)

QUEUE_RUNS = 8  # runs waiting per lane of a parallel writer (a striped batch gives each lane a few frames)
TAIL_FRAMES = 24  # frames per chunk of a long clip's last generation (rolling_chunks)
ROLL_FRAMES = 125  # frames per rolling chunk at most (5 s: one IDR each, as x264's keyint 250 gives ~2 per 10 s)
SHM_SPILL_MAX = 2 << 30  # bytes: spill to RAM only while the estimate stays under this and 1/4 of its room


def disk_error(exc: OSError, path: Path) -> RenderError:
    """One sentence for a failed write, naming the folder that failed (a spill file's, from an
    encoder process, or the output's)."""
    where = Path(exc.filename).parent if isinstance(getattr(exc, "filename", None), str) else path.parent
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        why = "no space left on device" if exc.errno == errno.ENOSPC else "disk quota exceeded"
        return RenderError(
            f"The disk is full ({why} in {where}) while writing {path.name}: free some space and render again."
        )
    if exc.errno == errno.EPIPE:  # a pipe to an encoder process, not the disk
        return RenderError(f"An encoder process stopped while writing {path.name} ({exc}): render again.")
    return RenderError(f"Writing {path.name} failed ({exc.strerror or exc}, in {where}): check the output folder.")


def no_packets(pkt) -> None:  # sink of worker-spilled chunks: encoders return no packets
    raise AssertionError("a spilling encoder process returned a packet")


def split(total: int, n: int) -> list[tuple[int, int]]:
    """``n`` contiguous near-equal frame ranges covering ``0..total``."""
    edges = [round(total * k / n) for k in range(n + 1)]
    return [(edges[k], edges[k + 1]) for k in range(n)]


def rolling_chunks(total: int, lanes: int, max_frames: int = ROLL_FRAMES) -> list[tuple[int, int]]:
    """``lanes`` x g equal chunks of at most ``max_frames`` (g generations): a short clip gets one
    chunk per lane as before, a 10-minute clip 8 generations of 16 at 15,000 frames.

    A clip of several generations ends with one more generation of short chunks (``TAIL_FRAMES``
    each): the last generation is what is still to mux when the last frame arrives (the others
    were muxed while the render ran), so the work after the last frame stays that of a few
    hundred frames at any length (at 15,000 frames, 16 chunks of 117 frames took 0.125 s)."""
    total = int(total)
    gens = max(1, -(-total // (lanes * max_frames)))
    if gens == 1 or max_frames < 2 * TAIL_FRAMES:
        return split(total, lanes * gens)
    tail = lanes * TAIL_FRAMES
    body = total - tail
    gens = max(1, -(-body // (lanes * max_frames)))
    return split(body, lanes * gens) + [(body + s, body + e) for s, e in split(tail, lanes)]


@dataclass(eq=False)
class Chunk:
    """Frames ``start..end`` (``end`` None: open-ended) of the clip, encoded by one encoder."""

    k: int
    start: int
    end: int | None
    encoder: Any = None
    sink: Any = None  # where the encoder's packets go (None: the encoder spills them itself)
    spill: Path | None = None  # packets to mux (read back in order)
    next: int = -1  # the frame expected next
    done: threading.Event = field(default_factory=threading.Event)  # flushed: its spill file is complete
    muxed_at: float | None = None
    trace: Any = None

    def __post_init__(self) -> None:
        self.next = self.start


class Lane:
    """One encoder thread and its bounded queue of runs ``(chunk, frames, first, release, offset, event)``."""

    def __init__(self, j: int, depth: int):
        self.j = j
        self.idle_s = 0.0  # the lane's thread waiting for frames
        self.queue: queue.Queue = queue.Queue(depth)
        self.thread: threading.Thread | None = None
        self.trace: list = []


class LaneWriter:
    """The pipeline: feeding, lanes, the streaming mux, failure, close, abort and clean-up."""

    suffix = ".mp4"
    lane_depth = QUEUE_RUNS
    enc_width: int  # the encoded frame size (a subclass sets it before calling __init__)
    enc_height: int

    def __init__(self, path: Path, *, chunks, window, audio_source, write_hook, overwrite: bool, stream_mux=True):
        """Claims the output's temporary, opens ``audio_source()`` and calls ``_start``; on any failure
        everything made so far is removed. A subclass sets its own fields before calling this."""
        from studio.core.store.fsutil import atomic_output

        self.path = path
        self.overwrite = overwrite
        self.chunks = chunks
        self.window = max(1, min(int(window or len(chunks)), len(chunks)))
        self.frames_written = 0
        self.close_ms: dict[str, float] = {}  # close(): encoder tail, chunk join + audio, index + fsync
        self.spill_dir: Path | None = None  # the spilled chunks' folder (RAM or beside the output)
        self.trace: dict | None = None  # STUDIO_TRACE: filled at close (and written to that path)
        self._hook = write_hook
        self._stream_mux = stream_mux
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._done = False
        self._cursor = 0
        self._chunks: list[Chunk] = []
        self._starts: list[int] = []
        self._lanes: list[Lane] = []
        self._encoders: list = []  # every encoder opened (busy time; worker encoders are aborted on failure)
        self._workers: list = []  # leased x264_pool processes
        self._side_files: list[Path] = []  # registered temporaries beside the output
        self._mux: Any = None
        self._fh: Any = None
        self._mux_thread: threading.Thread | None = None
        self._tracing = bool(env.get("STUDIO_TRACE"))
        self._parent_trace: list = []
        self._opened = time.perf_counter()
        if not path.parent.is_dir():
            from studio.core.store.files import check_folder

            check_folder(path)  # raises the "does not exist" sentence
        self._atomic = atomic_output(path, suffix=self.suffix, overwrite=overwrite)
        try:
            self._tmp = self._atomic.__enter__().tmp  # left in close() (claim) or abort() (delete)
        except OSError as exc:
            raise RenderError(
                f"The output folder {path.parent} is not writable ({exc.strerror}): choose another folder."
            ) from exc
        self._audio: Any = None
        try:
            self._audio = audio_source()
            self._start()
            self._starts = [c.start for c in self._chunks]
            for j in range(self.window):
                lane = Lane(j, self.lane_depth)
                lane.thread = threading.Thread(target=self._run_lane, args=(lane,), daemon=True, name=f"encode-lane{j}")
                self._lanes.append(lane)
            for t in [lane.thread for lane in self._lanes]:
                if t is not None:
                    t.start()
            if self.spilled and self._stream_mux:
                self._mux_thread = threading.Thread(target=self._mux_chunks, daemon=True, name="encode-mux")
                self._mux_thread.start()
        except BaseException as exc:
            self._cleanup()
            with contextlib.suppress(BaseException):
                self._atomic.__exit__(type(exc), exc, None)  # the temporary goes too
            raise

    # ------------------------------------------------------------------ what a writer gives

    def _start(self) -> None:
        """Open the container (``self._fh``, ``self._mux``) and make ``self._chunks``."""
        raise NotImplementedError

    def _open_chunk(self, ch: Chunk) -> None:
        """A lane reached ``ch``: open its encoder unless open (and check its stream headers)."""
        raise NotImplementedError

    def _accept(self, frames):
        """The caller's frames as the lanes take them, and a CUDA event to wait for (or None)."""
        return frames, None

    def _prepare(self, lane: Lane, frame):
        """One host frame as ``ch.encoder.encode`` takes it (in the lane's thread)."""
        return frame

    def _encode(self, lane: Lane, ch: Chunk, frames, first: int, release, offset: int, event) -> None:
        """Encode one run of host frames (a writer with CUDA frames overrides it for those)."""
        for i in range(len(frames)):
            if self._stop.is_set():
                return
            for out in ch.encoder.encode(self._prepare(lane, frames[i]), first + i):
                ch.sink(out)
            if release is not None:
                release(offset + i)

    def _close_stats(self, t0: float) -> None:
        """The writer's own figures in ``close_ms``."""

    def failure_label(self) -> str:
        """What the failure sentence calls the encoder."""
        return "encoder"

    @property
    def spilled(self) -> bool:
        """Chunks spill their packets and the mux appends them (several lanes)."""
        return self.spill_dir is not None

    # ------------------------------------------------------------------ public API

    def __enter__(self):
        return self

    @property
    def workers(self) -> list:
        """The encoder processes leased to this writer (``x264_pool`` workers; empty in-process)."""
        return list(self._workers)

    def audio_ready(self, timeout: float | None = None) -> bool:
        """Wait until the audio track prepared beside the frames is complete (False: ``timeout``
        passed first); True at once without such a track."""
        return self._audio is None or not hasattr(self._audio, "wait_ready") or self._audio.wait_ready(timeout)

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    @property
    def audio_how(self) -> str:
        """How the audio track was made: "copied", "cached", "encoded" or "pcm"; "" for none."""
        return "" if self._audio is None else self._audio.how

    @property
    def chunks_muxed(self) -> int:
        """Chunks already appended to the file (the streaming mux runs while frames still arrive)."""
        return self._mux.chunks_muxed

    def write(self, frames, first_index: int | None = None, release=None, indices=None) -> None:
        """Queue frames for encoding (numpy or torch; each writer says which shapes it takes).

        ``first_index`` is the absolute index of ``frames[0]`` (None: right after the previous
        write); or ``indices`` gives every frame's index (runs of consecutive indices, e.g. a
        ``render.stripes`` batch spanning all chunks). Each chunk must receive its frames in
        order, and a lane's chunks one after the other; lanes may be fed in any order. The
        writer keeps the arrays until they are encoded: do not modify them after the call,
        unless ``release(k)`` is given: it is called (from an encoder thread) once frame ``k`` of
        this batch has been consumed, after which its memory may be reused.
        """
        self.raise_if_failed()
        if self._done:
            raise RenderError("This video writer is already closed.")
        n = len(frames)
        if indices is None:
            first = self._cursor if first_index is None else int(first_index)
            indices = range(first, first + n)
        elif len(indices) != n:
            raise ValueError(f"{len(indices)} indices for {n} frames")
        if n == 0:
            return
        frames, event = self._accept(frames)
        t_put = time.perf_counter() if self._tracing else None
        for ch, s, e, pos in self._runs(indices, n):  # one queue item per run of consecutive frames in a chunk
            self._put(self._lanes[ch.k % self.window], (ch, frames[s:e], pos, release, s, event))
            if t_put is not None:
                self._parent_trace.append((ch.k, pos, e - s, t_put))
        with self._lock:
            self._cursor = int(indices[n - 1]) + 1
            self.frames_written += n

    def close(self) -> str:
        """Finish the encoders, append the chunks not yet in, mux the audio, write the index,
        fsync and rename onto ``path``; returns the name written."""
        if self._done:
            return str(self.path)
        t0 = time.perf_counter()
        self._muxed_before = self._mux.chunks_muxed
        self._audio_waited = getattr(self._audio, "wait_s", 0.0)
        try:
            for lane in self._lanes:
                self._put(lane, None)
            for lane in self._lanes:
                if lane.thread is not None:
                    lane.thread.join()
            self.raise_if_failed()
            t1 = time.perf_counter()
            missing = [(c.next, c.end) for c in self._chunks if c.end is not None and c.next < c.end]
            if missing:
                n, e = missing[0]
                raise RenderError(f"Frames {n}..{e - 1} were never written, so the video is incomplete.")
            self._end_video()
            if self.spilled:
                if self._mux_thread is not None:
                    self._mux_thread.join()
                else:  # stream_mux=False: the join after the last frame
                    self._mux_chunks()
                self.raise_if_failed()
            self._mux.finish()
            t2 = time.perf_counter()
            self._fh.close()
            self._atomic.__exit__(None, None, None)  # fsync, then claim the name (or replace the target)
            self.path = self._atomic.final or self.path
            t3 = time.perf_counter()
            self.close_ms = {"flush": (t1 - t0) * 1e3, "join": (t2 - t1) * 1e3, "file": (t3 - t2) * 1e3}
            self.close_ms["encode_busy"] = sum(getattr(e, "busy_s", 0.0) for e in self._encoders) * 1e3
            if self.spill_dir is not None:
                from studio.core.media.rings import shm_dir

                self.close_ms["chunks"] = len(self._chunks)
                self.close_ms["chunks_left_at_close"] = len(self._chunks) - self._muxed_before
                self.close_ms["spill_in_ram"] = float(self.spill_dir.parent == shm_dir())
            self.close_ms["feed_idle"] = sum(lane.idle_s for lane in self._lanes) * 1e3
            self._close_stats(t0)
            if self._tracing:
                self._write_trace(t0)
        except BaseException as exc:
            self.abort()
            if isinstance(exc, OSError):
                raise disk_error(exc, self.path) from exc
            raise
        self._done = True
        self._cleanup()
        return str(self.path)

    def _end_video(self) -> None:
        """After the last frame is encoded, before the spilled chunks' join (an elementary stream's mux)."""

    def raise_if_failed(self) -> None:
        """Raise what stopped an encoder or the mux (one sentence: a full disk names the folder);
        the writer's own calls check it, and so does a thread that feeds it (``hostcopy``)."""
        exc = self._error
        if exc is None:
            return
        if isinstance(exc, OSError):
            raise disk_error(exc, self.path) from exc
        if isinstance(exc, RenderError):
            raise exc
        raise RenderError(f"The {self.failure_label()} failed ({type(exc).__name__}: {exc}).") from exc

    def abort(self) -> None:
        """Stop everything and delete the temporaries; an existing file at ``path`` stays untouched."""
        if self._done:
            return
        self._done = True
        self._stop.set()
        if self._audio is not None and hasattr(self._audio, "cancel"):
            self._audio.cancel.set()
        for lane in self._lanes:  # what is queued is dropped; the end marker stops the lane
            with contextlib.suppress(queue.Empty):
                while True:
                    lane.queue.get_nowait()
            with contextlib.suppress(queue.Full):
                lane.queue.put_nowait(None)
        me = threading.current_thread()
        for t in [lane.thread for lane in self._lanes] + [self._mux_thread]:
            if t is not None and t.is_alive() and t is not me:
                t.join()
        with contextlib.suppress(Exception):
            self._fh.close()  # first: closing the container must not write (or faststart) anything
        if self._mux is not None:
            self._mux.discard()
        self._cleanup()
        with contextlib.suppress(BaseException):
            self._atomic.__exit__(RenderError, RenderError("aborted"), None)  # deletes the temporary

    # ------------------------------------------------------------------ the pipeline

    def _chunk_of(self, index: int) -> Chunk:
        k = bisect.bisect_right(self._starts, index) - 1
        if k >= 0:
            ch = self._chunks[k]
            if ch.end is None or index < ch.end:
                return ch
        raise ValueError(f"frame {index} is outside the clip ({self.chunks[0][0]}..{self.chunks[-1][1]})")

    def _runs(self, indices, n: int):
        """``(chunk, s, e, first)`` for each run ``indices[s:e]`` of consecutive frames inside one chunk,
        each chunk's frames in order (a lane's chunks one after the other); advances each chunk's ``next``."""
        s = 0
        while s < n:
            pos = int(indices[s])
            ch = self._chunk_of(pos)
            if pos != ch.next:
                raise ValueError(f"chunk {ch.start}..{ch.end} expects frame {ch.next} next, got {pos}")
            self._check_turn(ch, pos)
            limit = n if ch.end is None else min(n, s + ch.end - pos)
            e = s + 1
            while e < limit and int(indices[e]) == pos + e - s:
                e += 1
            yield ch, s, e, pos
            ch.next = pos + e - s
            s = e

    def _check_turn(self, ch: Chunk, pos: int) -> None:
        """A lane takes its chunks one after the other: a chunk starts only once the lane's earlier
        chunks are complete."""
        if pos == ch.start and ch.k >= self.window:
            prev = self._chunks[ch.k - self.window]  # the lane's chunk before this one
            if any(c.end is not None and c.next < c.end for c in self._chunks[ch.k % self.window : ch.k : self.window]):
                raise ValueError(
                    f"chunk {prev.start}..{prev.end} must be complete before chunk "
                    f"{ch.start}..{ch.end} starts (one encoder takes them in turn)"
                )

    def _put(self, lane: Lane, item) -> None:
        """Queue ``item`` to ``lane``, waiting while it is full; a lane's failure is raised instead."""
        while True:
            self.raise_if_failed()
            try:
                lane.queue.put(item, timeout=0.2)
                return
            except queue.Full:
                continue

    def _fail(self, exc: BaseException) -> None:
        """A lane or the mux thread failed: keep the first failure, stop everything."""
        if self._error is None:
            self._error = exc
        self._stop.set()

    def _run_lane(self, lane: Lane) -> None:
        """One lane: its chunks in turn, each flushed (and handed to the mux) before the next opens."""
        cur = None
        try:
            while not self._stop.is_set():
                t0 = time.perf_counter()
                item = lane.queue.get()
                t_get = time.perf_counter()
                lane.idle_s += t_get - t0
                if item is None:
                    if cur is not None:
                        self._finish_chunk(cur)
                    return
                ch, frames, first = item[0], item[1], item[2]
                if ch is not cur:
                    if cur is not None:
                        self._finish_chunk(cur)
                    self._open_chunk(ch)
                    cur = ch
                self._encode(lane, *item)
                if self._tracing:
                    lane.trace.append((ch.k, first, len(frames), t0, t_get, time.perf_counter()))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            self._fail(exc)

    def _finish_chunk(self, ch: Chunk) -> None:
        from studio.core.media.encoders import PacketFile

        for out in ch.encoder.flush():
            ch.sink(out)
        if isinstance(ch.sink, PacketFile):
            ch.sink.close()
        if self._tracing and getattr(ch.encoder, "trace", None):
            ch.trace = ch.encoder.trace
        ch.done.set()

    def _mux_chunks(self) -> None:
        """Append the chunks to the file in order, each as soon as it and all before it are
        encoded (the mux thread; or ``close`` itself with ``stream_mux=False``)."""
        try:
            self._mux.append_chunks(self._chunks, self._stop)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            self._fail(exc)

    def _open_in_worker(self, ch: Chunk, make, *args, **kwargs) -> Any:
        """Chunk ``ch``'s encoder in its lane's leased worker process (``x264_pool``), which spills the
        packets itself: ``make(worker, enc_width, enc_height, *args, **kwargs)``, registered with the others."""
        ch.encoder = make(self._workers[ch.k % self.window], self.enc_width, self.enc_height, *args, **kwargs)
        ch.sink = no_packets  # the worker spills the packets itself
        self._encoders.append(ch.encoder)
        return ch.encoder

    def _make_spill_dir(self, estimate: int) -> Path:
        """A private folder for the chunks' packets (``estimate`` bytes spilled at once): in RAM
        (``/dev/shm``) when it fits (bounded), else beside the output; ``STUDIO_SPILL_DIR`` wins.
        Registered: removed even after a kill."""
        from studio.core.media.rings import shm_dir
        from studio.core.store.temps import temp_dir

        chosen = env.get("STUDIO_SPILL_DIR")
        root = Path(chosen) if chosen else self.path.parent
        shm = shm_dir()
        if not chosen and shm.is_dir() and os.access(shm, os.W_OK):
            with contextlib.suppress(OSError):
                st = os.statvfs(shm)
                if estimate <= min(SHM_SPILL_MAX, st.f_bavail * st.f_frsize // 4):
                    root = shm
        self.spill_dir = temp_dir(root, f".{self.path.stem}.", ".part.spill")
        for c in self._chunks:
            c.spill = self.spill_dir / f"chunk{c.k:05d}.rec"
        return self.spill_dir

    def _write_trace(self, t_close: float) -> None:
        """``STUDIO_TRACE``: per lane and chunk, when frames were handed over, taken by the lane
        thread, sent, received by the worker and encoded (``time.perf_counter`` seconds, one clock
        for all processes on Linux), and when each chunk was muxed."""
        import json

        self.trace = {
            "close_called": t_close,
            "window": self.window,
            "writes": [list(w) for w in self._parent_trace],  # chunk, first frame, frames, handed over
            "lanes": [[list(r) for r in lane.trace] for lane in self._lanes],  # chunk, first, n, wait, got, sent
            "chunks": [
                {
                    "k": c.k,
                    "start": c.start,
                    "end": c.end,
                    "muxed": c.muxed_at,
                    "frames": [list(f) for f in (c.trace or [])],
                }
                for c in self._chunks
            ],  # frames: pts, received, encode start, end
        }
        target = env.get("STUDIO_TRACE")
        try:
            Path(target).write_text(json.dumps(self.trace))
        except OSError as exc:
            log.warning("STUDIO_TRACE %s not written: %s", target, exc)

    def _cleanup(self) -> None:
        """Every temporary of the writer (spill folder, side files, leased workers), after close or abort."""
        from studio.core.store.temps import drop_temp

        for enc in self._encoders:  # an encoder stopped midway: its worker is restarted
            if hasattr(enc, "abort"):
                with contextlib.suppress(Exception):
                    enc.abort()
        if self._workers:
            from studio.core.media.x264_pool import release_workers

            release_workers(self)
        with contextlib.suppress(Exception):
            self._fh.close()
        for ch in self._chunks:
            with contextlib.suppress(Exception):
                if ch.sink is not None and hasattr(ch.sink, "close"):
                    ch.sink.close()
        for p in self._side_files:
            drop_temp(p)
        if self._audio is not None:
            with contextlib.suppress(Exception):
                self._audio.close()
        if self.spill_dir is not None:
            drop_temp(self.spill_dir)

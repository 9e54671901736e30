"""Streaming H.264 encoders with the original audio muxed as AAC, written atomically.

    with open_video("out.mp4", 1920, 1080, audio="voice.flac", total_frames=T) as w:
        for batch in batches:
            w.write(batch)            # RGB [B,H,W,3] or NV12 [B,H*3//2,W], numpy or torch
    # leaving the block without an error == w.close(); with an error (or Ctrl-C) == w.abort()

Encoders: "x264" (one libx264 encoder, auto threads), "x264-parallel" (the clip cut into contiguous
chunks, one single-threaded libx264 per chunk in a worker process (``x264_pool``), closed GOPs,
joined into ONE stream), "nvenc" (PyNvVideoCodec, where a session really opens; else libx264 and
the reason is recorded) and "auto". Nothing holds the clip in memory: queues are bounded (a full
queue blocks ``write``); the chunks' packets spill to temporary files beside the output (written by
the worker processes themselves) and ``close`` muxes them in order with the audio. The output is
H.264 yuv420p at exactly ``fps`` (frame t has pts t/fps), BT.709 limited range declared in the
stream, faststart MP4. The back-ends, spill files and the AAC source live in ``encoders``.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import queue
import threading
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

from studio.core.constants import FPS
from studio.core.errors import RenderError
from studio.core.fsutil import atomic_path, register_temp, release_temp
from studio.core.encoders import (  # noqa: F401 - probe_nvenc is part of this module's API
    BT709 as _BT709,
    ELEMENTARY,
    RANGE_MPEG as _RANGE_MPEG,
    AudioSource,
    HookedFile,
    PacketFile,
    RawFile,
    X264Encoder,
    configure_x264,
    probe_nvenc,
    read_packets,
)

log = logging.getLogger(__name__)

ENCODERS = ("auto", "x264", "x264-parallel", "nvenc")
X264_PRESETS = ("ultrafast", "superfast", "veryfast", "faster", "fast", "medium", "slow", "slower",
                "veryslow", "placebo")
MIN_PARALLEL_CHUNK = 24  # frames: auto picks parallel x264 only when every chunk gets at least this
MIN_CHUNK = 8  # frames: x264's reorder delay is only constant from 3 frames on (dts must join up)
QUEUE_BATCHES = 2  # batches waiting per chunk before write() blocks (one encoder)
QUEUE_RUNS = 8  # runs waiting per chunk of a parallel writer (a striped batch gives each chunk a few frames)


def open_video(path, width, height, *, audio=None, encoder="auto", crf=20, preset="veryfast",
               fps=FPS, total_frames=None, workers=None, write_hook=None) -> VideoWriter:
    """Open a streaming MP4 writer; checks the output folder and the audio before anything starts.

    ``width``/``height`` are the frame size the caller writes; odd sizes are padded to even.
    ``write_hook(nbytes)`` is called before every write to disk (tests inject ENOSPC through it).
    """
    if encoder not in ENCODERS:
        raise RenderError(f"Unknown encoder {encoder!r}: use one of {', '.join(ENCODERS)}.")
    if preset not in X264_PRESETS:
        raise RenderError(f"Unknown preset {preset!r}: use one of {', '.join(X264_PRESETS)}.")
    if not 0 <= crf <= 51:
        raise RenderError(f"CRF {crf} is out of range: use 0 (lossless) to 51 (smallest); 18-23 is typical.")
    if width < 2 or height < 2:
        raise RenderError(f"The video size {width}x{height} is too small to encode.")
    name, reason, chunks = _choose(encoder, total_frames, workers)
    return VideoWriter(Path(path), int(width), int(height), audio=audio, name=name, reason=reason,
                       chunks=chunks, crf=crf, preset=preset, fps=fps, write_hook=write_hook)


def check_output(path) -> Path:
    """Raise RenderError unless ``path``'s folder exists and accepts new files (nothing is left).

    The folder half of ``studio.core.outputs.check_output`` (which also refuses an output that is
    an input, a folder or a wrong extension)."""
    from studio.core.outputs import check_folder

    return check_folder(path)


class VideoWriter:
    """One output MP4. ``name``: the encoder used; ``reason``: why; ``chunks``: frame ranges."""

    def __init__(self, path: Path, width: int, height: int, *, audio, name: str, reason: str,
                 chunks: list[tuple[int, int]], crf: int, preset: str, fps: int, write_hook):
        self.path = path
        self.name = name
        self.reason = reason
        self.chunks = chunks
        self.width, self.height = width, height
        self.enc_width, self.enc_height = width + width % 2, height + height % 2
        self.fps = int(fps)
        self.frames_written = 0
        self.close_ms: dict[str, float] = {}  # close(): encoder tail, chunk join + audio, faststart + fsync
        self._crf, self._preset, self._hook = crf, preset, write_hook
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._done = False
        self._cursor = 0
        self._tmp_files: list[Path] = []
        self._proc_encoders: list = []
        self._gpu_slots = None  # per chunk: page-locked slot views, False when unavailable
        self._check_folder()
        self._audio = AudioSource(audio) if audio is not None else None
        try:
            self._start()
        except BaseException:
            self._cleanup()
            raise
        log.info("encoding %s with %s (%s), %d chunk(s)", path, name, reason, len(chunks))

    # ------------------------------------------------------------------ public API

    def __enter__(self) -> VideoWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None:
            self.close()
        else:
            self.abort()
        return False

    def write(self, frames, first_index: int | None = None, release=None, indices=None) -> None:
        """Queue frames for encoding: RGB [B,H,W,3] or NV12 [B,H*3//2,W] uint8, numpy or torch,
        or a list of per-frame numpy arrays (no stacking copy: a renderer's pinned slots).

        ``first_index`` is the absolute index of ``frames[0]`` (None: right after the previous
        write); or ``indices`` gives every frame's index (runs of consecutive indices, e.g. a
        ``render.stripes`` batch spanning all chunks). Each chunk must receive its frames in
        order; chunks may be fed in any order. The writer keeps the arrays until they are
        encoded: do not modify them after the call, unless ``release(k)`` is given: it is called
        (from an encoder thread) once frame ``k`` of this batch has been consumed, after which
        its memory may be reused.
        """
        self._raise_if_failed()
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
        event = None
        if isinstance(frames, (list, tuple)):
            for f in frames:
                self._check_frame(f)
        elif self._takes_gpu_frames(frames):
            frames, event = self._gpu_nv12(frames)
        else:
            frames = self._as_host_frames(frames)
        s = 0
        while s < n:  # one queue item per run of consecutive frames inside one chunk
            pos = int(indices[s])
            ch = self._chunk_of(pos)
            if pos != ch.next:
                raise ValueError(f"chunk {ch.start}..{ch.end} expects frame {ch.next} next, got {pos}")
            limit = n if ch.end is None else min(n, s + ch.end - pos)
            e = s + 1
            while e < limit and int(indices[e]) == pos + e - s:
                e += 1
            self._put(ch, (frames[s:e], pos, release, s, event))
            ch.next = pos + e - s
            s = e
        with self._lock:
            self._cursor = int(indices[n - 1]) + 1
            self.frames_written += n

    def takes_gpu_frames(self) -> bool:
        """Whether ``write`` takes CUDA tensors without a host round trip (parallel x264 workers
        with CUDA-registered slots)."""
        import torch

        probe = torch.empty(0, device="cuda") if torch.cuda.is_available() else None
        return probe is not None and self._takes_gpu_frames(probe)

    def _takes_gpu_frames(self, frames) -> bool:
        """CUDA frames go straight to the encoder processes' page-locked slots (one DMA each)."""
        if not (hasattr(frames, "is_cuda") and frames.is_cuda and self._proc_encoders):
            return False
        with self._lock:  # several render threads (one per GPU) may write at once
            if self._gpu_slots is None:
                slots = [enc.gpu_slots() for enc in self._proc_encoders]
                self._gpu_slots = slots if all(v is not None for v in slots) else False
                if os.environ.get("STUDIO_GPU_DIRECT", "1") == "0":
                    self._gpu_slots = False
        return bool(self._gpu_slots)

    def _gpu_nv12(self, frames):
        import torch

        from studio.core.composite import pad_even, rgb_to_nv12

        if frames.ndim == 4:
            frames = rgb_to_nv12(pad_even(frames))
        if tuple(frames.shape[1:]) != (self.enc_height * 3 // 2, self.enc_width) or frames.dtype != torch.uint8:
            raise ValueError(f"expected NV12 [B,{self.enc_height * 3 // 2},{self.enc_width}] uint8, got {tuple(frames.shape)}")
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(frames.device))
        return frames, event

    def _check_frame(self, f) -> None:
        if not isinstance(f, np.ndarray) or f.dtype != np.uint8 or f.shape not in (
            (self.enc_height * 3 // 2, self.enc_width), (self.height, self.width, 3), (self.enc_height, self.enc_width, 3)
        ):
            raise ValueError(f"expected NV12 [{self.enc_height * 3 // 2},{self.enc_width}] or RGB frames, "
                             f"got {getattr(f, 'shape', type(f))}")

    def close(self) -> str:
        """Finish the encoders, append the chunks, mux the audio, fsync and rename onto ``path``."""
        if self._done:
            return str(self.path)
        t0 = time.perf_counter()
        try:
            for ch in self._chunks:
                self._put(ch, None)
            for ch in self._chunks:
                ch.thread.join()
            self._raise_if_failed()
            t1 = time.perf_counter()
            missing = [(c.start, c.end, c.next) for c in self._chunks if c.end is not None and c.next < c.end]
            if missing:
                s, e, n = missing[0]
                raise RenderError(f"Frames {n}..{e - 1} were never written, so the video is incomplete.")
            if isinstance(self._chunks[0].sink, RawFile):
                self._chunks[0].sink.close()
                self._mux_annexb(self._chunks[0].sink.path)
            for ch in self._chunks:
                if ch.spill is not None:  # packets spilled by a worker or by PacketFile
                    if isinstance(ch.sink, PacketFile):
                        ch.sink.close()
                    for pkt in read_packets(ch.spill, self._vstream):
                        self._mux_video(pkt)
            self._finish_audio()
            t2 = time.perf_counter()
            self._container.close()
            self._fh.close()
            self._atomic.__exit__(None, None, None)  # fsync, then rename onto the target
            t3 = time.perf_counter()
            self.close_ms = {"flush": (t1 - t0) * 1e3, "join": (t2 - t1) * 1e3, "file": (t3 - t2) * 1e3}
            if self._proc_encoders:  # time inside x264, summed over the worker processes
                self.close_ms["x264_busy"] = sum(e.busy_s for e in self._proc_encoders) * 1e3
                for k in ("worker", "gpu"):
                    self.close_ms[f"feed_wait_{k}"] = sum(e.waits[k] for e in self._proc_encoders) * 1e3
            self.close_ms["feed_idle"] = sum(c.idle_s for c in self._chunks) * 1e3
        except BaseException as exc:
            self.abort()
            if isinstance(exc, OSError):
                raise _disk_error(exc, self.path) from exc
            raise
        self._done = True
        self._cleanup()
        return str(self.path)

    def abort(self) -> None:
        """Stop everything and delete the temporaries; an existing file at ``path`` stays untouched."""
        if self._done:
            return
        self._done = True
        self._stop.set()
        for ch in getattr(self, "_chunks", []):
            with contextlib.suppress(queue.Empty):
                while True:
                    ch.queue.get_nowait()
            with contextlib.suppress(queue.Full):
                ch.queue.put_nowait(None)
        for ch in getattr(self, "_chunks", []):
            if ch.thread.is_alive() and ch.thread is not threading.current_thread():
                ch.thread.join()
        with contextlib.suppress(Exception):
            self._fh.close()  # first: closing the container must not write (or faststart) anything
        with contextlib.suppress(Exception):
            self._container.close()
        self._cleanup()
        with contextlib.suppress(BaseException):
            self._atomic.__exit__(RenderError, RenderError("aborted"), None)  # deletes the temporary

    # ------------------------------------------------------------------ set-up

    def _check_folder(self) -> None:
        folder = self.path.parent
        if not folder.is_dir():
            check_output(self.path)  # raises the "does not exist" sentence
        self._atomic = atomic_path(self.path, suffix=".mp4")
        try:
            self._tmp = self._atomic.__enter__()  # left in close() (rename) or abort() (delete)
        except OSError as exc:
            raise RenderError(f"The output folder {folder} is not writable ({exc.strerror}): "
                              "choose another folder.") from exc
        self._tmp_files.append(self._tmp)

    def _start(self) -> None:
        self._fh = HookedFile(self._tmp, "wb+", self._hook)
        self._muxed_until = 0  # video frames muxed so far (drives the audio interleave)
        self._last_dts = -(1 << 62)
        self._chunks = []
        kind = self.name.split()[0]
        enc = None
        if kind in ELEMENTARY:
            try:
                enc = ELEMENTARY[kind](self.enc_width, self.enc_height, self.fps, self._crf, self._preset)
            except Exception as exc:  # the probe's session opened, this one did not (busy, size...)
                self.name = "libx264"
                self.reason = f"NVENC unavailable: {type(exc).__name__}: {exc}; using libx264"
                self.chunks = [self.chunks[0]]
        if enc is not None:
            # NVENC writes an Annex B elementary stream; close() muxes it with the audio.
            raw = register_temp(self._tmp.with_name(f"{self._tmp.name}.h264"))  # removed even after a kill
            self._tmp_files.append(raw)
            self._chunks.append(_Chunk(*self.chunks[0], enc, RawFile(raw, self._hook)))
        else:
            self._start_x264()
        for k, ch in enumerate(self._chunks):
            ch.thread = threading.Thread(target=self._encode_chunk, args=(ch,), daemon=True,
                                         name=f"encode-chunk{k}")
            ch.thread.start()

    def _open_container(self, template=None):
        import av

        self._container = av.open(self._fh, "w", format="mp4", options={"movflags": "+faststart"})
        if template is None:
            vs = self._container.add_stream("libx264", rate=Fraction(self.fps))
        else:
            vs = self._container.add_stream_from_template(template)
            vs.time_base = Fraction(1, self.fps * 512)
        cc = vs.codec_context
        cc.color_primaries = cc.color_trc = cc.colorspace = _BT709
        cc.color_range = _RANGE_MPEG
        self._vstream = vs
        if self._audio is not None:
            self._audio.add_stream(self._container)
        return vs

    def _start_x264(self) -> None:
        import av

        vs = self._open_container()
        parallel = len(self.chunks) > 1
        configure_x264(vs.codec_context, self.enc_width, self.enc_height, self.fps, self._crf,
                        self._preset, threads=1 if parallel else 0)
        self._container.start_encoding()
        procs = parallel and _use_processes()
        if procs:  # PyAV holds the GIL while x264 encodes: one process per chunk (x264_pool)
            from studio.core.x264_pool import ProcessEncoder, worker_pool

            workers = worker_pool(len(self.chunks))
            spills = [register_temp(self._tmp.with_name(f"{self._tmp.name}.chunk{k}")) for k in range(len(self.chunks))]
            self._tmp_files += spills
            self._proc_encoders = [  # all workers open their encoders at once; each writes its chunk's packets
                ProcessEncoder(w, self.enc_width, self.enc_height, self.fps, self._crf, self._preset, path=p)
                for w, p in zip(workers, spills)
            ]
        for k, (s, e) in enumerate(self.chunks):
            if procs:
                enc = self._proc_encoders[k]
                extradata = enc.extradata
            elif k == 0:
                ctx = vs.codec_context
                enc, extradata = X264Encoder(ctx), ctx.extradata
            else:
                ctx = av.CodecContext.create("libx264", "w")
                ctx.flags |= av.codec.context.Flags.global_header
                configure_x264(ctx, self.enc_width, self.enc_height, self.fps, self._crf,
                                self._preset, threads=1)
                ctx.open()
                enc, extradata = X264Encoder(ctx), ctx.extradata
            if bytes(extradata or b"") != bytes(vs.codec_context.extradata or b""):
                raise RenderError("The parallel x264 encoders disagree on stream headers: use --encoder x264.")
            if procs:  # the worker spills the packets; they are muxed at close
                sink, spill = _no_packets, spills[k]
            elif k == 0:
                sink, spill = self._mux_video, None
            else:
                spill = register_temp(self._tmp.with_name(f"{self._tmp.name}.chunk{k}"))
                self._tmp_files.append(spill)
                sink = PacketFile(spill, self._hook)
            ch = _Chunk(s, e, enc, sink, depth=QUEUE_RUNS if parallel else QUEUE_BATCHES)
            ch.spill = spill
            self._chunks.append(ch)

    def _mux_annexb(self, raw: Path) -> None:
        """Mux an H.264 Annex B file (no B-frames: decode order = display order) frame by frame."""
        import av

        with av.open(str(raw), format="h264", options={"framerate": str(self.fps)}) as src:
            self._open_container(src.streams.video[0])
            self._container.start_encoding()
            tb = Fraction(1, self.fps)
            for i, pkt in enumerate(p for p in src.demux(src.streams.video[0]) if p.size):
                pkt.pts = pkt.dts = i
                pkt.duration = 1
                pkt.time_base = tb
                self._mux_video(pkt)

    # ------------------------------------------------------------------ threads

    def _encode_chunk(self, ch: _Chunk) -> None:
        from studio.core.composite import pad_even, rgb_to_nv12

        buf = None  # one NV12 frame, reused (the encoders copy their input)
        stream = slots = None
        try:
            while not self._stop.is_set():
                t0 = time.perf_counter()
                item = ch.queue.get()
                ch.idle_s += time.perf_counter() - t0
                if item is None:
                    for out in ch.encoder.flush():
                        ch.sink(out)
                    return
                frames, first, release, offset, event = item
                if event is not None:  # CUDA NV12 frames: DMA each into a free slot of the worker
                    import torch

                    if stream is None:  # on the frames' GPU (a chunk is fed by one GPU)
                        stream = torch.cuda.Stream(device=frames.device)
                        slots = self._gpu_slots[self._chunks.index(ch)]
                    stream.wait_event(event)
                    with torch.cuda.device(frames.device), torch.cuda.stream(stream):
                        for out in ch.encoder.encode_gpu(frames, first, stream, slots):
                            ch.sink(out)
                    continue
                for i in range(len(frames)):
                    if self._stop.is_set():
                        return
                    frame = frames[i]
                    if frame.ndim == 3:  # RGB: convert here, in parallel with the other chunks
                        if buf is None:
                            buf = np.empty((1, self.enc_height * 3 // 2, self.enc_width), np.uint8)
                        frame = rgb_to_nv12(pad_even(frame[None]), out=buf)[0]
                    for out in ch.encoder.encode(frame, first + i):
                        ch.sink(out)
                    if release is not None:
                        release(offset + i)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            if self._error is None:
                self._error = exc
            self._stop.set()

    def _mux_video(self, pkt) -> None:
        pkt.stream = self._vstream
        if pkt.dts is not None:  # safety net where two chunks' reorder delays differ
            if pkt.dts <= self._last_dts < pkt.pts:
                pkt.dts = self._last_dts + 1
            self._last_dts = pkt.dts
        self._container.mux(pkt)
        if pkt.pts is not None:
            self._muxed_until = max(self._muxed_until, int(pkt.pts) + 1)
        if self._audio is not None:
            self._audio.mux_until(self._container, self._muxed_until / self.fps)

    def _finish_audio(self) -> None:
        if self._audio is not None:
            self._audio.mux_until(self._container, None)

    # ------------------------------------------------------------------ helpers

    def _as_host_frames(self, frames):
        if hasattr(frames, "detach"):  # torch
            if frames.ndim == 4 and frames.device.type != "cpu":
                from studio.core.composite import pad_even, rgb_to_nv12

                frames = rgb_to_nv12(pad_even(frames))  # on the GPU: 2x less to copy, no CPU work
            frames = frames.detach().cpu().numpy()
        frames = np.asarray(frames)
        if frames.dtype != np.uint8:
            raise ValueError(f"frames must be uint8, got {frames.dtype}")
        if frames.ndim == 4 and frames.shape[1:] in ((self.height, self.width, 3),
                                                     (self.enc_height, self.enc_width, 3)):
            return frames
        if frames.ndim == 3 and frames.shape[1:] == (self.enc_height * 3 // 2, self.enc_width):
            return frames
        raise ValueError(f"expected RGB [B,{self.height},{self.width},3] or NV12 "
                         f"[B,{self.enc_height * 3 // 2},{self.enc_width}], got {frames.shape}")

    def _chunk_of(self, index: int) -> _Chunk:
        for ch in self._chunks:
            if ch.start <= index and (ch.end is None or index < ch.end):
                return ch
        raise ValueError(f"frame {index} is outside the clip ({self.chunks[0][0]}..{self.chunks[-1][1]})")

    def _put(self, ch: _Chunk, item) -> None:
        while True:
            self._raise_if_failed()
            try:
                ch.queue.put(item, timeout=0.2)
                return
            except queue.Full:
                continue

    def _raise_if_failed(self) -> None:
        exc = self._error
        if exc is None:
            return
        if isinstance(exc, OSError):
            raise _disk_error(exc, self.path) from exc
        if isinstance(exc, RenderError):
            raise exc
        raise RenderError(f"The encoder failed ({type(exc).__name__}: {exc}).") from exc

    def _cleanup(self) -> None:
        for enc in self._proc_encoders:  # an encoder stopped midway: its worker is restarted
            with contextlib.suppress(Exception):
                enc.abort()
        with contextlib.suppress(Exception):
            self._fh.close()
        for ch in getattr(self, "_chunks", []):
            with contextlib.suppress(Exception):
                ch.sink.close()
        for p in self._tmp_files:
            if p != self.path:
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()
                release_temp(p)
        if self._audio is not None:
            self._audio.close()


# ---------------------------------------------------------------------- encoder choice


def _choose(encoder: str, total_frames: int | None, workers: int | None):
    cores = os.cpu_count() or 1
    workers = workers or int(os.environ.get("STUDIO_X264_WORKERS", "0")) or None  # parallel chunks (default: cores)
    whole = [(0, total_frames)]
    if encoder in ("auto", "nvenc"):
        ok, why = probe_nvenc()
        if ok:
            return "nvenc h264", f"{why}; NVENC asked" if encoder == "nvenc" else why, whole
        if encoder == "nvenc":
            return "libx264", f"NVENC unavailable: {why}; using libx264", whole
        n = _parallel_chunks(total_frames, workers or cores, MIN_PARALLEL_CHUNK)
        if cores >= 4 and n > 1:
            return (f"libx264 x{n} parallel", f"NVENC unavailable: {why}; {cores} cores, "
                    f"{total_frames} frames: parallel libx264", _split(total_frames, n))
        return "libx264", f"NVENC unavailable: {why}; using libx264", whole
    if encoder == "x264-parallel":
        if total_frames is None:
            return "libx264", "parallel x264 needs the frame count up front; using one libx264", whole
        n = _parallel_chunks(total_frames, workers or cores, MIN_CHUNK)
        if n > 1:
            return f"libx264 x{n} parallel", f"parallel libx264 as asked ({n} chunks)", _split(total_frames, n)
        return "libx264", "too few frames to split; using one libx264", whole
    return "libx264", "libx264 as asked", whole


def _use_processes() -> bool:
    """Parallel chunks run in worker processes unless STUDIO_X264_PROCESSES=0 (threads then)."""
    return os.environ.get("STUDIO_X264_PROCESSES", "1") != "0"


def _parallel_chunks(total: int | None, workers: int, min_chunk: int) -> int:
    if not total:
        return 1
    return max(1, min(int(workers), total // max(1, min_chunk)))


def _split(total: int, n: int) -> list[tuple[int, int]]:
    edges = [round(total * k / n) for k in range(n + 1)]
    return [(edges[k], edges[k + 1]) for k in range(n)]


def _disk_error(exc: OSError, path: Path) -> RenderError:
    """One sentence for a failed write, naming the folder that failed (a spill file's, from an
    encoder process, or the output's)."""
    where = Path(exc.filename).parent if isinstance(getattr(exc, "filename", None), str) else path.parent
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        why = "no space left on device" if exc.errno == errno.ENOSPC else "disk quota exceeded"
        return RenderError(f"The disk is full ({why} in {where}) while writing {path.name}: "
                           "free some space and render again.")
    if exc.errno == errno.EPIPE:  # a pipe to an encoder process, not the disk
        return RenderError(f"An encoder process stopped while writing {path.name} ({exc}): render again.")
    return RenderError(f"Writing {path.name} failed ({exc.strerror or exc}, in {where}): check the output folder.")


class _Chunk:
    def __init__(self, start, end, encoder, sink, depth=None):
        depth = depth or QUEUE_BATCHES
        self.start, self.end, self.next = start, end, start
        self.idle_s = 0.0  # the chunk's thread waiting for frames
        self.spill: Path | None = None  # packets to mux at close (read back in order)
        self.encoder, self.sink = encoder, sink
        self.queue: queue.Queue = queue.Queue(depth)
        self.thread: threading.Thread | None = None


def _no_packets(pkt) -> None:  # sink of worker-spilled chunks: encoders return no packets
    raise AssertionError("a spilling x264 worker returned a packet")

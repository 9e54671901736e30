"""Streaming H.264 encoders with the original audio muxed as AAC, written atomically.

    with open_video("out.mp4", 1920, 1080, audio="voice.flac", total_frames=T, rolling=True) as w:
        for idx in stripes(T, 64, w.chunks, window=w.window):
            w.write(batch, indices=idx)   # RGB [B,H,W,3] or NV12 [B,H*3//2,W], numpy or torch
    # leaving the block without an error == w.close(); with an error (or Ctrl-C) == w.abort()

Encoders: "x264" (one libx264 encoder, auto threads), "x264-parallel" (the clip cut into chunks,
each a closed-GOP segment encoded by a single-threaded libx264 in a worker process
(``x264_pool``), all in ONE stream), "nvenc" (PyNvVideoCodec, where a session really opens; else
libx264 and the reason is recorded) and "auto". Nothing holds the clip in memory: queues are
bounded (a full queue blocks ``write``).

Parallel writers run ``window`` lanes, one encoder process each. ``rolling=True`` cuts the clip
into rolling chunks of at most ``ROLL_FRAMES`` frames, lane ``j`` taking chunks ``j, j+window,
...`` in turn (the caller feeds the lanes' current chunks: ``render.stripes(..., window=)``);
otherwise there is one contiguous chunk per lane. Each chunk's packets spill to a file (written
by its worker process) in a private folder in RAM (``/dev/shm`` when it has room, else beside the
output); a mux thread appends each finished chunk to the MP4 as soon as every chunk before it is
in, then deletes its spill file. So with rolling chunks the work after the last frame is the last
window's packets plus the index, whatever the clip length. The audio is encoded to AAC by another
worker process while the video renders, and its packets are interleaved as the video is muxed.

The output is H.264 yuv420p at exactly ``fps`` (a Fraction: 30000/1001 at 29.97; frame t has pts t/fps), BT.709 limited range
declared in the stream; the index (``moov``) goes first, into space reserved for it when the
frame count is known (no rewrite of the file at the end), else by a faststart rewrite.
``STUDIO_TRACE=path.json`` writes per-frame arrival and encode times of every lane (see
``VideoWriter.trace``). The back-ends, spill files and the AAC source live in ``encoders``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import shutil
import threading
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

from studio.core.errors import RenderError
from studio.core.media.encoders import (
    ELEMENTARY,
    AudioSource,
    HookedFile,
    PacketFile,
    RawFile,
    X264Encoder,
    configure_x264,
    probe_nvenc,
)
from studio.core.media.lanes import LaneWriter, disk_error
from studio.core.media.mux import Muxer
from studio.core.media.rates import DEFAULT_RATE
from studio.core.media.rings import shm_dir
from studio.core.settings import DEFAULT_CRF, DEFAULT_ENCODER, DEFAULT_PRESET, ENCODERS, PRESETS
from studio.core.store.fsutil import atomic_output, register_temp, release_temp, temp_dir

log = logging.getLogger(__name__)

MIN_PARALLEL_CHUNK = 24  # frames: auto picks parallel x264 only when every chunk gets at least this
MIN_CHUNK = 8  # frames: x264's reorder delay is only constant from 3 frames on (dts must join up)
QUEUE_BATCHES = 2  # batches waiting per chunk before write() blocks (one encoder)
QUEUE_RUNS = 8  # runs waiting per lane of a parallel writer (a striped batch gives each lane a few frames)
TAIL_FRAMES = 24  # frames per chunk of a long clip's last generation (rolling_chunks)
ROLL_FRAMES = 125  # frames per rolling chunk at most (5 s: one IDR each, as x264's keyint 250 gives ~2 per 10 s)
SHM_SPILL_MAX = 2 << 30  # bytes: spill to RAM only while the estimate stays under this and 1/4 of its room
SPILL_RATIO = 16  # the estimate of a spilled frame: raw NV12 / 16 (ultrafast CRF 20 measured ~70:1)


def open_video(
    path,
    width,
    height,
    *,
    audio=None,
    encoder=DEFAULT_ENCODER,
    crf=DEFAULT_CRF,
    preset=DEFAULT_PRESET,
    fps=DEFAULT_RATE,
    total_frames=None,
    workers=None,
    write_hook=None,
    rolling=False,
    changing=None,
    overwrite=True,
    codec="h264",
    alpha=False,
):
    """Open a streaming MP4 writer; checks the output folder and the audio before anything starts.

    ``width``/``height`` are the frame size the caller writes; odd sizes are padded to even.
    ``write_hook(nbytes)`` is called before every write to disk (tests inject ENOSPC through it).
    ``rolling``: a parallel writer cuts the clip into rolling chunks (see the module docstring);
    the caller then feeds at most ``window`` chunks at a time, each lane's in order.
    ``changing=(x1, y1, x2, y2)``: only this box of the frame ever changes (a photo avatar's face),
    or a bool macroblock mask of what may change (``hints.changing_macroblocks``: a video avatar
    with a still backdrop); the parallel x264 workers then tell libx264 that the other
    macroblocks are unchanged (its ``mb_info``, FFmpeg's AVVideoHint), so it skips their analysis.
    ``overwrite=False``: an existing file at ``path`` is never replaced; the name is claimed when the
    MP4 is complete and a taken one gets the next number (``close()`` returns the name written).
    ``codec``: any other than h264 is written by ``codecs.CodecWriter`` (HEVC, ProRes, DNxHR, VP9; RGB
    or, with ``alpha``, RGBA frames); ``encoder`` then only refuses NVENC, which encodes H.264 alone.
    """
    if codec != "h264":
        from studio.core.media.codecs import open_codec_writer

        if encoder == "nvenc":
            raise RenderError(f"NVENC encodes H.264 only: use --encoder auto with --codec {codec}.")
        if preset not in PRESETS:
            raise RenderError(f"Unknown preset {preset!r}: use one of {', '.join(PRESETS)}.")
        return open_codec_writer(
            path,
            width,
            height,
            codec=codec,
            audio=audio,
            crf=crf,
            preset=preset,
            fps=fps,
            total_frames=total_frames,
            alpha=alpha,
            workers=workers,
            rolling=rolling,
            write_hook=write_hook,
            overwrite=overwrite,
        )
    if encoder not in ENCODERS:
        raise RenderError(f"Unknown encoder {encoder!r}: use one of {', '.join(ENCODERS)}.")
    if preset not in PRESETS:
        raise RenderError(f"Unknown preset {preset!r}: use one of {', '.join(PRESETS)}.")
    if not 0 <= crf <= 51:
        raise RenderError(f"CRF {crf} is out of range: use 0 (lossless) to 51 (smallest); 18-23 is typical.")
    if width < 2 or height < 2:
        raise RenderError(f"The video size {width}x{height} is too small to encode.")
    name, reason, chunks = _choose(encoder, total_frames, workers)
    window = len(chunks)
    if rolling and window > 1:
        chunks = rolling_chunks(total_frames, window)
    return VideoWriter(
        Path(path),
        int(width),
        int(height),
        audio=audio,
        name=name,
        reason=reason,
        chunks=chunks,
        crf=crf,
        preset=preset,
        fps=fps,
        write_hook=write_hook,
        window=window,
        changing=changing,
        overwrite=overwrite,
    )


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
        return _split(total, lanes * gens)
    tail = lanes * TAIL_FRAMES
    body = total - tail
    gens = max(1, -(-body // (lanes * max_frames)))
    return _split(body, lanes * gens) + [(body + s, body + e) for s, e in _split(tail, lanes)]


def check_output(path) -> Path:
    """Raise RenderError unless ``path``'s folder exists and accepts new files (nothing is left).

    The folder half of ``studio.core.render.outputs.check_output`` (which also refuses an output that is
    an input, a folder or a wrong extension)."""
    from studio.core.store.files import check_folder

    return check_folder(path)


class VideoWriter(LaneWriter):
    """One output MP4. ``name``: the encoder used; ``reason``: why; ``chunks``: frame ranges;
    ``window``: lanes (encoders) running at once; chunk ``k`` runs on lane ``k % window``."""

    def __init__(
        self,
        path: Path,
        width: int,
        height: int,
        *,
        audio,
        name: str,
        reason: str,
        chunks: list[tuple[int, int]],
        crf: int,
        preset: str,
        fps: int | Fraction,
        write_hook,
        window: int | None = None,
        stream_mux: bool = True,
        changing=None,
        overwrite: bool = True,
    ):
        """``stream_mux=False`` keeps every chunk's packets until ``close`` and joins them there
        (the behaviour before rolling chunks; tests compare the two). ``overwrite``: see ``open_video``."""
        self.path = path
        self.overwrite = overwrite
        self.name = name
        self.reason = reason
        self.chunks = chunks
        self.window = max(1, min(int(window or len(chunks)), len(chunks)))
        self.width, self.height = width, height
        self.enc_width, self.enc_height = width + width % 2, height + height % 2
        self.fps = Fraction(fps)
        self.frames_written = 0
        self.close_ms: dict[str, float] = {}  # close(): encoder tail, chunk join + audio, index + fsync
        self.spill_dir: Path | None = None  # the spilled chunks' folder (RAM or beside the output)
        self.trace: dict | None = None  # STUDIO_TRACE: filled at close (and written to that path)
        self._crf, self._preset, self._hook = crf, preset, write_hook
        self._stream_mux = stream_mux
        if os.environ.get("STUDIO_VIDEO_HINTS", "1") == "0":  # for comparisons: x264 analyses everything
            changing = None
        self.changing = _changing_rects(changing, width + width % 2, height + height % 2)  # ((x, y, w, h), ...)
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._done = False
        self._cursor = 0
        self._tmp_files: list[Path] = []
        self._proc_encoders: list = []  # every worker-process encoder this writer opened
        self._gpu_slots = None  # per lane: page-locked slot views, False when unavailable
        self._mux_thread: threading.Thread | None = None
        self._tracing = bool(os.environ.get("STUDIO_TRACE"))
        self._parent_trace: list = []
        self._opened = time.perf_counter()
        self._check_folder()
        self._audio = None
        try:
            self._audio = AudioSource(audio) if audio is not None else None
            self._start()
        except BaseException as exc:
            self._cleanup()
            with contextlib.suppress(BaseException):
                self._atomic.__exit__(type(exc), exc, None)  # the temporary MP4 goes too
            raise
        log.info(
            "encoding %s with %s (%s), %d chunk(s) on %d lane(s), spill %s",
            path,
            name,
            reason,
            len(chunks),
            self.window,
            self.spill_dir,
        )

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
        event = None
        if isinstance(frames, (list, tuple)):
            for f in frames:
                self._check_frame(f)
        elif self._takes_gpu_frames(frames):
            frames, event = self._gpu_nv12(frames)
        else:
            frames = self._as_host_frames(frames)
        t_put = time.perf_counter() if self._tracing else None
        for ch, s, e, pos in self._runs(indices, n):  # one queue item per run of consecutive frames in a chunk
            self._put(self._lanes[ch.k % self.window], (ch, frames[s:e], pos, release, s, event))
            if t_put is not None:
                self._parent_trace.append((ch.k, pos, e - s, t_put))
        with self._lock:
            self._cursor = int(indices[n - 1]) + 1
            self.frames_written += n

    @property
    def audio_how(self) -> str:
        """How the output's AAC track was made: "copied" (the voice-over's own AAC packets),
        "cached" (encoded by an earlier render of the same content) or "encoded"; "" for none."""
        return "" if self._audio is None else self._audio.how

    @property
    def chunks_muxed(self) -> int:
        """Chunks already appended to the MP4 (the streaming mux runs while frames still arrive)."""
        return self._mux.chunks_muxed

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
                slots = [self._chunks[j].encoder.gpu_slots() for j in range(self.window)]  # one ring per lane
                self._gpu_slots = slots if all(v is not None for v in slots) else False
                if os.environ.get("STUDIO_GPU_DIRECT", "1") == "0":
                    self._gpu_slots = False
        return bool(self._gpu_slots)

    def _gpu_nv12(self, frames):
        import torch

        from studio.core.media.pixels import pad_even, rgb_to_nv12

        if frames.ndim == 4:
            frames = rgb_to_nv12(pad_even(frames))
        if tuple(frames.shape[1:]) != (self.enc_height * 3 // 2, self.enc_width) or frames.dtype != torch.uint8:
            raise ValueError(
                f"expected NV12 [B,{self.enc_height * 3 // 2},{self.enc_width}] uint8, got {tuple(frames.shape)}"
            )
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(frames.device))
        return frames, event

    def _check_frame(self, f) -> None:
        if (
            not isinstance(f, np.ndarray)
            or f.dtype != np.uint8
            or f.shape
            not in (
                (self.enc_height * 3 // 2, self.enc_width),
                (self.height, self.width, 3),
                (self.enc_height, self.enc_width, 3),
            )
        ):
            raise ValueError(
                f"expected NV12 [{self.enc_height * 3 // 2},{self.enc_width}] or RGB frames, "
                f"got {getattr(f, 'shape', type(f))}"
            )

    def close(self) -> str:
        """Finish the encoders, append the chunks not yet in, mux the audio, write the index,
        fsync and rename onto ``path``."""
        if self._done:
            return str(self.path)
        t0 = time.perf_counter()
        muxed_before = self._mux.chunks_muxed
        audio_waited = self._audio.wait_s if self._audio is not None else 0.0
        try:
            for lane in self._lanes:
                self._put(lane, None)
            for lane in self._lanes:
                lane.thread.join()
            self.raise_if_failed()
            t1 = time.perf_counter()
            missing = [(c.start, c.end, c.next) for c in self._chunks if c.end is not None and c.next < c.end]
            if missing:
                s, e, n = missing[0]
                raise RenderError(f"Frames {n}..{e - 1} were never written, so the video is incomplete.")
            if isinstance(self._chunks[0].sink, RawFile):
                self._chunks[0].sink.close()
                self._mux.annexb(self._chunks[0].sink.path)
            if self._parallel:
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
            if self._parallel:
                self.close_ms["chunks"] = len(self._chunks)
                self.close_ms["chunks_left_at_close"] = len(self._chunks) - muxed_before
                self.close_ms["spill_in_ram"] = float(self.spill_dir.parent == shm_dir())
            if self._audio is not None:  # how long the mux waited for AAC packets; when the track was ready
                self.close_ms["audio_wait"] = self._audio.wait_s * 1e3
                self.close_ms["audio_wait_finish"] = (self._audio.wait_s - audio_waited) * 1e3
                if self._audio.ready_at is not None:
                    self.close_ms["audio_ready"] = (self._audio.ready_at - self._opened) * 1e3
                    self.close_ms["audio_after_close"] = max(0.0, self._audio.ready_at - t0) * 1e3
            if self._proc_encoders:  # time inside x264, summed over the worker processes
                self.close_ms["x264_busy"] = sum(e.busy_s for e in self._proc_encoders) * 1e3
                for k in ("worker", "gpu"):
                    self.close_ms[f"feed_wait_{k}"] = sum(e.waits[k] for e in self._proc_encoders) * 1e3
            self.close_ms["feed_idle"] = sum(lane.idle_s for lane in self._lanes) * 1e3
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

    # ------------------------------------------------------------------ set-up

    def _check_folder(self) -> None:
        folder = self.path.parent
        if not folder.is_dir():
            check_output(self.path)  # raises the "does not exist" sentence
        self._atomic = atomic_output(self.path, suffix=".mp4", overwrite=self.overwrite)
        try:
            self._tmp = self._atomic.__enter__().tmp  # left in close() (claim) or abort() (delete)
        except OSError as exc:
            raise RenderError(
                f"The output folder {folder} is not writable ({exc.strerror}): choose another folder."
            ) from exc
        self._tmp_files.append(self._tmp)

    def _start(self) -> None:
        self._fh = HookedFile(self._tmp, "wb+", self._hook)
        self._mux = Muxer(self._fh, self.fps, self.chunks[-1][1], self._audio)
        self._chunks = []
        self._lanes = []
        self._parallel = self._procs = False
        kind = self.name.split()[0]
        enc = None
        if kind in ELEMENTARY:
            try:
                enc = ELEMENTARY[kind](self.enc_width, self.enc_height, self.fps, self._crf, self._preset)
            except Exception as exc:  # noqa: BLE001 - the probe's session opened, this one did not (busy, size...)
                self.name = "libx264"
                self.reason = f"NVENC unavailable: {type(exc).__name__}: {exc}; using libx264"
                self.chunks, self.window = [(0, self.chunks[-1][1])], 1
        if enc is not None:
            # NVENC writes an Annex B elementary stream; close() muxes it with the audio.
            raw = self._tmp.with_name(f"{self._tmp.name}.h264")
            register_temp(raw)  # removed even after a kill
            self._tmp_files.append(raw)
            self.chunks, self.window = [(0, self.chunks[-1][1])], 1
            self._chunks.append(_Chunk(0, *self.chunks[0], enc, RawFile(raw, self._hook)))
        else:
            self._start_x264()
        self._starts = [c.start for c in self._chunks]
        for j in range(self.window):
            lane = _Lane(j, QUEUE_RUNS if self._parallel else QUEUE_BATCHES)
            lane.thread = threading.Thread(target=self._encode_lane, args=(lane,), daemon=True, name=f"encode-lane{j}")
            self._lanes.append(lane)
        for lane in self._lanes:
            lane.thread.start()
        if self._parallel and self._stream_mux:
            self._mux_thread = threading.Thread(target=self._mux_chunks, daemon=True, name="encode-mux")
            self._mux_thread.start()

    def _start_x264(self) -> None:
        vs = self._mux.open()
        parallel = self._parallel = len(self.chunks) > 1
        configure_x264(
            vs.codec_context,
            self.enc_width,
            self.enc_height,
            self.fps,
            self._crf,
            self._preset,
            threads=1 if parallel else 0,
        )
        self._mux.start()
        self._headers = bytes(vs.codec_context.extradata or b"")
        self._procs = parallel and _use_processes()
        if parallel:
            self.spill_dir = self._make_spill_dir()
        for k, (s, e) in enumerate(self.chunks):
            ch = _Chunk(k, s, e, None, None)
            if parallel:
                ch.spill = self.spill_dir / f"chunk{k:05d}.rec"
            self._chunks.append(ch)
        if self._procs:  # PyAV holds the GIL while x264 encodes: one process per lane (x264_pool)
            from studio.core.media.x264_pool import audio_worker, lease_workers

            self._workers = lease_workers(self.window, self)  # not another writer's (pipelined jobs)
            for ch in self._chunks[: self.window]:  # the first encoders open at once; their headers are
                self._open_encoder(ch, check=False)  # checked by the lanes: no wait here for the workers'
                # start-up, which overlaps the engine's loading and the first batches instead
            if self._audio is not None and not self._audio.copy:  # the AAC is prepared by another process meanwhile
                self._audio.encode_elsewhere(audio_worker(), self.spill_dir / "audio.rec")
        elif not parallel:
            self._chunks[0].encoder = X264Encoder(vs.codec_context)
            self._chunks[0].sink = self._mux.video

    def _make_spill_dir(self) -> Path:
        """A private folder for the chunks' packets: in RAM (``/dev/shm``) when the estimate of
        what is spilled at once fits (bounded), else beside the output; ``STUDIO_SPILL_DIR`` wins."""
        env = os.environ.get("STUDIO_SPILL_DIR")
        longest = max(e - s for s, e in self.chunks)
        frames = min(self.chunks[-1][1], 2 * self.window * longest)  # a window encoding, one being muxed
        estimate = frames * self.enc_width * self.enc_height * 3 // 2 // SPILL_RATIO
        root = Path(env) if env else self.path.parent
        shm = shm_dir()
        if not env and shm.is_dir() and os.access(shm, os.W_OK):
            with contextlib.suppress(OSError):
                st = os.statvfs(shm)
                if estimate <= min(SHM_SPILL_MAX, st.f_bavail * st.f_frsize // 4):
                    root = shm
        return temp_dir(root, f".{self.path.stem}.", ".part.spill")  # registered: removed even after a kill

    def _open_encoder(self, ch: _Chunk, check: bool = True) -> None:
        """Chunk ``ch``'s encoder and sink (called for the first window at open, then by its lane)."""
        import av

        if self._procs:
            from studio.core.media.x264_pool import ProcessEncoder

            ch.encoder = ProcessEncoder(
                self._workers[ch.k % self.window],
                self.enc_width,
                self.enc_height,
                self.fps,
                self._crf,
                self._preset,
                path=ch.spill,
                changing=self.changing,
            )
            self._proc_encoders.append(ch.encoder)
            ch.sink = _no_packets  # the worker spills the packets itself
            if check:
                self._check_headers(ch.encoder.extradata)
            return
        ctx = av.CodecContext.create("libx264", "w")
        ctx.flags |= av.codec.context.Flags.global_header
        configure_x264(ctx, self.enc_width, self.enc_height, self.fps, self._crf, self._preset, threads=1)
        ctx.open()
        self._check_headers(ctx.extradata)
        ch.encoder, ch.sink = X264Encoder(ctx), PacketFile(ch.spill, self._hook)

    def _check_headers(self, extradata) -> None:
        if bytes(extradata or b"") != self._headers:
            raise RenderError("The parallel x264 encoders disagree on stream headers: use --encoder x264.")

    # ------------------------------------------------------------------ threads

    def _encode_lane(self, lane: _Lane) -> None:
        """One lane: its chunks in turn, each flushed (and handed to the mux) before the next opens."""
        from studio.core.media.pixels import pad_even, rgb_to_nv12

        buf = None  # one NV12 frame, reused (the encoders copy their input)
        stream = None
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
                ch, frames, first, release, offset, event = item
                if ch is not cur:
                    if cur is not None:
                        self._finish_chunk(cur)
                    if ch.encoder is None:
                        self._open_encoder(ch)
                    elif self._procs:  # opened at start: its headers come with the worker's answer
                        self._check_headers(ch.encoder.extradata)
                    cur = ch
                if event is not None:  # CUDA NV12 frames: DMA each into a free slot of the worker
                    import torch

                    if stream is None:  # on the frames' GPU (a lane is fed by one GPU)
                        stream = torch.cuda.Stream(device=frames.device)
                    stream.wait_event(event)
                    with torch.cuda.device(frames.device), torch.cuda.stream(stream):
                        for out in ch.encoder.encode_gpu(frames, first, stream, self._gpu_slots[lane.j]):
                            ch.sink(out)
                else:
                    for i in range(len(frames)):
                        if self._stop.is_set():
                            return
                        frame = frames[i]
                        if frame.ndim == 3:  # RGB: convert here, in parallel with the other lanes
                            if buf is None:
                                buf = np.empty((1, self.enc_height * 3 // 2, self.enc_width), np.uint8)
                            frame = rgb_to_nv12(pad_even(frame[None]), out=buf)[0]
                        for out in ch.encoder.encode(frame, first + i):
                            ch.sink(out)
                        if release is not None:
                            release(offset + i)
                if self._tracing:
                    lane.trace.append((ch.k, first, len(frames), t0, t_get, time.perf_counter()))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            self._fail(exc)

    def _finish_chunk(self, ch: _Chunk) -> None:
        for out in ch.encoder.flush():
            ch.sink(out)
        if isinstance(ch.sink, PacketFile):
            ch.sink.close()
        if self._tracing and getattr(ch.encoder, "trace", None):
            ch.trace = ch.encoder.trace
        ch.done.set()

    def _mux_chunks(self) -> None:
        """Append the chunks to the MP4 in order, each as soon as it and all before it are
        encoded (the mux thread; or ``close`` itself with ``stream_mux=False``)."""
        try:
            self._mux.append_chunks(self._chunks, self._stop)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            self._fail(exc)

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
                }  # pts, received, encode start, end
                for c in self._chunks
            ],
        }
        target = os.environ.get("STUDIO_TRACE")
        try:
            Path(target).write_text(json.dumps(self.trace))
        except OSError as exc:
            log.warning("STUDIO_TRACE %s not written: %s", target, exc)

    # ------------------------------------------------------------------ helpers

    def _as_host_frames(self, frames):
        if hasattr(frames, "detach"):  # torch
            if frames.ndim == 4 and frames.device.type != "cpu":
                from studio.core.media.pixels import pad_even, rgb_to_nv12

                frames = rgb_to_nv12(pad_even(frames))  # on the GPU: 2x less to copy, no CPU work
            frames = frames.detach().cpu().numpy()
        frames = np.asarray(frames)
        if frames.dtype != np.uint8:
            raise ValueError(f"frames must be uint8, got {frames.dtype}")
        if frames.ndim == 4 and frames.shape[1:] in (
            (self.height, self.width, 3),
            (self.enc_height, self.enc_width, 3),
        ):
            return frames
        if frames.ndim == 3 and frames.shape[1:] == (self.enc_height * 3 // 2, self.enc_width):
            return frames
        raise ValueError(
            f"expected RGB [B,{self.height},{self.width},3] or NV12 "
            f"[B,{self.enc_height * 3 // 2},{self.enc_width}], got {frames.shape}"
        )

    def _check_run(self, ch, pos: int) -> None:
        """A lane takes its chunks one after the other: a chunk starts only once the lane's earlier
        chunks are complete."""
        if pos == ch.start and ch.k >= self.window:
            prev = self._chunks[ch.k - self.window]  # the lane's chunk before this one
            if prev.next < prev.end or any(
                self._chunks[j].next < self._chunks[j].end for j in range(ch.k % self.window, ch.k, self.window)
            ):
                raise ValueError(
                    f"chunk {prev.start}..{prev.end} must be complete before chunk "
                    f"{ch.start}..{ch.end} starts (one encoder takes them in turn)"
                )

    def _cleanup(self) -> None:
        for enc in self._proc_encoders:  # an encoder stopped midway: its worker is restarted
            with contextlib.suppress(Exception):
                enc.abort()
        if getattr(self, "_workers", None):
            from studio.core.media.x264_pool import release_workers

            release_workers(self)
        with contextlib.suppress(Exception):
            self._fh.close()
        for ch in getattr(self, "_chunks", []):
            with contextlib.suppress(Exception):
                if ch.sink is not None and hasattr(ch.sink, "close"):
                    ch.sink.close()
        for p in self._tmp_files:
            if p != self.path:
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()
                if p != self._tmp:  # the MP4's own is atomic_path's
                    release_temp(p)
        if self._audio is not None:
            self._audio.close()
        if self.spill_dir is not None:
            shutil.rmtree(self.spill_dir, ignore_errors=True)
            release_temp(self.spill_dir)


# ---------------------------------------------------------------------- encoder choice


def _choose(encoder: str, total_frames: int | None, workers: int | None):
    cores = os.cpu_count() or 1
    from studio.core import env

    workers = workers or env.get_int("STUDIO_X264_WORKERS") or None  # parallel chunks (default: cores)
    whole = [(0, total_frames)]
    if encoder in ("auto", "nvenc"):
        ok, why = probe_nvenc()
        if ok:
            return "nvenc h264", f"{why}; NVENC asked" if encoder == "nvenc" else why, whole
        if encoder == "nvenc":
            return "libx264", f"NVENC unavailable: {why}; using libx264", whole
        n = _parallel_chunks(total_frames, workers or cores, MIN_PARALLEL_CHUNK)
        if cores >= 4 and n > 1:
            return (
                f"libx264 x{n} parallel",
                f"NVENC unavailable: {why}; {cores} cores, {total_frames} frames: parallel libx264",
                _split(total_frames, n),
            )
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


def _changing_rects(changing, width: int, height: int):
    """The writer's video hints as pixel rectangles ``((x, y, w, h), ...)`` that may change (the
    rest of every frame is the previous frame's): from a box ``(x1, y1, x2, y2)`` (a photo's
    face) or a bool macroblock mask (``hints.changing_macroblocks``); None for no hints."""
    if changing is None:
        return None
    arr = np.asarray(changing)
    if arr.ndim == 2 and arr.dtype == bool:
        from studio.core.media.hints import mask_rects

        rects = mask_rects(arr, width, height)
        return tuple(rects) if rects else None
    rect = _mb_rect(changing, width, height)
    return None if rect is None else (rect,)


def _mb_rect(box, width: int, height: int):
    """``box`` (x1, y1, x2, y2) grown by one macroblock and aligned to the 16-pixel grid, as
    (x, y, w, h) inside the frame; None for no box."""
    if box is None:
        return None
    x1, y1, x2, y2 = (float(v) for v in box)
    x = max(0, int(x1) // 16 * 16 - 16)
    y = max(0, int(y1) // 16 * 16 - 16)
    xe = min(width, -(-int(np.ceil(x2)) // 16) * 16 + 16)
    ye = min(height, -(-int(np.ceil(y2)) // 16) * 16 + 16)
    return (x, y, xe - x, ye - y) if xe > x and ye > y else None


def _split(total: int, n: int) -> list[tuple[int, int]]:
    edges = [round(total * k / n) for k in range(n + 1)]
    return [(edges[k], edges[k + 1]) for k in range(n)]


class _Chunk:
    def __init__(self, k, start, end, encoder, sink):
        self.k = k
        self.start, self.end, self.next = start, end, start
        self.spill: Path | None = None  # packets to mux (read back in order)
        self.encoder, self.sink = encoder, sink
        self.done = threading.Event()  # flushed: its spill file is complete
        self.muxed_at: float | None = None
        self.trace = None


class _Lane:
    def __init__(self, j: int, depth: int):
        self.j = j
        self.idle_s = 0.0  # the lane's thread waiting for frames
        self.queue: queue.Queue = queue.Queue(depth)
        self.thread: threading.Thread | None = None
        self.trace: list = []


def _no_packets(pkt) -> None:  # sink of worker-spilled chunks: encoders return no packets
    raise AssertionError("a spilling x264 worker returned a packet")

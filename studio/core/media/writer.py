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

import logging
import os
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from studio.core import env
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
from studio.core.media.lanes import Chunk, Lane, LaneWriter, rolling_chunks, split
from studio.core.media.mux import Muxer
from studio.core.media.rates import DEFAULT_RATE
from studio.core.settings import DEFAULT_CRF, DEFAULT_ENCODER, DEFAULT_PRESET, ENCODERS, PRESETS
from studio.core.store.temps import register_temp

log = logging.getLogger(__name__)
__all__ = ["VideoWriter", "check_output", "open_video", "probe_nvenc", "rolling_chunks"]

MIN_PARALLEL_CHUNK = 24  # frames: auto picks parallel x264 only when every chunk gets at least this
MIN_CHUNK = 8  # frames: x264's reorder delay is only constant from 3 frames on (dts must join up)
QUEUE_BATCHES = 2  # batches waiting per chunk before write() blocks (one encoder)
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
    scan="progressive",
    gop=0,
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
    ``codec``: any other than h264 is written by ``codec_writer.CodecWriter`` (HEVC, ProRes, DNxHR, VP9; RGB
    or, with ``alpha``, RGBA frames); ``encoder`` then only refuses NVENC, which encodes H.264 alone.
    ``gop``: H.264 gets a keyframe (a closed GOP's start) at least every ``gop`` frames (0: the encoder's own).
    """
    if codec != "h264":
        from studio.core.media.codec_writer import open_codec_writer

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
            scan=scan,
        )
    if scan != "progressive":
        raise RenderError("Interlaced frames are written by --codec xdcam-hd422 or avc-intra-100, not h264.")
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
        gop=gop,
    )


def check_output(path) -> Path:
    """Raise RenderError unless ``path``'s folder exists and accepts new files (nothing is left).

    The folder half of ``studio.core.render.outputs.check_output`` (which also refuses an output that is
    an input, a folder or a wrong extension)."""
    from studio.core.store.files import check_folder

    return check_folder(path)


class VideoWriter(LaneWriter):
    """One output MP4: the lane pipeline (``lanes``) with H.264 encoders. ``name``: the encoder used;
    ``reason``: why; ``chunks``: frame ranges; ``window``: lanes (encoders) running at once; chunk
    ``k`` runs on lane ``k % window``."""

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
        gop: int = 0,
    ):
        """``stream_mux=False`` keeps every chunk's packets until ``close`` and joins them there
        (the behaviour before rolling chunks; tests compare the two). ``overwrite``: see ``open_video``."""
        self.name = name
        self.reason = reason
        self.width, self.height = width, height
        self.enc_width, self.enc_height = width + width % 2, height + height % 2
        self.fps = Fraction(fps)
        self._crf, self._preset, self._gop = crf, preset, int(gop or 0)
        if not env.flag("STUDIO_VIDEO_HINTS"):  # for comparisons: x264 analyses everything
            changing = None
        self.changing = _changing_rects(changing, self.enc_width, self.enc_height)  # ((x, y, w, h), ...)
        self._procs = False  # parallel chunks in x264_pool worker processes
        self._gpu_slots: Any = None  # per lane: page-locked slot views, False when unavailable
        self._bufs: dict[int, np.ndarray] = {}  # per lane: one NV12 frame, reused (the encoders copy their input)
        self._streams: dict[int, Any] = {}  # per lane: the CUDA stream of its copies
        super().__init__(
            path,
            chunks=chunks,
            window=window,
            audio_source=lambda: AudioSource(audio) if audio is not None else None,
            write_hook=write_hook,
            overwrite=overwrite,
            stream_mux=stream_mux,
        )
        log.info(
            "encoding %s with %s (%s), %d chunk(s) on %d lane(s), spill %s",
            path,
            self.name,
            self.reason,
            len(self.chunks),
            self.window,
            self.spill_dir,
        )

    def takes_gpu_frames(self) -> bool:
        """Whether ``write`` takes CUDA tensors without a host round trip (parallel x264 workers
        with CUDA-registered slots)."""
        import torch

        probe = torch.empty(0, device="cuda") if torch.cuda.is_available() else None
        return probe is not None and self._takes_gpu_frames(probe)

    def _takes_gpu_frames(self, frames) -> bool:
        """CUDA frames go straight to the encoder processes' page-locked slots (one DMA each)."""
        if not (hasattr(frames, "is_cuda") and frames.is_cuda and self._procs):
            return False
        with self._lock:  # several render threads (one per GPU) may write at once
            if self._gpu_slots is None:
                slots = [self._chunks[j].encoder.gpu_slots() for j in range(self.window)]  # one ring per lane
                self._gpu_slots = slots if all(v is not None for v in slots) else False
                if not env.flag("STUDIO_GPU_DIRECT"):
                    self._gpu_slots = False
        return bool(self._gpu_slots)

    def _accept(self, frames):
        """RGB [B,H,W,3] or NV12 [B,H*3//2,W] uint8, numpy or torch, or a list of per-frame numpy
        arrays (no stacking copy: a renderer's pinned slots)."""
        if isinstance(frames, (list, tuple)):
            for f in frames:
                self._check_frame(f)
            return frames, None
        if self._takes_gpu_frames(frames):
            return self._gpu_nv12(frames)
        return self._as_host_frames(frames), None

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

    def _end_video(self) -> None:
        if isinstance(self._chunks[0].sink, RawFile):  # NVENC's elementary stream, muxed now
            self._chunks[0].sink.close()
            self._mux.annexb(self._chunks[0].sink.path)

    def _close_stats(self, t0: float) -> None:
        if self._audio is not None:  # how long the mux waited for AAC packets; when the track was ready
            self.close_ms["audio_wait"] = self._audio.wait_s * 1e3
            self.close_ms["audio_wait_finish"] = (self._audio.wait_s - self._audio_waited) * 1e3
            if self._audio.ready_at is not None:
                self.close_ms["audio_ready"] = (self._audio.ready_at - self._opened) * 1e3
                self.close_ms["audio_after_close"] = max(0.0, self._audio.ready_at - t0) * 1e3
        if self._procs:  # time inside x264, summed over the worker processes
            self.close_ms["x264_busy"] = self.close_ms["encode_busy"]
            for k in ("worker", "gpu"):
                self.close_ms[f"feed_wait_{k}"] = sum(e.waits[k] for e in self._encoders) * 1e3

    # ------------------------------------------------------------------ set-up

    def _start(self) -> None:
        self._fh = HookedFile(self._tmp, "wb+", self._hook)
        self._mux = Muxer(self._fh, self.fps, self.chunks[-1][1], self._audio)
        kind = self.name.split()[0]
        enc = None
        if kind in ELEMENTARY:
            try:
                enc = ELEMENTARY[kind](self.enc_width, self.enc_height, self.fps, self._crf, self._preset, self._gop)
            except Exception as exc:  # noqa: BLE001 - the probe's session opened, this one did not (busy, size...)
                self.name = "libx264"
                self.reason = f"NVENC unavailable: {type(exc).__name__}: {exc}; using libx264"
                self.chunks, self.window = [(0, self.chunks[-1][1])], 1
        if enc is not None:
            # NVENC writes an Annex B elementary stream; close() muxes it with the audio.
            raw = self._tmp.with_name(f"{self._tmp.name}.h264")
            register_temp(raw)  # removed even after a kill
            self._side_files.append(raw)
            self.chunks, self.window = [(0, self.chunks[-1][1])], 1
            start, end = self.chunks[0]
            self._chunks.append(Chunk(0, start, end, encoder=enc, sink=RawFile(raw, self._hook)))
            self.lane_depth = QUEUE_BATCHES
        else:
            self._start_x264()

    def _start_x264(self) -> None:
        vs = self._mux.open()
        parallel = len(self.chunks) > 1
        configure_x264(
            vs.codec_context,
            self.enc_width,
            self.enc_height,
            self.fps,
            self._crf,
            self._preset,
            threads=1 if parallel else 0,
            gop=self._gop,
        )
        self._mux.start()
        self._headers = bytes(vs.codec_context.extradata or b"")
        self._procs = parallel and env.flag("STUDIO_X264_PROCESSES")
        self._chunks = [Chunk(k, s, e) for k, (s, e) in enumerate(self.chunks)]
        if not parallel:
            self._chunks[0].encoder = X264Encoder(vs.codec_context)
            self._chunks[0].sink = self._mux.video
            self.lane_depth = QUEUE_BATCHES
            return
        longest = max(e - s for s, e in self.chunks)
        frames = min(self.chunks[-1][1], 2 * self.window * longest)  # a window encoding, one being muxed
        spill_dir = self._make_spill_dir(frames * self.enc_width * self.enc_height * 3 // 2 // SPILL_RATIO)
        if self._procs:  # PyAV holds the GIL while x264 encodes: one process per lane (x264_pool)
            from studio.core.media.x264_pool import audio_worker, lease_workers

            self._workers = lease_workers(self.window, self)  # not another writer's (pipelined jobs)
            for ch in self._chunks[: self.window]:  # the first encoders open at once; their headers are
                self._open_encoder(ch, check=False)  # checked by the lanes: no wait here for the workers'
                # start-up, which overlaps the engine's loading and the first batches instead
            if self._audio is not None and not self._audio.copy:  # the AAC is prepared by another process meanwhile
                self._audio.encode_elsewhere(audio_worker(), spill_dir / "audio.rec")

    def _open_chunk(self, ch: Chunk) -> None:
        if ch.encoder is None:
            self._open_encoder(ch)
        elif self._procs:  # opened at start: its headers come with the worker's answer
            self._check_headers(ch.encoder.extradata)

    def _open_encoder(self, ch: Chunk, check: bool = True) -> None:
        """Chunk ``ch``'s encoder and sink (the first window's at open, then by its lane)."""
        import av

        if self._procs:
            from studio.core.media.x264_pool import ProcessEncoder

            self._open_in_worker(
                ch,
                ProcessEncoder,
                self.fps,
                self._crf,
                self._preset,
                path=ch.spill,
                changing=self.changing,
                gop=self._gop,
            )
            if check:
                self._check_headers(ch.encoder.extradata)
            return
        ctx = av.CodecContext.create("libx264", "w")
        ctx.flags |= av.codec.context.Flags.global_header
        configure_x264(ctx, self.enc_width, self.enc_height, self.fps, self._crf, self._preset, 1, self._gop)
        ctx.open()
        self._check_headers(ctx.extradata)
        assert ch.spill is not None  # threads instead of processes: a parallel writer spills too
        ch.encoder, ch.sink = X264Encoder(ctx), PacketFile(ch.spill, self._hook)

    def _check_headers(self, extradata) -> None:
        if bytes(extradata or b"") != self._headers:
            raise RenderError("The parallel x264 encoders disagree on stream headers: use --encoder x264.")

    # ------------------------------------------------------------------ in the lanes

    def _prepare(self, lane: Lane, frame):
        if frame.ndim != 3:  # NV12 already
            return frame
        from studio.core.media.pixels import pad_even, rgb_to_nv12

        buf = self._bufs.get(lane.j)  # RGB: convert here, in parallel with the other lanes
        if buf is None:
            buf = self._bufs[lane.j] = np.empty((1, self.enc_height * 3 // 2, self.enc_width), np.uint8)
        return rgb_to_nv12(pad_even(frame[None]), out=buf)[0]

    def _encode(self, lane: Lane, ch: Chunk, frames, first: int, release, offset: int, event) -> None:
        if event is None:
            super()._encode(lane, ch, frames, first, release, offset, event)
            return
        import torch  # CUDA NV12 frames: DMA each into a free slot of the worker

        stream = self._streams.get(lane.j)
        if stream is None:  # on the frames' GPU (a lane is fed by one GPU)
            stream = self._streams[lane.j] = torch.cuda.Stream(device=frames.device)
        stream.wait_event(event)
        with torch.cuda.device(frames.device), torch.cuda.stream(stream):
            for out in ch.encoder.encode_gpu(frames, first, stream, self._gpu_slots[lane.j]):
                ch.sink(out)

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


# ---------------------------------------------------------------------- encoder choice


def _choose(encoder: str, total_frames: int | None, workers: int | None):
    cores = os.cpu_count() or 1
    workers = workers or env.get_int("STUDIO_X264_WORKERS") or None  # parallel chunks (default: cores)
    whole = [(0, total_frames)]
    if encoder in ("auto", "nvenc"):
        ok, why = probe_nvenc()
        if ok:
            return "nvenc h264", f"{why}; NVENC asked" if encoder == "nvenc" else why, whole
        if encoder == "nvenc":
            return "libx264", f"NVENC unavailable: {why}; using libx264", whole
        n = parallel_chunks(total_frames, workers or cores, MIN_PARALLEL_CHUNK)
        if cores >= 4 and n > 1:
            return (
                f"libx264 x{n} parallel",
                f"NVENC unavailable: {why}; {cores} cores, {total_frames} frames: parallel libx264",
                split(int(total_frames or 0), n),
            )
        return "libx264", f"NVENC unavailable: {why}; using libx264", whole
    if encoder == "x264-parallel":
        if total_frames is None:
            return "libx264", "parallel x264 needs the frame count up front; using one libx264", whole
        n = parallel_chunks(total_frames, workers or cores, MIN_CHUNK)
        if n > 1:
            return f"libx264 x{n} parallel", f"parallel libx264 as asked ({n} chunks)", split(total_frames, n)
        return "libx264", "too few frames to split; using one libx264", whole
    return "libx264", "libx264 as asked", whole


def parallel_chunks(total: int | None, workers: int, min_chunk: int) -> int:
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

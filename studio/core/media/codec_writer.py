"""The delivery codecs' writer (HEVC, ProRes 422 HQ / 4444, DNxHR HQ, VP9): the lane pipeline of
``lanes`` with the codec's encoders, in the codec's container (``codecs.CODECS`` says which).

    with open_codec_writer("out.mov", 1920, 1080, codec="prores", audio="voice.flac", total_frames=T) as w:
        for idx in stripes(T, 64, w.chunks, window=w.window):
            w.write(batch, indices=idx)         # RGB [B,H,W,3] (or RGBA [B,H,W,4]), numpy or torch

An intra-only codec (ProRes, DNxHR) codes every frame on its own, so the clip is cut into chunks
trivially: as for parallel x264, each lane is a worker process of ``x264_pool`` with a shared-memory
ring; the parent copies each RGB(A) frame into a slot, the worker converts it (swscale, BT.709 limited
range) and encodes it, spilling the packets to the chunk's file; the mux thread appends finished
chunks in order while the render goes on. HEVC uses the same lanes with closed GOPs (each chunk
starts on an IDR; the headers of every lane are checked equal). VP9 runs one libvpx encoder with its
own row and tile threads (``row-mt``): its alpha travels in packet side data, which spill files do not keep.
"""

from __future__ import annotations

import logging
import os
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from studio.core import env
from studio.core.errors import RenderError
from studio.core.media.codecs import CodecSpec, PlainAudio, configure, encoder_for, spec, suffix_problem, to_video_frame
from studio.core.media.lanes import Chunk, LaneWriter, rolling_chunks, split
from studio.core.media.mux import MOOV_PER_SAMPLE, Muxer, tag_container
from studio.core.settings import DEFAULT_CRF, DEFAULT_PRESET

log = logging.getLogger(__name__)

MIN_CHUNK = 8  # frames per chunk at least for a codec with GOPs (as parallel x264's)


# ---------------------------------------------------------------------------------------------
# The container


class _Container(Muxer):
    """One output file in the codec's container: ``Muxer``'s interleave and streaming mux, with the
    codec's own stream (configured as the lanes are, opened for its parameters)."""

    def __init__(self, fh, s: CodecSpec, fps, total: int, audio, encoder: str | None = None):
        super().__init__(fh, fps, total, audio)
        self.spec = s
        self.encoder = encoder or s.encoder

    def open_codec(self, configure_stream) -> Any:
        import av

        options = {}
        if self.spec.container in ("mp4", "mov"):
            options = {"movflags": "+faststart"}
            if self.total_frames:
                samples = self.total_frames + (self.audio.packets_at_most() if self.audio is not None else 0)
                options = {"moov_size": str(16384 + MOOV_PER_SAMPLE * samples)}
        self.container = av.open(self.fh, "w", format=self.spec.container, options=options)
        vs = self.container.add_stream(self.encoder, rate=self.fps)
        configure_stream(vs.codec_context)
        if self.spec.tag:
            vs.codec_tag = self.spec.tag
        if self.spec.container in ("mp4", "mov"):
            from studio.core.media.rates import mp4_time_base

            vs.time_base = mp4_time_base(self.fps)
        self.vstream = vs
        tag_container(self.container, vs)  # mux.delivery_tags: timecode track, chapters
        if self.audio is not None:
            self.audio.add_stream(self.container)
        self.container.start_encoding()  # opens the stream's encoder: its headers, profile and tag
        return vs


# ---------------------------------------------------------------------------------------------
# Encoders: in a worker process (lanes), or here (one encoder with its own threads)


class FrameEncoder:
    """An encoder context fed RGB(A) frames converted here (BT.709 limited range); yields packets.
    ``fields``: a ``mxf.FieldFlags`` marking each frame interlaced, top field first."""

    def __init__(self, ctx, in_fmt: str, fields=None):
        import av

        self._av, self.ctx, self.in_fmt = av, ctx, in_fmt
        self.fields = fields
        self.busy_s = 0.0

    def encode(self, frame: np.ndarray, pts: int):
        t0 = time.perf_counter()
        vf = to_video_frame(self._av, frame, self.in_fmt, self.ctx.pix_fmt)
        vf.pts = pts
        if self.fields is not None:
            vf = self.fields(vf)
        out = self.ctx.encode(vf)
        self.busy_s += time.perf_counter() - t0
        return out

    def flush(self):
        return self.ctx.encode(None)


def _process_encoder(worker, width, height, channels, fps, codec, crf, preset, alpha, path):
    from studio.core.media.x264_pool import CodecProcessEncoder

    return CodecProcessEncoder(worker, width, height, channels, fps, codec, crf, preset, alpha, path)


def open_codec_writer(
    path,
    width,
    height,
    *,
    codec: str,
    audio=None,
    crf: int = DEFAULT_CRF,
    preset: str = DEFAULT_PRESET,
    fps=25,
    total_frames: int | None = None,
    alpha: bool = False,
    workers: int | None = None,
    rolling: bool = False,
    write_hook=None,
    overwrite: bool = True,
    scan: str = "progressive",
) -> CodecWriter:
    """A streaming writer for ``codec`` (not h264: ``writer.open_video`` routes here). ``alpha``: the
    frames come as RGBA and the codec keeps it (an alpha codec given RGB frames writes opaque alpha).
    ``scan="interlaced"``: coded as interlaced frames, top field first (the MXF codecs: ``mxf``)."""
    s = spec(codec)
    from studio.core.media.mxf import problem as mxf_problem

    mxf_says = mxf_problem(codec, int(width), int(height), fps, scan)
    if mxf_says:
        raise RenderError(mxf_says[0].upper() + mxf_says[1:] + ".")
    if s.name == "h264":
        raise RenderError("--codec h264 is written by the H.264 writer (writer.open_video).")
    if width < 2 or height < 2:
        raise RenderError(f"The video size {width}x{height} is too small to encode.")
    if codec == "dnxhr" and (width < 256 or height < 120):
        raise RenderError(
            f"DNxHR needs frames of at least 256x120 and this avatar is {width}x{height}: use --codec prores."
        )
    problem = suffix_problem(path, codec)
    if problem:
        raise RenderError(problem)
    total = int(total_frames or 0)
    n = int(workers or 0) or env.get_int("STUDIO_X264_WORKERS") or os.cpu_count() or 1
    lanes = 1
    if s.lanes and total:
        lanes = max(1, min(n, total // (1 if s.intra else MIN_CHUNK)))
    chunks: list[tuple[int, Any]] = [(0, total or None)]
    if total and lanes > 1:
        chunks = list(rolling_chunks(total, lanes) if rolling else split(total, lanes))
    return CodecWriter(
        Path(path),
        int(width),
        int(height),
        s,
        audio=audio,
        crf=int(crf),
        preset=str(preset),
        fps=Fraction(fps),
        total=total,
        alpha=alpha,
        chunks=chunks,
        window=lanes,
        write_hook=write_hook,
        overwrite=overwrite,
        interlaced=scan == "interlaced",
    )


class CodecWriter(LaneWriter):
    """One output file in ``spec``'s codec and container. ``chunks``: frame ranges; ``window``: lanes
    at once (chunk ``k`` on lane ``k % window``); the caller feeds each lane's chunks in turn, as
    ``VideoWriter``'s (``render.stripes(..., window=)``). ``write`` takes RGB or RGBA frames."""

    takes_nv12 = False

    def __init__(self, path: Path, width, height, s: CodecSpec, *, audio, crf, preset, fps, total, alpha, chunks, window, write_hook, overwrite, interlaced=False):  # fmt: skip
        self.spec = s
        self.interlaced = bool(interlaced)
        self.suffix = s.suffix
        self.width, self.height = width, height
        self.enc_width = width + (width % 2 if s.even else 0)
        self.enc_height = height + (height % 2 if s.even else 0)
        self.fps, self.total = fps, total
        self.alpha = s.alpha  # the output has an alpha channel (opaque for RGB frames)
        self.channels = 4 if self.alpha else 3
        self.encoder = encoder_for(s.name, preset)
        window = max(1, min(window, len(chunks)))
        self.name = self.encoder + (f" x{window} parallel" if window > 1 else "")
        self.reason = f"{s.label} in {s.container_label}"
        self._crf, self._preset = crf, preset

        def audio_source():
            if audio is None:
                return None
            if s.audio == "aac":
                from studio.core.media.encoders import AudioSource

                return AudioSource(audio)
            if s.audio == "tracks":  # MXF: 8 mono PCM tracks
                from studio.core.media.mxf import TrackAudio

                return TrackAudio(audio)
            return PlainAudio(audio, s.audio)

        super().__init__(
            path, chunks=chunks, window=window, audio_source=audio_source, write_hook=write_hook, overwrite=overwrite
        )
        log.info("encoding %s with %s, %d chunk(s) on %d lane(s)", path, self.name, len(chunks), self.window)

    def takes_gpu_frames(self) -> bool:
        return False

    def failure_label(self) -> str:  # the sentence names the encoder: "The prores_aw encoder failed"
        return f"{self.encoder} encoder"

    # -- set-up -------------------------------------------------------------------------------

    def _configure(self, ctx, threads: int) -> None:
        configure(
            ctx,
            self.spec.name,
            self.enc_width,
            self.enc_height,
            self.fps,
            self._crf,
            self._preset,
            self.alpha,
            threads,
            self.interlaced,
        )

    def _start(self) -> None:
        from studio.core.media.encoders import HookedFile

        self._fh = HookedFile(self._tmp, "wb+", self._hook)
        self._mux = _Container(self._fh, self.spec, self.fps, self.total, self._audio, self.encoder)
        parallel = self.window > 1
        vs = self._mux.open_codec(lambda ctx: self._configure(ctx, 1 if parallel else 0))
        self._headers = bytes(vs.codec_context.extradata or b"")
        self._chunks = [Chunk(k, s, e) for k, (s, e) in enumerate(self.chunks)]
        if parallel:
            from studio.core.media.x264_pool import lease_workers

            longest = max(e - s for s, e in self.chunks)
            self._make_spill_dir(
                2 * self.window * longest * self.enc_width * self.enc_height * 3 // 4
            )  # intra: ~1/4 of RGB
            self._workers = lease_workers(self.window, self)
        else:
            ch = self._chunks[0]
            fields = None
            if self.interlaced:
                from studio.core.media.mxf import FieldFlags

                cc = vs.codec_context
                fields = FieldFlags(cc.width, cc.height, cc.pix_fmt, self.fps)
            ch.encoder = FrameEncoder(vs.codec_context, "rgba" if self.channels == 4 else "rgb24", fields)
            ch.sink = self._mux.video  # one in-process encoder: packets straight in
            self._encoders.append(ch.encoder)

    def _open_chunk(self, ch: Chunk) -> None:
        if ch.encoder is not None:
            return
        enc = self._open_in_worker(
            ch, _process_encoder, self.channels, self.fps, self.spec.name, self._crf, self._preset, self.alpha, ch.spill
        )
        if bytes(enc.extradata or b"") != self._headers:
            raise RenderError(f"The parallel {self.encoder} encoders disagree on stream headers; render again.")

    # -- frames -------------------------------------------------------------------------------

    def _accept(self, frames):
        """Host RGB(A) frames with this writer's channels (and even sides where the codec needs them)."""
        if isinstance(frames, (list, tuple)):
            frames = np.stack([np.asarray(f) for f in frames])
        if hasattr(frames, "detach"):
            frames = frames.detach().cpu().numpy()
        frames = np.asarray(frames)
        if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[1:3] != (self.height, self.width):
            raise ValueError(f"expected RGB(A) [B,{self.height},{self.width},3|4] uint8 frames, got {frames.shape}")
        c = frames.shape[3]
        if c not in (3, 4):
            raise ValueError(f"expected 3 or 4 channels, got {c}")
        if c != self.channels:  # RGBA to a codec without alpha: drop it; RGB to one with: opaque
            if c == 4:
                frames = frames[..., :3]
            else:
                frames = np.concatenate([frames, np.full((*frames.shape[:3], 1), 255, np.uint8)], axis=3)
        if (self.enc_width, self.enc_height) != (self.width, self.height):
            from studio.core.media.pixels import pad_even

            frames = pad_even(frames)
        return frames, None

"""Delivery codecs beside H.264: HEVC, ProRes 422 HQ, ProRes 4444, DNxHR HQ and VP9, each in its own
container, encoded in parallel over the CPU cores, written atomically.

    spec = CODECS["prores"]                     # encoder, container, extensions, pixel format, audio
    suffix_problem("out.mp4", "prores")         # "out.mp4: --codec prores writes QuickTime (.mov) ..."
    with open_codec_writer("out.mov", 1920, 1080, codec="prores", audio="voice.flac", total_frames=T) as w:
        for idx in stripes(T, 64, w.chunks, window=w.window):
            w.write(batch, indices=idx)         # RGB [B,H,W,3] (or RGBA [B,H,W,4]), numpy or torch

=========== ========================= ========= ======================== ============= ===========
codec       encoder (FFmpeg, PyAV's)  container pixel format             audio         parallel
=========== ========================= ========= ======================== ============= ===========
h264        libx264 / NVENC           .mp4      yuv420p                  AAC           (``writer``)
hevc        libx265                   .mp4      yuv420p (tag hvc1)       AAC           closed-GOP chunks
prores      prores_ks, profile HQ     .mov      yuv422p10le              PCM           intra chunks
prores4444  prores_ks, profile 4444   .mov      yuva444p10le (alpha)     PCM           intra chunks
dnxhr       dnxhd, profile DNxHR HQ   .mov      yuv422p                  PCM           intra chunks
vp9         libvpx-vp9 (row-mt)       .webm     yuva420p (alpha)         Opus          encoder threads
=========== ========================= ========= ======================== ============= ===========

**Parallel.** An intra-only codec (ProRes, DNxHR) codes every frame on its own, so the clip is cut
into chunks trivially: as for parallel x264 (``writer`` + ``x264_pool``), each lane is a worker
process with a shared-memory ring; the parent copies each RGB(A) frame into a slot, the worker
converts it (swscale, BT.709 limited range) and encodes it, spilling the packets to the chunk's file;
a mux thread appends finished chunks in order while the render goes on. HEVC uses the same lanes
with closed GOPs (each chunk starts on an IDR; the headers of every lane are checked equal). VP9 runs
one libvpx encoder with its own row and tile threads (``row-mt``): its alpha travels in packet side
data (Matroska BlockAdditional), which the spill files do not keep.

**Alpha.** ``prores4444`` and ``vp9`` write an alpha channel: frames written as RGBA keep theirs;
RGB frames get a fully opaque one (``CodecWriter.alpha`` says which). The others have none.

**Audio.** QuickTime intermediates carry the voice-over as PCM (16-bit when the file is 16-bit,
else 24-bit) at its own sample rate; WebM carries Opus (48 kHz); MP4 (HEVC) AAC as the H.264 path.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import shutil
import threading
import time
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from studio.core.errors import RenderError
from studio.core.media.lanes import LaneWriter, disk_error
from studio.core.media.mux import MOOV_PER_SAMPLE, Muxer, tag_container
from studio.core.settings import DEFAULT_CRF, DEFAULT_PRESET

log = logging.getLogger(__name__)

BT709, RANGE_MPEG = 1, 1
QUEUE_RUNS = 8  # runs waiting per lane before write() blocks


@dataclass(frozen=True)
class CodecSpec:
    """One delivery codec: what FFmpeg encodes it with, where it goes and how it is parallelised."""

    name: str
    label: str
    encoder: str
    container: str  # FFmpeg's muxer name
    suffixes: tuple[str, ...]  # the first is the one to use
    pix_fmt: str
    alpha_pix_fmt: str | None = None  # the format with alpha, when the codec carries it
    intra: bool = False  # every frame a keyframe: chunks join trivially
    audio: str = "aac"  # "aac", "pcm" or "opus"
    lanes: bool = True  # worker processes over chunks (else one encoder with its own threads)
    even: bool = True  # 4:2:0 / 4:2:2 codecs that need even sides
    tag: str | None = None  # the stream's FourCC in the container
    container_label: str = "MP4"

    @property
    def suffix(self) -> str:
        return self.suffixes[0]

    @property
    def alpha(self) -> bool:
        return self.alpha_pix_fmt is not None


CODECS: dict[str, CodecSpec] = {
    "h264": CodecSpec("h264", "H.264", "libx264", "mp4", (".mp4", ".m4v", ".mov"), "yuv420p"),
    "hevc": CodecSpec("hevc", "HEVC (H.265)", "libx265", "mp4", (".mp4", ".mov"), "yuv420p", tag="hvc1"),
    "prores": CodecSpec(
        "prores",
        "Apple ProRes 422 HQ",
        "prores_ks",
        "mov",
        (".mov",),
        "yuv422p10le",
        intra=True,
        audio="pcm",
        even=False,
        container_label="QuickTime",
    ),
    "prores4444": CodecSpec(
        "prores4444",
        "Apple ProRes 4444",
        "prores_ks",
        "mov",
        (".mov",),
        "yuv444p10le",
        alpha_pix_fmt="yuva444p10le",
        intra=True,
        audio="pcm",
        even=False,
        container_label="QuickTime",
    ),
    "dnxhr": CodecSpec(
        "dnxhr",
        "Avid DNxHR HQ",
        "dnxhd",
        "mov",
        (".mov",),
        "yuv422p",
        intra=True,
        audio="pcm",
        even=False,
        container_label="QuickTime",
    ),
    "vp9": CodecSpec(
        "vp9",
        "VP9",
        "libvpx-vp9",
        "webm",
        (".webm",),
        "yuv420p",
        alpha_pix_fmt="yuva420p",
        audio="opus",
        lanes=False,
        container_label="WebM",
    ),
}
ALPHA_CODECS = tuple(n for n, s in CODECS.items() if s.alpha)
SUFFIXES = tuple(dict.fromkeys(x for s in CODECS.values() for x in s.suffixes))  # every video extension written
# --preset for VP9: libvpx's deadline and cpu-used (the fast presets run its realtime mode, ~4x faster)
VP9_SPEED = {
    "ultrafast": ("realtime", 8),
    "superfast": ("realtime", 7),
    "veryfast": ("realtime", 6),
    "faster": ("good", 5),
    "fast": ("good", 4),
    "medium": ("good", 3),
    "slow": ("good", 2),
    "slower": ("good", 1),
    "veryslow": ("good", 0),
}
FAST_PRESETS = ("ultrafast", "superfast", "veryfast", "faster")  # ProRes: prores_aw, about 3x prores_ks's speed


def encoder_for(codec: str, preset: str) -> str:
    """The FFmpeg encoder of ``codec`` at ``preset``: ProRes is prores_aw at the fast presets (the
    default ultrafast) and prores_ks, FFmpeg's most accurate one, from fast on; the others have one."""
    s = spec(codec)
    if s.encoder == "prores_ks" and str(preset) in FAST_PRESETS:
        return "prores_aw"
    return s.encoder


def spec(codec: str) -> CodecSpec:
    try:
        return CODECS[codec]
    except KeyError:
        raise RenderError(f"Unknown codec {codec!r}: use one of {', '.join(CODECS)}.") from None


def suffix_problem(path, codec: str) -> str | None:
    """One sentence when ``path``'s extension is not the container ``codec`` writes, else None."""
    s = spec(codec)
    p = Path(os.fspath(path))
    if p.suffix.lower() in s.suffixes:
        return None
    return (
        f"{p.name}: --codec {codec} writes {s.label} in {s.container_label} ({s.suffix}); name the output "
        f"{p.stem}{s.suffix}"
        + (
            " or choose a codec for that extension (--codec h264 or hevc for .mp4)"
            if p.suffix.lower() == ".mp4"
            else ""
        )
        + "."
    )


def configure(ctx, codec: str, width: int, height: int, fps, crf: int, preset: str, alpha: bool, threads: int) -> None:
    """Set up an encoder context for ``codec`` (the same in the parent's stream and every lane, so their
    headers agree)."""
    s = spec(codec)
    ctx.width, ctx.height = width, height
    ctx.pix_fmt = s.alpha_pix_fmt if (alpha and s.alpha_pix_fmt) else s.pix_fmt
    ctx.time_base = 1 / Fraction(fps)
    ctx.framerate = Fraction(fps)
    ctx.color_primaries = ctx.color_trc = ctx.colorspace = BT709
    ctx.color_range = RANGE_MPEG
    ctx.thread_count = threads
    if codec == "hevc":
        ctx.options = {
            "crf": str(crf),
            "preset": str(preset),
            "x265-params": "log-level=error:open-gop=0:repeat-headers=0"
            + (":pools=1:frame-threads=1" if threads == 1 else ""),
        }
    elif codec in ("prores", "prores4444"):  # prores_aw and prores_ks take the same options
        ctx.options = {"profile": "3" if codec == "prores" else "4", "vendor": "apl0"}
        if alpha and codec == "prores4444":
            ctx.options = {**ctx.options, "alpha_bits": "16"}
    elif codec == "dnxhr":
        ctx.options = {"profile": "dnxhr_hq"}
    elif codec == "vp9":
        ctx.options = {
            "crf": str(min(63, round(crf * 1.55))),  # CRF 20 -> VP9's 31
            "b": "0",
            "deadline": VP9_SPEED.get(str(preset), ("good", 4))[0],
            "cpu-used": str(VP9_SPEED.get(str(preset), ("good", 4))[1]),
            "row-mt": "1",
            "tile-columns": "2",
            **({"auto-alt-ref": "0"} if alpha else {}),
        }
    else:
        raise RenderError(f"--codec {codec} is written by the H.264 writer, not here.")


def alpha_of(codec: str, avatar_alpha: bool) -> str:
    """What a render's file does with alpha (``RenderResult.alpha``): "kept" (the avatar's, in an
    alpha codec), "opaque" (an alpha codec, an avatar without: every pixel opaque), "dropped" (the
    avatar has alpha, the codec has none: use prores4444 or vp9), "" (no alpha anywhere)."""
    has = CODECS[codec].alpha if codec in CODECS else False
    if has:
        return "kept" if avatar_alpha else "opaque"
    return "dropped" if avatar_alpha else ""


def pix_fmt_of(codec: str, alpha: bool) -> str:
    s = spec(codec)
    return s.alpha_pix_fmt if (alpha and s.alpha_pix_fmt) else s.pix_fmt


def available() -> dict[str, str]:
    """Codec name -> "" when PyAV's FFmpeg has its encoder, else why not (the doctor and the bench)."""
    import av

    out = {}
    for name, s in CODECS.items():
        out[name] = ""
        for enc in dict.fromkeys((s.encoder, encoder_for(name, "ultrafast"))):
            try:
                av.codec.Codec(enc, "w")
            except Exception as exc:  # noqa: BLE001 - av raises UnknownCodecError or ValueError
                out[name] = f"PyAV's FFmpeg has no {enc} encoder ({exc})"
    return out


# ---------------------------------------------------------------------------------------------
# Audio for QuickTime (PCM) and WebM (Opus)


class PlainAudio:
    """The voice-over as PCM (``pcm``) or Opus (``opus``), read block by block and muxed as the video
    advances (the interface ``AudioSource`` gives the MP4 path: ``add_stream``, ``mux_until``)."""

    BLOCK = 8192

    def __init__(self, path, kind: str):
        from studio.core.media.audio import probe

        self.path = Path(path)
        self.kind = kind
        self.info = probe(path)
        self.rate_in = self.info.source_rate
        self.channels = 2 if self.info.channels == 2 else 1  # more than two: a mono downmix
        self._layout = "mono" if self.channels == 1 else "stereo"
        if kind == "pcm":
            self.rate = self.rate_in
            bits16 = self.info.subtype.upper() in ("PCM_16", "PCM_S8", "PCM_U8", "S16")
            self.codec, self.fmt = ("pcm_s16le", "s16") if bits16 else ("pcm_s24le", "s32")
        else:
            self.rate = 48_000
            self.codec, self.fmt = "libopus", "flt"
        self._resampler = None
        if self.rate != self.rate_in:
            import soxr

            self._resampler = soxr.ResampleStream(self.rate_in, self.rate, self.channels, dtype="float32")
        self._blocks = None
        self._sent = 0
        self._eof = False
        self.how = "pcm" if kind == "pcm" else "encoded"
        self.cancel = threading.Event()
        self.wait_s, self.ready_at = 0.0, None
        self.copy = False
        self._remote = None

    def packets_at_most(self) -> int:
        seconds = self.info.source_frames / max(1, self.rate_in)
        return int(seconds * self.rate / 1024) + 64

    def add_stream(self, container) -> None:
        self.stream = container.add_stream(self.codec, rate=self.rate, layout=self._layout)
        if self.kind == "opus":
            self.stream.codec_context.bit_rate = 96_000 * self.channels

    def _frames(self):
        import av

        from studio.core.media.audio import read_blocks

        if self._blocks is None:
            self._blocks = read_blocks(self.info, self.BLOCK)
        for block in self._blocks:
            block = np.asarray(block, np.float32)
            if block.shape[1] > 2 or (block.shape[1] == 2 and self.channels == 1):
                block = block.mean(axis=1, keepdims=True)
            if self._resampler is not None:
                block = self._resampler.resample_chunk(block)
            if len(block):
                yield self._frame(av, block)
        self._eof = True
        if self._resampler is not None:
            tail = self._resampler.resample_chunk(np.zeros((0, self.channels), np.float32), last=True)
            if len(tail):
                yield self._frame(av, tail)

    def _frame(self, av, block: np.ndarray):
        if self.fmt == "s16":
            data = np.clip(np.round(block * 32767.0), -32768, 32767).astype(np.int16)
        elif self.fmt == "s32":  # pcm_s24le keeps the top 24 bits of s32
            data = (np.clip(np.round(block * 8388607.0), -8388608, 8388607).astype(np.int32) << 8).astype(np.int32)
        else:
            data = np.ascontiguousarray(block, np.float32)
        frame = av.AudioFrame.from_ndarray(data.reshape(1, -1), format=self.fmt, layout=self._layout)
        frame.sample_rate = self.rate
        frame.pts = self._sent
        frame.time_base = Fraction(1, self.rate)
        self._sent += len(block)
        return frame

    def mux_until(self, container, seconds: float | None) -> None:
        """Encode and mux the audio up to ``seconds`` (None: to the end, then flush)."""
        target = None if seconds is None else int(seconds * self.rate) + self.BLOCK
        if not self._eof and (target is None or self._sent < target):
            for frame in self._frames():
                for pkt in self.stream.encode(frame):
                    container.mux(pkt)
                if target is not None and self._sent >= target:
                    break
        if seconds is None:
            for pkt in self.stream.encode(None):
                container.mux(pkt)

    def close(self) -> None:
        self._blocks = None


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
    """An encoder context fed RGB(A) frames converted here (BT.709 limited range); yields packets."""

    def __init__(self, ctx, in_fmt: str):
        import av

        self._av, self.ctx, self.in_fmt = av, ctx, in_fmt
        self.busy_s = 0.0

    def encode(self, frame: np.ndarray, pts: int):
        t0 = time.perf_counter()
        vf = to_video_frame(self._av, frame, self.in_fmt, self.ctx.pix_fmt)
        vf.pts = pts
        out = self.ctx.encode(vf)
        self.busy_s += time.perf_counter() - t0
        return out

    def flush(self):
        return self.ctx.encode(None)


def to_video_frame(av, frame: np.ndarray, in_fmt: str, pix_fmt: str):
    """An RGB(A) uint8 frame as a PyAV frame in ``pix_fmt``, BT.709 limited range (alpha kept as is)."""
    vf = av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format=in_fmt)
    vf = vf.reformat(format=pix_fmt, dst_colorspace="ITU709", dst_color_range="MPEG")
    vf.colorspace, vf.color_range = BT709, RANGE_MPEG
    return vf


def _process_encoder(worker, width, height, channels, fps, codec, crf, preset, alpha, path):
    from studio.core.media.x264_pool import CodecProcessEncoder

    return CodecProcessEncoder(worker, width, height, channels, fps, codec, crf, preset, alpha, path)


# ---------------------------------------------------------------------------------------------
# The writer


@dataclass
class _Chunk:
    k: int
    start: int
    end: int
    next: int = 0
    encoder: Any = None
    spill: Path | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self):
        self.next = self.start


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
) -> CodecWriter:
    """A streaming writer for ``codec`` (not h264: ``writer.open_video`` routes here). ``alpha``: the
    frames come as RGBA and the codec keeps it (an alpha codec given RGB frames writes opaque alpha)."""
    s = spec(codec)
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
    from studio.core.media.writer import MIN_CHUNK, _split, rolling_chunks

    total = int(total_frames or 0)
    cores = os.cpu_count() or 1
    n = int(workers or 0) or int(os.environ.get("STUDIO_X264_WORKERS", "0") or 0) or cores
    lanes = 1
    if s.lanes and total:
        lanes = max(1, min(n, total // (1 if s.intra else MIN_CHUNK)))
    if total and lanes > 1:
        chunks = rolling_chunks(total, lanes) if rolling else _split(total, lanes)
    else:
        chunks = [(0, total or (1 << 62))]
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
    )


class CodecWriter(LaneWriter):
    """One output file in ``spec``'s codec and container. ``chunks``: frame ranges; ``window``: lanes
    at once (chunk ``k`` on lane ``k % window``); the caller feeds each lane's chunks in turn, as
    ``VideoWriter``'s (``render.stripes(..., window=)``). ``write`` takes RGB or RGBA frames."""

    takes_nv12 = False

    def __init__(self, path: Path, width, height, s: CodecSpec, *, audio, crf, preset, fps, total, alpha, chunks, window, write_hook, overwrite):  # fmt: skip
        from studio.core.store.fsutil import atomic_output

        self.path, self.spec, self.overwrite = path, s, overwrite
        self.width, self.height = width, height
        self.enc_width = width + (width % 2 if s.even else 0)
        self.enc_height = height + (height % 2 if s.even else 0)
        self.fps, self.total = fps, total
        self.alpha = s.alpha  # the output has an alpha channel (opaque for RGB frames)
        self.channels = 4 if self.alpha else 3
        self.chunks = chunks
        self.window = max(1, min(window, len(chunks)))
        self.encoder = encoder_for(s.name, preset)
        self.name = self.encoder + (f" x{self.window} parallel" if self.window > 1 else "")
        self.reason = f"{s.label} in {s.container_label}"
        self.close_ms: dict[str, float] = {}
        self.frames_written = 0
        self._crf, self._preset, self._hook = crf, preset, write_hook
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._done = False
        self._encoders: list = []
        self._lanes: list = []
        self._mux_thread: threading.Thread | None = None
        self.spill_dir: Path | None = None
        self._atomic = atomic_output(path, suffix=s.suffix, overwrite=overwrite)
        if not path.parent.is_dir():
            from studio.core.store.files import check_folder

            check_folder(path)
        try:
            self._tmp = self._atomic.__enter__().tmp
        except OSError as exc:
            raise RenderError(
                f"The output folder {path.parent} is not writable ({exc.strerror}): choose another folder."
            ) from exc
        self._audio: Any = None
        try:
            if audio is not None:
                if s.audio == "aac":
                    from studio.core.media.encoders import AudioSource

                    self._audio = AudioSource(audio)
                else:
                    self._audio = PlainAudio(audio, s.audio)
            self._start()
        except BaseException as exc:
            self._cleanup()
            with contextlib.suppress(BaseException):
                self._atomic.__exit__(type(exc), exc, None)
            raise
        log.info("encoding %s with %s, %d chunk(s) on %d lane(s)", path, self.name, len(chunks), self.window)

    # -- public -------------------------------------------------------------------------------

    def __enter__(self) -> CodecWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    @property
    def audio_how(self) -> str:
        return "" if self._audio is None else self._audio.how

    @property
    def chunks_muxed(self) -> int:
        return self._mux.chunks_muxed

    def takes_gpu_frames(self) -> bool:
        return False

    def failure_label(self) -> str:  # the sentence names the encoder: "The prores_aw encoder failed"
        return f"{self.encoder} encoder"

    def write(self, frames, first_index: int | None = None, release=None, indices=None) -> None:
        """Queue RGB [B,H,W,3] or RGBA [B,H,W,4] uint8 frames (numpy or torch); ``indices`` as
        ``VideoWriter.write`` (runs of consecutive frames, each chunk's in order)."""
        self.raise_if_failed()
        if self._done:
            raise RenderError("This video writer is already closed.")
        frames = self._host(frames, copy=release is not None)
        n = len(frames)
        if indices is None:
            first = self.frames_written if first_index is None else int(first_index)
            indices = range(first, first + n)
        for ch, s, e, pos in self._runs(indices, n):
            self._put(self._lanes[ch.k % self.window], (ch, frames[s:e], pos))
        with self._lock:
            self.frames_written += n
        if release is not None:
            for i in range(n):
                release(i)

    def close(self) -> str:
        if self._done:
            return str(self.path)
        t0 = time.perf_counter()
        try:
            for lane in self._lanes:
                self._put(lane, None)
            for lane in self._lanes:
                lane.join()
            self.raise_if_failed()
            missing = [c for c in self._chunks if c.end < (1 << 62) and c.next < c.end]
            if missing and self.total:
                c = missing[0]
                raise RenderError(f"Frames {c.next}..{c.end - 1} were never written, so the video is incomplete.")
            t1 = time.perf_counter()
            if self._mux_thread is not None:
                self._mux_thread.join()
                self.raise_if_failed()
            self._mux.finish()
            t2 = time.perf_counter()
            self._fh.close()
            self._atomic.__exit__(None, None, None)
            self.path = self._atomic.final or self.path
            t3 = time.perf_counter()
            self.close_ms = {"flush": (t1 - t0) * 1e3, "join": (t2 - t1) * 1e3, "file": (t3 - t2) * 1e3}
            self.close_ms["encode_busy"] = sum(getattr(e, "busy_s", 0.0) for e in self._encoders) * 1e3
            if self.window > 1:
                self.close_ms["chunks"] = len(self._chunks)
        except BaseException as exc:
            self.abort()
            if isinstance(exc, OSError):
                raise disk_error(exc, self.path) from exc
            raise
        self._done = True
        self._cleanup()
        return str(self.path)

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
        )

    def _start(self) -> None:
        from studio.core.media.encoders import HookedFile

        self._fh = HookedFile(self._tmp, "wb+", self._hook)
        self._mux = _Container(self._fh, self.spec, self.fps, self.total, self._audio, self.encoder)
        parallel = self.window > 1
        vs = self._mux.open_codec(lambda ctx: self._configure(ctx, 1 if parallel else 0))
        self._headers = bytes(vs.codec_context.extradata or b"")
        self._chunks = [_Chunk(k, s, e) for k, (s, e) in enumerate(self.chunks)]
        self._starts = [c.start for c in self._chunks]
        if parallel:
            from studio.core.media.x264_pool import lease_workers
            from studio.core.store.fsutil import temp_dir

            self.spill_dir = temp_dir(_spill_root(self), f".{self.path.stem}.", ".part.spill")
            for c in self._chunks:
                c.spill = self.spill_dir / f"chunk{c.k:05d}.rec"
            self._workers = lease_workers(self.window, self)
        else:
            self._chunks[0].encoder = FrameEncoder(vs.codec_context, "rgba" if self.channels == 4 else "rgb24")
            self._encoders.append(self._chunks[0].encoder)
        for j in range(self.window):
            self._lanes.append(_Lane(self, j))
        if parallel:
            self._mux_thread = threading.Thread(target=self._mux_chunks, daemon=True, name="codec-mux")
            self._mux_thread.start()

    def _open_encoder(self, ch: _Chunk) -> None:
        ch.encoder = _process_encoder(
            self._workers[ch.k % self.window],
            self.enc_width,
            self.enc_height,
            self.channels,
            self.fps,
            self.spec.name,
            self._crf,
            self._preset,
            self.alpha,
            ch.spill,
        )
        self._encoders.append(ch.encoder)
        if bytes(ch.encoder.extradata or b"") != self._headers:
            raise RenderError(f"The parallel {self.encoder} encoders disagree on stream headers; render again.")

    def _mux_chunks(self) -> None:
        try:
            self._mux.append_chunks(self._chunks, self._stop)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            self._fail(exc)

    # -- helpers ------------------------------------------------------------------------------

    def _host(self, frames, copy: bool = False):
        """Host RGB(A) frames with this writer's channels (and even sides where the codec needs them);
        ``copy``: never a view of the caller's memory (it is reused once released)."""
        if isinstance(frames, (list, tuple)):
            frames = np.stack([np.asarray(f) for f in frames])
        if hasattr(frames, "detach"):
            frames = frames.detach().cpu().numpy()
        frames = np.array(frames) if copy else np.asarray(frames)
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
        return frames

    def _cleanup(self) -> None:
        for enc in self._encoders:
            if hasattr(enc, "abort"):
                with contextlib.suppress(Exception):
                    enc.abort()
        if getattr(self, "_workers", None):
            from studio.core.media.x264_pool import release_workers

            release_workers(self)
        with contextlib.suppress(Exception):
            self._fh.close()
        if self._audio is not None:
            with contextlib.suppress(Exception):
                self._audio.close()
        if self.spill_dir is not None:
            from studio.core.store.fsutil import release_temp

            shutil.rmtree(self.spill_dir, ignore_errors=True)
            release_temp(self.spill_dir)


class _Lane:
    """One lane: a thread encoding its chunks in turn (each flushed before the next opens)."""

    def __init__(self, w: CodecWriter, j: int):
        self.w, self.j = w, j
        self.queue: queue.Queue = queue.Queue(QUEUE_RUNS)
        self.thread = threading.Thread(target=self._run, daemon=True, name=f"codec-lane{j}")
        self.thread.start()

    def join(self) -> None:
        self.thread.join()

    def _run(self) -> None:
        w = self.w
        cur = None
        try:
            while not w._stop.is_set():
                item = self.queue.get()
                if item is None:
                    if cur is not None:
                        self._finish(cur)
                    return
                ch, frames, first = item
                if ch is not cur:
                    if cur is not None:
                        self._finish(cur)
                    if ch.encoder is None:
                        w._open_encoder(ch)
                    cur = ch
                for i in range(len(frames)):
                    if w._stop.is_set():
                        return
                    for pkt in ch.encoder.encode(frames[i], first + i):
                        w._mux.video(pkt)  # one in-process encoder: packets straight in
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            w._fail(exc)

    def _finish(self, ch: _Chunk) -> None:
        for pkt in ch.encoder.flush():
            self.w._mux.video(pkt)
        ch.done.set()


def _spill_root(w: CodecWriter) -> Path:
    """RAM (``/dev/shm``) when a window of chunks' packets fits comfortably, else beside the output."""
    from studio.core.media.rings import shm_dir

    env = os.environ.get("STUDIO_SPILL_DIR")
    if env:
        return Path(env)
    shm = shm_dir()
    longest = max(e - s for s, e in w.chunks)
    estimate = 2 * w.window * longest * w.enc_width * w.enc_height * 3 // 4  # intra codecs: ~1/4 of RGB
    if shm.is_dir() and os.access(shm, os.W_OK):
        with contextlib.suppress(OSError):
            st = os.statvfs(shm)
            if estimate <= min(2 << 30, st.f_bavail * st.f_frsize // 4):
                return shm
    return w.path.parent

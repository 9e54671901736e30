"""Delivery codecs beside H.264: HEVC, ProRes 422 HQ, ProRes 4444, DNxHR HQ and VP9, each in its own
container, encoded in parallel over the CPU cores, written atomically.

    spec = CODECS["prores"]                     # encoder, container, extensions, pixel format, audio
    suffix_problem("out.mp4", "prores")         # "out.mp4: --codec prores writes QuickTime (.mov) ..."
    with codec_writer.open_codec_writer("out.mov", 1920, 1080, codec="prores", audio="voice.flac", total_frames=T) as w:
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
xdcam-hd422 mpeg2video 4:2:2@HL       .mxf      yuv422p                  8 x PCM mono  encoder threads
avc-intra.. libx264 avcintra-class    .mxf      yuv422p10le              8 x PCM mono  encoder threads
=========== ========================= ========= ======================== ============= ===========

The MXF codecs (``xdcam-hd422``, ``avc-intra-100``) are set up by ``mxf``.

**Parallel.** ``codec_writer.CodecWriter`` runs the one lane pipeline (``lanes``) with these codecs'
encoders: intra-only codecs (ProRes, DNxHR) cut into chunks trivially, HEVC with closed GOPs (each
chunk starts on an IDR; the headers of every lane are checked equal), each lane a worker process of
``x264_pool``. VP9 runs one libvpx encoder with its own row and tile threads (``row-mt``): its alpha
travels in packet side data (Matroska BlockAdditional), which the spill files do not keep.

**Alpha.** ``prores4444`` and ``vp9`` write an alpha channel: frames written as RGBA keep theirs;
RGB frames get a fully opaque one (``CodecWriter.alpha`` says which). The others have none.

**Audio.** QuickTime intermediates carry the voice-over as PCM (16-bit when the file is 16-bit,
else 24-bit) at its own sample rate; WebM carries Opus (48 kHz); MP4 (HEVC) AAC as the H.264 path.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np

from studio.core.errors import RenderError

log = logging.getLogger(__name__)

BT709, RANGE_MPEG = 1, 1


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
    # the newsroom's MXF OP1a (``mxf``): one encoder with its own threads (long GOPs; no lanes)
    "xdcam-hd422": CodecSpec(
        "xdcam-hd422",
        "XDCAM HD422 (MPEG-2 4:2:2 50 Mb/s)",
        "mpeg2video",
        "mxf",
        (".mxf",),
        "yuv422p",
        audio="tracks",
        lanes=False,
        container_label="MXF",
    ),
    "avc-intra-100": CodecSpec(
        "avc-intra-100",
        "AVC-Intra 100",
        "libx264",
        "mxf",
        (".mxf",),
        "yuv422p10le",
        intra=True,
        audio="tracks",
        lanes=False,
        container_label="MXF",
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


def configure(
    ctx,
    codec: str,
    width: int,
    height: int,
    fps,
    crf: int,
    preset: str,
    alpha: bool,
    threads: int,
    interlaced: bool = False,
) -> None:
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
    elif codec in ("xdcam-hd422", "avc-intra-100"):
        from studio.core.media.mux import current_tags
        from studio.core.media.mxf import configure as mxf_configure

        mxf_configure(ctx, codec, fps, interlaced, (current_tags() or {}).get("start_tc"))
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
        from studio.core.media.audio import Resampled, probe

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
        self._source = Resampled(self.info, self.channels, self.rate, self.BLOCK)
        self._sent = 0
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

        for block in self._source:
            yield self._frame(av, block)

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
        if not self._source.eof and (target is None or self._sent < target):
            for frame in self._frames():
                for pkt in self.stream.encode(frame):
                    container.mux(pkt)
                if target is not None and self._sent >= target:
                    break
        if seconds is None:
            for pkt in self.stream.encode(None):
                container.mux(pkt)

    def close(self) -> None:
        self._source.close()


# ---------------------------------------------------------------------------------------------
# Frames and the writer


def to_video_frame(av, frame: np.ndarray, in_fmt: str, pix_fmt: str):
    """An RGB(A) uint8 frame as a PyAV frame in ``pix_fmt``, BT.709 limited range (alpha kept as is)."""
    vf = av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format=in_fmt)
    vf = vf.reformat(format=pix_fmt, dst_colorspace="ITU709", dst_color_range="MPEG")
    vf.colorspace, vf.color_range = BT709, RANGE_MPEG
    return vf

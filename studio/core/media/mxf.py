"""The newsroom's MXF OP1a deliveries: XDCAM HD422 (MPEG-2 4:2:2@HL long GOP, SMPTE RDD9) and AVC-Intra
class 100, written by FFmpeg's ``mxf`` muxer and encoders inside PyAV; their 8 mono PCM tracks.

    configure(ctx, "xdcam-hd422", 1920, 1080, Fraction(25), interlaced=True)   # the encoder's settings
    flag = FieldFlags(ctx) ; vf = flag(vf)       # frames marked interlaced, top field first (setfield=tff)
    TrackAudio("voice.flac")                    # 8 mono 24-bit 48 kHz tracks: voice on 1-2, silence on 3-8
    problem(codec, width, height, fps, scan, audio_format) -> one sentence or None

**XDCAM HD422** (RDD9): 1920x1080, 4:2:2 Profile @ High Level, 50 Mb/s constant bit rate (``minrate`` =
``maxrate`` = ``b``, the VBV buffer of 17.8 Mbit the profile allows, stuffing to the rate), closed GOPs of
exactly N=12 at 25 and N=15 at 29.97 frames with M=3 (``g``, two B-frames, ``+cgop`` and ``strict_gop``;
scene-change detection off, else the encoder starts a new GOP early: FFmpeg's defaults gave N=10), the
non-linear quantiser and intra VLC tables of the Sony files, 10-bit intra DC precision. Interlaced:
field DCT and field motion estimation (``+ildct+ilme``), every frame flagged interlaced with the top
field first (``setfield=tff`` in a one-filter graph: PyAV's frames have no writable field flags). The GOP
headers carry the start timecode (``gop_timecode``), the MXF its material package and system item
timecode (the muxer's ``timecode``: ``mux.tag_container``).

**AVC-Intra 100**: libx264's ``avcintra-class=100`` (High 4:2:2 Intra, 10-bit, its fixed bit rate,
slices and headers of the class), interlaced as x264 codes it (MBAFF, top field first).

**Interlacing a progressive render**: the engine renders 25 (29.97) frames a second and each frame is
split into its two fields (both from the same instant: the "frame split", as a 25PsF master is);
Studio's engines do not render at 50 fields a second, so motion between the fields is not made up.

**Audio**: eight mono 24-bit PCM tracks at 48 kHz (AES3 frame-wrapped by the muxer), the voice on
tracks 1 and 2 (a stereo voice-over's left on 1, right on 2), silence on 3 to 8: the channel map of
``delivery_audio.AUDIO_FORMATS["8-mono-48k"]``. A voice-over not at 48 kHz is resampled with soxr.
"""

from __future__ import annotations

import threading
from fractions import Fraction
from pathlib import Path

import numpy as np

MXF_CODECS = ("xdcam-hd422", "avc-intra-100")
GOP = {Fraction(25): 12, Fraction(30000, 1001): 15}  # RDD9's closed GOP length N at each rate
XDCAM_RATE = 50_000_000
XDCAM_VBV = 17_825_792  # bits: 4:2:2@HL's VBV buffer
SIZE = (1920, 1080)


def problem(codec: str, width: int, height: int, fps, scan: str = "progressive", audio_format: str = "") -> str | None:
    """One sentence when ``codec`` cannot be written with these values, else None."""
    mxf = codec in MXF_CODECS
    if scan == "interlaced" and not mxf:
        return f"interlaced frames are written by --codec xdcam-hd422 or avc-intra-100, not {codec}"
    if audio_format == "8-mono-48k" and not mxf:
        return f"8 mono audio tracks are written in MXF (--codec xdcam-hd422 or avc-intra-100), not with {codec}"
    if not mxf:
        return None
    if (width, height) != SIZE:
        return f"--codec {codec} is 1920x1080 and the frames are {width}x{height}: use --canvas 1920x1080"
    if Fraction(fps) not in GOP:
        return f"--codec {codec} is written at 25 or 29.97 frames a second, not {float(Fraction(fps)):g}"
    return None


def settings_problem(settings, rate: str = "") -> str | None:
    """``problem`` for render settings before any work: the canvas where one is set, the output rate
    where it is known (``rate``: the request's resolved ``rates.rate_text``, or the fps setting)."""
    from studio.core.media.rates import parse_rate

    width, height = settings.canvas_size or SIZE  # the avatar's own size is checked when the writer opens
    text = rate or (settings.fps if settings.fps != "auto" else "")
    fps = parse_rate(text) if text else next(iter(GOP))
    if getattr(settings, "aaf", False) and settings.codec not in MXF_CODECS:
        return "--aaf links an MXF: use an MXF delivery (xdcam-hd422, avc-intra-100), or --otio for other editors"
    return problem(settings.codec, width, height, fps, settings.scan, settings.audio_format)


def configure(ctx, codec: str, fps, interlaced: bool, start_tc: str | None = None) -> None:
    """Set up an encoder context for an MXF codec (size, format, rate, colour set by the caller)."""
    fps = Fraction(fps)
    if codec == "xdcam-hd422":
        n = GOP[fps]
        ctx.bit_rate = XDCAM_RATE
        ctx.gop_size = n
        ctx.max_b_frames = 2
        opts = {
            "g": str(n),
            "bf": "2",
            "flags": "+cgop" + ("+ildct+ilme" if interlaced else ""),
            "mpv_flags": "+strict_gop",
            "sc_threshold": "1000000000",  # no scene-change GOPs: every GOP exactly N
            "minrate": str(XDCAM_RATE),
            "maxrate": str(XDCAM_RATE),
            "bufsize": str(XDCAM_VBV),
            "rc_init_occupancy": str(XDCAM_VBV),
            "profile": "0",  # 4:2:2
            "level": "2",  # High
            "intra_vlc": "1",
            "non_linear_quant": "1",
            "dc": "10",
            "qmin": "1",
            "qmax": "12",
            "lmin": "1*QP2LAMBDA",
            "seq_disp_ext": "1",
        }
        if start_tc:
            opts["gop_timecode"] = start_tc
        ctx.options = opts
    elif codec == "avc-intra-100":
        ctx.options = {"avcintra-class": "100", **({"flags": "+ildct+ilme"} if interlaced else {})}
    else:
        raise ValueError(f"{codec} is not an MXF codec")


class FieldFlags:
    """Marks frames interlaced, top field first (FFmpeg's ``setfield=tff``), as the encoders read them."""

    def __init__(self, width: int, height: int, pix_fmt: str, fps):
        import av

        self.graph = av.filter.Graph()
        src = self.graph.add_buffer(
            width=width, height=height, format=av.VideoFormat(pix_fmt), time_base=1 / Fraction(fps)
        )
        field = self.graph.add("setfield", "tff")
        sink = self.graph.add("buffersink")
        src.link_to(field)
        field.link_to(sink)
        self.graph.configure()
        self.time_base = 1 / Fraction(fps)

    def __call__(self, vf):
        pts = vf.pts
        vf.time_base = self.time_base
        self.graph.push(vf)
        out = self.graph.pull()
        out.pts = pts
        return out


class TrackAudio:
    """The voice-over as eight mono 24-bit 48 kHz PCM tracks (the ``PlainAudio`` interface the muxer
    drives: ``add_stream``, ``mux_until``, ``close``)."""

    BLOCK = 8192
    RATE = 48_000

    def __init__(self, path, channel_map=None):
        from studio.core.media.audio import Resampled, probe
        from studio.core.media.delivery_audio import AUDIO_FORMATS, VOICE

        self.path = Path(path)
        self.info = probe(path)
        self.channels = 2 if self.info.channels == 2 else 1
        self.map = tuple(channel_map or AUDIO_FORMATS["8-mono-48k"].channel_map)
        self._voice = [k for k, what in enumerate(self.map) if what == VOICE]
        self.rate = self.RATE
        self._source = Resampled(self.info, self.channels, self.rate, self.BLOCK, quality="VHQ")
        self._sent = 0
        self.how = "pcm"
        self.cancel = threading.Event()
        self.wait_s, self.ready_at = 0.0, None
        self.copy = False
        self._remote = None
        self.streams: list = []
        self._video_s = 0.0  # the video's end so far (the tracks are padded to it)

    def packets_at_most(self) -> int:
        return len(self.map) * (int(self.info.duration_s * self.rate / self.BLOCK) + 64)

    def add_stream(self, container) -> None:
        self.streams = [container.add_stream("pcm_s24le", rate=self.rate, layout="mono") for _ in self.map]
        self.stream = self.streams[0]

    def _encode(self, container, block: np.ndarray) -> None:
        import av

        n = len(block)
        ints = (np.clip(np.round(block * 8388607.0), -8388608, 8388607).astype(np.int32) << 8).astype(np.int32)
        silence = np.zeros(n, np.int32)
        for k, stream in enumerate(self.streams):
            if k in self._voice:  # the voice: a stereo voice-over's left on the first, right on the second
                data = ints[:, min(self._voice.index(k), ints.shape[1] - 1)]
            else:
                data = silence
            frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(data).reshape(1, -1), format="s32", layout="mono")
            frame.sample_rate = self.rate
            frame.pts = self._sent
            frame.time_base = Fraction(1, self.rate)
            for pkt in stream.encode(frame):
                container.mux(pkt)
        self._sent += n

    def mux_until(self, container, seconds: float | None) -> None:
        """Encode and mux the tracks up to ``seconds`` (None: to the end, then flush). The tracks end
        with the video: a voice-over shorter than the video is padded with silence (FFmpeg's MXF
        interleaver drops the video frames that have no audio beside them)."""
        if seconds is not None:
            self._video_s = max(self._video_s, float(seconds))
        target = None if seconds is None else int(seconds * self.rate) + self.BLOCK
        if not self._source.eof and (target is None or self._sent < target):
            for block in self._source:
                self._encode(container, block)
                if target is not None and self._sent >= target:
                    break
        if seconds is None:
            short = round(self._video_s * self.rate) - self._sent
            while short > 0:
                n = min(short, self.BLOCK)
                self._encode(container, np.zeros((n, self.channels), np.float32))
                short -= n
            for stream in self.streams:
                for pkt in stream.encode(None):
                    container.mux(pkt)

    def close(self) -> None:
        self._source.close()

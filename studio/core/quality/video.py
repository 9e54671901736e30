"""The checked video: its stream facts, its frames as luma planes with RGB crops on demand, and
the voice (the video's own audio track or a separate file) as mono 16 kHz samples.

    info = probe_video("clip.mp4")                 # VideoInfo: size, fps, frames, audio track or not
    for frame in iter_frames("clip.mp4"):          # Frame: index, luma [H,W] uint8, rgb(x0,y0,x1,y1)
        ...
    voice = load_voice("clip.mp4", info)           # float32 [n] at 16 kHz, aligned to frame 0

Frames are decoded by PyAV. For the planar 4:2:0 formats every encoder writes, the luma plane
is used in place and only the face box is converted to RGB (for the face mesh); a whole 1080p
frame is converted only when the face must be found again. The audio is aligned by timestamps:
sample 0 is the moment the video's first frame is shown.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from studio.core.constants import SAMPLE_RATE
from studio.core.errors import InputError

log = logging.getLogger(__name__)

PLANAR_420 = ("yuv420p",)  # limited range 4:2:0: its planes are used as they are
JPEG_RANGE = 2  # PyAV's frame.color_range for full-range ("JPEG") video


@dataclass(frozen=True)
class VideoInfo:
    path: str
    width: int
    height: int
    fps: float
    frames: int | None  # from the container; None when it does not say
    has_audio: bool
    start_s: float  # the first video frame's time in the container

    @property
    def duration_s(self) -> float | None:
        return None if self.frames is None else self.frames / self.fps


def _check_file(path: str | os.PathLike, what: str) -> Path:
    p = Path(os.path.expanduser(os.fspath(path)))
    if not p.exists():
        raise InputError(f"{p}: no such file; check the path of the {what}")
    if p.is_dir():
        raise InputError(f"{p}: is a folder; give the path of the {what}")
    mode = p.stat().st_mode
    if stat.S_ISFIFO(mode):
        raise InputError(f"{p}: is a pipe (FIFO); save the {what} to a file and give its path")
    if not stat.S_ISREG(mode):
        raise InputError(f"{p}: is a device or socket, not a regular file; give the path of the {what}")
    return p


def probe_video(path: str | os.PathLike) -> VideoInfo:
    """Open ``path`` and describe its first video stream; one sentence (``InputError``) when it is
    not a video PyAV can decode."""
    import av

    p = _check_file(path, "video")
    try:
        with av.open(str(p)) as c:
            if not c.streams.video:
                raise InputError(f"{p}: has no video stream; give an MP4, MOV, MKV or WebM video")
            s = c.streams.video[0]
            rate = s.average_rate or s.guessed_rate or s.base_rate
            fps = float(rate) if rate else 25.0
            if not 1.0 <= fps <= 240.0:
                fps = 25.0
            frames = int(s.frames) if s.frames else None
            if frames is None and s.duration and s.time_base:
                frames = max(1, round(float(s.duration * s.time_base) * fps))
            start = float(s.start_time * s.time_base) if s.start_time is not None and s.time_base else 0.0
            first = next(c.decode(s), None)  # garbage often probes as something; it never decodes
            if first is None:
                raise InputError(f"{p}: the video stream has no frames; export the clip again")
            return VideoInfo(
                str(p),
                int(first.width),
                int(first.height),
                fps,
                frames,
                bool(c.streams.audio),
                start,
            )
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - PyAV's FFmpegError subclasses, StopIteration, ...
        raise InputError(
            f"{p}: not a video Studio can read, or the file is damaged ({_short(exc)}); "
            "give an MP4, MOV, MKV or WebM video"
        ) from None


@dataclass(eq=False)
class Frame:
    """One decoded frame: ``luma`` [H,W] uint8 (the Y plane, a view), RGB crops on demand."""

    index: int
    time_s: float
    luma: np.ndarray
    _frame: object  # the PyAV VideoFrame (its planes back ``luma``)
    _u: np.ndarray | None
    _v: np.ndarray | None

    @classmethod
    def of_rgb(cls, rgb: np.ndarray, luma: np.ndarray, index: int = 0) -> Frame:
        """A frame made from pixels in memory (an avatar's frame)."""
        return cls(index, 0.0, luma, _RGB(rgb), None, None)

    @property
    def size(self) -> tuple[int, int]:
        """``(width, height)`` in pixels."""
        height, width = self.luma.shape
        return width, height

    def rgb(self, x0: int = 0, y0: int = 0, x1: int | None = None, y1: int | None = None) -> np.ndarray:
        """RGB uint8 of the rectangle ``[y0:y1, x0:x1]`` (even corners for 4:2:0; clipped to the frame)."""
        import cv2

        w, h = self.size
        x1 = w if x1 is None else x1
        y1 = h if y1 is None else y1
        x0, y0 = max(0, x0 // 2 * 2), max(0, y0 // 2 * 2)
        x1, y1 = min(w // 2 * 2, -(-x1 // 2) * 2), min(h // 2 * 2, -(-y1 // 2) * 2)
        if self._u is None or self._v is None:  # not 4:2:0 planar: the library converts it all
            full = self._frame.to_ndarray(format="rgb24")  # type: ignore[attr-defined]
            return np.ascontiguousarray(full[y0:y1, x0:x1])
        cw, ch = x1 - x0, y1 - y0
        n = ch * cw
        flat = np.empty(n * 3 // 2, np.uint8)  # I420: Y, then the quarter-size U and V planes
        flat[:n].reshape(ch, cw)[:] = self.luma[y0:y1, x0:x1]
        flat[n : n + n // 4].reshape(ch // 2, cw // 2)[:] = self._u[y0 // 2 : y1 // 2, x0 // 2 : x1 // 2]
        flat[n + n // 4 :].reshape(ch // 2, cw // 2)[:] = self._v[y0 // 2 : y1 // 2, x0 // 2 : x1 // 2]
        buf = flat.reshape(ch * 3 // 2, cw)
        return cv2.cvtColor(buf, cv2.COLOR_YUV2RGB_I420)


class _RGB:
    """Stands in for a PyAV frame around RGB pixels in memory."""

    def __init__(self, rgb: np.ndarray):
        self._rgb = rgb

    def to_ndarray(self, format: str = "rgb24") -> np.ndarray:
        return self._rgb


def luma_of_rgb(rgb: np.ndarray) -> np.ndarray:
    """BT.709 limited-range luma of RGB, as Studio's encoders write it (so an avatar frame, a decoded
    frame of its render and a frame of any other format compare in the same units)."""
    import cv2

    w = np.array([[0.2126, 0.7152, 0.0722]], np.float32) * (219.0 / 255.0)
    y = cv2.transform(np.ascontiguousarray(rgb), w)  # saturating uint8, rounded
    return np.asarray(cv2.add(y, np.full_like(y, 16)))


def _frame(k: int, t: float, f) -> Frame:
    """A decoded frame: limited-range 4:2:0 planes in place; any other format (4:2:2, 4:4:4, full
    range, RGB, odd sizes) converted to RGB once by the library, its luma computed as Studio's."""
    if (
        f.format.name in PLANAR_420
        and f.width % 2 == 0
        and f.height % 2 == 0
        and getattr(f, "color_range", 0) != JPEG_RANGE
    ):
        y = _plane(f.planes[0], f.height, f.width)
        u = _plane(f.planes[1], f.height // 2, f.width // 2)
        v = _plane(f.planes[2], f.height // 2, f.width // 2)
        return Frame(k, t, y, f, u, v)
    rgb = f.to_ndarray(format="rgb24")
    return Frame(k, t, luma_of_rgb(rgb), _RGB(rgb), None, None)


def _plane(plane, rows: int, cols: int) -> np.ndarray:
    arr = np.frombuffer(plane, np.uint8)
    return arr.reshape(-1, plane.line_size)[:rows, :cols]


def iter_frames(path: str | os.PathLike, info: VideoInfo | None = None) -> Iterator[Frame]:
    """Every frame of the first video stream, in presentation order, numbered from 0."""
    import av

    info = info or probe_video(path)
    try:
        with av.open(str(path)) as c:
            s = c.streams.video[0]
            s.thread_type = "AUTO"
            for k, f in enumerate(c.decode(s)):
                t = float(f.time) - info.start_s if f.time is not None else k / info.fps
                yield _frame(k, t, f)
    except av.error.FFmpegError as exc:
        raise InputError(f"{path}: the video data is damaged ({_short(exc)}); export the clip again") from None


def load_voice(
    path: str | os.PathLike,
    info: VideoInfo | None = None,
    audio: str | os.PathLike | None = None,
    max_s: float | None = None,
) -> np.ndarray:
    """The voice as mono float32 at 16 kHz: ``audio`` (any file ``studio.core.media.audio`` reads, or a
    video's audio track) when given, else the video's own track aligned to its first frame.

    The same header limits as a render (``audio.probe``: the voice-over limit, read before decoding),
    and the voice is decoded as a stream: ``max_s`` keeps only its first seconds (the check compares
    the voice with the video's frames), so memory stays flat in the voice's length (a 3-hour FLAC for
    a 1 s video peaked at 4.9 GB when it was decoded whole)."""
    from studio.core.media.audio import probe
    from studio.core.media.audio_info import TooLong

    if audio is not None:
        from studio.core.errors import AudioError

        try:
            voice = probe(audio)
        except TooLong:
            raise
        except AudioError as exc:
            p = _check_file(audio, "voice-over")
            try:
                return _track_samples(p, None, max_s)
            except InputError:
                raise exc from None
        return _decoded(voice, max_s)
    info = info or probe_video(path)
    if not info.has_audio:
        raise InputError(f"{info.path}: the video has no audio track; give the voice-over with --audio VOICE")
    try:
        probe(info.path)  # its track's length against the limit, from the header
    except TooLong:
        raise
    except InputError:
        pass  # a track the audio reader cannot describe: decoded below, still no further than max_s
    return _track_samples(Path(info.path), info.start_s, max_s)


def voice_seconds(path: str | os.PathLike, audio: str | os.PathLike | None = None) -> float | None:
    """How long the voice is, from its header (None where it does not say)."""
    from studio.core.media.audio import probe

    try:
        return probe(audio if audio is not None else path).duration_s
    except InputError:
        return None


def _decoded(voice, max_s: float | None) -> np.ndarray:
    from studio.core.media.audio import decode

    count = None if max_s is None else max(1, int(max_s * SAMPLE_RATE))
    blocks = list(decode(voice, 0, count))
    return np.concatenate(blocks).astype(np.float32, copy=False) if blocks else np.zeros(0, np.float32)


def _track_samples(path: Path, video_start: float | None, max_s: float | None = None) -> np.ndarray:
    """The first audio stream decoded to mono 16 kHz float32. With ``video_start``, sample 0 is
    that moment (silence is put before an audio track that starts later, an earlier one is cut).
    ``max_s``: decoding stops after that many seconds of it."""
    import av

    chunks: list[np.ndarray] = []
    first_t: float | None = None
    cap = None if max_s is None else int(max_s * SAMPLE_RATE)
    have = 0
    try:
        with av.open(str(path)) as c:
            if not c.streams.audio:
                raise InputError(f"{path}: has no audio track; give a WAV, FLAC, OGG or MP3 voice-over")
            s = c.streams.audio[0]
            res = av.AudioResampler(format="flt", layout="mono", rate=SAMPLE_RATE)
            for f in c.decode(s):
                if first_t is None and f.time is not None:
                    first_t = float(f.time)
                for g in res.resample(f):
                    chunks.append(g.to_ndarray().reshape(-1))
                    have += len(chunks[-1])
                if cap is not None and have >= cap:
                    break
            else:
                for g in res.resample(None):
                    chunks.append(g.to_ndarray().reshape(-1))
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - any decoder failure gets the same sentence
        raise InputError(
            f"{path}: its audio track cannot be decoded ({_short(exc)}); give the voice-over with --audio VOICE"
        ) from None
    x = np.concatenate(chunks).astype(np.float32) if chunks else np.zeros(0, np.float32)
    if not np.isfinite(x).all():
        raise InputError(f"{path}: the audio track holds invalid (NaN or infinite) samples; export it again")
    if video_start is not None and first_t is not None:
        lead = round((first_t - video_start) * SAMPLE_RATE)
        if lead > 0:
            x = np.concatenate([np.zeros(lead, np.float32), x])
        elif lead < 0:
            x = x[-lead:]
    return x if cap is None else x[:cap]


def _short(exc: Exception) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:120].rstrip(".")


def frame_at(path: str | os.PathLike, index: int, info: VideoInfo) -> Frame | None:
    """Frame ``index`` (by its timestamp), found by seeking; None past the end."""
    import av

    target = index / info.fps
    try:
        with av.open(str(path)) as c:
            s = c.streams.video[0]
            if target > 2.0 and s.time_base:
                c.seek(
                    int((target - 1.0 + info.start_s) / s.time_base),
                    stream=s,
                    backward=True,
                )
            for k, f in enumerate(c.decode(s)):
                t = float(f.time) - info.start_s if f.time is not None else k / info.fps
                if t >= target - 0.5 / info.fps:
                    return _frame(index, t, f)
    except av.error.FFmpegError as exc:
        raise InputError(f"{path}: the video data is damaged ({_short(exc)}); export the clip again") from None
    return None

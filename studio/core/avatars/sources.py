"""Avatar sources: what a file is (photo or video), photos as RGB, videos on a frame grid by timestamp.

kind = source_kind(path)                   # "photo" or "video"; AvatarError otherwise (also for a
                                           # frame over MAX_PIXELS, read from the header, not decoded)
rgb = read_image(path)                     # [H,W,3] uint8, EXIF orientation applied
rgb, was = fit_photo(rgb)                  # at most 3840x2160 (either orientation), even sides
                                           # (photos, and every frame of a video above 4K)
for rgb in VideoReader(path, trim_start, trim_end, rate): ...   # frame k = the one shown at start + k/rate
"""

from __future__ import annotations

import contextlib
import logging
from fractions import Fraction
from pathlib import Path

import numpy as np

from studio.core.errors import AvatarError
from studio.core.media.rates import DEFAULT_RATE

log = logging.getLogger(__name__)

IMAGE_FORMATS = ("PNG", "JPEG", "MPO", "WEBP", "BMP", "TIFF")
MAX_PHOTO = (3840, 2160)  # long side x short side: 4K UHD, inside H.264 level 5.1's frame size
SOURCE_HELP = "a PNG/JPEG/WebP photo or a video (MP4, MOV, MKV, WebM ...)"
MAX_PIXELS = 100_000_000  # a photo's pixels, checked from the header before decoding
MAX_VIDEO_FRAME_PIXELS = 7680 * 4320  # a video frame's (8K): every frame of a video is decoded, not one


class TooLarge(AvatarError):
    """A photo or video frame larger than Studio decodes, said from its header."""


def check_pixels(path: Path, width: int, height: int, what: str = "image", most: int = MAX_PIXELS) -> None:
    """One sentence when a photo or video frame is bigger than ``most`` pixels (its decoded size, not
    its file size, is what it costs: a 32 KB PNG can hold 12000x12000 pixels, 432 MB of RGB)."""
    if int(width) * int(height) > most:
        raise TooLarge(
            f"{path}: the {what} is {width}x{height} ({width * height / 1e6:.0f} megapixels), over Studio's "
            f"{most / 1e6:.0f}-megapixel limit; scale it down (3840x2160 is the most an avatar uses) "
            "and add it again"
        )


@contextlib.contextmanager
def _open_image(path: Path):
    """``PIL.Image.open`` (lazy: only the header is read) without PIL's DecompressionBombWarning on
    stderr: the size is checked here, in one sentence, before any pixel is decoded."""
    import warnings

    from PIL import Image

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            im = Image.open(path)
        except Image.DecompressionBombError:  # over PIL's own hard limit (2 x 89.5 megapixels)
            raise TooLarge(
                f"{path}: the image has more than {2 * (Image.MAX_IMAGE_PIXELS or 0) / 1e6:.0f} megapixels, over "
                f"Studio's {MAX_PIXELS / 1e6:.0f}-megapixel limit; scale it down (3840x2160 is the most an avatar "
                "uses) and add it again"
            ) from None
        with im:
            yield im


@contextlib.contextmanager
def open_image(path: Path, what: str = "image"):
    """``PIL.Image.open`` with its size checked from the header (``check_pixels``) before any pixel is
    decoded: every image Studio reads (photos, mattes, backgrounds) goes through here."""
    with _open_image(path) as im:
        check_pixels(path, *im.size, what=what)
        yield im


def source_kind(path: Path) -> str:
    from PIL import UnidentifiedImageError

    try:
        with _open_image(path) as im:
            if im.format in IMAGE_FORMATS and getattr(im, "n_frames", 1) == 1:
                check_pixels(path, *im.size, what="photo")
                return "photo"
    except (UnidentifiedImageError, OSError, ValueError):
        pass
    import av

    try:
        with av.open(str(path)) as container:
            if container.streams.video:
                cc = container.streams.video[0].codec_context
                if cc.width and cc.height:
                    check_pixels(path, cc.width, cc.height, "video frame", MAX_VIDEO_FRAME_PIXELS)  # before decoding
                next(container.decode(video=0))  # garbage often probes as something; it never decodes
                return "video"
    except AvatarError:
        raise
    except Exception:  # noqa: BLE001 - PyAV raises FFmpegError subclasses (InvalidDataError, ...), StopIteration
        pass
    raise AvatarError(f"{path}: not an image or video Studio can read (or the file is corrupt); give {SOURCE_HELP}")


def read_image(path: Path) -> np.ndarray:
    return read_image_alpha(path)[0]


def read_image_alpha(path: Path) -> tuple[np.ndarray, np.ndarray | None]:
    """``(rgb, alpha)``: the photo (EXIF orientation applied) and its alpha channel, None when it has
    none (an RGBA or LA PNG, a palette PNG with a transparent colour, a WebP with alpha have one)."""
    from PIL import ImageOps

    try:
        with _open_image(path) as im:
            check_pixels(path, *im.size, what="photo")
            im = ImageOps.exif_transpose(im)
            has_alpha = im.mode in ("RGBA", "LA", "PA") or (im.mode == "P" and "transparency" in im.info)
            if has_alpha:
                rgba = np.asarray(im.convert("RGBA"))
                rgb, alpha = rgba[..., :3], rgba[..., 3]
                if alpha.min() == 255:  # an alpha channel that is opaque everywhere: none
                    alpha = None
            else:
                rgb, alpha = np.asarray(im.convert("RGB")), None
    except (OSError, ValueError) as exc:
        raise AvatarError(f"{path}: the image is corrupt ({exc}); export it again") from None
    return np.ascontiguousarray(rgb), None if alpha is None else np.ascontiguousarray(alpha)


def read_matte(path: Path, width: int, height: int) -> np.ndarray:
    """A matte file as the alpha of a ``width`` x ``height`` photo: its own alpha channel when it has
    one, else its grey levels (white opaque, black transparent); scaled when its size differs but not
    its shape (within 1 %); anything else one sentence."""
    from PIL import Image, UnidentifiedImageError

    p = Path(path)
    if not p.is_file():
        raise AvatarError(f"{p}: {not_a_file(p)}, not a matte file; give a PNG whose white is the presenter")
    try:
        with _open_image(p) as im:
            check_pixels(p, *im.size, what="matte")
            if im.mode in ("RGBA", "LA", "PA") and np.asarray(im.convert("RGBA"))[..., 3].min() < 255:
                m = np.asarray(im.convert("RGBA"))[..., 3]
            else:
                m = np.asarray(im.convert("L"))
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise AvatarError(f"{p}: not an image Studio can read as a matte ({exc}); give a PNG") from None
    mh, mw = m.shape
    if (mw, mh) != (width, height):
        if abs(mw / mh - width / height) > 0.01 * (width / height):
            raise AvatarError(
                f"{p}: the matte is {mw}x{mh} but the photo is {width}x{height}; give a matte of the photo's size"
            )
        m = np.asarray(Image.fromarray(m).resize((width, height), Image.BILINEAR))
    if int(m.max()) == 0:  # nothing opaque: the matte's fault, not the photo's (no face would be found)
        raise AvatarError(
            f"{p}: the matte is black everywhere, so it leaves nothing of the photo visible; give a matte whose "
            "white is the presenter"
        )
    return np.ascontiguousarray(m, np.uint8)


def not_a_file(p: Path) -> str:
    """What ``p`` is, when it is not a regular file: for a sentence that tells the truth about it
    (``/dev/zero`` is a device, not a missing file)."""
    import stat

    try:
        mode = p.stat().st_mode
    except FileNotFoundError:
        return "no such file"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if stat.S_ISDIR(mode):
        return "is a folder"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "is a device, not a file"
    if stat.S_ISFIFO(mode):
        return "is a pipe (FIFO), not a file"
    if stat.S_ISSOCK(mode):
        return "is a socket, not a file"
    return "is not a regular file"


def over_grey(rgb: np.ndarray, alpha: np.ndarray | None) -> np.ndarray:
    """``rgb`` seen over mid grey where ``alpha`` makes it transparent: what face tracking looks at
    (transparent pixels hold any colour, often black, which a face detector should not see)."""
    if alpha is None:
        return rgb
    a = alpha.astype(np.float32)[..., None] / 255.0
    return np.ascontiguousarray((rgb.astype(np.float32) * a + 128.0 * (1.0 - a) + 0.5).astype(np.uint8))


def fit_photo(rgb: np.ndarray, limit: tuple[int, int] = MAX_PHOTO) -> tuple[np.ndarray, tuple[int, int] | None]:
    """``(rgb, None)`` when the photo fits ``limit`` (long x short side), else the photo scaled
    down to fit, aspect kept, both sides even (H.264 4:2:0), and its original ``(w, h)``.

    A bigger frame gains nothing on screen, costs RAM in every render (each frame is composited
    and encoded at the avatar's size) and exceeds the H.264 level the encoders declare."""
    h, w = rgb.shape[:2]
    nw, nh = fitted_size(w, h, limit)
    if (nw, nh) == (w, h):
        return rgb, None
    import cv2

    return np.ascontiguousarray(cv2.resize(rgb, (nw, nh), interpolation=cv2.INTER_AREA)), (w, h)


def fitted_size(w: int, h: int, limit: tuple[int, int] = MAX_PHOTO) -> tuple[int, int]:
    """The (width, height) an avatar of ``w`` x ``h`` source frames has once ingested (``fit_photo``)."""
    long_side, short_side = max(limit), min(limit)
    f = min(1.0, long_side / max(w, h), short_side / min(w, h))
    if f >= 1.0:
        return w, h
    return max(2, int(w * f) // 2 * 2), max(2, int(h * f) // 2 * 2)


class VideoReader:
    """Decodes a video with PyAV and yields RGB frames on the grid of ``rate`` by timestamp.

    Output frame ``k`` is the source frame on screen at ``trim_start + k / rate``; the clip ends at
    ``trim_end`` or where the last source frame stops being shown. Display rotation is applied. At the
    video's own (constant) rate every source frame comes out once: nothing is resampled.
    """

    def __init__(self, path: Path, trim_start: float | None, trim_end: float | None, rate=DEFAULT_RATE):
        self.path, self.start, self.end = path, float(trim_start or 0.0), trim_end
        self.rate = Fraction(rate)
        fps = float(self.rate)
        import av

        try:
            with av.open(str(path)) as c:
                s = c.streams.video[0]
                #: frames come as RGBA (ProRes 4444 / VP9 with alpha ...): the alpha is kept
                self.alpha = stream_has_alpha(s)
                rate = s.average_rate or s.guessed_rate
                self.source_fps = float(rate) if rate else None
                dur = float(s.duration * s.time_base) if s.duration else (c.duration / 1e6 if c.duration else None)
                # what the video stream itself declares (an index that survived a truncation still
                # says it): its duration, else its frame count at its rate
                own = (
                    float(s.duration * s.time_base)
                    if s.duration
                    else (s.frames / self.source_fps if s.frames and self.source_fps else None)
                )
        except Exception as exc:  # noqa: BLE001 - deliberate: any failure here is reported, not fatal
            raise AvatarError(f"{path}: the video cannot be opened ({exc}); re-encode it as H.264 MP4") from None
        span = None if dur is None else (min(dur, self.end) if self.end else dur) - self.start
        if span is not None and span <= 0:
            raise AvatarError(f"{path}: --trim-start {self.start:g} s is past the end of the {dur:.2f} s video")
        self.estimate = None if span is None else max(1, int(np.ceil(span * fps - 1e-6)))
        own_span = None if own is None else (min(own, self.end) if self.end else own) - self.start
        #: frames (at ``rate``) the stream's own header promises over the requested span (None: unknown)
        self.declared = None if own_span is None or own_span <= 0 else max(1, int(np.ceil(own_span * fps - 1e-6)))
        self.stopped_early: str | None = None  # the decoder error that ended the clip, if any

    def __iter__(self):
        import av

        fps = float(self.rate)
        eps = 1e-6
        k, prev, prev_t, dur = 0, None, 0.0, None
        try:
            with av.open(str(self.path)) as c:
                s = c.streams.video[0]
                s.thread_type = "AUTO"
                origin = float(s.start_time * s.time_base) if s.start_time is not None else None
                if self.start > 2.0:
                    c.seek(int((self.start - 1.0 + (origin or 0.0)) / s.time_base), stream=s, backward=True)
                fallback = 1.0 / self.source_fps if self.source_fps else 1.0 / fps
                for n, frame in enumerate(_decode(c, s)):
                    if frame.time is None and frame.pts is not None:
                        tt = float(frame.pts * s.time_base)
                        origin = tt if origin is None else origin
                        t = tt - origin
                    elif frame.time is None:
                        t = n * fallback
                    else:
                        origin = frame.time if origin is None else origin
                        t = frame.time - origin
                    while prev is not None and self.start + k / fps < t - eps and not self._past(k):
                        yield self._rgb(prev)
                        k += 1
                    if self._past(k):
                        return
                    prev, prev_t = frame, t
                    dur = float(frame.duration * frame.time_base) if frame.duration and frame.time_base else fallback
        except av.error.FFmpegError as exc:
            if prev is None:
                raise AvatarError(f"{self.path}: the video data is corrupt ({exc}); re-encode it") from None
            self.stopped_early = str(exc)  # the caller compares what decoded with ``declared``
            log.info("%s: decoding stopped early (%s)", self.path, exc)
        if prev is None:
            return
        end = prev_t + (dur or 0.0)
        if self.end is not None:
            end = min(end, self.end)
        while self.start + k / fps < end - eps:
            yield self._rgb(prev)
            k += 1

    def _past(self, k: int) -> bool:
        return self.end is not None and self.start + float(k / self.rate) >= self.end - 1e-6

    def _rgb(self, frame) -> np.ndarray:
        """The frame as RGB [H,W,3], or RGBA [H,W,4] when the video has alpha; rotated for display."""
        rgb = frame.to_ndarray(format="rgba" if self.alpha else "rgb24")
        rot = getattr(frame, "rotation", 0) or 0
        if rot % 360:
            rgb = np.ascontiguousarray(np.rot90(rgb, k=int(round(rot / 90)) % 4))
        return rgb


def stream_has_alpha(stream) -> bool:
    """Whether a video stream carries alpha: a pixel format with an alpha plane (ProRes 4444 with
    alpha decodes as yuva444p12le), or VP9 in WebM with Matroska's alpha_mode (the alpha is in the
    blocks' side data, which FFmpeg's own vp9 decoder ignores and libvpx's reads)."""
    import av

    cc = stream.codec_context
    try:
        if cc.pix_fmt and any(c.is_alpha for c in av.VideoFormat(cc.pix_fmt).components):
            return True
    except (ValueError, TypeError):
        pass
    return cc.name == "vp9" and str(stream.metadata.get("alpha_mode", stream.metadata.get("ALPHA_MODE", ""))) == "1"


def _decode(container, stream):
    """The stream's frames: through libvpx for VP9 with alpha (its alpha plane), else FFmpeg's decoder."""
    if stream.codec_context.name == "vp9" and stream_has_alpha(stream):
        import av

        try:
            ctx = av.CodecContext.create("libvpx-vp9", "r")
        except Exception:  # noqa: BLE001 - no libvpx decoder: the colour planes without alpha
            log.warning("%s: no libvpx-vp9 decoder here: its alpha is lost", container.name)
            yield from container.decode(stream)
            return
        for pkt in container.demux(stream):
            yield from ctx.decode(pkt)
        return
    yield from container.decode(stream)

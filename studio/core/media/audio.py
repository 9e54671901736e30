"""Audio: decode any voice-over to mono 16 kHz float32 on the frame grid at the output's rate
(its RMS, silence mask and cached envelope are ``media.analysis``'s).

WAV, FLAC, OGG and MP3 are read by libsndfile (soundfile); what it does not read (M4A/AAC, the audio
track of a video file, Matroska/WebM, WMA...) is decoded by FFmpeg through PyAV (``read_blocks``
hides which; ``media.audio_ffmpeg`` holds the FFmpeg side). ``aac_copyable(path)``: the voice-over
already is AAC with its configuration, so an output takes its packets as they are (no re-encode).
What a file is (``AudioInfo``) and the length limit, checked from the header by ``probe``, are
``media.audio_info``'s.

Everything streams in blocks, so a two-hour file needs little memory beyond the 16 kHz array:

    wave = load("voice.flac")          # Wave: samples float32 [n] at 16 kHz, info about the source
    wave = wave.at(RATES["29.97"])     # the same samples on another frame grid (default 25 fps)
    part = load("voice.flac", window=(9000, 9500))   # only frames 9000..9499 decoded (seeked)

Frame ``t`` at rate ``r`` covers samples ``[floor(16000 t / r), floor(16000 (t + 1) / r))`` (640 each
at 25 fps; 533 or 534 at 29.97); a clip has ``ceil(duration x r)`` frames (``rates.frames_in``).
Seeking (``load(window=)``, ``read_frames``, ``frame_start``) works in 25 fps frames whatever the
output's rate (a window at another rate is widened to the 25 fps frames around it).
"""

from __future__ import annotations

import logging
import math
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path

import numpy as np

from studio.core.constants import (
    FPS,
    SAMPLE_RATE,
    SAMPLES_PER_FRAME,
)
from studio.core.errors import AudioError
from studio.core.media import audio_ffmpeg
from studio.core.media.audio_info import READ_BLOCK, SUPPORTED, AudioInfo, check_duration, quiet_stderr
from studio.core.media.rates import DEFAULT_RATE, first_sample

log = logging.getLogger(__name__)

PREROLL_FRAMES = 10  # video frames decoded (and dropped) before a window, so the resampler is settled


@dataclass(frozen=True, eq=False)
class Wave:
    """Mono 16 kHz float32 samples (``len == ceil(duration * 16000)``), the source's info, and the
    frame grid (``rate``, exact) the clip is cut into."""

    samples: np.ndarray
    info: AudioInfo
    window: tuple[int, int] | None = None  # 25 fps frames that were decoded (None: all of them)
    rate: Fraction = DEFAULT_RATE

    @property
    def decoded(self) -> tuple[int, int]:
        """``(first, end)``: the 25 fps frames (seeking's grid) whose samples were decoded."""
        return self.window if self.window is not None else (0, self.info.frames)

    def at(self, rate) -> Wave:
        """The same samples on the frame grid of ``rate`` (no copy)."""
        rate = Fraction(rate)
        return self if rate == self.rate else replace(self, rate=rate)

    @property
    def frames(self) -> int:
        return self.info.frames_at(self.rate)

    @property
    def span(self) -> tuple[int, int]:
        """``(first, end)``: the frames (at ``rate``) whose samples are all real (outside: zeros,
        never decoded)."""
        if self.window is None:
            return 0, self.frames
        w0, w1 = self.window
        if self.rate == DEFAULT_RATE:
            return w0, w1
        num, den = self.rate.numerator, self.rate.denominator
        first = -(-w0 * SAMPLES_PER_FRAME * num // (SAMPLE_RATE * den))
        end = self.frames if w1 >= self.info.frames else w1 * SAMPLES_PER_FRAME * num // (SAMPLE_RATE * den)
        return first, max(first, end)

    @property
    def duration_s(self) -> float:
        return self.info.duration_s

    def frame_span(self, t: int) -> tuple[int, int]:
        """The samples ``[a, b)`` of frame ``t``."""
        return int(first_sample(t, self.rate, SAMPLE_RATE)), int(first_sample(t + 1, self.rate, SAMPLE_RATE))

    def frame_samples(self, t: int) -> np.ndarray:
        """The samples of frame ``t`` (640 at 25 fps; the last frame zero-padded)."""
        a, b = self.frame_span(t)
        out = np.zeros(b - a, np.float32)
        chunk = self.samples[a:b]
        out[: len(chunk)] = chunk
        return out


# --------------------------------------------------------------------------------------------
# Loading


def probe(path: str | os.PathLike) -> AudioInfo:
    """Check that ``path`` is a readable, non-empty audio file and describe it.

    Raises ``AudioError`` with one actionable sentence otherwise. A pipe, device or socket is
    refused without opening it (a FIFO would block until someone writes to it); text and
    well-known non-audio files are named as such from their first bytes, before libsndfile sees
    them; libsndfile's decoders (mpg123's "Note: Illegal Audio-MPEG-Header...") are kept off
    stderr and go to the debug log.
    """
    import soundfile as sf

    p = Path(path)
    if not p.exists():
        raise AudioError(f"{p}: no such file; check the path")
    if p.is_dir():
        raise AudioError(f"{p}: is a folder, not an audio file; give the path of a {SUPPORTED} file")
    st = p.stat()
    if stat.S_ISFIFO(st.st_mode):
        raise AudioError(f"{p}: is a pipe (FIFO), not a regular file; save the voice-over to a file and give its path")
    if not stat.S_ISREG(st.st_mode):
        raise AudioError(f"{p}: is a device or socket, not a regular file; give the path of a {SUPPORTED} file")
    if not os.access(p, os.R_OK):
        raise AudioError(f"{p}: permission denied; make the file readable")
    if st.st_size == 0:
        raise AudioError(f"{p}: the file is empty (0 bytes); export the voice-over again")
    try:
        with open(p, "rb") as fh:
            head = fh.read(SNIFF_BYTES)
    except OSError as exc:
        raise AudioError(f"{p}: cannot be read ({exc.strerror or exc}); check the file") from None
    what = _not_audio(head)
    if what:
        raise AudioError(f"{p}: not an audio file (it looks like {what}); give the path of a {SUPPORTED} file")
    if audio_ffmpeg.is_ffmpeg_container(head, p.suffix):  # M4A/AAC, a video file...: libsndfile does not read these
        info = audio_ffmpeg.probe_ffmpeg(p)
        check_duration(info)
        return info
    try:
        with quiet_stderr():
            info = sf.info(str(p))
    except Exception as exc:  # noqa: BLE001 - soundfile raises LibsndfileError / RuntimeError / TypeError
        detail = _sf_detail(exc)
        raise AudioError(f"{p}: not an audio file Studio can read ({detail}); convert it to {SUPPORTED}") from None
    if info.frames <= 0 or info.samplerate <= 0:
        raise AudioError(f"{p}: contains no audio samples; export the voice-over again")
    out = AudioInfo(
        path=str(p),
        format=info.format,
        subtype=info.subtype or "",
        source_rate=int(info.samplerate),
        channels=int(info.channels),
        source_frames=int(info.frames),
    )
    if info.frames >= UNKNOWN_LENGTH:  # libsndfile's answer for a FLAC whose STREAMINFO has no length:
        # libsndfile cannot read such a stream either (psf_fseek fails); FFmpeg decodes it, counted here
        out = audio_ffmpeg.probe_ffmpeg(p)
        out = replace(out, source_frames=audio_ffmpeg.count_frames(out))
    check_duration(out)
    return out


#: libsndfile reports SF_COUNT_MAX frames for a stream of unknown length (``flac -`` and recorders
#: write a STREAMINFO with 0 samples when they cannot seek back to fill it in)
UNKNOWN_LENGTH = 2**62


SNIFF_BYTES = 4096
_MAGIC = (  # files people drop on Studio by mistake: (offset, bytes, what)
    (0, b"\x89PNG", "a PNG image"),
    (0, b"\xff\xd8\xff", "a JPEG image"),
    (0, b"GIF8", "a GIF image"),
    (0, b"%PDF", "a PDF document"),
    (0, b"PK\x03\x04", "a ZIP archive (or an office document)"),
)


def _not_audio(head: bytes) -> str | None:
    """What ``head`` (a file's first bytes) is when it is plainly not audio; None otherwise."""
    for offset, magic, what in _MAGIC:
        if head[offset : offset + len(magic)] == magic:
            return what
    if not head or b"\0" in head:
        return None
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 4:  # not just a character cut at the end of the sample
            return None
        text = head[: exc.start].decode("utf-8")
    printable = sum(ch.isprintable() or ch in "\t\r\n\f" for ch in text)
    return "a text file" if text and printable >= 0.95 * len(text) else None


def load(path: str | os.PathLike, window: tuple[int, int] | None = None, rate=DEFAULT_RATE) -> Wave:
    """Decode ``path`` to mono 16 kHz float32 in blocks (downmix, then a soxr resampler), on the
    frame grid of ``rate``.

    ``window=(first, end)`` (25 fps frames, seeking's grid at any ``rate``: ``decode_frames``): decode only that stretch (``read_frames``: the file is
    seeked); the other samples stay zero and are never touched (the array is allocated lazily by
    the OS, so they cost no memory). ``first`` may move down a few frames (``frame_start``)."""
    info = probe(path)
    rate = Fraction(rate)
    n_out = -(-info.source_frames * SAMPLE_RATE // info.source_rate)
    if window is not None:
        first = frame_start(info, window[0])
        end = min(info.frames, max(first + 1, int(window[1])))
        window = None if first == 0 and end >= info.frames else (first, end)
    out = np.zeros(n_out, np.float32)
    first, end = window if window is not None else (0, info.frames)
    read_frames(info, first, end, out=out[first * SAMPLES_PER_FRAME :])
    return Wave(samples=out, info=info, window=window, rate=rate)


def frame_start(info: AudioInfo, frame: int) -> int:
    """``frame``, or the frame before it that starts on a whole source sample (every frame does at
    8, 16, 22.05, 32, 44.1 and 48 kHz; at most 24 frames earlier at any rate)."""
    step = FPS // math.gcd(info.source_rate, FPS)
    return max(0, int(frame)) // step * step


def read_frames(info: AudioInfo, first: int, end: int, out: np.ndarray | None = None) -> np.ndarray:
    """The 16 kHz samples of video frames ``first..end`` (``first`` from ``frame_start``), decoded
    from there on (seeked, with a pre-roll that settles the resampler: the values equal a whole
    decode's to float rounding). Shorter at the end of the clip; silence where decoding fell short.
    ``out``: a zeroed float32 array to decode into (at least as long; its start is returned)."""
    n_out = -(-info.source_frames * SAMPLE_RATE // info.source_rate)
    a = first * SAMPLES_PER_FRAME
    b = min(n_out, end * SAMPLES_PER_FRAME)
    out = np.zeros(max(0, b - a), np.float32) if out is None else out[: max(0, b - a)]
    pos = 0
    for chunk in decode(info, a, b - a):
        out[pos : pos + len(chunk)] = chunk
        pos += len(chunk)
    if pos == 0 and len(out):
        raise AudioError(f"{info.path}: contains no audio samples; export the voice-over again")
    if pos < len(out) * 0.98:
        log.warning("%s: decoded %d of %d expected samples; the rest is silence", info.path, pos, len(out))
    return out


def decode(info: AudioInfo, first: int = 0, count: int | None = None) -> Iterator[np.ndarray]:
    """Yield 16 kHz mono float32 blocks of the file: ``count`` samples (default: to the end) from
    16 kHz sample ``first`` (``first * source_rate / 16000`` must be a whole source sample).

    Raises ``AudioError`` for corrupt data and, after the last block, for samples that are not
    numbers (NaN, +-inf: refused, not patched, since the render's AAC track is encoded from the
    file itself)."""
    n_out = -(-info.source_frames * SAMPLE_RATE // info.source_rate)
    count = n_out - first if count is None else min(count, n_out - first)
    src_first, exact = divmod(first * info.source_rate, SAMPLE_RATE)
    if exact:
        raise ValueError(f"sample {first} does not start on a whole source sample at {info.source_rate} Hz")
    drop = 0  # resampled pre-roll samples to drop
    if src_first and info.source_rate != SAMPLE_RATE:
        step = FPS // math.gcd(info.source_rate, FPS)
        pre = min(first // SAMPLES_PER_FRAME, -(-PREROLL_FRAMES // step) * step)
        drop = pre * SAMPLES_PER_FRAME
        src_first -= pre * info.source_rate // FPS
    resampler = None
    if info.source_rate != SAMPLE_RATE:
        import soxr

        resampler = soxr.ResampleStream(info.source_rate, SAMPLE_RATE, 1, dtype="float32", quality="HQ")
    left = count

    def take(chunk: np.ndarray) -> np.ndarray:
        nonlocal drop, left
        if drop:
            cut = min(drop, len(chunk))
            chunk, drop = chunk[cut:], drop - cut
        chunk = chunk[:left]
        left -= len(chunk)
        return chunk

    bad = 0  # samples that are not numbers (NaN, +-inf): a damaged float file
    total = 0
    try:
        for block in read_blocks(info, READ_BLOCK, start=src_first):
            total += block.size
            bad += block.size - int(np.count_nonzero(np.isfinite(block)))
            mono = block.mean(axis=1, dtype=np.float32) if block.shape[1] > 1 else block[:, 0]
            chunk = take(resampler.resample_chunk(mono) if resampler else mono)
            if len(chunk):
                yield chunk
            if left <= 0:
                break
        if resampler and left > 0:
            chunk = take(resampler.resample_chunk(np.zeros(0, np.float32), last=True))
            if len(chunk):
                yield chunk
    except AudioError:
        raise
    except Exception as exc:  # noqa: BLE001 - deliberate: any failure here is reported, not fatal
        raise AudioError(
            f"{info.path}: the audio data is corrupt ({_sf_detail(exc)}); export the voice-over again"
        ) from None
    if bad:
        of = f"{info.source_frames * info.channels}" if first == 0 and left <= 0 else f"the {total} read"
        raise AudioError(
            f"{info.path}: {bad} of {of} samples are not numbers "
            "(NaN or infinite), so the file is damaged; export the voice-over again"
        )


def read_blocks(info: AudioInfo, block: int = READ_BLOCK, start: int = 0, stop: int | None = None):
    """The source's samples as float32 ``[n, channels]`` blocks at its own rate, from source frame
    ``start`` to ``stop`` (None: the end; an FFmpeg source then ends exactly at
    ``info.source_frames``: the decoder's padding after the last sample is dropped)."""
    if info.decoder == "ffmpeg":
        yield from audio_ffmpeg.ffmpeg_blocks(info, block, start, info.source_frames if stop is None else stop)
        return
    import soundfile as sf

    from studio.core.cancel import checkpoint

    with quiet_stderr():
        fh = sf.SoundFile(info.path)
    with fh:
        if start:
            fh.seek(min(start, fh.frames))
        left = None if stop is None else max(0, stop - start)
        while left is None or left > 0:
            checkpoint()  # a cancelled render stops decoding (a server asked to stop, a job cancelled)
            data = fh.read(block if left is None else min(block, left), dtype="float32", always_2d=True)
            if len(data) == 0:
                return
            if left is not None:
                left -= len(data)
            yield data


class Resampled:
    """The voice-over's blocks as float32 ``[n, channels]`` at ``rate`` (more than two channels, or two
    when ``channels`` is 1: a mono mix; soxr resamples when ``rate`` is not the source's), read as a
    muxer advances: each loop over it goes on where the last one stopped; ``eof`` once all is read.
    PCM and Opus tracks (``codecs.PlainAudio``) and MXF's tracks (``mxf.TrackAudio``) read through it."""

    def __init__(self, info: AudioInfo, channels: int, rate: int, block: int, quality: str = "HQ"):
        self.info, self.channels, self.rate, self.block = info, channels, rate, block
        self._resampler = None
        if rate != info.source_rate:
            import soxr

            self._resampler = soxr.ResampleStream(info.source_rate, rate, channels, dtype="float32", quality=quality)
        self._blocks = None
        self.eof = False

    def __iter__(self):
        if self._blocks is None:
            self._blocks = read_blocks(self.info, self.block)
        for block in self._blocks:
            block = np.asarray(block, np.float32)
            if block.shape[1] > 2 or (block.shape[1] == 2 and self.channels == 1):
                block = block.mean(axis=1, keepdims=True)
            if self._resampler is not None:
                block = self._resampler.resample_chunk(block)
            if len(block):
                yield block
        self.eof = True
        if self._resampler is not None:
            tail = self._resampler.resample_chunk(np.zeros((0, self.channels), np.float32), last=True)
            if len(tail):
                yield tail

    def close(self) -> None:
        self._blocks = None


def aac_copyable(path: str | os.PathLike) -> bool:
    """Whether ``path``'s first audio stream is AAC with its decoder configuration in the
    container (M4A/MP4/MOV, Matroska): an MP4 output can then take its packets unchanged. ADTS
    ``.aac`` files (configuration in every packet header) are decoded and encoded instead."""
    try:
        info = probe(path)
    except AudioError:
        return False
    if info.decoder != "ffmpeg" or info.subtype != "AAC":
        return False
    container, stream = audio_ffmpeg.open_av(Path(path))
    try:
        return bool(stream.codec_context.extradata) and (container.format.name or "").split(",")[0] in (
            "mov",
            "matroska",
        )
    finally:
        container.close()


def _sf_detail(exc: Exception) -> str:
    text = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
    # libsndfile messages repeat the path; keep only the reason.
    if ": " in text and text.startswith("Error opening"):
        text = text.rsplit(": ", 1)[-1]
    if "possibly a pipe" in text:  # libsndfile's words for any file whose format it cannot tell
        return "its format is not recognised, or it is damaged"
    return text.rstrip(".")

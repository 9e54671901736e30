"""Audio: decode any voice-over to mono 16 kHz float32, the frame grid at the output's rate, RMS,
the silence mask and a cached display envelope.

WAV, FLAC, OGG and MP3 are read by libsndfile (soundfile); what it does not read (M4A/AAC, the audio
track of a video file, Matroska/WebM, WMA...) is decoded by FFmpeg through PyAV (``read_blocks``
hides which). ``aac_copyable(path)``: the voice-over already is AAC with its configuration, so an
output takes its packets as they are (no re-encode).

Everything streams in blocks, so a two-hour file needs little memory beyond the 16 kHz array:

    wave = load("voice.flac")          # Wave: samples float32 [n] at 16 kHz, info about the source
    wave = wave.at(RATES["29.97"])     # the same samples on another frame grid (default 25 fps)
    part = load("voice.flac", window=(9000, 9500))   # only frames 9000..9499 decoded (seeked)
    rms = frame_rms(wave.samples, wave.frames, wave.rate)
    mask = silence_mask(rms, threshold=0.008, min_run=3)

Frame ``t`` at rate ``r`` covers samples ``[floor(16000 t / r), floor(16000 (t + 1) / r))`` (640 each
at 25 fps; 533 or 534 at 29.97); a clip has ``ceil(duration x r)`` frames (``rates.frames_in``).
Seeking (``load(window=)``, ``read_frames``, ``frame_start``) works in 25 fps frames whatever the
output's rate (a window at another rate is widened to the 25 fps frames around it).

``analyze(path)`` computes RMS and envelope in one streaming pass (memory bounded by the block
size, not the file: 10 h of audio needs the 36 MB of its RMS and envelope, not 2.3 GB of
samples) and caches them in the data folder, so the GUI can draw a one-hour waveform at once on
the second open.

Limits, checked from the header before anything is decoded (``probe``): a voice-over longer than
``max_audio_minutes()`` (default 240 minutes, ``STUDIO_MAX_AUDIO_MINUTES``; ``studio serve
--max-audio-minutes`` sets its own) is refused in one sentence, since its decoded size, not its
file size, is what a render holds (a 917 KB FLAC can hold 10 h of silence: 2.3 GB decoded).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import stat
import sys
import threading
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from fractions import Fraction
from pathlib import Path

import numpy as np

from studio.core.constants import (
    DEFAULT_MIN_SILENCE_FRAMES,
    DEFAULT_SILENCE_THRESHOLD,
    FPS,
    SAMPLE_RATE,
    SAMPLES_PER_FRAME,
)
from studio.core.errors import AudioError
from studio.core.media.rates import DEFAULT_RATE, first_sample, frames_in, rate_number

log = logging.getLogger(__name__)

READ_BLOCK = 1 << 18  # source frames per decoded block (~6 s at 44.1 kHz)
RMS_BLOCK_FRAMES = 8192  # video frames per RMS block (~5 M samples)
ENVELOPE_BUCKET = 160  # samples per envelope bucket: 100 buckets per second
CACHE_VERSION = 2  # 2: files with NaN/inf samples are refused (version 1 cached their NaN RMS)
SUPPORTED = "WAV, FLAC, OGG (Vorbis/Opus), MP3 or M4A/AAC"
DEFAULT_MAX_MINUTES = 240.0  # 4 h: 0.9 GB of 16 kHz samples in a render
PREROLL_FRAMES = 10  # video frames decoded (and dropped) before a window, so the resampler is settled


@dataclass(frozen=True)
class AudioInfo:
    """What the source file is, before any conversion."""

    path: str
    format: str
    subtype: str
    source_rate: int
    channels: int
    source_frames: int
    decoder: str = "libsndfile"  # or "ffmpeg" (PyAV): what ``read_blocks`` decodes it with

    @property
    def duration_s(self) -> float:
        return self.source_frames / self.source_rate

    @property
    def frames(self) -> int:
        """Video frames on the 25 fps grid: ``ceil(duration_s * 25)``, computed exactly."""
        return frames_for(self.source_frames, self.source_rate)

    def frames_at(self, rate=DEFAULT_RATE) -> int:
        """Video frames at ``rate``: ``ceil(duration_s * rate)``, computed exactly."""
        return frames_for(self.source_frames, self.source_rate, rate)


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


def frames_for(source_frames: int, rate: int, fps=DEFAULT_RATE) -> int:
    """``ceil(source_frames / rate * fps)`` without floating-point error."""
    return frames_in(source_frames, rate, fps)


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
    if _ffmpeg_container(head, p.suffix):  # M4A/AAC, a video file...: libsndfile does not read these
        info = _probe_ffmpeg(p)
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
        out = _probe_ffmpeg(p)
        out = replace(out, source_frames=_count_frames(out))
    check_duration(out)
    return out


#: libsndfile reports SF_COUNT_MAX frames for a stream of unknown length (``flac -`` and recorders
#: write a STREAMINFO with 0 samples when they cannot seek back to fill it in)
UNKNOWN_LENGTH = 2**62


def _count_frames(info: AudioInfo) -> int:
    """The frames of a source whose header does not say: decoded and counted, block by block (memory
    flat), no further than the voice-over limit allows."""
    limit, how = max_audio_minutes()
    cap, n = int(limit * 60 * info.source_rate) + 1, 0
    try:
        for b in _ffmpeg_blocks(info, READ_BLOCK, 0, None):
            n += len(b)
            if n > cap:
                raise TooLong(
                    f"{info.path}: is longer than the {_hm(limit * 60)} limit for a voice-over ({how}); "
                    "split it into parts"
                )
    except AudioError:
        raise
    except Exception as exc:  # noqa: BLE001 - av.error.* while decoding
        raise _av_error(Path(info.path), exc) from None
    if n <= 0:
        raise AudioError(f"{info.path}: contains no audio samples; export the voice-over again")
    return n


# --------------------------------------------------------------------------------------------
# Limits (from the header, before decoding)

_LIMIT: dict = {"minutes": None, "how": ""}  # set by ``set_max_audio_minutes`` (``studio serve``)


def set_max_audio_minutes(minutes: float | None, how: str = "") -> None:
    """Set this process's limit (None: back to ``STUDIO_MAX_AUDIO_MINUTES`` or the default);
    ``how``: how the user raises it, for the message (e.g. "this server's --max-audio-minutes")."""
    if minutes is not None and not (math.isfinite(minutes) and minutes > 0):
        raise AudioError(f"the audio limit must be a positive number of minutes, not {minutes}")
    _LIMIT.update(minutes=minutes, how=how)


def max_audio_minutes() -> tuple[float, str]:
    """The longest voice-over accepted, in minutes, and how to raise the limit."""
    if _LIMIT["minutes"] is not None:
        return float(_LIMIT["minutes"]), _LIMIT["how"] or "--max-audio-minutes raises it"
    from studio.core import env

    text = env.get("STUDIO_MAX_AUDIO_MINUTES").strip()
    if not text:
        return DEFAULT_MAX_MINUTES, "STUDIO_MAX_AUDIO_MINUTES raises it"
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (math.isfinite(value) and value > 0):
        from studio.core.errors import InputError

        raise InputError(f"STUDIO_MAX_AUDIO_MINUTES={text}: give a positive number of minutes, such as 240")
    return value, "STUDIO_MAX_AUDIO_MINUTES sets it"


class TooLong(AudioError):
    """The voice-over is longer than the limit (``max_audio_minutes``), said from its header."""


def check_duration(info: AudioInfo) -> None:
    """One sentence when the header says the voice-over is longer than the limit."""
    limit, how = max_audio_minutes()
    if info.duration_s > limit * 60:
        raise TooLong(
            f"{info.path}: is {_hm(info.duration_s)} long, over the {_hm(limit * 60)} limit for a voice-over "
            f"({how}); split it into parts"
        )


def _hm(seconds: float) -> str:
    m = seconds / 60
    if m < 120:
        return f"{m:.4g} minutes" if m != int(m) else f"{int(m)} minutes"
    h, rest = divmod(int(round(m)), 60)
    return f"{h} h {rest} min" if rest else f"{h} hours"


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


_QUIET = threading.Lock()


@contextlib.contextmanager
def quiet_stderr():
    """Send what C libraries write to file descriptor 2 meanwhile to the debug log instead.

    libsndfile's MP3 decoder (mpg123) prints resync notes straight to stderr, which no
    library setting turns off. Kept short (header probes only): other threads' stderr lines
    written meanwhile land in the debug log too.
    """
    import tempfile

    with _QUIET:
        try:
            sys.stderr.flush()
            saved = os.dup(2)
        except (OSError, ValueError, AttributeError):
            yield
            return
        with tempfile.TemporaryFile() as sink:
            os.dup2(sink.fileno(), 2)
            try:
                yield
            finally:
                os.dup2(saved, 2)
                os.close(saved)
                sink.seek(0)
                noise = sink.read(4096).decode("utf-8", "replace").strip()
                if noise:
                    log.debug("decoder output: %s", noise.replace("\n", " | "))


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
        yield from _ffmpeg_blocks(info, block, start, info.source_frames if stop is None else stop)
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


# --------------------------------------------------------------------------------------------
# FFmpeg (PyAV) sources: M4A/AAC, the audio track of a video file, whatever libsndfile does not read

# Names of files libsndfile never reads; FFmpeg does (the sniff below catches most by content).
FFMPEG_SUFFIXES = frozenset(
    ".m4a .m4b .aac .adts .mp4 .m4v .mov .qt .3gp .3g2 .mkv .mka .webm .avi .wma .wmv .asf .flv .ts .mts "
    ".m2ts .amr .ac3 .eac3 .dts .mpg .mpeg".split()
)
_CONTAINERS = {  # FFmpeg's demuxer names -> what a user calls the file
    "mov": "M4A/MP4",
    "matroska": "MKV/WebM",
    "aac": "AAC",
    "avi": "AVI",
    "asf": "WMA/ASF",
    "flv": "FLV",
    "mpegts": "MPEG-TS",
    "amr": "AMR",
    "ac3": "AC-3",
    "eac3": "E-AC-3",
}


def _ffmpeg_container(head: bytes, suffix: str) -> bool:
    """Whether a file starting with ``head`` (or named ``*suffix``) is one libsndfile cannot read
    but FFmpeg can: MP4/M4A/MOV, Matroska/WebM, ADTS AAC, AVI, ASF/WMA, FLV, MPEG-TS."""
    if head[4:8] in (b"ftyp", b"moov", b"mdat", b"wide", b"free"):
        return True
    if head[:4] in (b"\x1aE\xdf\xa3", b"FLV\x01", b"0&\xb2u") or head[:6] == b"#!AMR\n":
        return True
    if head[:4] == b"RIFF" and head[8:12] == b"AVI ":
        return True
    if len(head) > 1 and head[0] == 0xFF and (head[1] & 0xF6) == 0xF0:  # ADTS sync word, layer 0
        return True
    if len(head) > 188 and head[0] == 0x47 and head[188] == 0x47:  # MPEG-TS packets
        return True
    return suffix.lower() in FFMPEG_SUFFIXES


def _av_error(p: Path, exc: Exception) -> AudioError:
    text = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
    text = text.replace(f": '{p}'", "").replace(str(p), "").strip(" :;'")
    if "Invalid data" in text or "moov atom not found" in text:
        text = "its format is not recognised, or it is damaged"
    return AudioError(f"{p}: not an audio file Studio can read ({text}); convert it to {SUPPORTED}")


def _open_av(p: Path):
    """The opened container and its first audio stream (``AudioError`` when there is none)."""
    import av

    try:
        with quiet_stderr():
            try:
                container = av.open(str(p), metadata_errors="ignore")  # PyAV 18: badly encoded tags
            except TypeError:  # PyAV 19 has no metadata_errors (its tags never raise)
                container = av.open(str(p))
    except Exception as exc:  # noqa: BLE001 - av.error.* (InvalidDataError, ...), OSError
        raise _av_error(p, exc) from None
    if not container.streams.audio:
        kind = "a video file without sound" if container.streams.video else "a file with no audio track"
        container.close()
        raise AudioError(f"{p}: it is {kind}; give the voice-over itself or a video with sound")
    return container, container.streams.audio[0]


_FFMPEG_INFO: dict[tuple, AudioInfo] = {}  # (path, size, mtime): a source without a length is decoded once


def _probe_ffmpeg(p: Path) -> AudioInfo:
    """Describe an FFmpeg source: an MP4/M4A/MOV's length of its first audio stream, or (other
    containers: ADTS, Matroska, AVI... where a length is missing or estimated from the bit rate)
    the decoded count (remembered while the file is unchanged)."""
    st = p.stat()
    key = (str(p), st.st_size, st.st_mtime_ns)
    if key in _FFMPEG_INFO:
        return _FFMPEG_INFO[key]
    info = _probe_ffmpeg_now(p)
    if len(_FFMPEG_INFO) > 64:
        _FFMPEG_INFO.clear()
    _FFMPEG_INFO[key] = info
    return info


def _probe_ffmpeg_now(p: Path) -> AudioInfo:
    container, stream = _open_av(p)
    try:
        ctx = stream.codec_context
        rate, channels = int(ctx.sample_rate or stream.rate or 0), int(ctx.channels or 0)
        if rate <= 0 or channels <= 0:
            raise AudioError(f"{p}: its audio track has no sample rate or channels; export the voice-over again")
        n = 0
        fmt = (container.format.name or "").split(",")[0]
        if fmt == "mov" and stream.duration and stream.time_base:  # exact (the track's own length); other
            n = int(round(stream.duration * stream.time_base * rate))  # formats' may be a bit-rate estimate
        codec = (ctx.name or "").upper()
    finally:
        container.close()
    info = AudioInfo(str(p), _CONTAINERS.get(fmt, fmt.upper()), codec, rate, channels, n, decoder="ffmpeg")
    if n <= 0:  # no length in the header: count what decodes (no further than the limit allows)
        limit, how = max_audio_minutes()
        cap, n = int(limit * 60 * rate) + 1, 0
        try:
            for b in _ffmpeg_blocks(info, READ_BLOCK, 0, None):
                n += len(b)
                if n > cap:
                    raise TooLong(
                        f"{p}: is longer than the {_hm(limit * 60)} limit for a voice-over ({how}); split it into parts"
                    )
        except AudioError:
            raise
        except Exception as exc:  # noqa: BLE001 - av.error.* while decoding
            raise _av_error(p, exc) from None
        info = replace(info, source_frames=n)
    if n <= 0:
        raise AudioError(f"{p}: contains no audio samples; export the voice-over again")
    return info


def _ffmpeg_blocks(info: AudioInfo, block: int, start: int, stop: int | None):
    """Decode an FFmpeg source's first audio stream: float32 ``[n, channels]`` blocks of about
    ``block`` source frames, frames ``start..stop`` of the decoded samples."""
    import av

    container, stream = _open_av(Path(info.path))
    resampler = av.AudioResampler(format="fltp")  # any sample format -> planar float, same rate and layout
    pending: list[np.ndarray] = []
    have = pos = 0
    try:
        for frame in container.decode(stream):
            for f in resampler.resample(frame):
                data = f.to_ndarray().T  # [n, channels]
                first, pos = pos, pos + len(data)
                if pos <= start:
                    continue
                if stop is not None and first >= stop:
                    break
                data = data[max(0, start - first) : len(data) if stop is None else min(len(data), stop - first)]
                pending.append(data)
                have += len(data)
                if have >= block:
                    from studio.core.cancel import checkpoint

                    checkpoint()  # a cancelled render stops decoding
                    yield np.ascontiguousarray(np.concatenate(pending), np.float32)
                    pending, have = [], 0
            if stop is not None and pos >= stop:
                break
        if pending:
            yield np.ascontiguousarray(np.concatenate(pending), np.float32)
    finally:
        container.close()


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
    container, stream = _open_av(Path(path))
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


# --------------------------------------------------------------------------------------------
# Frame grid, RMS and the silence mask


def frame_rms(samples: np.ndarray, frames: int, rate=DEFAULT_RATE, first: int = 0) -> np.ndarray:
    """RMS of each frame's samples at ``rate``; frame ``t`` covers ``[640t, 640(t+1))`` at 25 fps
    (``Wave.frame_span``), zero-padded past the end. ``first``: ``samples`` start at frame
    ``first``'s first sample, and the RMS of frames ``first .. first + frames`` is returned."""
    rms = np.zeros(frames, np.float32)
    rate = Fraction(rate)
    per = SAMPLE_RATE / rate
    base = int(first_sample(int(first), rate, SAMPLE_RATE))

    def edge(t):  # frame first + t's first sample, in ``samples``
        return first_sample(t + int(first), rate, SAMPLE_RATE) - base

    if per.denominator == 1:  # a whole number of samples per frame (25, 50 fps): fixed-size rows
        n = int(per)
        full = min(frames, len(samples) // n)
        for a in range(0, full, RMS_BLOCK_FRAMES):
            b = min(full, a + RMS_BLOCK_FRAMES)
            block = samples[a * n : b * n].reshape(b - a, n)
            rms[a:b] = np.sqrt(np.einsum("ij,ij->i", block, block, dtype=np.float64) / n)
    else:  # rows of two lengths (533 and 534 at 29.97): sums between the frame edges
        ends = edge(np.arange(1, frames + 1, dtype=np.int64))
        full = int(np.searchsorted(ends, len(samples), "right"))
        for a in range(0, full, RMS_BLOCK_FRAMES):
            b = min(full, a + RMS_BLOCK_FRAMES)
            edges = edge(np.arange(a, b + 1, dtype=np.int64))
            seg = samples[edges[0] : edges[-1]].astype(np.float64)
            sums = np.add.reduceat(seg * seg, edges[:-1] - edges[0])
            rms[a:b] = np.sqrt(sums / np.diff(edges))
    for t in range(full, frames):  # the padded tail: at most one or two frames
        s0, s1 = int(edge(t)), int(edge(t + 1))
        chunk = samples[s0:s1].astype(np.float64)
        rms[t] = math.sqrt(float(np.dot(chunk, chunk)) / max(1, s1 - s0))
    return rms


def silence_mask(
    rms: np.ndarray,
    threshold: float = DEFAULT_SILENCE_THRESHOLD,
    min_run: int = DEFAULT_MIN_SILENCE_FRAMES,
) -> np.ndarray:
    """True where RMS < ``threshold`` for at least ``min_run`` consecutive frames.

    Shorter dips (gaps between syllables) stay speech so the mouth does not snap shut.
    """
    if threshold < 0:
        raise ValueError("threshold must be >= 0")
    below = np.asarray(rms) < threshold
    if min_run <= 1:
        return below
    mask = np.zeros_like(below)
    for start, end in runs(below):
        if end - start >= min_run:
            mask[start:end] = True
    return mask


def runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """Half-open ``(start, end)`` spans where ``mask`` is True."""
    m = np.concatenate([[False], np.asarray(mask, bool), [False]])
    edges = np.flatnonzero(m[1:] != m[:-1])
    return [(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2])]


def envelope(samples: np.ndarray, bucket: int = ENVELOPE_BUCKET) -> tuple[np.ndarray, np.ndarray]:
    """Min and max per bucket of ``bucket`` samples, for drawing (100 buckets per second)."""
    n = -(-len(samples) // bucket)
    mins = np.zeros(n, np.float32)
    maxs = np.zeros(n, np.float32)
    full = len(samples) // bucket
    step = 1 << 16
    for a in range(0, full, step):
        b = min(full, a + step)
        block = samples[a * bucket : b * bucket].reshape(b - a, bucket)
        mins[a:b] = block.min(axis=1)
        maxs[a:b] = block.max(axis=1)
    if full < n:
        tail = samples[full * bucket :]
        mins[full] = min(0.0, float(tail.min()))
        maxs[full] = max(0.0, float(tail.max()))
    return mins, maxs


# --------------------------------------------------------------------------------------------
# Analysis with a disk cache


@dataclass(frozen=True, eq=False)
class AudioAnalysis:
    """Per-frame RMS and the display envelope of one file; the mask is derived on demand."""

    info: AudioInfo
    rms: np.ndarray
    env_min: np.ndarray
    env_max: np.ndarray
    bucket: int = ENVELOPE_BUCKET
    from_cache: bool = field(default=False, compare=False)
    rate: Fraction = DEFAULT_RATE  # the frame grid of ``rms``

    @property
    def frames(self) -> int:
        return self.info.frames_at(self.rate)

    def mask(self, threshold: float = DEFAULT_SILENCE_THRESHOLD, min_run: int = DEFAULT_MIN_SILENCE_FRAMES):
        return silence_mask(self.rms, threshold, min_run)

    def summary(self, threshold: float = DEFAULT_SILENCE_THRESHOLD, min_run: int = DEFAULT_MIN_SILENCE_FRAMES) -> dict:
        mask = self.mask(threshold, min_run)
        spans = runs(mask)
        longest = max((b - a for a, b in spans), default=0)
        return {
            "path": self.info.path,
            "duration_s": round(self.info.duration_s, 6),
            "sample_rate": self.info.source_rate,
            "channels": self.info.channels,
            "format": self.info.format,
            "subtype": self.info.subtype,
            "frames": self.frames,
            "fps": rate_number(self.rate),
            "silence_threshold": threshold,
            "min_silence_frames": min_run,
            "silent_frames": int(mask.sum()),
            "silent_percent": round(100.0 * float(mask.mean()) if self.frames else 0.0, 2),
            "longest_silence_frames": int(longest),
            "longest_silence_s": float(longest / self.rate),
            "silent_spans": [[a, b] for a, b in spans],
            "silent_mask": mask.astype(int).tolist(),
        }


def analyze(path: str | os.PathLike, use_cache: bool = True, rate=DEFAULT_RATE) -> AudioAnalysis:
    """RMS (per frame at ``rate``) and envelope in one streaming pass (bounded memory), cached in
    ``<data>/cache/audio`` (one file per rate)."""
    info = probe(path)
    rate = Fraction(rate)
    cache = _cache_file(path, rate) if use_cache else None
    if cache is not None and cache.exists():
        try:
            with np.load(cache) as z:
                meta = json.loads(str(z["meta"]))
                if (
                    meta.get("version") == CACHE_VERSION
                    and meta.get("info") == asdict(info)
                    and meta.get("rate", "25") == str(rate)
                ):
                    rms, lo, hi = z["rms"], z["env_min"], z["env_max"]
                    return AudioAnalysis(info, rms, lo, hi, int(meta["bucket"]), True, rate)
        except Exception as exc:  # noqa: BLE001 - a damaged cache is rebuilt, never trusted
            log.warning("audio cache %s unreadable (%s); rebuilding", cache, exc)
    result = stream_analysis(info, rate)
    if cache is not None:
        from studio.core.store.fsutil import atomic_path

        meta = json.dumps({"version": CACHE_VERSION, "info": asdict(info), "bucket": result.bucket, "rate": str(rate)})
        try:
            with atomic_path(cache) as tmp, open(tmp, "wb") as fh:
                np.savez(fh, meta=meta, rms=result.rms, env_min=result.env_min, env_max=result.env_max)
        except OSError as exc:
            log.warning("could not write audio cache %s: %s", cache, exc)
    return result


def stream_analysis(info: AudioInfo, rate=DEFAULT_RATE) -> AudioAnalysis:
    """``analysis_of(load(path).at(rate))`` without holding the samples: the same values (the same
    ``frame_rms`` and ``envelope`` applied to whole units of frames and buckets as they are
    decoded), memory bounded by one decoded block plus the result."""
    rate = Fraction(rate)
    n_out = -(-info.source_frames * SAMPLE_RATE // info.source_rate)
    T = info.frames_at(rate)
    # a unit: the fewest frames that fill whole samples and whole envelope buckets (1 frame of 640
    # samples at 25 fps, 3 of 1600 at 30, 300 of 160160 at 29.97)
    num, den = rate.numerator, rate.denominator
    unit_frames = num * ENVELOPE_BUCKET // math.gcd(SAMPLE_RATE * den, num * ENVELOPE_BUCKET)
    unit = unit_frames * SAMPLE_RATE * den // num
    rms = np.zeros(T, np.float32)
    n_env = -(-n_out // ENVELOPE_BUCKET)
    mins, maxs = np.zeros(n_env, np.float32), np.zeros(n_env, np.float32)
    carry = np.zeros(0, np.float32)
    pos = 0  # samples consumed (a multiple of the unit, itself a multiple of the bucket)

    def consume(buf: np.ndarray, last: bool) -> np.ndarray:
        nonlocal pos
        full = len(buf) if last else len(buf) // unit * unit
        if full:
            part = buf[:full]
            f0, b0 = pos // unit * unit_frames, pos // ENVELOPE_BUCKET
            frames = (T - f0) if last else full // unit * unit_frames
            rms[f0 : f0 + frames] = frame_rms(part, frames, rate, f0)
            lo, hi = envelope(part)
            mins[b0 : b0 + len(lo)], maxs[b0 : b0 + len(hi)] = lo, hi
            pos += full
        return buf[full:]

    got = 0
    for chunk in decode(info):
        got += len(chunk)
        carry = consume(np.concatenate([carry, chunk]) if len(carry) else chunk, False)
    if got == 0:
        raise AudioError(f"{info.path}: contains no audio samples; export the voice-over again")
    if got < n_out * 0.98:
        log.warning("%s: decoded %d of %d expected samples; the rest is silence", info.path, got, n_out)
    while got < n_out:  # what did not decode is silence, as in ``load``
        pad = min(n_out - got, READ_BLOCK)
        carry = consume(np.concatenate([carry, np.zeros(pad, np.float32)]), False)
        got += pad
    consume(carry, True)
    return AudioAnalysis(info, rms, mins, maxs, rate=rate)


def analysis_of(wave: Wave) -> AudioAnalysis:
    mins, maxs = envelope(wave.samples)
    return AudioAnalysis(wave.info, frame_rms(wave.samples, wave.frames, wave.rate), mins, maxs, rate=wave.rate)


def _cache_file(path: str | os.PathLike, rate: Fraction = DEFAULT_RATE) -> Path | None:
    try:
        from studio.core.env import sub_dir
        from studio.core.store.fsutil import quick_file_key

        tag = "" if rate == DEFAULT_RATE else f"-{rate.numerator}_{rate.denominator}"
        return sub_dir("cache/audio") / f"{quick_file_key(path)}{tag}.npz"
    except OSError:
        return None

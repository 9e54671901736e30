"""Audio: decode any file soundfile reads to mono 16 kHz float32, the 25 fps frame grid, RMS,
the silence mask and a cached display envelope.

Everything streams in blocks, so a two-hour file needs little memory beyond the 16 kHz array:

    wave = load("voice.flac")          # Wave: samples float32 [n] at 16 kHz, info about the source
    rms = frame_rms(wave.samples, wave.frames)
    mask = silence_mask(rms, threshold=0.008, min_run=3)

``analyze(path)`` does the same and caches RMS and envelope in the data folder, so the GUI can
draw a one-hour waveform at once on the second open.
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
from dataclasses import asdict, dataclass, field
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

log = logging.getLogger(__name__)

READ_BLOCK = 1 << 18  # source frames per decoded block (~6 s at 44.1 kHz)
RMS_BLOCK_FRAMES = 8192  # video frames per RMS block (~5 M samples)
ENVELOPE_BUCKET = 160  # samples per envelope bucket: 100 buckets per second
CACHE_VERSION = 2  # 2: files with NaN/inf samples are refused (version 1 cached their NaN RMS)
SUPPORTED = "WAV, FLAC, OGG (Vorbis/Opus) or MP3"


@dataclass(frozen=True)
class AudioInfo:
    """What the source file is, before any conversion."""

    path: str
    format: str
    subtype: str
    source_rate: int
    channels: int
    source_frames: int

    @property
    def duration_s(self) -> float:
        return self.source_frames / self.source_rate

    @property
    def frames(self) -> int:
        """Video frames on the 25 fps grid: ``ceil(duration_s * 25)``, computed exactly."""
        return frames_for(self.source_frames, self.source_rate)


@dataclass(frozen=True, eq=False)
class Wave:
    """Mono 16 kHz float32 samples (``len == ceil(duration * 16000)``) and the source's info."""

    samples: np.ndarray
    info: AudioInfo

    @property
    def frames(self) -> int:
        return self.info.frames

    @property
    def duration_s(self) -> float:
        return self.info.duration_s

    def frame_samples(self, t: int) -> np.ndarray:
        """The 640 samples of frame ``t`` (the last frame zero-padded)."""
        out = np.zeros(SAMPLES_PER_FRAME, np.float32)
        chunk = self.samples[t * SAMPLES_PER_FRAME : (t + 1) * SAMPLES_PER_FRAME]
        out[: len(chunk)] = chunk
        return out


def frames_for(source_frames: int, rate: int) -> int:
    """``ceil(source_frames / rate * FPS)`` without floating-point error."""
    return -(-source_frames * FPS // rate)


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
    try:
        with quiet_stderr():
            info = sf.info(str(p))
    except Exception as exc:  # noqa: BLE001 - soundfile raises LibsndfileError / RuntimeError / TypeError
        detail = _sf_detail(exc)
        raise AudioError(f"{p}: not an audio file Studio can read ({detail}); convert it to {SUPPORTED}") from None
    if info.frames <= 0 or info.samplerate <= 0:
        raise AudioError(f"{p}: contains no audio samples; export the voice-over again")
    return AudioInfo(
        path=str(p),
        format=info.format,
        subtype=info.subtype or "",
        source_rate=int(info.samplerate),
        channels=int(info.channels),
        source_frames=int(info.frames),
    )


SNIFF_BYTES = 4096
_MAGIC = (  # files people drop on Studio by mistake: (offset, bytes, what)
    (0, b"\x89PNG", "a PNG image"),
    (0, b"\xff\xd8\xff", "a JPEG image"),
    (0, b"GIF8", "a GIF image"),
    (0, b"%PDF", "a PDF document"),
    (0, b"PK\x03\x04", "a ZIP archive (or an office document)"),
    (4, b"ftyp", "an MP4/M4A file, which Studio does not read as audio: convert it to WAV or FLAC"),
    (0, b"\x1aE\xdf\xa3", "a Matroska/WebM file, which Studio does not read as audio: convert it to WAV or FLAC"),
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


def load(path: str | os.PathLike) -> Wave:
    """Decode ``path`` to mono 16 kHz float32 in blocks (downmix, then a soxr resampler)."""
    import soundfile as sf

    info = probe(path)
    n_out = -(-info.source_frames * SAMPLE_RATE // info.source_rate)
    out = np.zeros(n_out, np.float32)
    pos = 0
    resampler = None
    if info.source_rate != SAMPLE_RATE:
        import soxr

        resampler = soxr.ResampleStream(info.source_rate, SAMPLE_RATE, 1, dtype="float32", quality="HQ")

    def put(chunk: np.ndarray) -> None:
        nonlocal pos
        take = min(len(chunk), n_out - pos)
        out[pos : pos + take] = chunk[:take]
        pos += take

    bad = 0  # samples that are not numbers (NaN, +-inf): a damaged float file
    try:
        with quiet_stderr():
            fh = sf.SoundFile(info.path)
        with fh:
            while True:
                block = fh.read(READ_BLOCK, dtype="float32", always_2d=True)
                if len(block) == 0:
                    break
                bad += block.size - int(np.count_nonzero(np.isfinite(block)))
                mono = block.mean(axis=1, dtype=np.float32) if block.shape[1] > 1 else block[:, 0]
                put(resampler.resample_chunk(mono) if resampler else mono)
            if resampler:
                put(resampler.resample_chunk(np.zeros(0, np.float32), last=True))
    except Exception as exc:  # noqa: BLE001 - deliberate: any failure here is reported, not fatal
        raise AudioError(
            f"{info.path}: the audio data is corrupt ({_sf_detail(exc)}); export the voice-over again"
        ) from None
    if bad:  # refused, not patched: the render's AAC track is encoded from the file itself
        raise AudioError(
            f"{info.path}: {bad} of {info.source_frames * info.channels} samples are not numbers "
            "(NaN or infinite), so the file is damaged; export the voice-over again"
        )
    if pos == 0:
        raise AudioError(f"{info.path}: contains no audio samples; export the voice-over again")
    if pos < n_out * 0.98:
        log.warning("%s: decoded %d of %d expected samples; the rest is silence", info.path, pos, n_out)
    return Wave(samples=out, info=info)


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


def frame_rms(samples: np.ndarray, frames: int) -> np.ndarray:
    """RMS of each frame's 640 samples; frame ``t`` covers ``[640t, 640(t+1))``, zero-padded."""
    rms = np.zeros(frames, np.float32)
    full = min(frames, len(samples) // SAMPLES_PER_FRAME)
    for a in range(0, full, RMS_BLOCK_FRAMES):
        b = min(full, a + RMS_BLOCK_FRAMES)
        block = samples[a * SAMPLES_PER_FRAME : b * SAMPLES_PER_FRAME].reshape(b - a, SAMPLES_PER_FRAME)
        rms[a:b] = np.sqrt(np.einsum("ij,ij->i", block, block, dtype=np.float64) / SAMPLES_PER_FRAME)
    for t in range(full, frames):  # the padded tail: at most one or two frames
        chunk = samples[t * SAMPLES_PER_FRAME : (t + 1) * SAMPLES_PER_FRAME].astype(np.float64)
        rms[t] = math.sqrt(float(np.dot(chunk, chunk)) / SAMPLES_PER_FRAME)
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

    @property
    def frames(self) -> int:
        return self.info.frames

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
            "fps": FPS,
            "silence_threshold": threshold,
            "min_silence_frames": min_run,
            "silent_frames": int(mask.sum()),
            "silent_percent": round(100.0 * float(mask.mean()) if self.frames else 0.0, 2),
            "longest_silence_frames": int(longest),
            "longest_silence_s": longest / FPS,
            "silent_spans": [[a, b] for a, b in spans],
            "silent_mask": mask.astype(int).tolist(),
        }


def analyze(path: str | os.PathLike, use_cache: bool = True) -> AudioAnalysis:
    """Decode once, compute RMS and envelope, and cache them in ``<data>/cache/audio``."""
    info = probe(path)
    cache = _cache_file(path) if use_cache else None
    if cache is not None and cache.exists():
        try:
            with np.load(cache) as z:
                meta = json.loads(str(z["meta"]))
                if meta.get("version") == CACHE_VERSION and meta.get("info") == asdict(info):
                    return AudioAnalysis(info, z["rms"], z["env_min"], z["env_max"], int(meta["bucket"]), True)
        except Exception as exc:  # noqa: BLE001 - a damaged cache is rebuilt, never trusted
            log.warning("audio cache %s unreadable (%s); rebuilding", cache, exc)
    wave = load(path)
    result = analysis_of(wave)
    if cache is not None:
        from studio.core.store.fsutil import atomic_path

        meta = json.dumps({"version": CACHE_VERSION, "info": asdict(info), "bucket": result.bucket})
        try:
            with atomic_path(cache) as tmp, open(tmp, "wb") as fh:
                np.savez(fh, meta=meta, rms=result.rms, env_min=result.env_min, env_max=result.env_max)
        except OSError as exc:
            log.warning("could not write audio cache %s: %s", cache, exc)
    return result


def analysis_of(wave: Wave) -> AudioAnalysis:
    mins, maxs = envelope(wave.samples)
    return AudioAnalysis(wave.info, frame_rms(wave.samples, wave.frames), mins, maxs)


def _cache_file(path: str | os.PathLike) -> Path | None:
    try:
        from studio.core.store.fsutil import quick_file_key
        from studio.core.store.paths import sub_dir

        return sub_dir("cache/audio") / f"{quick_file_key(path)}.npz"
    except OSError:
        return None

"""A voice-over's analysis: per-frame RMS at the output's rate, the silence mask, the display
envelope, computed in one streaming pass and cached in the data folder.

    rms = frame_rms(wave.samples, wave.frames, wave.rate)
    mask = silence_mask(rms, threshold=0.008, min_run=3)
    result = analyze("voice.flac", rate=RATES["29.97"])   # AudioAnalysis: rms, envelope, mask()

``analyze(path)`` computes RMS and envelope in one streaming pass (memory bounded by the block
size, not the file: 10 h of audio needs the 36 MB of its RMS and envelope, not 2.3 GB of
samples) and caches them in the data folder, so the GUI can draw a one-hour waveform at once on
the second open. Decoding is ``media.audio``'s.
"""

from __future__ import annotations

import json
import logging
import math
import os
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from pathlib import Path

import numpy as np

from studio.core.constants import DEFAULT_MIN_SILENCE_FRAMES, DEFAULT_SILENCE_THRESHOLD, SAMPLE_RATE
from studio.core.errors import AudioError
from studio.core.media.audio import Wave, decode, probe
from studio.core.media.audio_info import READ_BLOCK, AudioInfo
from studio.core.media.rates import DEFAULT_RATE, first_sample, rate_number

log = logging.getLogger(__name__)

RMS_BLOCK_FRAMES = 8192  # video frames per RMS block (~5 M samples)
ENVELOPE_BUCKET = 160  # samples per envelope bucket: 100 buckets per second
CACHE_VERSION = 2  # 2: files with NaN/inf samples are refused (version 1 cached their NaN RMS)


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

"""Lip sync as a cross-correlation: the mouth's opening against the voice's speech envelope.

    env = envelope(samples, frames, fps)           # RMS per video frame
    curve = correlation(opening, env)              # [31]: Pearson r at shifts -15..+15
    offset, confidence = best_shift(curve)

Both signals are high-passed first (each minus its own 0.44 s moving average), so what is compared
is the syllable-rate motion (3-8 Hz) rather than the slow speech/pause structure, which would
give a broad peak. ``correlation[s + MAX_SHIFT]`` compares the mouth at frame ``t + s`` with the
voice at frame ``t``; the best ``s`` is ``offset_frames``:

* **positive: the video is late** (the mouth moves ``s`` frames after the sound; delay the audio
  by ``s`` frames to align it);
* **negative: the video is early** (the audio is late; advance it).

``confidence`` is the peak minus the median over the 31 shifts, as SyncNet's LSE-C is (there on
distances of learned embeddings, here on correlations): a mouth that follows its voice stands out
at one shift; a mouth that follows another script is as (un)related at every shift.

Hand-written because it is a few lines of numpy; a library cross-correlation would not skip the
frames without a face, which are left out of each shift's sums.
"""

from __future__ import annotations

import numpy as np

MAX_SHIFT = 15  # frames each way
HIGH_PASS_FRAMES = 11  # the moving average removed from both signals (at 25 fps: 0.44 s)


def envelope(samples: np.ndarray, frames: int, fps: float, rate: int = 16_000) -> np.ndarray:
    """RMS of the samples under each video frame (frame ``t`` covers ``[t/fps, (t+1)/fps)``)."""
    x = np.asarray(samples, np.float64)
    edges = np.minimum(np.round(np.arange(frames + 1) * rate / fps).astype(np.int64), len(x))
    sq = np.concatenate([[0.0], np.cumsum(x * x)])
    n = np.maximum(np.diff(np.round(np.arange(frames + 1) * rate / fps)), 1.0)
    return np.sqrt(np.maximum(sq[edges[1:]] - sq[edges[:-1]], 0.0) / n).astype(np.float64)


def high_pass(x: np.ndarray, fps: float = 25.0) -> np.ndarray:
    """``x`` minus its centred moving average over ``HIGH_PASS_FRAMES`` (scaled to ``fps``);
    NaN (no face) stays NaN and is left out of its neighbours' averages."""
    k = max(3, round(HIGH_PASS_FRAMES * fps / 25.0) | 1)
    x = np.asarray(x, np.float64)
    ok = np.isfinite(x)
    v = np.where(ok, x, 0.0)
    kern = np.ones(k)
    pad = k // 2
    s = np.convolve(np.pad(v, pad, mode="edge"), kern, "valid")
    n = np.convolve(np.pad(ok.astype(np.float64), pad, mode="edge"), kern, "valid")
    out = x - s / np.maximum(n, 1.0)
    out[~ok] = np.nan
    return out


def pearson(a: np.ndarray, b: np.ndarray) -> float:
    ok = np.isfinite(a) & np.isfinite(b)
    if ok.sum() < 8:
        return float("nan")
    x, y = a[ok] - a[ok].mean(), b[ok] - b[ok].mean()
    den = np.sqrt((x * x).sum() * (y * y).sum())
    return float((x * y).sum() / den) if den > 1e-12 else float("nan")


def shifted(mouth: np.ndarray, voice: np.ndarray, s: int) -> tuple[np.ndarray, np.ndarray]:
    """The overlapping parts of ``mouth[t + s]`` and ``voice[t]``."""
    n = min(len(mouth), len(voice))
    mouth, voice = mouth[:n], voice[:n]
    if s >= 0:
        return mouth[s:], voice[: n - s]
    return mouth[: n + s], voice[-s:]


def correlation(mouth: np.ndarray, voice: np.ndarray, max_shift: int = MAX_SHIFT) -> np.ndarray:
    """Pearson r of the (already high-passed) signals at every shift ``-max_shift..max_shift``."""
    return np.array([pearson(*shifted(mouth, voice, s)) for s in range(-max_shift, max_shift + 1)])


def best_shift(curve: np.ndarray) -> tuple[int, float, float]:
    """``(offset_frames, confidence, peak)`` of a correlation curve (NaN-free or all-NaN)."""
    if not np.isfinite(curve).any():
        return 0, 0.0, float("nan")
    c = np.where(np.isfinite(curve), curve, -1.0)
    i = int(np.argmax(c))
    mid = (len(curve) - 1) // 2
    med = float(np.nanmedian(curve))
    return i - mid, max(0.0, float(c[i]) - med), float(c[i])


def local_sync(
    mouth: np.ndarray,
    voice: np.ndarray,
    offset: int,
    speech: np.ndarray,
    fps: float,
    window_s: float = 3.0,
    min_speech_s: float = 0.8,
) -> np.ndarray:
    """Per second ``k``: the correlation at ``offset`` over the ``window_s`` seconds centred on that
    second (NaN where the window has less than ``min_speech_s`` of speech)."""
    m, v = shifted(mouth, voice, offset)
    sp = shifted(speech.astype(np.float64), speech.astype(np.float64), offset)[1]  # the voice's frames
    lab = np.arange(len(m)) + max(offset, 0)  # each pair is labelled by its mouth frame
    seconds = int(np.ceil(len(mouth) / fps))
    out = np.full(seconds, np.nan)
    half = window_s / 2
    for k in range(seconds):
        lo, hi = (k + 0.5 - half) * fps, (k + 0.5 + half) * fps
        sel = (lab >= lo) & (lab < hi)
        if sp[sel].sum() < min_speech_s * fps:
            continue
        out[k] = pearson(m[sel], v[sel])
    return out


def local_offsets(
    mouth: np.ndarray,
    voice: np.ndarray,
    speech: np.ndarray,
    fps: float,
    window_s: float = 3.0,
    min_speech_s: float = 0.8,
    max_shift: int = MAX_SHIFT,
) -> tuple[np.ndarray, np.ndarray]:
    """Per second ``k``: ``(offset, confidence)`` of the ``window_s`` seconds centred on that second
    alone (the best shift of the mouth frames in the window against the voice; NaN where the window
    has less than ``min_speech_s`` of speech), so a stretch whose sync slips shows where it slips."""
    n = min(len(mouth), len(voice))
    seconds = int(np.ceil(n / fps))
    offs, confs = np.full(seconds, np.nan), np.full(seconds, np.nan)
    sp = np.asarray(speech, bool)[:n]
    half = window_s / 2
    for k in range(seconds):
        a, b = max(0, round((k + 0.5 - half) * fps)), min(n, round((k + 0.5 + half) * fps))
        if sp[a:b].sum() < min_speech_s * fps:
            continue
        curve = np.full(2 * max_shift + 1, np.nan)
        for j, s in enumerate(range(-max_shift, max_shift + 1)):
            lo, hi = max(a, s), min(b, n + s)  # mouth frames u in [a, b) against voice frames u - s
            if hi - lo >= 8:
                curve[j] = pearson(mouth[lo:hi], voice[lo - s : hi - s])
        if np.isfinite(curve).any():
            off, conf, _ = best_shift(curve)
            offs[k], confs[k] = off, conf
    return offs, confs

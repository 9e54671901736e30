"""Jitter: how much the lips shake from frame to frame, beyond the motion of speech.

    per_frame = jitter(m.lips, m.ref_lips, fps)   # [T] % of the eye distance per frame^2, NaN without a face

Each frame's lips (``Measurements.lips``: the 40 lip-contour landmarks, mapped onto the reference's
upper face so the head's own motion and size are taken off, in eye distances) make a path over time.
Its **acceleration** (the second difference, frame to frame) is compared with the acceleration of
the same path smoothed by a Savitzky-Golay filter (a quadratic over ``WINDOW_S`` = 0.28 s, 7 frames
at 25 fps): speech moves the lips at 3-8 syllables a second, which the smooth path keeps; a mouth
that shakes (a crossfade left off, a noisy landmark track, a generator's frame-to-frame flicker)
moves at the frame rate, which it does not. The jitter of a frame is the RMS over the lip points of
that difference, in per cent of the eye distance per frame squared. Against a reference that moves
(a video avatar), the reference's own jitter at the same frame is taken off, so a head that shakes
in the source does not count against the render.

Hand-written because it is a few lines of numpy over scipy's ``savgol_filter``; no library scores
landmark shake.
"""

from __future__ import annotations

import numpy as np

WINDOW_S = 0.28  # the smooth path's Savitzky-Golay window (7 frames at 25 fps)
ORDER = 2


def _fill(x: np.ndarray) -> np.ndarray:
    """NaN frames filled by linear interpolation in time (each column), for the smoothing only."""
    x = np.array(x, np.float64)
    t = np.arange(len(x))
    flat = x.reshape(len(x), -1)
    for j in range(flat.shape[1]):
        col = flat[:, j]
        ok = np.isfinite(col)
        if ok.sum() >= 2 and not ok.all():
            col[~ok] = np.interp(t[~ok], t[ok], col[ok])
    return flat.reshape(x.shape)


def path_jitter(lips: np.ndarray, fps: float) -> np.ndarray:
    """[T] per-frame jitter of one lip path ``[T, P, 2]`` (NaN where a frame or a neighbour has no face)."""
    from scipy.signal import savgol_filter

    x = np.asarray(lips, np.float64)
    T = len(x)
    out = np.full(T, np.nan)
    k = max(5, round(WINDOW_S * fps) | 1)
    if T < k:
        return out
    filled = _fill(x)
    if not np.isfinite(filled).all():
        return out
    smooth = savgol_filter(filled, k, ORDER, axis=0, mode="interp")
    rough = x - smooth  # NaN frames stay NaN
    acc = rough[2:] - 2 * rough[1:-1] + rough[:-2]  # the frame-rate part of the acceleration
    out[1:-1] = 100.0 * np.sqrt(np.mean(np.sum(acc * acc, axis=-1), axis=-1))
    return out


def jitter(lips: np.ndarray | None, ref_lips: np.ndarray | None, fps: float) -> np.ndarray:
    """[T] the video's jitter minus the reference's (when the reference moves), never below 0."""
    if lips is None or len(lips) == 0:
        return np.zeros(0)
    own = path_jitter(lips, fps)
    if ref_lips is None or not np.isfinite(ref_lips).any():
        return own
    ref = path_jitter(ref_lips, fps)
    return np.where(np.isfinite(ref), np.maximum(own - ref, 0.0), own)

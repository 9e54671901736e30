"""Which macroblocks of a render can change: the encoder's video hints for an avatar.

    mask = changing_macroblocks(avatar)   # bool [ceil(H/16), ceil(W/16)], or None (all may change)
    rects = mask_rects(mask, width, height)   # [(x, y, w, h), ...] pixels, 16-aligned

A rendered frame is the avatar frame with a face pasted inside its box. So a macroblock can only
differ from the previous frame where the avatar's own frames differ from each other (a presenter
moving; a tripod recording's backdrop does not) or inside a face box (grown by one macroblock: the
blend's feathered edge). Everything else is bit for bit the same in every frame of every render of
that avatar, and libx264 can skip its analysis (``mb_info`` through FFmpeg's AVVideoHint, see
``x264_pool.video_hint``). A photo avatar is the extreme case: one box changes.

The mask is computed once per avatar (one pass over its frames) and kept beside its engine caches
(``hints/changing-<shape>.npy``), so later renders read a few kilobytes.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

MB = 16
MAX_CHANGING = 0.85  # a mask changing more of the frame than this is not worth the hints
CACHE_VERSION = 1


def changing_region(avatar):
    """What ``open_video(changing=...)`` takes for a render of ``avatar``: a photo's face box, a
    video's macroblock mask, or None (everything may change, or ``STUDIO_VIDEO_HINTS=0``)."""
    from studio.core import env

    if not env.flag("STUDIO_VIDEO_HINTS"):
        return None
    if getattr(avatar, "N", 0) == 1:
        return np.asarray(avatar.boxes[0])
    try:
        return changing_macroblocks(avatar)
    except Exception as exc:  # noqa: BLE001 - hints are an optimisation: render without them
        log.warning("video hints skipped (%s: %s)", type(exc).__name__, exc)
        return None


def changing_macroblocks(avatar, block: int = 16) -> np.ndarray | None:
    """bool ``[ceil(H/16), ceil(W/16)]``: True where some render frame may change; None when
    (nearly) everything may (no gain in hints) or the avatar has no frames."""
    frames = avatar.frames
    n, h, w = int(np.shape(frames)[0]), int(np.shape(frames)[1]), int(np.shape(frames)[2])
    if n == 0:
        return None
    mbh, mbw = -(-h // MB), -(-w // MB)
    cache = _cache_path(avatar, n, h, w)
    if cache is not None and cache.is_file():
        from studio.core.store.fsutil import load_checked_npy

        got = load_checked_npy(cache)  # None: missing, damaged (header included) or of an older Studio
        if got is not None and got.shape == (mbh, mbw) and got.dtype == bool:
            return None if got.mean() > MAX_CHANGING else got
    moving = np.zeros((h, w), bool)
    first = np.asarray(frames[0])
    for s in range(1, n, block):  # frames differing from the first, anywhere in any channel
        chunk = np.asarray(frames[s : s + block])
        moving |= (chunk != first[None]).any(axis=(0, 3))
    mask: Any = np.zeros((mbh * MB, mbw * MB), bool)
    mask[:h, :w] = moving
    mask = mask.reshape(mbh, MB, mbw, MB).any(axis=(1, 3))
    for x1, y1, x2, y2 in np.asarray(avatar.boxes, np.float64):  # face boxes, one macroblock wider
        bx0, by0 = max(0, int(x1) // MB - 1), max(0, int(y1) // MB - 1)
        bx1, by1 = min(mbw, -(-int(np.ceil(x2)) // MB) + 1), min(mbh, -(-int(np.ceil(y2)) // MB) + 1)
        if bx1 > bx0 and by1 > by0:
            mask[by0:by1, bx0:bx1] = True
    if cache is not None:
        from studio.core.store.fsutil import save_checked_npy

        try:  # its folder again if a repair emptied the engine caches while the frames were read
            save_checked_npy(cache, mask)
        except OSError as exc:  # a read-only library: computed again next time
            log.info("video hint cache %s not written (%s)", cache, exc)
    share = float(mask.mean())
    log.info("video hints: %.0f %% of the macroblocks may change", 100 * share)
    return None if share > MAX_CHANGING else mask


def mask_rects(mask: np.ndarray, width: int, height: int) -> list[tuple[int, int, int, int]]:
    """The True macroblocks of ``mask`` as few pixel rectangles ``(x, y, w, h)`` inside
    ``width`` x ``height``: runs along each row, merged down while the next rows have the same run."""
    rects: list[list[int]] = []
    open_runs: dict[tuple[int, int], list[int]] = {}  # (x0, x1) -> its rectangle, growing down
    for y in range(mask.shape[0]):
        row = np.concatenate([[False], mask[y], [False]])
        edges = np.flatnonzero(row[1:] != row[:-1])
        runs = set(zip(edges[0::2].tolist(), edges[1::2].tolist()))
        grown = {}
        for run in runs:
            r = open_runs.get(run)
            if r is None:
                r = [run[0], y, run[1] - run[0], 0]
                rects.append(r)
            r[3] += 1
            grown[run] = r
        open_runs = grown
    out = []
    for x0, y0, wm, hm in rects:
        x, y = x0 * MB, y0 * MB
        out.append((x, y, min(width, x + wm * MB) - x, min(height, y + hm * MB) - y))
    return [r for r in out if r[2] > 0 and r[3] > 0]


def _cache_path(avatar, n: int, h: int, w: int):
    engine_dir = getattr(avatar, "engine_dir", None)
    if engine_dir is None:
        return None
    try:
        return engine_dir("hints") / f"changing-v{CACHE_VERSION}-{n}x{h}x{w}.npy"
    except OSError:
        return None

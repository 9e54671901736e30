"""Which macroblocks of a render can change: the encoder's video hints for an avatar.

    mask = changing_macroblocks(avatar)   # bool [ceil(H/16), ceil(W/16)], or None (all may change)
    rects = mask_rects(mask, width, height)   # [(x, y, w, h), ...] pixels, 16-aligned

A rendered frame is the avatar frame with a face pasted inside its box. So a macroblock can only
differ from the previous frame where the avatar's own frames differ from each other (a presenter
moving; a tripod recording's backdrop does not) or inside a face box (grown by one macroblock: the
blend's feathered edge). Everything else is bit for bit the same in every frame of every render of
that avatar, and libx264 can skip its analysis (``mb_info`` through FFmpeg's AVVideoHint, see
``video_hint`` below). A photo avatar is the extreme case: one box changes.

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


# ---------------------------------------------------------------------------------------------
# Video hints: which macroblocks cannot change (libx264 ``mb_info``, FFmpeg's AVVideoHint)


_HINTS: dict = {}


def hints_available() -> bool:
    """Whether frames can carry an AVVideoHint: PyAV exposes frame side data read-only, so the
    hint is attached with ctypes through the ``AVFrame`` pointer of the PyAV frame (found by
    checking its width and height) and ``av_video_hint_create_side_data`` of the libavutil PyAV
    loaded. False (and no hints) wherever any of that is not as expected."""
    if "ok" not in _HINTS:
        _HINTS["ok"] = False
        try:
            import ctypes
            import glob
            import os

            import av

            libs = glob.glob(os.path.join(os.path.dirname(av.__file__), os.pardir, "av.libs", "libavutil*"))
            lib = ctypes.CDLL(libs[0]) if libs else ctypes.CDLL("libavutil.so.60")
            fn = lib.av_video_hint_create_side_data
            fn.restype, fn.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t]
            _HINTS["create"] = fn
            probe = av.VideoFrame(64, 48, "nv12")
            _HINTS["offset"] = next(off for off in (16, 24, 32) if _frame_dims(probe, off) == (64, 48))
            _HINTS["ok"] = True
        except Exception as exc:  # noqa: BLE001 - no hints: x264 analyses every macroblock
            log.info("video hints unavailable (%s: %s)", type(exc).__name__, exc)
    return _HINTS["ok"]


def _frame_dims(frame, off: int):
    import ctypes

    ptr = ctypes.c_void_p.from_address(id(frame) + off).value
    if not ptr:
        return None
    # AVFrame: data[8] (64 bytes), linesize[8] (32), extended_data (8), then width, height
    return ctypes.c_int.from_address(ptr + 104).value, ctypes.c_int.from_address(ptr + 108).value


def video_hint(frame, rects) -> bool:
    """Mark everything outside ``rects`` (``(x, y, w, h)`` pixel rectangles, or one such
    rectangle) of ``frame`` as unchanged since the previous frame (AV_VIDEO_HINT_TYPE_CHANGED)."""
    import ctypes

    if not hints_available():
        return False
    if rects and not isinstance(rects[0], (tuple, list)):
        rects = (rects,)
    off = _HINTS["offset"]
    if _frame_dims(frame, off) != (frame.width, frame.height):
        return False
    ptr = ctypes.c_void_p.from_address(id(frame) + off).value
    hint = _HINTS["create"](ptr, len(rects))
    if not hint:
        return False
    # AVVideoHint: size_t nb_rects, rect_offset, rect_size; int type; AVVideoRect: 4 x uint32
    rect_offset = ctypes.c_size_t.from_address(hint + 8).value
    rect_size = ctypes.c_size_t.from_address(hint + 16).value
    ctypes.c_int.from_address(hint + 24).value = 1  # AV_VIDEO_HINT_TYPE_CHANGED
    for i, rect in enumerate(rects):
        (ctypes.c_uint32 * 4).from_address(hint + rect_offset + i * rect_size)[:] = [int(v) for v in rect]
    return True

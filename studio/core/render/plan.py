"""The render plan and the batch schedule: pure functions, testable without a GPU.

    plan = make_plan(wave, avatar, settings)      # per frame: avatar index, silent, face found, weight
    plan.engine_frames                            # the frames the engine renders (weight > 0)
    batches = stripes(T, 64, writer.chunks, window=writer.window, engine=plan.weight > 0)

The crossfade weights are the plan's decision; engines are handed them (``plan.weight``), never
re-derive them.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np

from studio.core.constants import SAMPLES_PER_FRAME
from studio.core.media import rates
from studio.core.media.rates import DEFAULT_RATE


@dataclass(frozen=True, eq=False)
class RenderPlan:
    """Per output frame: which avatar frame, silent or not, face found, and the engine weight."""

    avatar_idx: np.ndarray  # [T] int
    silent: np.ndarray  # [T] bool (from the silence mask)
    face_ok: np.ndarray  # [T] bool
    weight: np.ndarray  # [T] float32: 0 = avatar frame as is, 1 = generated face; ramps at edges

    @property
    def frames(self) -> int:
        return len(self.avatar_idx)

    @property
    def engine_frames(self) -> np.ndarray:
        """Indices of frames that need the engine (weight > 0)."""
        return np.flatnonzero(self.weight > 0)


def check_range(frames: tuple[int, int] | None, total: int, rate=DEFAULT_RATE) -> tuple[int, int]:
    """``(start, end)`` of an in/out range inside a clip of ``total`` frames (None: all of it)."""
    if frames is None:
        return 0, total
    a, b = int(frames[0]), min(int(frames[1]), total)
    if a < 0 or a >= total or b <= a:
        from studio.core.errors import InputError

        raise InputError(
            f"the range {frames[0]}..{frames[1]} is outside the clip (frames 0..{total}, "
            f"{float(total / Fraction(rate)):.2f} s): set the in and out points inside it"
        )
    return a, b


@contextlib.contextmanager
def audio_range(wave, path: str, first: int, end: int):
    """A temporary FLAC of the original audio under frames ``first..end`` (its own rate and channels)."""
    import shutil
    import tempfile

    import soundfile as sf

    from studio.core.media.audio import probe, read_blocks
    from studio.core.store.temps import release_temp, temp_dir

    # a registered temporary: a killed render's is removed by the next studio command
    folder = temp_dir(tempfile.gettempdir(), ".studio-range.", ".part")
    try:
        out = Path(folder) / "range.flac"
        info = probe(path)  # any voice-over: WAV ... M4A, a video's sound
        rate = info.source_rate
        fps = Fraction(getattr(wave, "rate", DEFAULT_RATE))
        a, b = int(round(first / fps * rate)), int(round(end / fps * rate))
        a, b = min(a, info.source_frames), min(b, info.source_frames)
        # the source's depth: 16-bit stays 16-bit, anything deeper is kept as 24-bit (FLAC's most), so a
        # range muxed as PCM (ProRes, DNxHR) has the depth the whole render's has
        bits16 = (info.subtype or "").upper() in ("PCM_16", "PCM_S8", "PCM_U8", "S16")
        with sf.SoundFile(
            out, "w", rate, info.channels, format="FLAC", subtype="PCM_16" if bits16 else "PCM_24"
        ) as dst:
            for block in read_blocks(info, start=a, stop=max(a, b)):
                dst.write(block)
        yield str(out)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        release_temp(folder)


RANGE_CONTEXT = 750  # frames (30 s) of audio prepared on each side of an in/out range
PIECE = 750  # frames per 30 s piece (MuseTalk's whisper windows start at multiples of it)
RANGE_MIN_FRAMES = 7500  # clips up to 5 minutes are prepared whole whatever the range


def audio_window(frames: tuple[int, int] | None, total: int, rate=DEFAULT_RATE) -> tuple[int, int] | None:
    """The stretch of a clip of ``total`` frames (25 fps: seeking's grid) that rendering ``frames``
    (frames at ``rate``) needs prepared: the range and ``RANGE_CONTEXT`` around it, in whole 30 s
    pieces of 25 fps frames; None: the whole clip.

    Every per-frame value is local (the silence mask looks ``min_silence`` frames around, the
    crossfade ``crossfade`` frames, the classic engine's smoothing about half a second, MuseTalk's
    whisper one 30 s piece), so 30 s around the range leaves each frame of it what the whole
    render gives it (the classic engine's clip statistics come from the file: ``sampled_stats``)."""
    if frames is None or total <= RANGE_MIN_FRAMES:
        return None
    a, b = to_decode_frames(frames, rate)
    w0 = max(0, (a - RANGE_CONTEXT) // PIECE * PIECE)
    w1 = min(total, -(-(b + RANGE_CONTEXT) // PIECE) * PIECE)
    return None if w0 == 0 and w1 >= total else (w0, w1)


def covers(span: tuple[int, int], window: tuple[int, int] | None, total: int) -> bool:
    """Whether audio prepared for ``span`` holds what ``window`` (None: the whole clip) needs."""
    need = (0, total) if window is None else window
    return span[0] <= need[0] and span[1] >= need[1]


def to_decode_frames(frames: tuple[int, int], rate=DEFAULT_RATE) -> tuple[int, int]:
    """Frames ``(a, b)`` at ``rate`` as the 25 fps frames (seeking's grid) that hold their samples."""
    if Fraction(rate) == DEFAULT_RATE:
        return int(frames[0]), int(frames[1])
    a, b = (int(rates.first_sample(int(f), rate)) for f in frames)
    return a // SAMPLES_PER_FRAME, -(-b // SAMPLES_PER_FRAME)


def frame_index(seconds: float, rate=DEFAULT_RATE) -> int:
    """The frame shown at ``seconds`` on the grid of ``rate`` (robust to float error: 0.12 s at 25 -> 3)."""
    return rates.frame_index(seconds, rate)


def make_plan(wave, avatar, settings) -> RenderPlan:
    from studio.core.media.analysis import frame_rms, silence_mask

    T = wave.frames
    rate = getattr(wave, "rate", DEFAULT_RATE)
    shown = rates.map_frames(np.arange(T, dtype=np.int64), rate, getattr(avatar, "fps", DEFAULT_RATE))
    avatar_idx = np.asarray(avatar.cycle_index(shown), np.int64)
    first, end = getattr(wave, "span", (0, T))
    if (first, end) == (0, T):
        rms = frame_rms(wave.samples, T, rate)
    else:  # only a stretch was decoded (an in/out range): the rest is silent, and never rendered
        rms = np.zeros(T, np.float32)
        start = int(rates.first_sample(first, rate))
        rms[first:end] = frame_rms(wave.samples[start:], end - first, rate, first)
    silent = silence_mask(rms, settings.threshold, settings.min_silence)
    face_ok = np.asarray(avatar.face_ok, bool)[avatar_idx]
    return RenderPlan(avatar_idx, silent, face_ok, crossfade_weights(~silent & face_ok, settings.crossfade))


def crossfade_weights(speech: np.ndarray, crossfade: int) -> np.ndarray:
    """1 inside speech, ramping ``1/(n+1) .. n/(n+1)`` over the ``n`` frames next to each non-speech frame.

    Non-speech frames get 0 (the avatar frame itself).
    """
    T = len(speech)
    weight = speech.astype(np.float32)
    if crossfade <= 0 or T == 0 or speech.all():
        return weight
    # distance of every frame to the nearest non-speech frame
    idx = np.arange(T)
    off = np.flatnonzero(~speech)
    pos = np.searchsorted(off, idx)
    left = np.where(pos > 0, idx - off[np.maximum(pos - 1, 0)], T + 1)
    right = np.where(pos < len(off), off[np.minimum(pos, len(off) - 1)] - idx, T + 1)
    dist = np.minimum(left, right).astype(np.float32)
    return np.where(speech, np.minimum(1.0, dist / (crossfade + 1)), 0.0).astype(np.float32)


def batch_ranges(total: int, batch: int) -> list[tuple[int, int]]:
    batch = max(1, int(batch))
    return [(a, min(total, a + batch)) for a in range(0, total, batch)]


def stripes(
    total: int,
    batch: int,
    chunks: list[tuple[int, int]],
    window: int | None = None,
    engine: np.ndarray | None = None,
    max_frames: int | None = None,
) -> list[np.ndarray]:
    """Frame indices per batch for a writer with parallel ``chunks``: every batch takes the next
    ``batch // lanes`` frames of each lane in turn, so all encoders get work from the first batch
    on and finish together, while each chunk still receives its frames in order. ``window``: the
    writer's lanes (``VideoWriter.window``; None: one lane per chunk): lane ``j`` holds chunks
    ``j, j + window, ...`` one after the other (rolling chunks). Batches keep the full ``batch``
    size (no bucket padding) until the chunks run out.

    ``engine`` (bool per frame: needs the engine): batches are cut so that each holds ``batch``
    engine frames instead of ``batch`` frames, so the engine always runs full (a silent frame
    costs it nothing, but a batch of 64 frames with 13 silent ones still pays for a 64 bucket);
    ``max_frames`` (default ``4 * batch``) bounds a batch through long silences."""
    batch = max(1, int(batch))
    if len(chunks) <= 1:
        c0, c1 = chunks[0] if chunks else (0, total)
        flat = np.arange(c0, c1)
    else:
        lanes = len(chunks) if window is None else max(1, min(int(window), len(chunks)))
        share = max(1, batch // lanes)
        seqs = [np.concatenate([np.arange(c0, c1) for c0, c1 in chunks[j::lanes]]) for j in range(lanes)]
        runs = [s[a : a + share] for a in range(0, max(len(s) for s in seqs), share) for s in seqs if a < len(s)]
        flat = np.concatenate(runs) if runs else np.zeros(0, np.int64)
    if engine is None:
        return [flat[i : i + batch] for i in range(0, len(flat), batch)]
    return _cut_by_engine_frames(flat, np.asarray(engine, bool), batch, max_frames or 4 * batch)


def _cut_by_engine_frames(flat: np.ndarray, engine: np.ndarray, batch: int, max_frames: int) -> list[np.ndarray]:
    """``flat`` cut in order into pieces of ``batch`` engine frames (at most ``max_frames`` frames)."""
    out, i, n = [], 0, len(flat)
    count = np.concatenate([[0], np.cumsum(engine[flat])])  # engine frames before position p
    while i < n:
        # the end: the first position holding `batch` engine frames since i, or max_frames, or n
        j = int(np.searchsorted(count, count[i] + batch, side="left"))
        j = min(n, i + max_frames, max(j, i + 1))
        out.append(flat[i:j])
        i = j
    return out

"""``studio check``: a lip-sync quality report for a rendered (or any) presenter video, offline.

    report = check_video("clip.mp4")                          # the video's own audio track
    report = check_video("clip.mp4", "voice.wav", avatar="anna")
    report.verdict, report.reason, report.offset_frames, report.to_json()

What is measured (``mouth``: the face mesh on the face box only; ``sync``: the maths of the
offset and its confidence; ``report``: figures, per-second figures, verdict):

* ``offset_frames``/``confidence``: the shift of the voice's speech envelope that best matches the
  mouth's opening (positive: the video is late), and how far that shift stands out;
* ``silence_motion``: the mouth's distance from its rest pose where the voice is silent, against
  the same during speech;
* ``sharpness``: the mouth region's detail against the reference's;
* ``seam``: the luma step the blend adds across the blend mask's border;
* ``drift``: how far the jaw, nose and eyes move from the reference's.

The reference is the avatar when it is known (exactly the frames the renderer started from),
else the video's own first rest frame (a silent frame; the report says so).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

import numpy as np

from studio.core.constants import DEFAULT_MIN_SILENCE_FRAMES, DEFAULT_SILENCE_THRESHOLD
from studio.core.errors import InputError
from studio.core.limits import Limits
from studio.core.quality.mouth import Measurements
from studio.core.quality.report import (
    THRESHOLDS,
    Report,
    Thresholds,
    build_report,
)

log = logging.getLogger(__name__)

__all__ = [
    "THRESHOLDS",
    "Limits",
    "NoFace",
    "Report",
    "Thresholds",
    "check_video",
    "measure_video",
]


class NoFace(InputError):
    """No face in the checked video."""


def voice_of(
    video: str | os.PathLike, audio: str | os.PathLike | None = None, max_s: float | None = None
) -> np.ndarray:
    """The voice as 16 kHz mono samples: ``audio``, else the video's own track (one sentence if none);
    ``max_s``: its first seconds only (decoded as a stream: memory flat in the voice's length)."""
    from studio.core.quality.video import load_voice, probe_video

    info = probe_video(video)
    return load_voice(video, info, audio, max_s)


def speech_of(
    samples: np.ndarray,
    frames: int,
    fps: float,
    threshold: float = DEFAULT_SILENCE_THRESHOLD,
    min_silence: int = DEFAULT_MIN_SILENCE_FRAMES,
) -> tuple[np.ndarray, np.ndarray]:
    """``(envelope, silent)`` per video frame; ``min_silence`` is in 25 fps frames, as the render's."""
    from studio.core.media.analysis import silence_mask
    from studio.core.quality.sync import envelope

    env = envelope(samples, frames, fps)
    run = max(1, round(min_silence * fps / 25.0))
    return env, silence_mask(env, threshold, run)


def measure_video(
    video: str | os.PathLike,
    silent: np.ndarray | None = None,
    avatar=None,
    *,
    avatar_start: int = 0,
    progress: Callable[[int, int], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> Measurements:
    """Per-frame measurements of ``video`` against ``avatar`` (``AvatarAssets``, a library name or
    a path), or against the video's first rest frame (the middle of its first silence in
    ``silent``, a per-frame bool array) when no avatar is given."""
    from studio.core.media.analysis import runs
    from studio.core.quality import mouth
    from studio.core.quality.video import frame_at, iter_frames, probe_video

    info = probe_video(video)
    total = info.frames or 0
    assets = avatar_assets(avatar)

    def reference_for(finder: mouth.FaceFinder):
        if assets is not None:
            return mouth.avatar_reference(assets, finder, info.width, info.height, avatar_start)
        candidates: list[int] = []
        margin = max(1, round(0.16 * info.fps))
        if silent is not None:
            for a, b in runs(np.asarray(silent, bool)):
                if b - a > 2 * margin:
                    candidates.append((a + b) // 2)
        for idx in candidates[:4]:
            frame = frame_at(video, idx, info)
            if frame is None:
                continue
            ref = mouth.video_reference(
                frame,
                finder,
                f"the video's own frame {idx} (at {idx / info.fps:.2f} s, in a silence)",
                24.0,
            )
            if ref is not None:
                return ref
        return None  # the first frame with a face becomes it

    with mouth.FaceFinder() as finder:
        m = mouth.measure(
            iter_frames(video, info),
            total,
            info.fps,
            reference_for,
            finder,
            progress,
            cancelled,
        )
    if m.frames == 0 or not m.face.any():
        raise NoFace(
            f"{info.path}: no face was found in any frame; the check measures a presenter's mouth, "
            "so give a video that shows one"
        )
    return m


def check_video(
    video: str | os.PathLike,
    audio: str | os.PathLike | None = None,
    avatar=None,
    *,
    avatar_start: int = 0,
    threshold: float = DEFAULT_SILENCE_THRESHOLD,
    min_silence: int = DEFAULT_MIN_SILENCE_FRAMES,
    thresholds: Thresholds = THRESHOLDS,
    measurements: Measurements | None = None,
    progress: Callable[[int, int], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> Report:
    """The quality report of ``video`` spoken by ``audio`` (default: its own track).

    ``measurements``: those of an earlier ``measure_video`` of the same video (another voice is
    checked without measuring the frames again)."""
    from studio.core.quality.video import probe_video

    t0 = time.monotonic()
    info = probe_video(video)
    # the voice beyond the video is never compared: decoded no further than the video (+2 s), so a
    # long voice-over costs no more memory than a short one (its length comes from its header)
    video_s = (info.frames / info.fps) if info.frames and info.fps else None
    samples = voice_of(video, audio, 0.0 if video_s is None else video_s + 2.0)  # 0: checked, read later
    frames = measurements.frames if measurements is not None else (info.frames or 0)
    extra = {}
    if measurements is None:
        if frames <= 0:  # the container does not say: count while measuring, voice mask after
            env, silent = None, None
        else:
            env, silent = speech_of(samples, frames, info.fps, threshold, min_silence)
        measurements = measure_video(
            video,
            silent,
            avatar,
            avatar_start=avatar_start,
            progress=progress,
            cancelled=cancelled,
        )
        extra["check_fps"] = round(measurements.frames / max(time.monotonic() - t0, 1e-6), 1)
    if video_s is None:  # the container did not say how long the video is: now it is counted
        samples = voice_of(video, audio, measurements.frames / info.fps + 2.0)
    env, silent = speech_of(samples, measurements.frames, info.fps, threshold, min_silence)
    notes = []
    if measurements.reference_kind == "video":
        notes.append(
            f"No avatar was given: the reference is {measurements.reference}; give --avatar for the exact comparison."
        )
    from studio.core.quality.video import voice_seconds

    voice_s, video_s = voice_seconds(video, audio) or len(samples) / 16_000, measurements.frames / info.fps
    if abs(voice_s - video_s) > 1.0:
        notes.append(
            f"The voice lasts {voice_s:.1f} s and the video {video_s:.1f} s; only their overlap is "
            "compared from the start."
        )
    report = build_report(
        measurements,
        env,
        silent,
        video=str(info.path),
        audio=str(audio) if audio is not None else "the video's own audio track",
        thresholds=thresholds,
        notes=tuple(notes),
    )
    from dataclasses import replace

    return replace(report, seconds=time.monotonic() - t0, extra=extra)


def avatar_assets(avatar):
    """The avatar as ``AvatarAssets`` (given as assets, a library name or a path), or None."""
    if avatar is None:
        return None
    if hasattr(avatar, "frames") and hasattr(avatar, "masks"):
        return avatar
    from studio.core.avatars import library as avatar_mod

    return avatar_mod.resolve(avatar)

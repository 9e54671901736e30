"""A render's markers (the user's, the pauses) and its start timecode, for the file's chapters and
timecode track and for the OpenTimelineIO hand-off.

    ms = markers_of(settings, plan, rate)                 # [Marker(frame, name, kind, frames)], by frame
    chapters(ms, first, end, rate)                        # [(start_s, end_s, title)] relative to ``first``
    start_frame("10:00:00:00", rate) -> 900000            # the label's frame count at 25 fps
    start_label("10:00:00:00", rate(29.97), first=0) -> "10:00:00;00"   # drop-frame where the rate is
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

PAUSE_S = 1.0  # a silence this long or longer is a marker ("Pause")


@dataclass(frozen=True)
class Marker:
    frame: int  # in the whole clip's frames
    name: str
    kind: str  # "user", "silence" or "check"
    frames: int = 0  # how long it lasts (a silence), 0 for a point


def markers_of(settings, plan, rate: Fraction) -> list[Marker]:
    """The user's markers (``settings.markers``) inside the clip and each pause of ``PAUSE_S`` or more."""
    from studio.core.delivery import parse_markers
    from studio.core.media.analysis import runs

    out = [
        Marker(nearest_frame(t, rate), name, "user")
        for t, name in parse_markers(settings.markers)
        if nearest_frame(t, rate) < plan.frames
    ]
    least = max(1, round(PAUSE_S * float(rate)))
    for k, (a, b) in enumerate((r for r in runs(np.asarray(plan.silent, bool)) if r[1] - r[0] >= least), 1):
        out.append(Marker(int(a), f"Pause {k}", "silence", int(b - a)))
    return sorted(out, key=lambda m: (m.frame, m.kind))


def nearest_frame(seconds: float, rate: Fraction) -> int:
    """The frame of the output rate nearest ``seconds`` (a marker typed as 3.333 at 30 fps is frame 100,
    not the frame showing at that instant, 99): markers and chapters sit on it."""
    return int(round(float(seconds) * float(rate)))


def chapters(markers: list[Marker], first: int, end: int, rate: Fraction) -> list[tuple[float, float, str]]:
    """Chapters of the frames ``[first, end)``: one from each marker to the next (the first from the
    start when no marker is there), times in seconds from ``first``."""
    points = sorted({m.frame: m.name for m in markers if first <= m.frame < end}.items())
    if not points:
        return []
    if points[0][0] != first:
        points.insert(0, (first, "Start"))
    bounds = [p[0] for p in points[1:]] + [end]
    return [(float((a - first) / rate), float((b - first) / rate), name) for (a, name), b in zip(points, bounds)]


def start_frame(text: str, rate: Fraction) -> int:
    """The frame count of the timecode label ``text`` at ``rate`` (drop-frame at 29.97/59.94); one
    sentence when its frames field is past the rate's."""
    from studio.core.errors import InputError
    from studio.core.media.rates import drop_frames, nominal
    from studio.core.media.timecode import parse_jump

    t = text.strip()
    ff = int(t[-2:])
    if ff >= nominal(rate):
        raise InputError(f"start timecode {text}: the frames field counts 00 to {nominal(rate) - 1:02d} at this rate")
    if drop_frames(rate):
        t = t[:-3] + ";" + t[-2:]
    else:
        t = t[:-3] + ":" + t[-2:]
    return int(parse_jump(t, 0, rate))


def start_label(text: str, rate: Fraction, first: int = 0) -> str:
    """The timecode of frame ``first`` of a render whose frame 0 is ``text`` (normalised: ``;`` drop-frame)."""
    from studio.core.media.timecode import timecode

    return timecode(start_frame(text, rate) + int(first), rate)


def tags_context(settings, plan, rate: Fraction, first: int, end: int):
    """``mux.delivery_tags`` for a render of frames ``[first, end)``: every MP4/MOV gets a timecode track."""
    from studio.core.media.mux import delivery_tags

    chap = chapters(markers_of(settings, plan, rate), first, end, rate) if settings.chapters else []
    return delivery_tags(start_tc=start_label(settings.start_tc, rate, first), chapters=chap)

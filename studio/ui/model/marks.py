"""The voice-over's marks, Qt-free: its in/out range and its named markers, as frames of the timeline's
grid. The ``EditorSession`` owns one (``session.marks``) and holds the values (keys ``"range"``: (in,
out), the out frame included, and ``"markers"``: sorted (frame, name) pairs), so every change is one of
its events and undo steps:

    marks = Marks(read=session.value, write=session.set, frames=lambda: session.frames or None, rate=...)
    marks.set_in(25); marks.set_out(124); marks.range_frames() -> (25, 125)
    marks.add_marker(40, "Intro"); marks.marker_span(40) -> (40, 125)
    marks.retimed(range, markers, 25, 30)     # the same moments on another rate's grid
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from studio.core.media.timecode import seconds_text, timecode

MARK_KEYS = {"range": (None, None), "markers": ()}


@dataclass(frozen=True, order=True)
class Marker:
    """A named point on the timeline (a frame of the voice-over)."""

    frame: int
    name: str = ""


class Marks:
    """In/out and markers over the session's values: ``read(key)`` and ``write(key, value)`` (one edit),
    ``frames()`` the frames of the voice-over on the timeline (None without one), ``rate()`` its grid's rate."""

    def __init__(
        self,
        read: Callable[[str], Any],
        write: Callable[[str, Any], Any],
        frames: Callable[[], int | None],
        rate: Callable[[], Fraction],
    ):
        self.read, self.write, self.clip_frames, self.rate = read, write, frames, rate

    @property
    def frames(self) -> int:
        return self.clip_frames() or 0

    def check(self, key: str, value: Any) -> Any:
        """``value`` of ``"range"`` or ``"markers"`` as held: ints, and markers inside the voice-over, sorted."""
        if key == "range":
            a, b = value
            return (None if a is None else int(a), None if b is None else int(b))
        out: dict[int, str] = {}
        for m in value:
            frame, name = (m.frame, m.name) if isinstance(m, Marker) else (int(m[0]), str(m[1]))
            if self.clip_frames() is None or 0 <= frame < max(1, self.frames):
                out[int(frame)] = name
        return tuple(sorted(out.items()))

    # ---- in / out -------------------------------------------------------------------------

    @property
    def in_frame(self) -> int | None:
        return self.read("range")[0]

    @property
    def out_frame(self) -> int | None:
        """The last frame of the range (included), or None."""
        return self.read("range")[1]

    def set_in(self, frame: int) -> None:
        """``frame`` is the first frame of the range; an in point past the out point clears the out point."""
        if self.clip_frames() is None:
            return
        frame = self.clamp(frame)
        out = self.out_frame if self.out_frame is None or self.out_frame >= frame else None
        self.write("range", (frame, out))

    def set_out(self, frame: int) -> None:
        """``frame`` is the last frame of the range (included, as in Premiere)."""
        if self.clip_frames() is None:
            return
        frame = self.clamp(frame)
        first = self.in_frame if self.in_frame is None or self.in_frame <= frame else None
        self.write("range", (first, frame))

    def set_range(self, in_frame: int | None, out_frame: int | None) -> None:
        self.write("range", (in_frame, out_frame))

    def clear_in(self) -> None:
        self.write("range", (None, self.out_frame))

    def clear_out(self) -> None:
        self.write("range", (self.in_frame, None))

    def clear_range(self) -> None:
        self.write("range", (None, None))

    def range_frames(self) -> tuple[int, int] | None:
        """The in/out range as frames ``[start, end)``; None when neither point is set."""
        a, b = self.read("range")
        if self.clip_frames() is None or (a is None and b is None):
            return None
        start = a if a is not None else 0
        end = b + 1 if b is not None else self.frames
        return (max(0, start), min(self.frames, end))

    def render_range(self) -> tuple[int, int] | None:
        """The frames a render covers when "Render in/out range only" is on; None: the whole clip."""
        r = self.range_frames()
        return r if r is not None and self.read("range_only") else None

    def clamp(self, frame: int) -> int:
        return min(max(0, int(frame)), max(0, self.frames - 1))

    # ---- markers --------------------------------------------------------------------------

    @property
    def markers(self) -> list[Marker]:
        return [Marker(f, n) for f, n in self.read("markers")]

    def marker_at(self, frame: int) -> Marker | None:
        return next((m for m in self.markers if m.frame == int(frame)), None)

    def add_marker(self, frame: int, name: str | None = None) -> Marker | None:
        """A marker at ``frame`` named ``name`` (default "Marker N"); one already there is returned."""
        if self.clip_frames() is None:
            return None
        f = self.clamp(frame)
        old = self.marker_at(f)
        if old is not None:
            return old
        taken = {m.name for m in self.markers}
        n = len(taken) + 1
        while f"Marker {n}" in taken:
            n += 1
        marker = Marker(f, name if name is not None else f"Marker {n}")
        self.write("markers", [*self.read("markers"), (marker.frame, marker.name)])
        return marker

    def rename_marker(self, frame: int, name: str) -> None:
        if self.marker_at(frame) is not None:
            self.write("markers", [(f, name if f == int(frame) else n) for f, n in self.read("markers")])

    def remove_marker(self, frame: int) -> None:
        self.write("markers", [(f, n) for f, n in self.read("markers") if f != int(frame)])

    def marker_span(self, frame: int) -> tuple[int, int]:
        """Frames ``[marker, next marker)`` (or to the end) of the marker at ``frame``."""
        later = [f for f, _n in self.read("markers") if f > frame]
        return (int(frame), later[0] if later else self.frames)

    def next_marker(self, frame: int, direction: int) -> int | None:
        frames = [f for f, _n in self.read("markers")]
        if direction > 0:
            return next((x for x in frames if x > frame), None)
        return next((x for x in reversed(frames) if x < frame), None)

    def markers_setting(self) -> str:
        """The markers as the ``markers`` render setting's text: ``SECONDS=NAME`` separated by commas
        (seconds at the grid's rate: chapters and the OpenTimelineIO file)."""
        rate = float(self.rate())
        return ",".join(
            f"{f / rate:.3f}".rstrip("0").rstrip(".") + (f"={marker_text(n)}" if marker_text(n) else "")
            for f, n in sorted(self.read("markers"))
        )

    # ---- another rate -----------------------------------------------------------------------

    @staticmethod
    def retimed(range_: tuple, markers: Iterable[tuple[int, str]], was, now) -> tuple[tuple, list]:
        """The in/out range and markers of a ``was`` fps grid at the same moments of a ``now`` fps grid."""
        a, b = range_
        moved = (None if a is None else retime(a, was, now), None if b is None else retime(b + 1, was, now) - 1)
        return moved, [(retime(f, was, now), n) for f, n in markers]

    # ---- the figures the labels show --------------------------------------------------------

    def range_label(self) -> str:
        """The Render panel's line: ``00:00:01:00–00:00:04:24 · 4.00 s`` at the timeline's rate."""
        r = self.range_frames()
        if r is None:
            return "set I / O on the timeline"
        a, b = r
        rate = self.rate()
        return f"{timecode(a, rate)}–{timecode(b - 1, rate)} · {seconds_text(b - a, rate)}"

    def inout_label(self, short: int = 0) -> str:
        """The timeline's line: ``in … · out … (4.00 s)``; ``short`` 1: ``…–… (4.00 s)``, 2: ``4.00 s``."""
        r = self.range_frames()
        if r is None:
            return ("no in/out range (I, O)", "no in/out (I, O)", "no in/out")[short]
        a, b = r
        rate = self.rate()
        length = seconds_text(b - a, rate)
        if short == 1:
            return f"{timecode(a, rate)}–{timecode(b - 1, rate)} ({length})"
        if short == 2:
            return f"in/out {length}"
        return f"in {timecode(a, rate)} · out {timecode(b - 1, rate)} ({length})"


def retime(frame: int, was, now) -> int:
    """Frame ``frame`` of a ``was`` fps grid as the nearest frame of a ``now`` fps grid (the same moment)."""
    was, now = Fraction(was), Fraction(now)
    if was == now:
        return int(frame)
    return int(round(Fraction(int(frame)) * now / was))


def markers_step(before, after) -> str:
    """An undo step's words for a change of the markers: "Add marker “Intro”", "Rename marker ..."."""
    b, a = dict(before), dict(after)
    added = [a[f] for f in a if f not in b]
    gone = [b[f] for f in b if f not in a]
    renamed = [(b[f], a[f]) for f in a if f in b and a[f] != b[f]]
    if len(added) == 1 and not gone and not renamed:
        return f"Add marker “{added[0]}”"
    if len(gone) == 1 and not added and not renamed:
        return f"Delete marker “{gone[0]}”"
    if len(renamed) == 1 and not added and not gone:
        return f"Rename marker “{renamed[0][0]}” to “{renamed[0][1]}”"
    return "Change markers"


def marker_text(name: str) -> str:
    """A marker's name as the markers setting can carry it (its separators, commas and =, are spaces)."""
    return " ".join(str(name or "").replace(",", " ").replace("=", " ").split())

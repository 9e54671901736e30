"""Timecode at the output's frame rate: ``HH:MM:SS:FF`` text, and typed jumps as an editor types them.

    timecode(80)              -> "00:00:03:05"          (25 fps, the default)
    timecode(1800, RATES["29.97"]) -> "00:01:00;02"     (drop-frame: ``;`` before the frames)
    parse_jump("12:03")       -> 303        (12 s 3 frames)
    parse_jump("1:00:00")     -> 1500       (1 min)
    parse_jump("+1:00", 80)   -> 105        (one second later)

Hand-written because the rules are Premiere Pro's timecode field's, which no library implements:

- Fields are read **from the right**: frames, seconds, minutes, hours. Any of ``: ; . ,`` separates
  them, so ``12:03`` is 12 s 3 f and ``1:00:00`` is 1 min 0 s 0 f.
- **Bare digits** are the same fields packed two digits each, from the right: ``1203`` is
  12 s 3 f, ``500`` is 5 s, ``80`` is 80 frames (= 00:00:03:05). Up to two digits, a bare number
  is therefore a frame count.
- ``#N`` or ``Nf`` is frame number N, however many digits (``#706``, ``706f``).
- ``Ns`` is N seconds, decimals allowed (``3.2s`` = frame 80).
- A leading ``+`` or ``-`` moves relative to the current frame (``+10`` = ten frames on, ``-1:00``
  = one second back).
- Fields overflow as Premiere's do: ``1:30`` is 1 s + 30 f = 2 s 5 f.

Frame ``t`` starts at ``t / rate`` seconds (see ``studio.core.media.rates.frame_index``). A timecode
second counts ``round(rate)`` frames (24 at 23.976, 30 at 29.97). At 29.97 and 59.94 the timecode is
**drop-frame** (SMPTE 12M): frame numbers 0-1 (59.94: 0-3) are skipped at the start of every minute but
each tenth, so the label stays on the wall clock; it is written ``HH:MM:SS;FF`` and a typed timecode
is read the same way (a label that was dropped, such as ``00:01:00;00``, means the next frame).
23.976 is counted without drops (as editors use it).
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

from studio.core.errors import InputError
from studio.core.media.rates import DEFAULT_RATE, drop_frames, nominal

JUMP_HELP = (
    "Go to a timecode or a frame, as in Premiere: fields from the right are frames, seconds, minutes, "
    "hours (12:03 = 12 s 3 frames, 1:00:00 = 1 minute); bare digits pack two per field (1203 = 12 s 3 f, "
    "80 = 80 frames); #706 or 706f = frame 706; 3.2s = 3.2 seconds; +10 / -1:00 move from the playhead"
)


class TimecodeError(InputError):
    """A typed timecode that cannot be read."""


def timecode(frame: int, fps: int | Fraction = DEFAULT_RATE) -> str:
    """``HH:MM:SS:FF`` of frame ``frame`` at rate ``fps`` (``HH:MM:SS;FF`` drop-frame at 29.97 and
    59.94); negative frames clamp to 0."""
    frame = max(0, int(frame))
    base, drop = nominal(fps), drop_frames(fps)
    if drop:  # the frame number -> the label's count (skipped numbers added back)
        per_10min = base * 600 - drop * 9
        per_min = base * 60 - drop
        tens, rest = divmod(frame, per_10min)
        frame += drop * 9 * tens + (drop * ((rest - drop) // per_min) if rest > drop else 0)
    ff = frame % base
    s = frame // base
    return f"{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}{';' if drop else ':'}{ff:02d}"


def seconds_text(frame: int, fps: int | Fraction = DEFAULT_RATE) -> str:
    """A short duration such as ``28.24 s`` or ``1:02.40`` for a frame count."""
    seconds = float(max(0, int(frame)) / Fraction(fps))
    if seconds < 60:
        return f"{seconds:.2f} s"
    m, s = divmod(seconds, 60)
    return f"{int(m)}:{s:05.2f}"


_SEP = re.compile(r"[:;.,]")


def parse_jump(text: str, current: int = 0, fps: int | Fraction = DEFAULT_RATE) -> int:
    """The frame a typed ``text`` points at (see the module docstring); raises ``TimecodeError``.

    The result is not clamped to a clip: the caller knows its length.
    """
    raw = (text or "").strip().replace(" ", "")
    if not raw:
        raise TimecodeError("type a timecode (12:03), a frame (#80) or seconds (3.2s)")
    sign = 0
    if raw[0] in "+-":
        sign = 1 if raw[0] == "+" else -1
        raw = raw[1:]
    frames = _parse_absolute(raw, text, fps)
    if sign:
        return int(current) + sign * frames
    return frames


def _parse_absolute(raw: str, original: str, fps: int | Fraction) -> int:
    bad = TimecodeError(f"'{original}' is not a timecode; {JUMP_HELP}")
    low = raw.lower()
    if low.startswith("#") or low.endswith("f"):
        digits = low[1:] if low.startswith("#") else low[:-1]
        if not digits.isdigit():
            raise bad
        return int(digits)
    if low.endswith("s"):
        if not re.fullmatch(r"\d+(\.\d*)?|\.\d+", low[:-1]):
            raise bad
        return int(math.floor(float(low[:-1]) * float(fps) + 1e-9))
    if _SEP.search(low):
        fields = _SEP.split(low)
        if len(fields) > 4 or not all(f.isdigit() or f == "" for f in fields):
            raise bad
        values = [int(f) if f else 0 for f in fields]
    elif low.isdigit():
        if len(low) > 8:
            raise bad
        padded = low.rjust((len(low) + 1) // 2 * 2, "0")
        values = [int(padded[i : i + 2]) for i in range(0, len(padded), 2)]
    else:
        raise bad
    values = [0] * (4 - len(values)) + values  # hours, minutes, seconds, frames
    h, m, s, f = values
    base, drop = nominal(fps), drop_frames(fps)
    count = ((h * 60 + m) * 60 + s) * base + f
    if drop:  # a drop-frame label: the numbers skipped before it come off
        minutes, pos = divmod(count, base * 60)
        if minutes % 10 and pos < drop:  # a label that does not exist: the frame after it
            count += drop - pos
        count -= drop * (minutes - minutes // 10)
    return count

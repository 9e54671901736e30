"""Frame rates as exact fractions: the output's time base, its frame grid and its timestamps.

    rate = parse_rate("29.97")            # Fraction(30000, 1001), exactly
    rate_text(rate)                       # "29.97"
    frames_in(48_000, 16_000, rate)       # 90: ceil(3 s x 29.97), computed without float error
    first_sample(t, rate)                 # the 16 kHz sample frame t starts at: floor(t x 16000 / rate)
    frame_index(1.5, rate)                # 44: the frame on screen at 1.5 s
    mp4_time_base(rate)                   # Fraction(1, 30000): 1001 ticks per frame, every pts exact

Rates such as 29.97 are 30000/1001 exactly (the NTSC rates): a float 29.97 drifts by a frame every
9 hours and its pts are not whole ticks. Frame ``t`` of a clip starts at ``t / rate`` seconds; a clip
of ``d`` seconds has ``ceil(rate x d)`` frames (the last one partly past the audio).
"""

from __future__ import annotations

import math
from fractions import Fraction

from studio.core.constants import RATES  # the offered rates (the settings list them too)

DEFAULT_RATE = Fraction(25)  # a photo avatar's rate, and the rate before rates were a setting
SAMPLE_RATE = 16_000  # the analysis audio's rate (constants.SAMPLE_RATE)
DROP_FRAME = {Fraction(30000, 1001): 2, Fraction(60000, 1001): 4}  # frame numbers dropped per minute
MATCH = 0.002  # a video's own rate within 0.2 % of a listed one is that rate (29.97 read as 29.969...)


def parse_rate(value) -> Fraction:
    """``value`` (a listed name such as ``"29.97"``, ``"30000/1001"``, a number or a Fraction) as an
    exact rate; listed rates by their names snap to the exact fraction. ``ValueError`` otherwise."""
    if isinstance(value, Fraction):
        rate = value
    elif isinstance(value, str):
        text = value.strip()
        if text in RATES:
            return RATES[text]
        rate = Fraction(text)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise ValueError(f"frame rate {value!r} is not a number")
        rate = Fraction(value).limit_denominator(1001)
    else:
        raise ValueError(f"frame rate {value!r} is not a number")
    if rate <= 0 or rate > 1000:
        raise ValueError(f"frame rate {value!r} is not between 0 and 1000")
    return listed(rate) or rate


def listed(rate) -> Fraction | None:
    """The listed rate ``rate`` (a float, e.g. a stream's average rate) stands for, or None."""
    if rate is None or not float(rate) > 0:
        return None
    best = min(RATES.values(), key=lambda x: abs(float(rate) / float(x) - 1.0))  # 30 and 29.97 are 0.1 % apart
    return best if abs(float(rate) / float(best) - 1.0) <= MATCH else None


def nearest(rate) -> Fraction:
    """The listed rate closest to ``rate`` (by ratio): a 15 fps clip gives 23.976, 120 fps gives 60."""
    r = float(rate) if rate and float(rate) > 0 else float(DEFAULT_RATE)
    return min(RATES.values(), key=lambda x: abs(math.log(r / float(x))))


def output_rate(setting=None, avatar=None) -> Fraction:
    """The output rate a render uses: the ``fps`` setting (``"29.97"``...), or for ``"auto"`` (None)
    the video avatar's own rate and 25 for a photo."""
    if setting in (None, "", "auto"):
        try:
            video = avatar is not None and avatar.kind == "video"
        except (AttributeError, KeyError, TypeError):
            video = False
        return parse_rate(avatar.fps) if video else DEFAULT_RATE
    return parse_rate(setting)


def rate_text(rate) -> str:
    """The name of a listed rate (``"29.97"``), else the rate in a short form (``"12.5"``, ``"30000/1001"``)."""
    rate = Fraction(rate)
    for name, exact in RATES.items():
        if exact == rate:
            return name
    short = f"{float(rate):g}"
    return short if Fraction(short) == rate else f"{rate.numerator}/{rate.denominator}"


def rate_number(rate) -> int | float:
    """``rate`` for JSON: an int when whole (25), else a float to 3 decimals (29.97)."""
    rate = Fraction(rate)
    return int(rate) if rate.denominator == 1 else round(float(rate), 3)


def frames_in(samples: int, sample_rate: int, rate) -> int:
    """``ceil(samples / sample_rate x rate)``: the frames covering ``samples`` audio samples, exactly."""
    rate = Fraction(rate)
    return -(-int(samples) * rate.numerator // (int(sample_rate) * rate.denominator))


def first_sample(t, rate, sample_rate: int = SAMPLE_RATE):
    """The sample frame ``t`` starts at: ``floor(t x sample_rate / rate)`` (``t`` an int or an int array)."""
    rate = Fraction(rate)
    return t * (sample_rate * rate.denominator) // rate.numerator


def frame_index(seconds: float, rate=DEFAULT_RATE) -> int:
    """The frame shown at ``seconds`` (robust to float error: 0.12 s at 25 -> 3). A time no clip
    reaches (1e308 s, infinity, NaN) is ``OutsideClip``, never an overflow."""
    at = float(seconds) * float(Fraction(rate))
    if not math.isfinite(at) or abs(at) >= 2**62:
        from studio.core.errors import OutsideClip

        raise OutsideClip(f"{seconds} s is past the end of any clip; give a time inside the voice-over")
    return int(math.floor(at + 1e-6))


def frame_time(t: int, rate=DEFAULT_RATE) -> float:
    """When frame ``t`` starts, in seconds."""
    return float(Fraction(int(t)) / Fraction(rate))


def map_frames(t, src_rate, dst_rate):
    """Index on the ``dst_rate`` grid of what is on screen at frame ``t`` of ``src_rate`` (an int or an
    int array): ``floor(t x dst / src)``, exact; the identity when the rates are equal."""
    src, dst = Fraction(src_rate), Fraction(dst_rate)
    if src == dst:
        return t
    k = dst / src
    return t * k.numerator // k.denominator


def mp4_time_base(rate) -> Fraction:
    """The video stream's time base in an MP4/MOV: ``1 / timescale`` with the timescale a multiple of
    the rate's numerator (at least 10000, as FFmpeg's mov muxer picks it), so every frame's pts is a
    whole number of ticks: 25 -> 1/12800 (512 ticks a frame), 29.97 -> 1/30000 (1001 ticks)."""
    rate = Fraction(rate)
    scale = rate.numerator
    while scale < 10_000:
        scale *= 2
    return Fraction(1, scale)


def ticks_per_frame(rate) -> int:
    """Ticks of ``mp4_time_base(rate)`` per frame (an integer by construction)."""
    rate = Fraction(rate)
    ticks = Fraction(1) / (rate * mp4_time_base(rate))
    assert ticks.denominator == 1
    return int(ticks)


def drop_frames(rate) -> int:
    """Frame numbers skipped each minute by drop-frame timecode at ``rate`` (2 at 29.97, 4 at 59.94; 0:
    non-drop)."""
    return DROP_FRAME.get(Fraction(rate), 0)


def nominal(rate) -> int:
    """Frames a timecode second counts: 30 at 29.97, 24 at 23.976, 25 at 25."""
    return max(1, round(Fraction(rate)))

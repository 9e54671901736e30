"""Timecode text and typed jumps (Premiere's partial entry), and the shared progress rounding."""

from __future__ import annotations

import pytest

from studio.core.errors import InputError
from studio.core.media.timecode import TimecodeError, parse_jump, seconds_text, timecode
from studio.core.progress import fraction_percent, percent


@pytest.mark.parametrize(
    "frame, text",
    [
        (0, "00:00:00:00"),
        (24, "00:00:00:24"),
        (25, "00:00:01:00"),
        (80, "00:00:03:05"),
        (706, "00:00:28:06"),
        (1500, "00:01:00:00"),
        (90_000, "01:00:00:00"),
        (90_000 + 1525, "01:01:01:00"),
        (-5, "00:00:00:00"),
    ],
)
def test_timecode_text(frame, text):
    assert timecode(frame) == text


@pytest.mark.parametrize(
    "typed, frame",
    [
        ("12:03", 12 * 25 + 3),  # 12 s 3 frames (the example)
        ("1:00:00", 1500),  # one minute
        ("1:00:00:00", 90_000),  # one hour
        ("00:00:03:05", 80),
        ("3.05", 80),
        ("3;05", 80),
        ("3,05", 80),  # any separator
        ("1203", 303),  # bare digits: two per field from the right
        ("500", 125),  # 5 s 00 f
        ("80", 80),
        ("5", 5),  # up to two digits: a frame count
        ("#706", 706),
        ("706f", 706),
        ("706F", 706),
        ("3.2s", 80),
        ("0s", 0),
        ("28.24s", 706),
        ("1:30", 55),  # frames overflow into seconds, as Premiere does
        (":10", 10),
        ("2:", 50),
        (" 12 : 03 ", 303),
    ],
)
def test_parse_jump_absolute(typed, frame):
    assert parse_jump(typed) == frame


def test_parse_jump_relative():
    assert parse_jump("+10", current=80) == 90
    assert parse_jump("-1:00", current=80) == 55
    assert parse_jump("+#5", current=80) == 85
    assert parse_jump("-100", current=10) == -15  # not clamped: the caller knows the clip


@pytest.mark.parametrize("typed", ["", "  ", "abc", "1:2:3:4:5", "12:x3", "#", "#12a", "-s", "1e3s", "123456789"])
def test_parse_jump_refuses_with_one_sentence(typed):
    with pytest.raises(TimecodeError) as e:
        parse_jump(typed)
    assert isinstance(e.value, InputError)
    assert "\n" not in str(e.value)


def test_seconds_text():
    assert seconds_text(706) == "28.24 s"
    assert seconds_text(1500 + 60) == "1:02.40"


@pytest.mark.parametrize(
    "done, total, pct",
    [
        (0, 706, 0),
        (1, 706, 0),
        (353, 706, 50),
        (699, 706, 99),
        (705, 706, 99),
        (706, 706, 100),
        (7, 0, 0),
        (800, 706, 100),
        (-1, 10, 0),
        (29, 100, 29),
        (57, 100, 57),
    ],
)
def test_percent_floors_and_agrees(done, total, pct):
    assert percent(done, total) == pct
    assert fraction_percent(done / total if total else 0) == pct

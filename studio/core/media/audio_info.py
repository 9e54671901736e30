"""What a voice-over file is (``AudioInfo``: its format, rate, channels and length) and what Studio
accepts, shared by the two decoders (libsndfile in ``media.audio``, FFmpeg in ``media.audio_ffmpeg``).

Limits, checked from the header before anything is decoded (``probe``): a voice-over longer than
``max_audio_minutes()`` (default 240 minutes, ``STUDIO_MAX_AUDIO_MINUTES``; ``studio serve
--max-audio-minutes`` sets its own) is refused in one sentence, since its decoded size, not its
file size, is what a render holds (a 917 KB FLAC can hold 10 h of silence: 2.3 GB decoded).
``quiet_stderr`` keeps what the decoders' C libraries print off the terminal.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import sys
import threading
from dataclasses import dataclass

from studio.core.errors import AudioError
from studio.core.media.rates import DEFAULT_RATE, frames_in

log = logging.getLogger(__name__)

READ_BLOCK = 1 << 18  # source frames per decoded block (~6 s at 44.1 kHz)
SUPPORTED = "WAV, FLAC, OGG (Vorbis/Opus), MP3 or M4A/AAC"
DEFAULT_MAX_MINUTES = 240.0  # 4 h: 0.9 GB of 16 kHz samples in a render


@dataclass(frozen=True)
class AudioInfo:
    """What the source file is, before any conversion."""

    path: str
    format: str
    subtype: str
    source_rate: int
    channels: int
    source_frames: int
    decoder: str = "libsndfile"  # or "ffmpeg" (PyAV): what ``read_blocks`` decodes it with

    @property
    def duration_s(self) -> float:
        return self.source_frames / self.source_rate

    @property
    def frames(self) -> int:
        """Video frames on the 25 fps grid: ``ceil(duration_s * 25)``, computed exactly."""
        return frames_for(self.source_frames, self.source_rate)

    def frames_at(self, rate=DEFAULT_RATE) -> int:
        """Video frames at ``rate``: ``ceil(duration_s * rate)``, computed exactly."""
        return frames_for(self.source_frames, self.source_rate, rate)


def frames_for(source_frames: int, rate: int, fps=DEFAULT_RATE) -> int:
    """``ceil(source_frames / rate * fps)`` without floating-point error."""
    return frames_in(source_frames, rate, fps)


_LIMIT: dict = {"minutes": None, "how": ""}  # set by ``set_max_audio_minutes`` (``studio serve``)


def set_max_audio_minutes(minutes: float | None, how: str = "") -> None:
    """Set this process's limit (None: back to ``STUDIO_MAX_AUDIO_MINUTES`` or the default);
    ``how``: how the user raises it, for the message (e.g. "this server's --max-audio-minutes")."""
    if minutes is not None and not (math.isfinite(minutes) and minutes > 0):
        raise AudioError(f"the audio limit must be a positive number of minutes, not {minutes}")
    _LIMIT.update(minutes=minutes, how=how)


def max_audio_minutes() -> tuple[float, str]:
    """The longest voice-over accepted, in minutes, and how to raise the limit."""
    if _LIMIT["minutes"] is not None:
        return float(_LIMIT["minutes"]), _LIMIT["how"] or "--max-audio-minutes raises it"
    from studio.core import env

    text = env.get("STUDIO_MAX_AUDIO_MINUTES").strip()
    if not text:
        return DEFAULT_MAX_MINUTES, "STUDIO_MAX_AUDIO_MINUTES raises it"
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (math.isfinite(value) and value > 0):
        from studio.core.errors import InputError

        raise InputError(f"STUDIO_MAX_AUDIO_MINUTES={text}: give a positive number of minutes, such as 240")
    return value, "STUDIO_MAX_AUDIO_MINUTES sets it"


class TooLong(AudioError):
    """The voice-over is longer than the limit (``max_audio_minutes``), said from its header."""


def check_duration(info: AudioInfo) -> None:
    """One sentence when the header says the voice-over is longer than the limit."""
    limit, how = max_audio_minutes()
    if info.duration_s > limit * 60:
        raise TooLong(
            f"{info.path}: is {hours_minutes(info.duration_s)} long, over the {hours_minutes(limit * 60)} limit for a voice-over "
            f"({how}); split it into parts"
        )


def hours_minutes(seconds: float) -> str:
    """A length as people say it: '90 minutes', '4 hours', '2 h 30 min'."""
    m = seconds / 60
    if m < 120:
        return f"{m:.4g} minutes" if m != int(m) else f"{int(m)} minutes"
    h, rest = divmod(int(round(m)), 60)
    return f"{h} h {rest} min" if rest else f"{h} hours"


def too_long(path) -> TooLong:
    """The error for a voice-over found (while decoding) to run past the limit."""
    limit, how = max_audio_minutes()
    return TooLong(
        f"{path}: is longer than the {hours_minutes(limit * 60)} limit for a voice-over ({how}); split it into parts"
    )


_QUIET = threading.Lock()


@contextlib.contextmanager
def quiet_stderr():
    """Send what C libraries write to file descriptor 2 meanwhile to the debug log instead.

    libsndfile's MP3 decoder (mpg123) prints resync notes straight to stderr, which no
    library setting turns off. Kept short (header probes only): other threads' stderr lines
    written meanwhile land in the debug log too.
    """
    import tempfile

    with _QUIET:
        try:
            sys.stderr.flush()
            saved = os.dup(2)
        except (OSError, ValueError, AttributeError):
            yield
            return
        with tempfile.TemporaryFile() as sink:
            os.dup2(sink.fileno(), 2)
            try:
                yield
            finally:
                os.dup2(saved, 2)
                os.close(saved)
                sink.seek(0)
                noise = sink.read(4096).decode("utf-8", "replace").strip()
                if noise:
                    log.debug("decoder output: %s", noise.replace("\n", " | "))

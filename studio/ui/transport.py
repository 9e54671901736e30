"""Playback of the timeline with an editor's transport: play/stop, J/K/L shuttle, loop of the range.

    t = Transport(timeline)
    t.toggle()            # Space: play at 1x from the playhead, or stop
    t.shuttle(+1)         # L: play forward; again: 2x, 4x.  J (shuttle(-1)) the same backwards
    t.stop()              # K

The clock is a 40 ms ``QTimer`` that moves the timeline's playhead to
``anchor + speed * elapsed * 25`` frames, so the playhead moves at real speed whatever the preview
manages to draw; the main window turns each move into a (coalesced) scrub frame. Playback covers the
in/out range when one is set, else the whole clip; at its end it stops on the last frame (or, with
Loop on, starts again at the range's first frame).

While a finished render is on screen, ``media`` is its ``QMediaPlayer``: forward play is the
player's own (at the shuttle's rate) and its position moves the playhead (the main window wires
that); reverse play steps the player with the same clock.

At 1x forward the script's own audio plays too (a ``QMediaPlayer`` made on first use) when this
machine has an audio output device; ``audio_device()`` says whether it has.
"""

from __future__ import annotations

import logging
import math
import time

from PySide6.QtCore import QObject, QTimer, QUrl, Signal

log = logging.getLogger(__name__)

SPEEDS = (1, 2, 4)
TICK_MS = 40


def audio_device() -> str | None:
    """Where sound would go, or None when this machine has no audio output (``studio.core.doctor``).

    Not QMediaDevices: asking Qt loads its audio stack, which logs from its own thread and can
    hang the GUI thread while background threads import (seen under pytest-qt)."""
    from studio.core.doctor import audio_output

    return audio_output()


class Transport(QObject):
    playingChanged = Signal(bool)
    speedChanged = Signal(int)  # frames of clip per frame of time: -4..4, 0 = stopped
    loopChanged = Signal(bool)

    def __init__(self, timeline, parent=None):
        super().__init__(parent)
        self.timeline = timeline
        self.speed = 0
        self.loop = False
        self.media = None  # the finished render's QMediaPlayer while it is shown
        self.audio_path = ""  # the script whose sound plays at 1x
        self.has_audio: bool | None = None  # None until checked
        self._audio = None
        self._anchor_frame = 0
        self._anchor_t = 0.0
        self.timer = QTimer(self)
        self.timer.setInterval(TICK_MS)
        self.timer.timeout.connect(self._tick)
        timeline.loopToggled.connect(self.set_loop)

    @property
    def playing(self) -> bool:
        return self.speed != 0

    # ---- commands ----------------------------------------------------------------------

    def toggle(self) -> None:
        if self.playing:
            self.stop()
        else:
            self.play(1)

    def shuttle(self, direction: int) -> None:
        """J (-1) or L (+1): start that way at 1x, or go faster (2x, 4x) when already going that way."""
        if self.speed and (self.speed > 0) == (direction > 0):
            k = SPEEDS.index(abs(self.speed))
            speed = SPEEDS[min(k + 1, len(SPEEDS) - 1)]
        else:
            speed = 1
        self.play(speed if direction > 0 else -speed)

    def play(self, speed: int = 1) -> None:
        if self.timeline.frames <= 0:
            return
        start, end = self.timeline.play_span()
        f = self.timeline.frame
        if speed > 0 and (f >= end - 1 or (self.loop and not start <= f < end)):
            self.timeline.set_frame(start)  # from the start, as editors expect after the end
        elif speed < 0 and (f <= start or (self.loop and not start <= f < end)):
            self.timeline.set_frame(end - 1)
        was = self.playing
        self.speed = int(speed)
        self._anchor()
        if self.media is not None and speed > 0:
            self.timer.stop()
            self.media.setPlaybackRate(float(speed))
            self.media.play()
        else:
            if self.media is not None:
                self.media.pause()
            self.timer.start()
        self._sound()
        self.speedChanged.emit(self.speed)
        if not was:
            self.timeline.set_playing(True)
            self.playingChanged.emit(True)

    def stop(self) -> None:
        self.timer.stop()
        if self.media is not None:
            self.media.pause()
        if self._audio is not None:
            self._audio.pause()
        if self.speed:
            self.speed = 0
            self.speedChanged.emit(0)
            self.timeline.set_playing(False)
            self.playingChanged.emit(False)

    def set_loop(self, on: bool) -> None:
        changed = self.loop != bool(on)
        self.loop = bool(on)
        if self.timeline.loop_btn.isChecked() != self.loop:
            self.timeline.loop_btn.setChecked(self.loop)
        if changed:
            self.loopChanged.emit(self.loop)

    def set_media(self, player) -> None:
        """Drive ``player`` (a QMediaPlayer) instead of scrub frames; None goes back to the timeline."""
        self.stop()
        self.media = player

    def media_ended(self) -> None:
        """The finished render played to its end: loop, or stop on its last frame."""
        if self.loop and self.speed > 0 and self.media is not None:
            start, _end = self.timeline.play_span()
            self.media.setPosition(math.ceil(start * 1000 / self.timeline.fps - 1e-9))
            self.media.play()
            return
        self.stop()

    def media_moved(self, frame: int) -> None:
        """The finished render's player reached ``frame``: the range's end stops or loops it."""
        if self.speed <= 0 or self.media is None:
            return
        start, end = self.timeline.play_span()
        if frame >= end - 1 and (end < self.timeline.frames or self.loop):
            if self.loop:
                self.media.setPosition(math.ceil(start * 1000 / self.timeline.fps - 1e-9))
            else:
                self.media.setPosition(math.ceil((end - 1) * 1000 / self.timeline.fps - 1e-9))
                self.stop()

    # ---- clock -------------------------------------------------------------------------

    def _anchor(self) -> None:
        self._anchor_frame = self.timeline.frame
        self._anchor_t = time.monotonic()

    def _tick(self) -> None:
        if not self.speed:
            self.timer.stop()
            return
        start, end = self.timeline.play_span()
        elapsed = time.monotonic() - self._anchor_t
        frame = self._anchor_frame + int(self.speed * elapsed * self.timeline.fps)
        if self.speed > 0 and frame >= end - 1:
            if self.loop and end - start > 1:
                self.timeline.set_frame(start)
                self._anchor()
                self._sound()
                return
            self.timeline.set_frame(end - 1)  # the last frame stays on screen
            self.stop()
            return
        if self.speed < 0 and frame <= start:
            if self.loop and end - start > 1:
                self.timeline.set_frame(end - 1)
                self._anchor()
                return
            self.timeline.set_frame(start)
            self.stop()
            return
        if frame != self.timeline.frame:
            self.timeline.set_frame(frame)

    # ---- sound -------------------------------------------------------------------------

    def _sound(self) -> None:
        """The script's audio at 1x forward (timeline playback only), silent otherwise."""
        if self.media is not None or self.speed != 1 or not self.audio_path:
            if self._audio is not None:
                self._audio.pause()
            return
        if self.has_audio is None:
            self.has_audio = audio_device() is not None
        if not self.has_audio:
            return
        try:
            if self._audio is None:
                from PySide6.QtMultimedia import QAudioOutput, QMediaPlayer

                self._audio = QMediaPlayer(self)
                self._audio_out = QAudioOutput(self)
                self._audio.setAudioOutput(self._audio_out)
            if self._audio.source().toLocalFile() != self.audio_path:
                self._audio.setSource(QUrl.fromLocalFile(self.audio_path))
            self._audio.setPosition(int(self.timeline.frame * 1000 / self.timeline.fps))
            self._audio.play()
        except Exception:
            log.warning("script audio playback failed", exc_info=True)
            self.has_audio = False

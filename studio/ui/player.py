"""In-app playback of the finished MP4 with sound (QtMultimedia), created on demand.

A QMediaPlayer must never live in module globals (PySide 6.12 aborts at exit): the player is
owned by this widget, which the main window creates.

The player and the timeline are one: its position moves the timeline's playhead
(``frameChanged``), the timeline's seeks move it (``seek_frame``), and the window's transport keys
drive it. A seek asked for while the file is still opening (the Render panel's "worst second" right
after ``play``) is kept and made once the player can seek: Qt's FFmpeg backend reports the duration
while the media is still loading and drops a ``setPosition`` made then. At the end it stays on the last frame (the video output would go black once the player
stops) and its button says Play again.
"""

from __future__ import annotations

import logging
import math

from PySide6.QtCore import Qt, QUrl, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QSlider, QVBoxLayout, QWidget

log = logging.getLogger(__name__)


def _mmss(ms: int) -> str:
    s = max(0, int(ms)) // 1000
    return f"{s // 60}:{s % 60:02d}"


class PlayerWidget(QWidget):
    closed = Signal()
    error = Signal(str)
    frameChanged = Signal(int)  # the frame on screen
    ended = Signal()
    playingChanged = Signal(bool)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("player")
        self.fps = 25.0  # the render's frame rate (the window sets the timeline's before each play)
        from PySide6.QtMultimedia import QAudioOutput, QMediaPlayer
        from PySide6.QtMultimediaWidgets import QVideoWidget

        self.video = QVideoWidget()
        self.player = QMediaPlayer(self)
        self.audio = QAudioOutput(self)
        self.player.setAudioOutput(self.audio)
        self.player.setVideoOutput(self.video)
        self.player.errorOccurred.connect(lambda _e, text: self.error.emit(f"playback failed: {text}"))
        self.player.mediaStatusChanged.connect(self._status)
        self.player.playbackStateChanged.connect(self._state)
        self.path = ""
        self.play_btn = QPushButton("Play")
        self.play_btn.setFocusPolicy(Qt.FocusPolicy.NoFocus)  # Space is the window's play/stop key
        self.play_btn.clicked.connect(self.toggle)
        self.back_btn = QPushButton("Back to preview")
        self.back_btn.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.back_btn.clicked.connect(self.close_player)
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.slider.sliderMoved.connect(self.player.setPosition)
        self.player.durationChanged.connect(self._duration)
        self._pending_ms: int | None = None  # a seek asked for before the file could seek
        self._opening = False  # play() gave a new file that has not loaded yet
        self.player.positionChanged.connect(self._moved)
        self.time = QLabel("0:00 / 0:00")
        self.time.setMinimumWidth(self.time.fontMetrics().horizontalAdvance("00:00 / 00:00") + 6)
        row = QHBoxLayout()
        row.addWidget(self.play_btn)
        row.addWidget(self.slider, 1)
        row.addWidget(self.time)
        row.addWidget(self.back_btn)
        from studio.ui.check_strip import CheckStrip

        self.strip = CheckStrip()  # the lip-sync check's seconds, when the render has its report
        self.strip.secondClicked.connect(lambda s: self.seek_frame(round(s * self.fps)))
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 0, 0, 0)
        box.addWidget(self.video, 1)
        box.addWidget(self.strip)
        box.addLayout(row)

    @property
    def playing(self) -> bool:
        from PySide6.QtMultimedia import QMediaPlayer

        return self.player.playbackState() == QMediaPlayer.PlaybackState.PlayingState

    def play(self, path: str) -> None:
        from PySide6.QtMultimedia import QMediaPlayer

        self.path = path
        self._pending_ms = None
        self.strip.load(path)
        self.player.setSource(QUrl.fromLocalFile(path))  # may say the old file's LoadedMedia on its way
        # a new file is LoadingMedia now, and isSeekable() still answers for the old one until it has loaded
        loaded = (QMediaPlayer.MediaStatus.LoadedMedia, QMediaPlayer.MediaStatus.BufferedMedia)
        self._opening = self.player.mediaStatus() not in loaded
        self.player.setPlaybackRate(1.0)
        self.player.play()

    def toggle(self) -> None:
        if self.playing:
            self.player.pause()
        else:
            if (
                self.player.duration() > 0
                and self.player.position() >= self.player.duration() - int(1000 / self.fps) - 1
            ):
                self.player.setPosition(0)  # at the end: from the start again
            self.player.play()

    def seek_frame(self, frame: int) -> None:
        """Show frame ``frame`` (the timeline's playhead moved)."""
        ms = math.ceil(frame * 1000 / self.fps - 1e-9)  # inside the frame: never the one before
        if self._opening or not self.player.isSeekable():  # still opening: a setPosition now is dropped
            self._pending_ms = ms
            return
        self._pending_ms = None
        if abs(self.player.position() - ms) > int(500 / self.fps):
            self.player.setPosition(ms)

    def _seek_pending(self, buffered: bool) -> None:
        """Make the kept seek: at LoadedMedia, and again at BufferedMedia, the first status at which the
        FFmpeg backend's playback engine exists (one made at LoadedMedia alone was seen dropped)."""
        if self._pending_ms is not None and self.player.isSeekable():
            self.player.setPosition(self._pending_ms)
            if buffered:
                self._pending_ms = None

    def close_player(self) -> None:
        # pause, not stop: stop() tears Qt's FFmpeg playback threads down and waits for them, and that
        # wait has hung the GUI thread (a full offscreen UI test run, no audio device); the next play()
        # replaces the source, the window's close stops it for good
        self.player.pause()
        self.closed.emit()

    def release(self) -> None:
        """Stop playback for good (the window closes), from the event loop rather than from here.

        Qt's FFmpeg backend tears its playback threads down in ``stop()``; its audio thread calls
        into the Python-wrapped ``QAudioOutput`` (which needs the GIL) while holding a lock that
        ``stop()`` waits for, and a ``stop()`` called from Python holds the GIL all the while: the
        window's close hung there (seen in a full offscreen UI run, gdb: the GUI thread in
        ``QObject::disconnect`` under ``stop()``, the ``QFFmpeg::AudioRenderer`` thread in
        ``PyGILState_Ensure``). Queued, ``stop()`` runs from the event loop, where PySide has released
        the GIL."""
        from PySide6.QtCore import QMetaObject
        from PySide6.QtMultimedia import QMediaPlayer

        if self.player.playbackState() != QMediaPlayer.PlaybackState.StoppedState:
            QMetaObject.invokeMethod(self.player, "stop", Qt.ConnectionType.QueuedConnection)

    def _duration(self, ms: int) -> None:
        self.slider.setRange(0, int(ms))
        self._moved(self.player.position())

    def _status(self, status) -> None:
        from PySide6.QtMultimedia import QMediaPlayer

        if status == QMediaPlayer.MediaStatus.LoadingMedia:
            self._opening = True
        if status == QMediaPlayer.MediaStatus.InvalidMedia:
            self._opening, self._pending_ms = False, None
        if status in (QMediaPlayer.MediaStatus.LoadedMedia, QMediaPlayer.MediaStatus.BufferedMedia):
            self._opening = False
            self._seek_pending(status == QMediaPlayer.MediaStatus.BufferedMedia)
        if status == QMediaPlayer.MediaStatus.EndOfMedia:
            # stay on the last frame: position it there and pause (a stopped player shows black)
            last = max(0, self.player.duration() - int(1000 / self.fps))
            self.player.setPosition(last)
            self.player.pause()
            self.ended.emit()

    def _state(self, _state) -> None:
        playing = self.playing
        self.play_btn.setText("Pause" if playing else "Play")
        self.playingChanged.emit(playing)

    def _moved(self, ms: int) -> None:
        if not self.slider.isSliderDown():
            self.slider.setValue(int(ms))
        self.time.setText(f"{_mmss(ms)} / {_mmss(self.player.duration())}")
        self.frameChanged.emit(int(math.floor(ms * self.fps / 1000 + 1e-6)))

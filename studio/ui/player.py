"""In-app playback of the finished MP4 with sound (QtMultimedia), created on demand.

A QMediaPlayer must never live in module globals (PySide 6.12 aborts at exit): the player is
owned by this widget, which the main window creates.
"""

from __future__ import annotations

import logging

from PySide6.QtCore import Qt, QUrl, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QSlider, QVBoxLayout, QWidget

log = logging.getLogger(__name__)


class PlayerWidget(QWidget):
    closed = Signal()
    error = Signal(str)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("player")
        from PySide6.QtMultimedia import QAudioOutput, QMediaPlayer
        from PySide6.QtMultimediaWidgets import QVideoWidget

        self.video = QVideoWidget()
        self.player = QMediaPlayer(self)
        self.audio = QAudioOutput(self)
        self.player.setAudioOutput(self.audio)
        self.player.setVideoOutput(self.video)
        self.player.errorOccurred.connect(lambda _e, text: self.error.emit(f"playback failed: {text}"))
        self.play_btn = QPushButton("Pause")
        self.play_btn.clicked.connect(self.toggle)
        self.back_btn = QPushButton("Back to preview")
        self.back_btn.clicked.connect(self.close_player)
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.sliderMoved.connect(self.player.setPosition)
        self.player.durationChanged.connect(lambda d: self.slider.setRange(0, int(d)))
        self.player.positionChanged.connect(self._moved)
        self.time = QLabel("0:00")
        row = QHBoxLayout()
        row.addWidget(self.play_btn)
        row.addWidget(self.slider, 1)
        row.addWidget(self.time)
        row.addWidget(self.back_btn)
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 0, 0, 0)
        box.addWidget(self.video, 1)
        box.addLayout(row)

    def play(self, path: str) -> None:
        self.player.setSource(QUrl.fromLocalFile(path))
        self.player.play()
        self.play_btn.setText("Pause")

    def toggle(self) -> None:
        from PySide6.QtMultimedia import QMediaPlayer

        if self.player.playbackState() == QMediaPlayer.PlaybackState.PlayingState:
            self.player.pause()
            self.play_btn.setText("Play")
        else:
            self.player.play()
            self.play_btn.setText("Pause")

    def close_player(self) -> None:
        self.player.stop()
        self.closed.emit()

    def _moved(self, ms: int) -> None:
        if not self.slider.isSliderDown():
            self.slider.setValue(int(ms))
        s = ms // 1000
        self.time.setText(f"{s // 60}:{s % 60:02d}")

"""The editor's keys and the finished render's player, wired to the timeline and the transport.

    controls = TransportControls(window, timeline, transport, preview)
    controls.shortcuts["Space"]          # every key binding (window-wide, not in text fields)
    controls.play("out.mp4")             # the render plays in the preview; playhead and player move together

Keys follow video editors (NLE) and work wherever the focus is in the window, except in text fields
and spin boxes, which keep their own keys (``studio.ui.widgets.InputGuard``):

    Space            play / stop              J K L      shuttle back / stop / forward (again: 2x, 4x)
    Left / Right     one frame (also , .)     K+J, K+L   one frame back / on (K held)
    Shift+Left/Right one second (also < >)    Home / End first / last frame
    Up / Down        previous / next silence or speech edge
    I / O            set in / out point       Alt+I / Alt+O   clear it
    Ctrl+G           type a timecode to go to
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QKeySequence, QShortcut

from studio.core.constants import FPS


class TransportControls(QObject):
    """Key bindings (J/K/L, steps, edges, in/out, go to timecode) and the in-app player."""

    playerClosed = Signal()  # the finished render left the preview: show the exact frame again

    def __init__(self, window, timeline, transport, preview):
        super().__init__(window)
        self.window, self.timeline, self.transport, self.preview = window, timeline, transport, preview
        self.player = None
        self._k_held = False  # K is down: J / L step one frame
        self.shortcuts: dict[str, QShortcut] = {}
        self._bind_keys()

    # ---- the player ----------------------------------------------------------------------

    def play(self, path: str) -> None:
        w = self.window
        if not path or not Path(path).exists():
            w.show_error(f"{path or 'the output'} does not exist any more; render it again")
            return
        try:
            if self.player is None:
                from studio.ui.player import PlayerWidget

                self.player = PlayerWidget()
                self.player.closed.connect(self._player_closed)
                self.player.error.connect(w.show_error)
                self.player.frameChanged.connect(self._player_frame)
                self.player.ended.connect(self.transport.media_ended)
                self.player.playingChanged.connect(self._player_playing)
            self.preview.set_widget(self.player)
            self.transport.set_media(self.player.player)
            self.player.play(path)
        except ImportError as exc:
            w.show_error(f"in-app playback needs QtMultimedia ({exc}); install pyside6-addons and libpulse0")

    @property
    def player_shown(self) -> bool:
        return self.player is not None and self.preview.stack.currentWidget() is self.player

    def _player_closed(self) -> None:
        self.transport.set_media(None)
        self.preview.set_widget(None)
        self.playerClosed.emit()

    def _player_frame(self, frame: int) -> None:
        if self.player_shown:
            self.timeline.set_frame(frame, emit=False)
            self.transport.media_moved(frame)

    def _player_playing(self, playing: bool) -> None:
        # the player's own button: the transport and the timeline's button follow it
        if playing and not self.transport.playing:
            self.transport.speed = 1
            self.timeline.set_playing(True)
        elif not playing and self.transport.playing and self.transport.speed > 0:
            self.transport.stop()
        self.timeline.set_playing(self.transport.playing or playing)

    # ---- keys ----------------------------------------------------------------------------

    def _bind_keys(self) -> None:
        t, tl = self.transport, self.timeline
        bindings = [
            ("Space", t.toggle),
            ("J", lambda: self._jkl(-1)),
            ("K", self._k_pressed),
            ("L", lambda: self._jkl(1)),
            ("Left", lambda: self.step(-1)),
            ("Right", lambda: self.step(1)),
            (",", lambda: self.step(-1)),
            (".", lambda: self.step(1)),
            ("Shift+Left", lambda: self.step(-FPS)),
            ("Shift+Right", lambda: self.step(FPS)),
            ("<", lambda: self.step(-FPS)),
            (">", lambda: self.step(FPS)),
            ("Home", lambda: self.go(0)),
            ("End", lambda: self.go(tl.frames - 1)),
            ("Up", lambda: self.edge(-1)),
            ("Down", lambda: self.edge(1)),
            ("I", tl.set_in),
            ("O", tl.set_out),
            ("Alt+I", tl.clear_in),
            ("Alt+O", tl.clear_out),
            ("Ctrl+G", self.focus_timecode),
        ]
        for key, slot in bindings:
            sc = QShortcut(QKeySequence(key), self.window)
            sc.setContext(Qt.ShortcutContext.WindowShortcut)
            sc.activated.connect(slot)
            self.shortcuts[key] = sc

    def key_released(self, event) -> None:
        """The window's key releases: K let go ends K+J / K+L stepping."""
        if event.key() == Qt.Key.Key_K and not event.isAutoRepeat():
            self._k_held = False

    def _k_pressed(self) -> None:
        self._k_held = True
        self.transport.stop()

    def _jkl(self, direction: int) -> None:
        if self._k_held:  # K+J / K+L: one frame
            self.step(direction)
        else:
            self.transport.shuttle(direction)

    def step(self, frames: int) -> None:
        self.transport.stop()
        self.timeline.step(frames)

    def go(self, frame: int) -> None:
        self.transport.stop()
        self.timeline.set_frame(max(0, frame))

    def edge(self, direction: int) -> None:
        self.transport.stop()
        self.timeline.next_edge(direction)

    def focus_timecode(self) -> None:
        self.timeline.timecode_edit.setFocus(Qt.FocusReason.ShortcutFocusReason)

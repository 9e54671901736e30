"""The editor's keys and the finished render's player, wired to the timeline and the transport.

    controls = TransportControls(timeline, transport, preview, commands, parent=window)   # the Playback menu
    controls.error.connect(show_error); controls.status.connect(status_bar.showMessage)
    controls.renderMarker.connect(render_marker)   # the marker menu's Render: frames [start, end)
    controls.shortcuts["Space"]          # the action a key triggers (window-wide, not in text fields)
    controls.play("out.mp4")             # the render plays in the preview; playhead and player move together

Keys follow video editors (NLE) and work wherever the focus is in the window, except in text fields
and spin boxes, which keep their own keys (``studio.ui.widgets.InputGuard``):

    Space            play / stop              J K L      shuttle back / stop / forward (again: 2x, 4x)
    Left / Right     one frame (also , .)     K+J, K+L   one frame back / on (K held)
    Shift+Left/Right one second (also < >)    Home / End first / last frame
    Up / Down        previous / next silence or speech edge
    I / O            set in / out point       Alt+I / Alt+O   clear it (Alt+X both)
    Shift+I/Shift+O  go to the in / out point Ctrl+/      loop playback
    Ctrl+G           type a timecode to go to
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QAction


class TransportControls(QObject):
    """Key bindings (J/K/L, steps, edges, in/out, go to timecode) and the in-app player."""

    playerClosed = Signal()  # the finished render left the preview: show the exact frame again
    error = Signal(str)  # one readable sentence (the window's banner)
    status = Signal(str, int)  # a passing note for the status bar, and how long it stays (ms)
    renderMarker = Signal(int, int)  # render frames [start, end): a marker to the next

    def __init__(self, timeline, transport, preview, commands, parent=None):
        super().__init__(parent)
        self.timeline, self.transport, self.preview = timeline, transport, preview
        self.commands = (
            commands  # the window's actions by id (``studio.ui.actions.Actions``): the Playback menu joins them
        )
        self.player = None
        self._k_held = False  # K is down: J / L step one frame
        self.shortcuts: dict[str, QAction] = {}  # key text -> its action
        self._bind_keys()

    # ---- the player ----------------------------------------------------------------------

    def play(self, path: str) -> None:
        if not path or not Path(path).exists():
            self.error.emit(f"{path or 'the output'} does not exist any more; render it again")
            return
        try:
            if self.player is None:
                from studio.ui.player import PlayerWidget

                self.player = PlayerWidget()
                self.player.closed.connect(self._player_closed)
                self.player.error.connect(self.error)
                self.player.frameChanged.connect(self._player_frame)
                self.player.ended.connect(self.transport.media_ended)
                self.player.playingChanged.connect(self._player_playing)
            self.player_rate = file_rate(path, self.timeline.rate)  # the file's own, not the timeline's
            self.player.fps = float(self.player_rate)
            self.preview.set_widget(self.player)
            self.transport.set_media(self.player.player)
            self.player.play(path)
            self._player_caption(0)
        except ImportError as exc:
            self.error.emit(f"in-app playback needs QtMultimedia ({exc}); install pyside6-addons and libpulse0")

    player_rate = Fraction(25)

    @property
    def second(self) -> int:
        """Frames in one second of timecode at the timeline's rate (30 at 29.97)."""
        from studio.core.media.rates import nominal

        return nominal(self.timeline.rate)

    @property
    def player_shown(self) -> bool:
        return self.player is not None and self.preview.stack.currentWidget() is self.player

    def _player_closed(self) -> None:
        self.transport.set_media(None)
        self.preview.set_widget(None)
        self.playerClosed.emit()

    def _player_frame(self, frame: int) -> None:
        if self.player_shown:  # the file's frame at its rate: the same moment on the timeline's grid
            self.timeline.set_playhead(frame / self.player_rate, emit=False)
            self.transport.media_moved(frame)
            self._player_caption(frame)

    def _player_caption(self, frame: int) -> None:
        """The caption says what plays: the rendered file and its frame (never a scrub frame's words)."""
        name = Path(self.player.path).name if self.player is not None and self.player.path else "the render"
        caption = self.timeline.session.frame_caption(frame, self.player_rate)  # counted at the file's rate
        self.preview.caption.setText(f"{name} · {caption} · the rendered file")

    def seek_seconds(self, seconds: float) -> None:
        """Show the finished file at ``seconds`` (its frame at its own rate)."""
        from studio.core.render.plan import frame_index

        self.player.seek_frame(frame_index(max(0.0, float(seconds)) + 1e-9, self.player_rate))

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
        """The Playback menu: every transport key is an action (its menu entry shows the key)."""
        t, tl, add = self.transport, self.timeline, self.commands.add
        add("play", "Playback", "Play / stop", t.toggle, "Space")
        add("shuttle_back", "Playback", "Play backwards (again: faster)", lambda: self._jkl(-1), "J")
        add("stop", "Playback", "Stop (hold K: J / L step one frame)", self._k_pressed, "K")
        add("shuttle_forward", "Playback", "Play forwards (again: faster)", lambda: self._jkl(1), "L")
        add("loop", "Playback", "Loop playback", t.set_loop, "Ctrl+/", checkable=True)
        t.loopChanged.connect(self.commands["loop"].setChecked)
        self.commands.separator("Playback")
        add("step_back", "Playback", "Previous frame", lambda: self.step(-1), ["Left", ","])
        add("step_forward", "Playback", "Next frame", lambda: self.step(1), ["Right", "."])
        add("second_back", "Playback", "Back one second", lambda: self.step(-self.second), ["Shift+Left", "<"])
        add("second_forward", "Playback", "Forward one second", lambda: self.step(self.second), ["Shift+Right", ">"])
        add("first_frame", "Playback", "First frame", lambda: self.go(0), "Home")
        add("last_frame", "Playback", "Last frame", lambda: self.go(tl.frames - 1), "End")
        add("prev_edge", "Playback", "Previous silence or speech edge", lambda: self.edge(-1), "Up")
        add("next_edge", "Playback", "Next silence or speech edge", lambda: self.edge(1), "Down")
        add("goto_timecode", "Playback", "Go to timecode…", self.focus_timecode, "Ctrl+G")
        self.commands.separator("Playback")
        add("set_in", "Playback", "Mark in", tl.set_in, "I")
        add("set_out", "Playback", "Mark out", tl.set_out, "O")
        add("go_in", "Playback", "Go to in", lambda: self._go_point(tl.in_frame), "Shift+I")
        add("go_out", "Playback", "Go to out", lambda: self._go_point(tl.out_frame), "Shift+O")
        add("clear_in", "Playback", "Clear in", tl.clear_in, ["Alt+I", "Ctrl+Shift+I"])
        add("clear_out", "Playback", "Clear out", tl.clear_out, ["Alt+O", "Ctrl+Shift+O"])
        add("clear_in_out", "Playback", "Clear in and out", tl.clear_range, ["Alt+X", "Ctrl+Shift+X"])
        self.commands.separator("Playback")
        marker = self.marker_action
        add("add_marker", "Playback", "Add marker (then type its name)", lambda: marker("add"), "M")
        add("next_marker", "Playback", "Next marker", lambda: marker("next"), "Shift+M")
        add("prev_marker", "Playback", "Previous marker", lambda: marker("prev"), "Ctrl+Shift+M")
        add("rename_marker", "Playback", "Rename marker…", lambda: marker("rename"), "Ctrl+Alt+R")
        add("delete_marker", "Playback", "Delete marker", lambda: marker("delete"), "Ctrl+Alt+M")
        add(
            "render_marker",
            "Render",
            "Render from the marker to the next",
            lambda: marker("render"),
            tip="Render from the marker at or before the playhead to the next one",
        )
        self.shortcuts = {k.toString(): a for a in self.commands.actions.values() for k in a.shortcuts()}

    def marker_action(self, what: str) -> None:
        """M, Shift+M, Ctrl+Shift+M, Ctrl+Alt+R, Ctrl+Alt+M and the marker menu's Render."""
        tl = self.timeline
        if tl.analysis is None:
            self.status.emit("import a voice-over first: markers sit on its timeline", 5000)
            return
        here = [m for m in tl.markers if m.frame <= tl.frame]
        layer = tl.markers_layer
        if what == "add":
            layer.add_marker()
        elif what == "next":
            layer.next_marker(1)
        elif what == "prev":
            layer.next_marker(-1)
        elif not here:
            self.status.emit("no marker at or before the playhead (M adds one)", 5000)
        elif what == "delete":
            layer.remove_marker(here[-1].frame)
        elif what == "rename":
            layer.rename_marker(here[-1].frame)
        elif what == "render":
            self.renderMarker.emit(*layer.marker_span(here[-1].frame))

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

    def _go_point(self, frame: int | None) -> None:
        if frame is None:
            self.status.emit("no point set there: I marks in, O marks out", 4000)
            return
        self.go(frame)

    def focus_timecode(self) -> None:
        """Ctrl+G: the timecode field with its text selected, so what is typed replaces it."""
        self.timeline.focus_timecode()


def file_rate(path: str, fallback) -> Fraction:
    """The frame rate of the video file at ``path`` (29.97 as 30000/1001), or ``fallback``."""
    try:
        from studio.core.quality.video import probe_video

        return Fraction(probe_video(path).fps).limit_denominator(1001)
    except Exception:  # noqa: BLE001 - a file the player still opens: its caption counts at the fallback
        return Fraction(fallback)

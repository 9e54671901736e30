"""The window's parts are handed their collaborators and talk back by signals: ``TransportControls``,
``EditorPreview`` and ``WindowCommands`` keep no reference to the window (it is only their Qt
parent), and the Playback
keys work on a bare main window built from the same real parts (timeline, transport, preview,
actions), saying what they have to say through ``status``, ``error`` and ``renderMarker``."""

from __future__ import annotations

from PySide6.QtWidgets import QMainWindow
from ui_helpers import clip, window  # noqa: F401 (fixture)

from studio.ui.actions import Actions
from studio.ui.model import EditorSession
from studio.ui.preview import PreviewView
from studio.ui.timeline import TimelineView
from studio.ui.transport import Transport
from studio.ui.transport_controls import TransportControls
from studio.ui.voiceovers import VoiceoverMemory


def test_the_parts_hold_no_window_but_as_their_qt_parent(window):
    for part in (window.editor, window.controls, window.window_commands):
        held = [name for name, value in vars(part).items() if value is window]
        assert held == [], f"{type(part).__name__} keeps the window in {held}"
        assert part.parent() is window


def test_an_editor_error_reaches_the_window_banner(window, qtbot):
    window.editor.error.emit("the avatar “nobody” cannot be loaded")
    assert window.banner.isVisible()
    assert window.banner_text.text() == "the avatar “nobody” cannot be loaded"


def test_the_window_commands_speak_through_signals(window, tmp_path):
    """File > Show output folder where the folder cannot be made: the banner says so (``error``)."""
    taken = tmp_path / "a file"
    taken.write_text("a file where the output folder should be")
    window.session.set("folder", str(taken))
    window.commands["show_output"].trigger()
    assert window.banner.isVisible()
    assert window.banner_text.text().startswith(f"the output folder {taken} cannot be made")


def test_the_playback_keys_work_without_the_studio_window(qtbot, tmp_path):
    host = QMainWindow()
    qtbot.addWidget(host)
    session = EditorSession(VoiceoverMemory())
    timeline = TimelineView(session)
    preview = PreviewView()
    host.setCentralWidget(timeline)
    transport = Transport(timeline, host)
    commands = Actions(host)
    controls = TransportControls(timeline, transport, preview, commands, parent=host)
    said: list[tuple[str, int]] = []
    errors: list[str] = []
    spans: list[tuple[int, int]] = []
    controls.status.connect(lambda text, ms: said.append((text, ms)))
    controls.error.connect(errors.append)
    controls.renderMarker.connect(lambda start, end: spans.append((start, end)))

    commands["add_marker"].trigger()  # no voice-over: no timeline to mark
    commands["go_in"].trigger()  # no in point
    controls.play(str(tmp_path / "gone.mp4"))
    assert said == [
        ("import a voice-over first: markers sit on its timeline", 5000),
        ("no point set there: I marks in, O marks out", 4000),
    ]
    assert errors == [f"{tmp_path / 'gone.mp4'} does not exist any more; render it again"]

    from studio.core.media.analysis import analyze

    session.set_analysis(analyze(str(clip(tmp_path, 4.0)), True, session.rate))
    timeline.markers_layer.set_markers([(10, "A"), (60, "B")])
    timeline.set_frame(30)
    commands["render_marker"].trigger()  # the marker at or before the playhead to the next
    assert spans == [(10, 60)]
    timeline.set_frame(5)
    commands["render_marker"].trigger()
    assert spans == [(10, 60)]
    assert said[-1] == ("no marker at or before the playhead (M adds one)", 5000)
    commands["step_forward"].trigger()
    assert timeline.frame == 6

"""The editor's model without Qt: every figure a label shows, the request, undo records (no qtbot)."""

from __future__ import annotations

import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest
import soundfile as sf

from studio.core.errors import InputError
from studio.core.media.analysis import analyze
from studio.core.settings import specs
from studio.ui.model import EditorSession


@pytest.fixture(scope="module")
def voice(tmp_path_factory):
    """10 s: speech-like noise with a second of silence in the middle (16-bit WAV)."""
    rate = 16_000
    rng = np.random.default_rng(0)
    x = (0.2 * rng.standard_normal(rate * 10)).astype(np.float32)
    x[rate * 4 : rate * 5] = 0.0
    path = tmp_path_factory.mktemp("voice") / "take.wav"
    sf.write(path, x, rate, subtype="PCM_16")
    return str(path)


def session_with(voice, fps="auto", avatar_rate=None):
    s = EditorSession()
    s.set("fps", fps)
    s.select(avatar="anna", script=voice)
    s.set_avatar_rate(avatar_rate)
    s.set_analysis(analyze(voice, False, s.rate))
    return s


def test_the_model_imports_no_qt():
    code = "import sys, studio.ui.model; print(sorted(m for m in sys.modules if m.split('.')[0] in ('PySide6', 'pyqtgraph', 'shiboken6')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_every_window_setting_is_held_once_with_the_schema_default():
    s = EditorSession()
    for spec in specs("ui"):
        want = spec.ui_default if spec.ui_default is not None else spec.default
        assert s.value(spec.name) == want, spec.name
    assert s.render_settings().threshold == s.value("threshold")
    s.set("threshold", 0.02)
    assert s.render_settings().threshold == 0.02
    with pytest.raises(InputError, match="crf"):
        s.set("crf", 99)


@pytest.mark.parametrize(("fps", "label"), [("25", "4.00 s"), ("29.97", "4.00 s"), ("60", "4.00 s")])
def test_the_range_label_is_at_the_rate_in_effect(voice, fps, label):
    s = session_with(voice, fps)
    rate = s.rate
    first, last = int(rate), int(rate * 5) - 1  # 1 s .. 5 s: 4.00 s
    s.marks.set_in(first)
    s.marks.set_out(last)
    assert s.marks.range_frames() == (first, last + 1)
    assert s.marks.range_label().endswith(label)
    assert s.marks.inout_label().endswith(f"({label})")
    assert s.grid_rate == rate


def test_auto_follows_a_video_avatars_rate_and_says_so(voice):
    s = EditorSession()
    seen = []
    s.events.rate.connect(seen.append)
    s.set_avatar_rate(Fraction(30))
    assert s.rate == 30 and seen == [30]
    s.set("fps", "50")
    assert s.rate == 50 and seen == [30, 50]
    s.set_avatar_rate(None)  # a photo now: the setting still rules
    assert seen == [30, 50]


def test_captions_count_frames_at_the_rate_given(voice):
    s = session_with(voice, "30")
    assert s.frame_caption(250, Fraction(25)) == "00:00:10:00 · frame 250"
    assert s.frame_caption(300) == "00:00:10:00 · frame 300"


def test_request_carries_everything_held(voice, tmp_path):
    s = session_with(voice, "25")
    s.set("folder", str(tmp_path))
    s.set("codec", "prores")
    s.set("loudness", -23.0)
    s.set("overwrite", True)
    s.marks.set_in(25)
    s.marks.set_out(74)
    req = s.request()
    assert req.frames is None  # range only is off
    s.set("range_only", True)
    req = s.request()
    assert req.frames == (25, 75)
    assert req.settings.loudness == -23.0 and req.settings.codec == "prores"
    assert req.overwrite is True
    assert req.output == str(tmp_path / "anna_take_auto_prores.mov")  # no "crf20" in a ProRes name
    assert not s.output.crf_applies
    s.set("codec", "h264")
    assert s.request().output.endswith("anna_take_auto_crf20.mp4")
    s.set("target", "farm")
    s.set("farm", "10.0.0.2:6379")
    assert s.request().placement.kind == "farm"


def test_the_timelines_markers_go_to_the_render_as_its_markers_setting(voice):
    """The window's markers are the timeline's (no text box): the render gets them as the ``markers``
    setting (seconds at the grid's rate), which its chapters and OpenTimelineIO file are made from."""
    from studio.core.delivery import parse_markers

    s = session_with(voice, "30")
    s.marks.add_marker(45, "Intro, part=1")
    s.marks.add_marker(15)
    text = s.request().settings.markers
    assert parse_markers(text) == [(0.5, "Marker 2"), (1.5, "Intro part 1")]  # the second marker added


def test_edits_are_recorded_with_before_and_after_restores_are_not(voice):
    s = session_with(voice, "25")
    steps = []
    s.events.edited.connect(lambda *a: steps.append(a))
    s.set("crf", 18)
    s.marks.set_in(10)
    s.marks.add_marker(40, "Intro")
    s.update({"crf": 30, "preset": "fast"})  # saved settings loading: no step
    assert steps == [
        ("crf", 20, 18, ""),
        ("range", (None, None), (10, None), ""),
        ("markers", (), ((40, "Intro"),), ""),
    ]
    assert s.step_text("markers", (), ((40, "Intro"),)) == "Add marker “Intro”"
    s.apply("crf", 18)  # an undo puts the value back, unrecorded
    assert s.value("crf") == 18 and len(steps) == 3


def test_marks_are_remembered_per_voiceover(voice, tmp_path):
    from studio.ui.voiceovers import VoiceoverMemory, content_key

    memory = VoiceoverMemory(tmp_path / "v.json")
    s = EditorSession(memory)
    s.select(script=voice)
    key = content_key(voice)
    s.set_analysis(analyze(voice, False, 25), key)
    s.marks.set_in(25)
    s.marks.add_marker(50, "Intro")
    again = EditorSession(VoiceoverMemory(tmp_path / "v.json"))
    again.select(script=voice)
    again.set_analysis(analyze(voice, False, 30), key)  # at 30 fps: the same moments
    assert again.marks.in_frame == 30 and [m.frame for m in again.marks.markers] == [60]
    # an undo of a mark of a voice-over no longer on screen goes to its memory
    again.apply("range", (None, None), scope="other-key")
    assert again.marks.in_frame == 30


def test_in_past_out_clears_out_and_markers_are_ordered(voice):
    s = session_with(voice, "25")
    s.marks.set_out(50)
    s.marks.set_in(60)
    assert (s.marks.in_frame, s.marks.out_frame) == (60, None)
    s.marks.add_marker(90)
    s.marks.add_marker(30)
    assert [(m.frame, m.name) for m in s.marks.markers] == [(30, "Marker 2"), (90, "Marker 1")]
    assert s.marks.marker_span(30) == (30, 90) and s.marks.marker_span(90) == (90, s.frames)
    assert s.marks.next_marker(40, 1) == 90 and s.marks.next_marker(40, -1) == 30 and s.marks.next_marker(95, 1) is None


def test_silence_summary_comes_from_the_held_threshold(voice):
    s = session_with(voice, "25")
    spans = s.silent_spans()
    assert any(a <= 100 and b >= 125 for a, b in spans)  # the quiet second 4..5 s
    assert "silences" in s.silence_summary()
    s.set("threshold", 1.0)  # everything is quieter than full scale
    assert s.mask.all()

"""What the editor remembers per voice-over (in/out, markers): keyed by content, moved to another
frame rate's grid, written atomically, and a damaged file set aside instead of failing."""

from __future__ import annotations

import json
import shutil

from conftest import DEMO_AUDIO

from studio.ui.voiceovers import VoiceoverMemory, content_key


def test_marks_are_keyed_by_content_and_survive_a_new_memory(tmp_path):
    copy = tmp_path / "renamed.flac"
    shutil.copy(DEMO_AUDIO, copy)
    assert content_key(copy) == content_key(DEMO_AUDIO)  # a copy elsewhere: the same key
    other = tmp_path / "other.flac"
    other.write_bytes(DEMO_AUDIO.read_bytes()[:-10] + b"0123456789")
    assert content_key(other) != content_key(DEMO_AUDIO)

    path = tmp_path / "editor" / "voiceovers.json"
    m = VoiceoverMemory(path)
    key = content_key(DEMO_AUDIO)
    m.put(key, name="voiceover.flac", rate=25.0, in_frame=25, out_frame=99, markers=[(40, "Intro"), (310, "Chorus")])
    again = VoiceoverMemory(path).get(key)
    assert again == {"in": 25, "out": 99, "markers": [[40, "Intro"], [310, "Chorus"]], "name": "voiceover.flac"}
    # at 30 fps the same moments: frame 40 of 25 fps (1.6 s) is frame 48
    at30 = VoiceoverMemory(path).get(key, rate=30.0)
    assert (at30["in"], at30["out"], at30["markers"][0]) == (30, 119, [48, "Intro"])
    # nothing left: the entry goes
    m.put(key, in_frame=None, out_frame=None, markers=[])
    assert key not in json.loads(path.read_text())["voiceovers"]
    assert [p.name for p in path.parent.iterdir()] == ["voiceovers.json"]  # no temporary left behind


def test_a_damaged_memory_is_set_aside_and_the_editor_starts_clean(tmp_path):
    path = tmp_path / "voiceovers.json"
    path.write_text("{not json")
    m = VoiceoverMemory(path)
    assert m.get("abc") == {"in": None, "out": None, "markers": [], "name": ""}
    assert (tmp_path / "voiceovers.json.damaged").read_text() == "{not json"
    m.put("abc", in_frame=3)
    assert VoiceoverMemory(path).get("abc")["in"] == 3


def test_an_unwritable_place_keeps_the_marks_for_the_session(tmp_path):
    blocker = tmp_path / "editor"
    blocker.write_text("a file where the folder should be")  # the write fails, also for root
    m = VoiceoverMemory(blocker / "voiceovers.json")
    m.put("k", in_frame=5)  # logged, not raised
    assert m.get("k")["in"] == 5
    assert blocker.read_text() == "a file where the folder should be"

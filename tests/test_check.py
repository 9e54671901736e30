"""``studio check`` on real renders whose answer is known (the classic engine on the CPU).

One 10 s render of the demo avatar speaking the first 10 s of the demo voice-over, made once for
the module; the voices (the same voice shifted by +-4 and +-8 frames, another script spoken by
espeak-ng) are checked against one measurement of its frames; edited copies (tests/check_cases.py)
give the mouth that talks through the silences, a blurred stretch, a seam and a drift.
"""

from __future__ import annotations

import json
import os

import check_cases as cc
import numpy as np
import pytest
from check_render import SECONDS, astro, home, render, voice, work  # noqa: F401 - fixtures

OTHER_SCRIPT = (
    "A small museum in the old town has opened an exhibition of maps, some of them five hundred years old. "
    "Visitors can see how sailors once imagined the world."
)


@pytest.fixture(scope="module")
def silent(render, voice):
    from studio.core.quality import speech_of
    from studio.core.quality.video import probe_video

    return speech_of(voice[0], probe_video(render).frames, 25.0)[1]


@pytest.fixture(scope="module")
def measured(render, astro, silent):
    from studio.core.quality import measure_video

    return measure_video(render, silent, astro)


@pytest.fixture(scope="module")
def own_report(render, astro, measured):
    from studio.core.quality import check_video

    return check_video(render, None, astro, measurements=measured)


def _check(video, audio, avatar, measured):
    from studio.core.quality import check_video

    return check_video(video, audio, avatar, measurements=measured)


def _edited(work, render, voice, astro, silent, kind, **kw):
    name = f"{kind}{'-span' if 'span' in kw else ''}.mp4"
    out = work / name
    if not out.exists():
        cc.edit_video(render, out, voice[1], astro, kind, silent=silent, **kw)
    return out


# --------------------------------------------------------------------------------------------
# The known answers


def test_the_renders_own_voice_is_in_sync(own_report):
    r = own_report
    assert r.offset_frames == 0
    assert r.confidence > 0.5
    assert r.verdict == "ok", r.reason
    assert r.silence_motion < 0.2 and r.sharpness > 0.8 and r.seam < 3.0 and r.drift < 0.025
    assert r.reference == "the avatar 'astro'"
    assert r.reason.endswith(".") and r.reason.count(". ") == 0  # one sentence


@pytest.mark.parametrize("delay", [-8, -4, 4, 8])
def test_a_shifted_voice_is_found_within_one_frame(work, render, astro, voice, measured, delay):
    """A voice delayed by d frames (silence put before it) makes the video d frames early: offset -d."""
    wav = cc.write_wav(work / f"shift{delay}.wav", cc.shifted_voice(voice[0], delay))
    r = _check(render, wav, astro, measured)
    assert abs(r.offset_frames - (-delay)) <= 1, (delay, r.offset_frames)
    assert r.confidence > 0.5
    assert r.verdict == "out of sync"
    word = "late" if -delay > 0 else "early"
    assert f"frames ({abs(r.offset_frames) * 40} ms) {word}" in r.reason


def test_another_script_in_the_same_voice_has_low_confidence(work, render, astro, measured, own_report):
    import espeak_speech as es

    if not es.available():
        pytest.skip("needs espeak-ng's library (Debian espeak-ng)")
    samples, _ = es.speak(OTHER_SCRIPT)
    wav = cc.write_wav(work / "other.wav", samples[: int(SECONDS * 16_000)])
    r = _check(render, wav, astro, measured)
    assert r.confidence < 0.25 < own_report.confidence
    assert r.verdict != "ok"
    assert "does not follow this voice" in r.reason


def test_a_mouth_talking_through_the_silences(work, render, voice, astro, silent, own_report):
    video = _edited(work, render, voice, astro, silent, "open")
    r = _check(video, None, astro, None)
    assert r.silence_motion > 0.35 > 3 * own_report.silence_motion
    assert r.verdict == "check"
    assert "moves during silences" in r.reason
    quiet = [s for s in r.per_second if s["silence_motion"] is not None]
    assert quiet and max(s["silence_motion"] for s in quiet) > 0.5


def test_without_the_avatar_the_videos_own_rest_frame_is_the_reference(render, voice, own_report):
    from studio.core.quality import check_video

    r = check_video(render)  # its own audio track, no avatar
    assert r.reference.startswith("the video's own frame")
    assert any("No avatar was given" in n for n in r.notes)
    assert r.offset_frames == own_report.offset_frames == 0
    assert r.verdict == "ok", r.reason
    assert abs(r.confidence - own_report.confidence) < 0.05  # the same voice, decoded from the MP4


def test_a_blurred_stretch_is_found_in_the_per_second_figures(work, render, voice, astro, silent, own_report):
    """Blur only seconds 4-7: sharpness falls there and the worst second is among them."""
    video = _edited(work, render, voice, astro, silent, "blur", amount=2.5, span=(100, 175))
    r = _check(video, None, astro, None)
    sharp = {s["second"]: s["sharpness"] for s in r.per_second if s["sharpness"] is not None}
    inside = [sharp[k] for k in (4, 5, 6) if k in sharp]
    outside = [v for k, v in sharp.items() if k <= 2 or k >= 8]
    assert inside and outside
    assert max(inside) < 0.65 < min(outside)
    issue = {i.figure: i for i in r.issues}
    if "sharpness" in issue:
        assert issue["sharpness"].worst_second in (4, 5, 6)
    assert min(sharp, key=lambda k: sharp[k]) in (4, 5, 6)


@pytest.mark.parametrize(("kind", "figure"), [("seam", "seam"), ("drift", "drift")])
def test_a_seam_and_a_drift_are_measured(work, render, voice, astro, silent, own_report, kind, figure):
    video = _edited(work, render, voice, astro, silent, kind)
    r = _check(video, None, astro, None)
    limit = getattr(r.thresholds, f"max_{figure}")
    assert getattr(r, figure) > limit > 2 * getattr(own_report, figure)
    assert r.verdict == "check"
    assert figure in {i.figure for i in r.issues}


# --------------------------------------------------------------------------------------------
# The command


def test_the_command_prints_the_json_report(render, home, capsys, monkeypatch):
    from studio.cli import main

    monkeypatch.setenv("STUDIO_HOME", str(home))
    rc = main(["check", str(render), "--avatar", "astro", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    for key in (
        "offset_frames",
        "confidence",
        "silence_motion",
        "sharpness",
        "seam",
        "drift",
        "verdict",
        "reason",
        "per_second",
        "worst_second",
        "reference",
        "correlation",
        "thresholds",
    ):
        assert key in out, key
    assert isinstance(out["offset_frames"], int) and out["offset_frames"] == 0
    assert isinstance(out["confidence"], float)
    assert out["verdict"] == "ok"
    assert len(out["per_second"]) == 10 and len(out["correlation"]) == 31
    assert {"second", "speech", "sync", "silence_motion", "sharpness", "seam", "drift"} <= set(out["per_second"][0])


def test_fail_under_exit_codes(render, work, voice, home, capsys, monkeypatch):
    from studio.cli import main

    monkeypatch.setenv("STUDIO_HOME", str(home))
    assert main(["check", str(render), "--avatar", "astro", "--fail-under", "ok,confidence=0.4,seam=5"]) == 0
    capsys.readouterr()
    assert main(["check", str(render), "--avatar", "astro", "--fail-under", "confidence=0.99"]) == 3
    err = capsys.readouterr().err
    assert "--fail-under not met" in err and "confidence" in err
    late = cc.write_wav(work / "late4.wav", cc.shifted_voice(voice[0], -4))
    assert main(["check", str(render), "--audio", str(late), "--fail-under", "check", "--json"]) == 3
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "out of sync" and out["fail_under"]["met"] is False
    assert main(["check", str(render), "--fail-under", "loudness=3"]) == 2  # before any work
    assert capsys.readouterr().err.count("\n") == 1


def test_a_video_without_a_face_is_one_sentence(work, capsys):
    from studio.cli import main
    from studio.core.media.writer import open_video

    wav = cc.write_wav(
        work / "tone.wav", (0.2 * np.sin(np.arange(32_000) / 16_000 * 2 * np.pi * 220)).astype(np.float32)
    )
    path = work / "noface.mp4"
    ramp = np.linspace(0, 255, 160, dtype=np.float32)
    frame = np.stack([np.broadcast_to(ramp, (120, 160))] * 3, -1).astype(np.uint8)
    with open_video(path, 160, 120, audio=str(wav), total_frames=50) as w:
        w.write(np.stack([frame] * 50))
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "no face was found" in err and err.count("\n") == 0


def test_a_video_without_audio_needs_the_voice(render, work, voice, capsys):
    import av

    from studio.cli import main

    silent_copy = work / "mute.mp4"
    with av.open(str(render)) as src, av.open(str(silent_copy), "w") as dst:
        s = dst.add_stream_from_template(src.streams.video[0])
        for pkt in src.demux(src.streams.video[0]):
            if pkt.dts is not None:
                pkt.stream = s
                dst.mux(pkt)
    assert main(["check", str(silent_copy)]) == 2
    err = capsys.readouterr().err.strip()
    assert "no audio track" in err and "--audio" in err and err.count("\n") == 0
    assert main(["check", str(silent_copy), "--audio", str(voice[1]), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["offset_frames"] == 0


@pytest.mark.parametrize("what", ["missing", "folder", "text", "fifo"])
def test_bad_inputs_are_one_sentence(work, what, capsys):
    from studio.cli import main

    path = work / f"bad-{what}"
    if what == "folder":
        path.mkdir(exist_ok=True)
    elif what == "text":
        path = work / "notes.mp4"
        path.write_text("not a video\n" * 10)
    elif what == "fifo":
        if not path.exists():
            os.mkfifo(path)
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("studio: error:") and err.count("\n") == 0


def test_a_muxing_offset_in_the_videos_own_track_is_found(work, render, astro, measured):
    """The audio packets stamped 160 ms late (the frames untouched): the video is 4 frames early."""
    late = cc.shift_audio_track(render, work / "late-track.mp4", 0.16)
    r = _check(late, None, astro, measured)
    assert r.offset_frames == -4 and r.verdict == "out of sync"
    assert "advance the audio by 4 frames" in r.reason


def test_other_pixel_formats_and_containers(work, render, astro):
    """Motion-JPEG (full-range 4:2:2) with PCM in an AVI: decoded through RGB, the same answers."""
    from studio.core.quality import check_video

    r = check_video(cc.transcode_mjpeg(render, work / "render.avi"), None, astro)
    assert r.offset_frames == 0 and r.confidence > 0.5
    assert r.verdict == "ok", r.reason

"""Output frame rates end to end: exact rates, drop-frame timecode, the frame grid, renders at every
rate (frame count, stream rate, pts, mouth sync), video avatars at their own rate, the CLI."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest
from conftest import prepare_demo_avatar, speech_pause_speech

from studio.core.media import rates
from studio.core.media.rates import RATES
from studio.core.media.timecode import parse_jump, seconds_text, timecode
from studio.core.render.renderer import Renderer
from studio.core.settings import SCHEMA, RenderSettings, from_dict

DURATION = 0.7  # seconds of voice-over per render: speech 0-0.4 s, silence, speech again


@pytest.fixture(scope="module")
def avatar(tmp_path_factory):
    return prepare_demo_avatar(tmp_path_factory.mktemp("rates_home"))


@pytest.fixture(scope="module")
def voice(tmp_path_factory):
    return speech_pause_speech(tmp_path_factory.mktemp("voice") / "voice.wav", 0.4, 0.15, 0.15)


# ---------------------------------------------------------------------------------------------
# rates, timecode, the frame grid


def test_listed_rates_are_exact_fractions():
    assert rates.parse_rate("29.97") == Fraction(30000, 1001) and rates.parse_rate("23.976") == Fraction(24000, 1001)
    assert rates.parse_rate("59.94") == Fraction(60000, 1001) and rates.parse_rate("30000/1001") == RATES["29.97"]
    assert rates.parse_rate(29.97002997) == RATES["29.97"] and rates.parse_rate(30) == 30
    assert rates.listed(30.0) == 30 and rates.listed(29.969) == RATES["29.97"] and rates.listed(27.0) is None
    assert rates.nearest(15) == RATES["23.976"] and rates.nearest(120) == 60 and rates.nearest(48) == 50
    assert [rates.rate_text(r) for r in RATES.values()] == list(RATES)
    with pytest.raises(ValueError):
        rates.parse_rate("fast")
    # ceil(rate x duration) without float error: 10 s at 29.97 is 299.7 -> 300 frames
    assert rates.frames_in(160_000, 16_000, RATES["29.97"]) == 300
    assert rates.frames_in(16_000 * 3600, 16_000, RATES["29.97"]) == 107_893  # one hour: 107892.1...
    for r in RATES.values():  # the mp4 time base holds every frame's pts in whole ticks
        tb = rates.mp4_time_base(r)
        assert tb.numerator == 1 and 1 / tb >= 10_000 and Fraction(rates.ticks_per_frame(r)) == 1 / (r * tb)
    assert rates.mp4_time_base(25) == Fraction(1, 12800) and rates.ticks_per_frame(RATES["29.97"]) == 1001


@pytest.mark.parametrize(
    "rate, frame, text",
    [
        ("29.97", 0, "00:00:00;00"),
        ("29.97", 1799, "00:00:59;29"),
        ("29.97", 1800, "00:01:00;02"),  # ;00 and ;01 are dropped at the minute
        ("29.97", 17982, "00:10:00;00"),  # but not at the tenth
        ("29.97", 107892, "01:00:00;00"),  # one hour of wall clock is one hour of timecode
        ("59.94", 3600, "00:01:00;04"),
        ("59.94", 215784, "01:00:00;00"),
        ("23.976", 24, "00:00:01:00"),  # non-drop, 24 frames a timecode second
        ("30", 1800, "00:01:00:00"),
        ("60", 61, "00:00:01:01"),
    ],
)
def test_drop_frame_timecode(rate, frame, text):
    r = RATES[rate]
    assert timecode(frame, r) == text
    assert parse_jump(text, 0, r) == frame


def test_drop_frame_round_trips_and_reads_dropped_labels():
    for name in ("29.97", "59.94"):
        r = RATES[name]
        assert all(parse_jump(timecode(f, r), 0, r) == f for f in range(0, 250_000, 97))
    r = RATES["29.97"]
    assert parse_jump("00:01:00;00", 0, r) == parse_jump("00:01:00;02", 0, r) == 1800  # a label that never shows
    assert parse_jump("1.5s", 0, r) == 44 and parse_jump("+1:00", 10, r) == 40
    assert seconds_text(300, r) == "10.01 s"


def test_frame_grid_at_29_97_has_frames_of_533_and_534_samples(tmp_path):
    import soundfile as sf

    from studio.core.media.analysis import frame_rms
    from studio.core.media.audio import load

    x = (0.1 * np.random.default_rng(0).standard_normal(16_000 * 2 + 77)).astype(np.float32)
    sf.write(tmp_path / "n.wav", x, 16_000, subtype="FLOAT")
    wave = load(tmp_path / "n.wav").at(RATES["29.97"])
    assert wave.frames == math.ceil((16_000 * 2 + 77) / 16_000 * 30000 / 1001) == 61
    spans = [wave.frame_span(t) for t in range(wave.frames)]
    assert spans[0] == (0, 533) and spans[1] == (533, 1067) and {b - a for a, b in spans} == {533, 534}
    rms = frame_rms(wave.samples, wave.frames, wave.rate)
    for t in (0, 1, 30, 59):
        a, b = spans[t]
        assert rms[t] == pytest.approx(np.sqrt(np.mean(x[a:b].astype(np.float64) ** 2)), rel=1e-5)
    assert load(tmp_path / "n.wav").frames == 51  # the default grid is 25 fps


def test_the_fps_setting_is_in_the_schema_and_checked():
    spec = SCHEMA["fps"]
    assert spec.default == "auto" and spec.choices == ("auto", *RATES) and spec.group == "engine"
    assert spec.faces == {"cli", "http", "ui", "job"}  # every face offers it
    assert "fps" in RenderSettings().frame_settings()  # a scrub on a server sends it
    assert from_dict({"fps": "29.97"}).fps == "29.97"
    with pytest.raises(Exception, match="fps '31' is not one of auto, 23.976"):
        from_dict({"fps": "31"})


# ---------------------------------------------------------------------------------------------
# renders at every rate


@pytest.mark.parametrize("name", list(RATES))
def test_render_at_each_rate(avatar, voice, tmp_path, name):
    """Frame count ceil(rate x duration), the stream's rate and every pts exact, and the frame on
    screen at t is frame_at(t) (the mouth in sync)."""
    import av

    rate = RATES[name]
    out = tmp_path / "out.mp4"
    settings = RenderSettings(engine="classic", device="cpu", fps=name, encoder="x264", crf=0, preset="ultrafast")
    r = Renderer(avatar, voice, settings)
    r.render(out)
    T = math.ceil(rate * Fraction(11200, 16000))  # 0.7 s
    assert r.result.frames == r.plan.frames == T and r.result.frame_rate == name
    with av.open(str(out)) as c:
        v = c.streams.video[0]
        assert v.average_rate == rate and v.time_base == rates.mp4_time_base(rate)
        decoded = [(f.pts, f.to_ndarray(format="nv12")) for f in c.decode(video=0)]
        a_dur = float(c.streams.audio[0].duration * c.streams.audio[0].time_base)
        time_base = v.time_base  # PyAV 18.1.1: a closed file's streams refuse
    assert len(decoded) == T
    assert [Fraction(p) * time_base for p, _ in decoded] == [Fraction(k) / rate for k in range(T)]
    assert abs(a_dur - DURATION) < 0.03
    # mouth sync: the frame on screen at t is frame_at(t), bit for bit (lossless x264: the decoded
    # NV12 planes are the writer's own conversion of the renderer's RGB frame), and not its neighbour
    from studio.core.render.composite import rgb_to_nv12

    scrub = Renderer(avatar, voice, settings)
    moved = 0
    for t in (0.05, 0.2, 0.31, 0.62, 0.69):
        k = rates.frame_index(t, rate)
        want = rgb_to_nv12(scrub.frame_at(t)[None])[0]
        assert np.array_equal(decoded[k][1], want), (name, t)
        moved += not np.array_equal(decoded[k - 1][1], want)
    assert moved >= 3  # the mouth really moves there: the match picks one frame


def test_the_mouth_follows_the_audio_in_time_at_every_rate(voice):
    """The classic controls at 25, 29.97 and 60 fps trace one curve in time (controls per output frame)."""
    from studio.core.engines.classic_visemes import mouth_controls
    from studio.core.media.audio import load

    wave = load(voice)
    base = mouth_controls(wave.samples, wave.frames, rate=25).open
    t25 = (np.arange(len(base)) + 0.5) / 25
    for name in ("29.97", "60"):
        w = wave.at(RATES[name])
        ctl = mouth_controls(w.samples, w.frames, rate=w.rate).open
        assert len(ctl) == w.frames
        t = (np.arange(len(ctl)) + 0.5) / float(w.rate)
        again = np.interp(t, t25, base)
        assert np.corrcoef(ctl, again)[0, 1] > 0.9 and np.abs(ctl - again).mean() < 0.08, name


def test_whisper_windows_are_centred_on_the_output_frames():
    import torch

    from studio.core.engines import whisper_features as wf

    for name, rate in RATES.items():
        left = wf.pad_left_for(rate)
        idx = torch.arange(0, 200)
        lo, w = wf.window_start(idx, rate, left)
        start = lo.double() + (0 if w is None else w)
        centre = start + wf.WINDOW / 2 - left  # in whisper steps (20 ms), unpadded
        want = (idx.double() + 0.5) * wf.STEP_RATE / float(rate)
        assert torch.allclose(centre, want, atol=1e-9), name
        assert int(lo.min()) >= 0
    assert wf.window_start(torch.arange(3), 25)[1] is None  # 25 fps: the official steps 2f-4 .. 2f+5
    # an interpolated window lies between the two whole-step windows around it
    steps = torch.randn(40, 2, 3)
    f = wf.Features(steps=steps, frames=8, pe=torch.zeros(20, 3), rate=RATES["30"], pad_left=wf.pad_left_for(30))
    lo, w = wf.window_start(torch.tensor([3]), RATES["30"], f.pad_left)
    a = steps[int(lo) : int(lo) + 10].reshape(20, 3)
    b = steps[int(lo) + 1 : int(lo) + 11].reshape(20, 3)
    assert torch.allclose(f.window([3])[0], a + (b - a) * float(w), atol=1e-6)


# ---------------------------------------------------------------------------------------------
# video avatars at their own rate


def _video(path, fps, seconds=1.0):
    import av
    from conftest import DEMO_AVATAR
    from PIL import Image

    img = np.asarray(Image.open(DEMO_AVATAR).convert("RGB").resize((256, 256)))
    with av.open(str(path), "w") as c:
        s = c.add_stream("libx264", rate=fps)
        s.width, s.height, s.pix_fmt = 256, 256, "yuv420p"
        s.options = {"crf": "18", "preset": "ultrafast"}
        for i in range(int(round(seconds * float(fps)))):
            frame = img.copy()
            frame[:8, :8] = (i * 9) % 255  # a frame counter in the corner (no face there)
            for p in s.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    return path


def test_a_29_97_video_avatar_renders_at_29_97_without_resampling(tmp_path, voice):
    import av

    from studio.core.avatars import library

    src = _video(tmp_path / "ntsc.mp4", Fraction(30000, 1001))
    a = library.prepare("ntsc", src)
    assert a.fps == RATES["29.97"] and a.meta["rate"] == "29.97" and a.N == 30
    r = Renderer("ntsc", voice, RenderSettings(engine="classic", device="cpu", encoder="x264"))
    assert r.rate == RATES["29.97"]  # auto: the avatar's own rate
    T = r.plan.frames
    expect = a.cycle_index(np.arange(T))  # output frame k shows avatar frame k (ping-pong): nothing resampled
    assert np.array_equal(r.plan.avatar_idx, expect)
    out = tmp_path / "ntsc_out.mp4"
    r.render(out)
    with av.open(str(out)) as c:
        assert c.streams.video[0].average_rate == Fraction(30000, 1001)
        assert sum(1 for _ in c.decode(video=0)) == T == math.ceil(RATES["29.97"] * Fraction(11200, 16000))
    # at another output rate the avatar's frames are mapped by time: 25 fps shows floor(k * 29.97 / 25)
    r25 = Renderer("ntsc", voice, RenderSettings(engine="classic", device="cpu", fps="25"))
    k = np.arange(r25.plan.frames)
    assert np.array_equal(r25.plan.avatar_idx, a.cycle_index(k * 30000 * 1 // (1001 * 25)))


def test_the_output_rate_is_resolved_once_in_the_request(tmp_path, voice, monkeypatch):
    """``auto`` at 29.97: the avatar's metadata is read for the rate once, when the request is built;
    the queue's estimates, the job row, the render, its clip and the sidecars read the request's rate,
    and the file has that rate."""
    import av

    from studio.core.avatars import library
    from studio.service.driver import Render
    from studio.service.queue import QueueService
    from studio.service.request import RenderRequest

    library.prepare("ntsc", _video(tmp_path / "ntsc.mp4", Fraction(30000, 1001)))
    calls = []
    real_avatar_rate, real_output_rate = library.avatar_rate, rates.output_rate

    def avatar_rate(avatar):
        calls.append(("avatar_rate", str(avatar)))
        return real_avatar_rate(avatar)

    def output_rate(setting=None, avatar=None):
        if setting in (None, "", "auto"):
            calls.append(("output_rate", setting))
        return real_output_rate(setting, avatar)

    monkeypatch.setattr(library, "avatar_rate", avatar_rate)
    monkeypatch.setattr(rates, "output_rate", output_rate)
    s = RenderSettings(engine="classic", device="cpu", encoder="x264", otio=True)
    req = RenderRequest("ntsc", str(voice), str(tmp_path / "one.mp4"), s)
    assert calls == [("avatar_rate", "ntsc")] and req.rate == "29.97" and req.settings.fps == "auto"
    assert req.render_settings.fps == "29.97" and RenderRequest.from_dict(req.to_dict()) == req
    assert req.with_(frames=(0, 5)).rate == "29.97" and len(calls) == 1  # kept by a copy
    render = Render(req)
    list(render.run())
    qs = QueueService()
    job = qs.add(req.with_(output=str(tmp_path / "queued.mp4")))
    assert job.settings["rate"] == "29.97" and job.settings["fps"] == "auto"
    assert [j.state for j in qs.run_until_empty()] == ["done"]
    assert calls == [("avatar_rate", "ntsc")]  # nothing below the request asked the avatar again
    for out in ("one.mp4", "queued.mp4"):
        with av.open(str(tmp_path / out)) as c:
            assert c.streams.video[0].average_rate == req.output_rate == Fraction(30000, 1001)
    assert render.result.frame_rate == "29.97" and qs.get(job.id).result["frame_rate"] == "29.97"
    assert req.with_(settings=s.with_(fps="25")).rate == "25"  # a new fps setting: resolved again


def test_an_odd_rate_video_is_resampled_to_the_nearest_listed_rate(tmp_path):
    from studio.core.avatars import library

    a = library.prepare("slow", _video(tmp_path / "fifteen.mp4", 15))
    assert a.fps == RATES["23.976"] and a.meta["source_fps"] == pytest.approx(15)
    assert a.N == math.ceil(RATES["23.976"] * 1)
    assert library.avatar_rate(tmp_path / "fifteen.mp4") == RATES["23.976"]


def test_caches_from_before_rates_stay_valid_for_photos_and_lost_sources(tmp_path):
    """A cache keyed the old way (25 fps frames) is kept where rebuilding gains nothing (a photo) or is
    impossible (the video's source is gone); with the source there, a video is rebuilt at its own rate."""
    import shutil

    from studio.core.avatars import builder, library
    from studio.core.avatars.assets import AvatarParams

    def make_legacy(name, src):
        a = library.prepare(name, src)
        meta = json.loads((a.folder / "meta.json").read_text())
        meta["stages"] = builder.stage_keys(meta["source_sha256"], a.params, 25)
        meta.update(fps=25, rate="25")
        (a.folder / "meta.json").write_text(json.dumps(meta))
        return a

    from conftest import DEMO_AVATAR

    photo = tmp_path / "p.png"
    shutil.copy(DEMO_AVATAR, photo)
    make_legacy("old_photo", photo)
    b = library.resolve("old_photo", AvatarParams(feather=8))
    assert b.meta["rebuilt"] == ["masks"]

    clip = _video(tmp_path / "c30.mp4", 30, seconds=0.6)
    make_legacy("old_clip", clip)
    os.rename(clip, tmp_path / "gone.mp4")
    c = library.resolve("old_clip", AvatarParams(feather=8))
    assert c.meta["rebuilt"] == ["masks"] and c.fps == 25  # its 25 fps frames are kept
    os.rename(tmp_path / "gone.mp4", clip)
    d = library.resolve("old_clip", AvatarParams(feather=9))
    assert d.meta["rebuilt"] == ["frames", "crops", "masks"] and d.fps == 30 and d.N == 18


# ---------------------------------------------------------------------------------------------
# the command line


def _studio(*args, home):
    env = {**os.environ, "STUDIO_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "studio", *map(str, args)], capture_output=True, text=True, env=env)


def test_cli_fps_and_a_drop_frame_range(avatar, voice, tmp_path):
    import av

    home = avatar.folder.parent.parent
    out = tmp_path / "cli.mp4"
    args = ("render", "--avatar", "astro", "--audio", voice, "-o", out, "--engine", "classic", "--fps", "59.94")
    r = _studio(*args, "--in", "00:00:00;10", "--out", "#30", "--json", home=home)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["frames"] == 20 and d["frame_rate"] == "59.94"
    with av.open(str(out)) as c:
        assert c.streams.video[0].average_rate == Fraction(60000, 1001)
    r = _studio(*args[:-2], "--fps", "31", home=home)
    assert r.returncode == 2 and "--fps" in r.stderr and "29.97" in r.stderr


def test_segments_joined_at_29_97_keep_exact_timestamps(avatar, voice, tmp_path):
    """Chunks (local or on a farm) are joined on the output's grid: pts k x 1001 / 30000 across the join."""
    import av

    from studio.core.scale.chunks import join_segments, render_segment

    rate = RATES["29.97"]
    settings = RenderSettings(engine="classic", device="cpu", fps="29.97", encoder="x264", crf=0, preset="ultrafast")
    r = Renderer(avatar, voice, settings)
    T = r.plan.frames
    segs = [render_segment(r, 0, 9, tmp_path / "a.mp4"), render_segment(r, 9, T, tmp_path / "b.mp4")]
    out = join_segments(segs, tmp_path / "joined.mp4", audio=str(voice), fps=r.rate)
    with av.open(out) as c:
        v = c.streams.video[0]
        assert v.average_rate == rate and v.time_base == Fraction(1, 30000)
        frames, time_base = list(c.decode(video=0)), v.time_base  # PyAV 18.1.1: read while open
    assert [Fraction(f.pts) * time_base for f in frames] == [Fraction(k) / rate for k in range(T)]
    whole = tmp_path / "whole.mp4"
    Renderer(avatar, voice, settings).render(whole)
    with av.open(str(whole)) as c:
        single = [f.to_ndarray(format="nv12") for f in c.decode(video=0)]
    assert all(np.array_equal(f.to_ndarray(format="nv12"), g) for f, g in zip(frames, single))


def test_a_range_of_a_long_clip_at_29_97_prepares_only_its_stretch(avatar, tmp_path):
    """Ranges of long voice-overs decode only their stretch (seeking on the 25 fps grid) and still give
    the whole render's frames at 29.97 (the RMS, the classic hops and the plan follow the output grid)."""
    import soundfile as sf
    from conftest import speechlike

    path = tmp_path / "six.flac"
    x = speechlike(30.0, 44_100, seed=4)
    x[44_100 * 10 : 44_100 * 12] = 0
    with sf.SoundFile(path, "w", 44_100, 1, "PCM_16", format="FLAC") as fh:
        for i in range(12):
            fh.write(x * (0.5 + 0.05 * i))
    s = RenderSettings(engine="classic", device="cpu", fps="29.97")
    a, b = 7193, 7223  # 4 min 0 s at 29.97
    part = Renderer(avatar, path, s, frames=(a, b))
    got = np.concatenate([f.cpu().numpy() for _, f in part.iter_frames([(a, b)])])
    assert part.wave.rate == RATES["29.97"] and part.wave.window == (5250, 7500)  # 25 fps decode frames
    first, end = part.wave.span
    assert first <= a - 800 and end >= b + 800 and part.plan.frames == math.ceil(360 * 30000 / 1001)
    whole = Renderer(avatar, path, s)
    want = np.concatenate([f.cpu().numpy() for _, f in whole.iter_frames([(a, b)])])
    assert np.abs(got.astype(np.int16) - want).max() <= 1 and (got != want).mean() < 1e-4
    assert np.array_equal(part.plan.weight[a - 200 : b + 200], whole.plan.weight[a - 200 : b + 200])
    assert np.allclose(part.plan.silent[a:b], whole.plan.silent[a:b])


def test_whisper_features_of_a_stretch_at_29_97_are_the_whole_clips(tmp_path):
    """MuseTalk's windows of a decoded stretch (an in/out range of a long clip) equal the whole clip's at
    29.97: the stretch starts on a 30 s piece, and the windows are placed on the output grid."""
    import soundfile as sf
    import torch
    from conftest import speechlike
    from musetalk_fakes import write_official_and_taesd

    from studio.core.engines.whisper_features import WhisperFeatures
    from studio.core.media.audio import load

    official, _ = write_official_and_taesd(tmp_path / "official")
    whisper = WhisperFeatures(official / "whisper")
    path = tmp_path / "v.wav"
    sf.write(path, speechlike(65.0, 16_000, seed=3), 16_000, subtype="FLOAT")
    rate = RATES["29.97"]
    whole = whisper(load(path, rate=rate))
    part_wave = load(path, window=(750, 1500), rate=rate)  # 25 fps decode frames: 30 s .. 60 s
    first, end = part_wave.span
    assert (first, end) == (math.ceil(30 * rate), math.floor(60 * rate))
    part = whisper(part_wave)
    assert part.partial and part.origin == 1500 and len(part) == len(whole) == math.ceil(65 * rate)
    idx = np.arange(first + 10, end - 10)
    torch.testing.assert_close(part.window(idx), whole.window(idx), atol=1e-5, rtol=1e-5)
    with pytest.raises(IndexError):
        part.window([first - 40])

"""Delivery codecs end to end: each codec's file decodes with the right codec, pixel format, profile,
audio and frame count; chunks in parallel lanes equal one encoder; wrong extensions and impossible
combinations are one sentence."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest
from conftest import prepare_demo_avatar, speech_pause_speech

from studio.core.errors import InputError, RenderError
from studio.core.render.renderer import Renderer
from studio.core.settings import RenderSettings

# codec -> (extension, decoded codec name, decoded pixel format, profile, audio codec)
EXPECT = {
    "h264": (".mp4", "h264", "yuv420p", None, "aac"),
    "hevc": (".mp4", "hevc", "yuv420p", "Main", "aac"),
    "prores": (".mov", "prores", "yuv422p10le", "HQ", "pcm_s16le"),
    "prores4444": (".mov", "prores", "yuva444p12le", "4444", "pcm_s16le"),  # always with alpha (opaque here)
    "dnxhr": (".mov", "dnxhd", "yuv422p", "DNXHR HQ", "pcm_s16le"),
    "vp9": (".webm", "vp9", "yuv420p", "Profile 0", "opus"),
}


@pytest.fixture(scope="module")
def avatar(tmp_path_factory):
    return prepare_demo_avatar(tmp_path_factory.mktemp("codecs_home"))


@pytest.fixture(scope="module")
def voice(tmp_path_factory):
    return speech_pause_speech(tmp_path_factory.mktemp("voice") / "voice.wav", 0.4, 0.1, 0.2)  # 16-bit


@pytest.fixture(scope="module")
def reference(avatar, voice, tmp_path_factory):
    """The clip's frames as the renderer makes them (RGB, before any encoding)."""
    r = Renderer(avatar, voice, RenderSettings(engine="classic", device="cpu"))
    return np.concatenate([f.numpy() for _, f in r.iter_frames()])


@pytest.mark.parametrize("codec", list(EXPECT))
def test_each_codec_decodes_with_its_codec_pixel_format_and_audio(avatar, voice, reference, tmp_path, codec):
    import av

    suffix, name, pix, profile, audio = EXPECT[codec]
    out = tmp_path / f"out{suffix}"
    settings = RenderSettings(engine="classic", device="cpu", codec=codec, fps="30")
    r = Renderer(avatar, voice, settings)
    r.render(out)
    assert r.result.output == str(out) and r.result.frames == 21 and [p.name for p in tmp_path.iterdir()] == [out.name]
    with av.open(str(out)) as c:
        v, a = c.streams.video[0], c.streams.audio[0]
        assert v.codec_context.name == name and v.average_rate == Fraction(30)
        assert (v.codec_context.width, v.codec_context.height) == (avatar.width, avatar.height)
        if profile is not None:
            assert v.codec_context.profile == profile
        assert a.codec_context.name == audio and a.channels == 1
        frames, time_base = list(c.decode(video=0)), v.time_base  # PyAV 18.1.1: a closed file's streams refuse
    assert len(frames) == 21 and frames[0].format.name == pix
    times = [Fraction(f.pts) * time_base for f in frames]
    if codec == "vp9":  # WebM (Matroska) counts milliseconds: each pts within half of one
        assert all(abs(t - Fraction(k, 30)) <= Fraction(1, 2000) for k, t in enumerate(times))
    else:
        assert times == [Fraction(k, 30) for k in range(21)]
    ref = Renderer(avatar, voice, settings).frame_at(0.2).astype(np.int16)  # frame 6
    got = frames[6].to_ndarray(format="rgb24").astype(np.int16)
    assert np.abs(got - ref).mean() < (2.5 if codec in ("prores", "prores4444", "dnxhr") else 4.0), codec
    with av.open(str(out)) as c:
        samples = sum(f.samples for f in c.decode(audio=0))
        rate = c.streams.audio[0].rate
    assert abs(samples / rate - 0.7) < 0.03  # the whole voice-over (Opus: 48 kHz, with its pre-skip)


def test_intra_chunks_in_parallel_lanes_equal_one_encoder(tmp_path):
    """ProRes over 3 worker-process lanes writes exactly the packets one encoder writes."""
    import av

    from studio.core.media.codec_writer import open_codec_writer

    rng = np.random.default_rng(1)
    frames = rng.integers(0, 255, (24, 96, 128, 3), dtype=np.uint8)
    outs = {}
    for lanes in (1, 3):
        out = tmp_path / f"p{lanes}.mov"
        with open_codec_writer(
            out, 128, 96, codec="prores", fps=Fraction(24000, 1001), total_frames=24, workers=lanes
        ) as w:
            assert w.window == lanes and (lanes == 1 or "x3 parallel" in w.name)
            from studio.core.render.plan import stripes

            for idx in stripes(24, 5, w.chunks, window=w.window):  # striped over the lanes, each in order
                w.write(frames[idx], indices=idx)
        with av.open(str(out)) as c:
            outs[lanes] = [bytes(p) for p in c.demux(video=0) if p.size]
    assert len(outs[1]) == 24 and outs[1] == outs[3]


def test_hevc_chunks_join_into_one_stream_on_closed_gops(tmp_path):
    import av

    from studio.core.media.codec_writer import open_codec_writer
    from studio.core.render.plan import stripes

    t = np.linspace(0, 1, 60)[:, None, None, None]
    frames = (np.arange(128)[None, None, :, None] * 2 + 200 * t).astype(np.uint8).repeat(96, 1).repeat(3, 3)
    out = tmp_path / "h.mp4"
    with open_codec_writer(out, 128, 96, codec="hevc", fps=25, total_frames=60, workers=3, preset="ultrafast") as w:
        assert w.window == 3
        for idx in stripes(60, 12, w.chunks, window=w.window):
            w.write(frames[idx], indices=idx)
    with av.open(str(out)) as c:
        v = c.streams.video[0]
        assert v.codec_context.name == "hevc" and v.codec_tag == "hvc1"
        keys = [p.is_keyframe for p in c.demux(video=0) if p.size]
        c.seek(0)
        got = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
    assert len(got) == 60 and sum(keys) >= 3  # each chunk starts on its own IDR
    assert max(np.abs(g.astype(int) - f.astype(int)).mean() for g, f in zip(got, frames)) < 3


@pytest.mark.parametrize(
    "name, codec, expect",
    [
        (
            "out.mp4",
            "prores",
            "out.mp4: --codec prores writes Apple ProRes 422 HQ in QuickTime (.mov); name the output out.mov",
        ),
        ("out.mov", "vp9", "out.mov: --codec vp9 writes VP9 in WebM (.webm); name the output out.webm."),
        ("out.webm", "h264", "out.webm: --codec h264 writes H.264 in MP4 (.mp4); name the output out.mp4."),
    ],
)
def test_a_wrong_extension_is_one_sentence(tmp_path, name, codec, expect):
    from studio.core.render.outputs import check_output

    with pytest.raises(InputError) as exc:
        check_output(tmp_path / name, codec=codec)
    assert str(exc.value).startswith(expect) and "\n" not in str(exc.value)
    assert check_output(tmp_path / "fine.mov", codec="dnxhr") == tmp_path / "fine.mov"


def _studio(*args, home):
    env = {**os.environ, "STUDIO_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "studio", *map(str, args)], capture_output=True, text=True, env=env)


def test_cli_codec_and_its_refusals(avatar, voice, tmp_path):
    import av

    home = avatar.folder.parent.parent
    base = ("render", "--avatar", "astro", "--audio", voice, "--engine", "classic")
    r = _studio(*base, "-o", tmp_path / "x.mp4", "--codec", "prores", home=home)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "name the output x.mov" in r.stderr
    assert not list(tmp_path.iterdir())
    r = _studio(*base, "-o", tmp_path / "x.mov", "--codec", "dnxhr", "--json", home=home)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["output"] == str(tmp_path / "x.mov") and d["encoder"].startswith("dnxhd") and d["audio"] == "pcm"
    with av.open(str(tmp_path / "x.mov")) as c:
        assert c.streams.video[0].codec_context.name == "dnxhd"
    r = _studio(*base, "-o", tmp_path / "y.webm", "--codec", "vp9", "--chunks", "2", home=home)
    assert r.returncode == 2 and "chunked and farm renders join h264, hevc, prores" in r.stderr
    r = _studio(*base, "-o", tmp_path / "y.mov", "--codec", "prores", "--encoder", "nvenc", home=home)
    assert r.returncode == 2 and "NVENC encodes H.264 only" in r.stderr
    r = _studio(*base, "-o", tmp_path / "y.mov", "--codec", "mpeg2", home=home)
    assert r.returncode == 2 and "--codec" in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.mov"]


def test_small_frames_and_a_broken_lane_are_one_sentence(tmp_path):
    from studio.core.media.codec_writer import open_codec_writer

    with pytest.raises(RenderError, match="DNxHR needs frames of at least 256x120"):
        open_codec_writer(tmp_path / "s.mov", 200, 100, codec="dnxhr", total_frames=10)
    assert not list(tmp_path.iterdir())
    # a write that fails midway (the wrong frame size) leaves nothing behind
    with pytest.raises(ValueError):
        with open_codec_writer(tmp_path / "t.mov", 128, 96, codec="prores", total_frames=10, workers=2) as w:
            w.write(np.zeros((3, 50, 50, 3), np.uint8), indices=np.arange(3))
    assert not list(tmp_path.iterdir())


def test_the_queue_keeps_the_codec_and_checks_its_extension(avatar, voice, tmp_path):
    home = avatar.folder.parent.parent
    add = ("queue", "add", "--avatar", "astro", "--audio", voice, "--engine", "classic", "--codec", "prores4444")
    r = _studio(*add, "-o", tmp_path / "q.mp4", home=home)
    assert r.returncode == 2 and "name the output q.mov" in r.stderr
    r = _studio(*add, "-o", tmp_path / "q.mov", "--fps", "23.976", home=home)
    assert r.returncode == 0, r.stderr
    job = r.stdout.split()[-1]  # "queued ... as job N"
    shown = json.loads(_studio("queue", "show", job, home=home).stdout)
    settings = shown.get("settings") or shown["request"]["settings"]
    assert settings["codec"] == "prores4444" and settings["fps"] == "23.976"


@pytest.mark.parametrize(
    "preset, encoder", [("ultrafast", "prores_aw"), ("veryfast", "prores_aw"), ("slow", "prores_ks")]
)
def test_the_preset_picks_the_prores_encoder(tmp_path, preset, encoder):
    import av

    from studio.core.media.codec_writer import open_codec_writer

    out = tmp_path / "p.mov"
    frames = np.random.default_rng(2).integers(0, 255, (4, 64, 96, 3), dtype=np.uint8)
    with open_codec_writer(out, 96, 64, codec="prores", total_frames=4, preset=preset, workers=1) as w:
        assert w.name == encoder
        w.write(frames, indices=np.arange(4))
    with av.open(str(out)) as c:
        v = c.streams.video[0]
        assert v.codec_context.profile == "HQ" and v.codec_tag == "apch" and len(list(c.decode(v))) == 4

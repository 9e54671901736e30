"""The render pipeline end to end on the classic engine: plan, frames, frame_at, MP4, cancel, CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import prepare_demo_avatar, speech_pause_speech

from studio.core.render.plan import crossfade_weights, frame_index, stripes
from studio.core.render.renderer import Renderer
from studio.core.settings import RenderSettings


@pytest.fixture(scope="module")
def avatar(tmp_path_factory):
    """The demo photo prepared once for the module (its own data folder)."""
    return prepare_demo_avatar(tmp_path_factory.mktemp("render_home"))


@pytest.fixture(scope="module")
def voice(tmp_path_factory):
    """3 s: speech 0-1.2 s, silence 1.2-2.0 s, speech 2.0-3.0 s."""
    return speech_pause_speech(tmp_path_factory.mktemp("voice") / "voice.wav", 1.2, 0.8, 1.0)


def test_crossfade_ramps_into_speech():
    speech = np.array([0, 0, 1, 1, 1, 1, 1, 1, 1, 0], bool)
    w = crossfade_weights(speech, 3)
    assert w.tolist() == pytest.approx([0, 0, 0.25, 0.5, 0.75, 1, 0.75, 0.5, 0.25, 0])
    assert crossfade_weights(speech, 0).tolist() == speech.astype(float).tolist()


def test_stripes_feed_every_chunk_in_order_with_full_batches():
    chunks = [(0, 5), (5, 10)]
    out = stripes(10, 4, chunks)
    assert [b.tolist() for b in out] == [[0, 1, 5, 6], [2, 3, 7, 8], [4, 9]]
    flat = np.concatenate(out)
    assert sorted(flat.tolist()) == list(range(10))
    for c0, c1 in chunks:  # each chunk's frames come in increasing order
        mine = flat[(flat >= c0) & (flat < c1)]
        assert mine.tolist() == list(range(c0, c1))
    # 16 chunks of 42 frames, batch 64: full batches, every chunk in the first one
    ch16 = [(42 * k, 42 * k + 42) for k in range(16)]
    b16 = stripes(672, 64, ch16)
    assert [len(b) for b in b16] == [64] * 10 + [32]
    assert {int(i) // 42 for i in b16[0]} == set(range(16))
    assert [b.tolist() for b in stripes(5, 2, [(0, 5)])] == [[0, 1], [2, 3], [4]]


def test_stripes_cut_by_engine_frames_keep_the_engine_full():
    """With ``engine`` given every batch but the last holds exactly ``batch`` engine frames (the
    silent ones ride along), the order inside each chunk is unchanged, and a long silence is cut
    at ``max_frames``."""
    rng = np.random.default_rng(3)
    engine = rng.random(672) > 0.2
    engine[100:400] = False  # a long pause
    ch16 = [(42 * k, 42 * k + 42) for k in range(16)]
    plain = np.concatenate(stripes(672, 64, ch16))
    out = stripes(672, 64, ch16, engine=engine, max_frames=128)
    assert np.array_equal(np.concatenate(out), plain)  # the same order, only cut elsewhere
    counts = [int(engine[b].sum()) for b in out]
    assert all(len(b) <= 128 for b in out)
    assert all(c == 64 for c, b in zip(counts[:-1], out[:-1]) if len(b) < 128)
    assert sum(counts) == int(engine.sum()) and 0 < counts[-1] <= 64
    assert len(out) < len(stripes(672, 64, ch16))  # fewer, fuller engine calls
    assert [b.tolist() for b in stripes(6, 2, [(0, 6)], engine=np.array([1, 0, 0, 1, 1, 1], bool))] == [
        [0, 1, 2, 3],
        [4, 5],
    ]


def test_frame_index_is_floor_of_t_times_25():
    assert frame_index(0.0) == 0 and frame_index(0.039) == 0 and frame_index(0.04) == 1
    assert frame_index(0.12) == 3 and frame_index(2.0) == 50


def test_plan_marks_the_pause_silent(avatar, voice):
    r = Renderer(avatar, voice, RenderSettings(engine="classic", device="cpu"))
    plan = r.plan
    assert plan.frames == 75
    assert plan.silent[32:48].all() and not plan.silent[:28].any() and not plan.silent[52:].any()
    assert (plan.weight[plan.silent] == 0).all()
    assert plan.weight[10] == 1.0 and 0 < plan.weight[29] < 1  # the ramp before the pause
    assert (plan.avatar_idx == 0).all()  # a photo: one frame


def test_silent_frames_are_the_avatar_frame_and_speech_moves_the_mouth(avatar, voice):
    r = Renderer(avatar, voice, RenderSettings(engine="classic", device="cpu", batch=8))
    frames = np.concatenate([f.numpy() for _, f in r.iter_frames()])
    assert frames.shape == (75, avatar.height, avatar.width, 3)
    still = np.asarray(avatar.frames[0])
    silent = np.flatnonzero(r.plan.weight == 0)
    assert len(silent) >= 15
    for t in silent:
        assert np.array_equal(frames[t], still), t
    # the mouth box region changes much more in speech than in silence
    x1, y1, x2, y2 = (int(v) for v in avatar.boxes[0])
    mid = (y1 + y2) // 2
    region = frames[:, mid:y2, x1:x2].astype(np.float32)
    motion = np.abs(np.diff(region, axis=0)).mean(axis=(1, 2, 3))
    speech_motion = motion[2:26].mean()
    silence_motion = motion[33:46].mean()
    assert speech_motion > 0.5 and silence_motion == 0.0
    assert np.abs(region[5:25] - still[mid:y2, x1:x2]).mean() > 1.0  # speech frames differ from the photo


def test_frame_at_equals_the_rendered_frame(avatar, voice):
    r = Renderer(avatar, voice, RenderSettings(engine="classic", device="cpu", batch=16))
    batches = {a: f.numpy() for a, f in r.iter_frames()}
    full = np.concatenate([batches[k] for k in sorted(batches)])
    scrub = Renderer(avatar, voice, RenderSettings(engine="classic", device="cpu", batch=16))
    for t in (0.0, 0.5, 1.13, 1.5, 2.04, 2.999):
        i = frame_index(t)
        assert np.array_equal(scrub.frame_at(t), full[i]), t


def test_render_writes_a_synced_h264_aac_mp4(avatar, voice, tmp_path):
    import av

    out = tmp_path / "out.mp4"
    r = Renderer(avatar, voice, RenderSettings(engine="classic", device="cpu", encoder="x264"))
    progress = list(r.run(out))
    assert progress[-1].finished and progress[-1].output == str(out)
    dones = [p.done for p in progress[:-1]]
    assert dones == sorted(dones) and dones[-1] == 75
    assert any(p.preview is not None for p in progress)
    assert {"engine", "composite", "encode"} <= set(progress[-1].stage_ms)
    res = r.result
    assert res.frames == 75 and res.silent_frames == r.plan.silent.sum() and res.engine == "classic"
    with av.open(str(out)) as c:
        v = c.streams.video[0]
        a = c.streams.audio[0]
        assert v.codec_context.name == "h264" and a.codec_context.name == "aac"
        assert v.average_rate == 25
        n = sum(1 for _ in c.decode(video=0))
        v_dur = float(v.duration * v.time_base)
        a_dur = float(a.duration * a.time_base)
    assert n == 75
    assert abs(v_dur - 3.0) <= 0.04 and abs(a_dur - v_dur) <= 0.04 + 0.025  # within a frame (+ AAC priming)
    assert [p.name for p in tmp_path.iterdir()] == ["out.mp4"]


def test_cancel_leaves_no_file_and_keeps_the_old_one(avatar, voice, tmp_path):
    from studio.core.errors import Cancelled

    out = tmp_path / "keep.mp4"
    out.write_bytes(b"previous render")
    r = Renderer(avatar, voice, RenderSettings(engine="classic", device="cpu", batch=8, encoder="x264"))
    with pytest.raises(Cancelled):
        for _p in r.run(out):
            r.cancel()
    assert out.read_bytes() == b"previous render"
    assert [p.name for p in tmp_path.iterdir()] == ["keep.mp4"]


def _studio(*args, home):
    env = {**os.environ, "STUDIO_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "studio", *map(str, args)], capture_output=True, text=True, env=env)


def test_cli_render_json_and_frame_png(avatar, voice, tmp_path):
    import PIL.Image

    home = avatar.folder.parent.parent  # the module's data folder holds the prepared avatar
    out = tmp_path / "cli.mp4"
    r = _studio("render", "--avatar", "astro", "--audio", voice, "-o", out, "--engine", "classic", "--json", home=home)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    for key in ("output", "frames", "silent_frames", "engine", "encoder", "seconds", "fps"):
        assert key in d
    assert d["frames"] == 75 and d["engine"] == "classic" and out.exists()
    png = tmp_path / "f.png"
    r = _studio(
        "frame", "--avatar", "astro", "--audio", voice, "-t", "0.5", "-o", png, "--engine", "classic", home=home
    )
    assert r.returncode == 0, r.stderr
    got = np.asarray(PIL.Image.open(png).convert("RGB"))
    want = Renderer(avatar, voice, RenderSettings(engine="classic", device="cpu")).frame_at(0.5)
    assert np.array_equal(got, want)


@pytest.mark.parametrize("case", ["missing-audio", "missing-folder", "time-outside"])
def test_cli_bad_input_exit_2(avatar, voice, tmp_path, case):
    home = avatar.folder.parent.parent
    if case == "missing-audio":
        r = _studio("render", "--avatar", "astro", "--audio", tmp_path / "no.wav", "-o", tmp_path / "o.mp4", home=home)
    elif case == "missing-folder":
        r = _studio("render", "--avatar", "astro", "--audio", voice, "-o", tmp_path / "nope" / "o.mp4", home=home)
    else:
        r = _studio("frame", "--avatar", "astro", "--audio", voice, "-t", "9", "-o", tmp_path / "f.png", home=home)
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("studio: error: ")
    assert not list(tmp_path.glob("*.mp4")) and not list(tmp_path.glob("*.png"))


@pytest.mark.gpu
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU")
def test_nv12_batches_equal_converted_rgb_batches_on_cuda(tmp_path, voice):
    from studio.bench.reference import synthetic_avatar  # no face tracker needed
    from studio.core.render.composite import pad_even, rgb_to_nv12

    r = Renderer(
        synthetic_avatar(tmp_path, 360, loop_frames=10), voice, RenderSettings(engine="classic", device="cuda")
    )
    assert r.nv12_ready
    batches = [np.arange(0, 20), np.arange(25, 40), np.arange(60, 75)]  # speech, the pause, mixed
    rgb = [rgb_to_nv12(pad_even(f)) for _, f in r.iter_batches(batches)]
    nv = [f for _, f in r.iter_batches(batches, nv12=True)]
    for a, b in zip(rgb, nv):
        assert a.shape == b.shape and bool((a == b).all())


@pytest.mark.parametrize(
    "env, expect",
    [
        ({"STUDIO_CPU_THREADS": "3"}, 3),
        ({"OMP_NUM_THREADS": "2"}, 2),
        ({}, max(1, (__import__("os").cpu_count() or 1) // 4)),
    ],
)
def test_cpu_render_threads_are_capped_unless_the_user_says(env, expect):
    import os
    import subprocess
    import sys

    clean = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "STUDIO_CPU_THREADS")}
    code = (
        "import torch; from studio.core.engines.runtime_torch import limit_cpu_threads as f; "
        "print(f(), torch.get_num_threads())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True, timeout=120, check=True
    ).stdout.split()
    assert out == [str(expect), str(expect)]

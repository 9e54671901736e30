"""Delivery (issue 35): the output canvas (fit, fill, face reframe, background, alpha), delivery presets,
the MP4/MOV timecode track and chapters, the OpenTimelineIO hand-off and the bad inputs' one sentence."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from fractions import Fraction
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import DEMO_AVATAR, prepare_demo_avatar, speech_pause_speech

from studio.core.errors import InputError
from studio.core.render.canvas import Canvas
from studio.core.render.renderer import Renderer
from studio.core.settings import RenderSettings, from_dict


@pytest.fixture(scope="module")
def avatar(tmp_path_factory):
    return prepare_demo_avatar(tmp_path_factory.mktemp("delivery_home"))


@pytest.fixture(scope="module")
def voice(tmp_path_factory):
    """3.0 s: speech 0-1.2 s, a 1.3 s pause, speech 2.5-3.0 s."""
    return speech_pause_speech(tmp_path_factory.mktemp("voice") / "voice.wav", 1.2, 1.3, 0.5)


def _stub(width, height, boxes, fps=25):
    """Avatar geometry alone (what the canvas reads): size, face boxes, which frames have a face."""
    boxes = np.asarray(boxes, np.float64)
    return SimpleNamespace(
        width=width, height=height, N=len(boxes), boxes=boxes, face_ok=np.ones(len(boxes), bool), fps=fps, alpha=None
    )


def test_fit_shows_all_of_the_avatar_centred_and_fill_covers_the_canvas():
    import torch

    a = _stub(512, 600, [[180, 60, 330, 230]])
    fit = Canvas.make(a, 1920, 1080, from_dict({"canvas": "1920x1080", "fit": "fit", "background": "#102030"}))
    assert (fit.scaled_w, fit.scaled_h) == (922, 1080)  # 1080/600 = 1.8x, all of it
    assert int(fit.ox[0]) == (1920 - 922) // 2 and int(fit.oy[0]) == 0
    frame = torch.full((1, 600, 512, 3), 200, dtype=torch.uint8)
    out = fit.place(frame, [0], alpha=False)[0].numpy()
    assert out.shape == (1080, 1920, 3)
    assert out[540, 10].tolist() == [0x10, 0x20, 0x30]  # the bars are the background colour
    assert out[540, 960].tolist() == [200, 200, 200]  # the presenter in the middle
    fill = Canvas.make(a, 1080, 1080, from_dict({"canvas": "1080x1080", "fit": "fill", "max_upscale": 4}))
    assert fill.scaled_w >= 1080 and fill.scaled_h >= 1080  # covers: no background shows
    out = fill.place(frame, [0], alpha=False)[0].numpy()
    assert (out == 200).all()


def test_scale_and_offset_move_the_presenter():
    a = _stub(640, 360, [[200, 50, 440, 300]])
    s = from_dict({"canvas": "1280x720", "fit": "fit", "scale": 0.5, "offset_x": 0.25, "offset_y": -0.1})
    c = Canvas.make(a, 1280, 720, s)
    assert (c.scaled_w, c.scaled_h) == (640, 360)
    assert int(c.ox[0]) == (1280 - 640) // 2 + 320 and int(c.oy[0]) == (720 - 360) // 2 - 72


def test_upscale_past_the_limit_is_held_back_with_a_note():
    a = _stub(256, 256, [[60, 60, 200, 200]])
    c = Canvas.make(a, 3840, 2160, from_dict({"canvas": "3840x2160", "max_upscale": 2.0}), quiet=True)
    assert (c.scaled_w, c.scaled_h) == (512, 512) and "kept at 2x" in c.note


def test_face_reframe_follows_the_face_smoothly_inside_the_middle_third():
    """A 1920x1080 source whose face walks from x=500 to x=1400 with +-12 px tracking jitter, on a vertical
    1080x1920 canvas: the face stays in the middle third of every frame and the crop glides (no jitter)."""
    import torch

    rng = np.random.default_rng(3)
    n = 150
    cx = np.linspace(500, 1400, n) + rng.uniform(-12, 12, n)
    cy = 400 + rng.uniform(-8, 8, n)
    boxes = np.stack([cx - 90, cy - 110, cx + 90, cy + 110], axis=1)
    a = _stub(1920, 1080, boxes)
    c = Canvas.make(a, 1080, 1920, from_dict({"canvas": "1080x1920", "fit": "face", "max_upscale": 2.0}))
    s = c.scaled_w / 1920
    assert c.scaled_h == 1920  # covers the height
    on_canvas = cx * s + c.ox
    assert ((on_canvas > 1080 / 3) & (on_canvas < 2 * 1080 / 3)).all()
    step = np.diff(c.ox.astype(float))
    assert np.abs(np.diff(step)).max() <= 2  # the crop's speed changes by a pixel or so: no jitter
    assert np.abs(step).max() < 25  # and it never jumps
    # the face drawn into a frame lands where the placement says
    k = 75
    frame = torch.zeros((1, 1080, 1920, 3), dtype=torch.uint8)
    x1, y1, x2, y2 = (int(v) for v in boxes[k])
    frame[0, y1:y2, x1:x2] = 255
    out = c.place(frame, [k], alpha=False)[0].numpy()
    ys, xs = np.nonzero(out[..., 0] > 128)
    assert abs(xs.mean() - (cx[k] * s + c.ox[k])) < 3 and 1080 / 3 < xs.mean() < 2 * 1080 / 3


def test_a_transparent_background_keeps_alpha_outside_the_presenter():
    import torch

    a = _stub(400, 400, [[100, 100, 300, 300]])
    c = Canvas.make(a, 1280, 720, from_dict({"canvas": "1280x720", "background": "transparent"}))
    out = c.place(torch.full((1, 400, 400, 3), 90, dtype=torch.uint8), [0], alpha=True)[0].numpy()
    assert out.shape == (720, 1280, 4)
    assert out[360, 20, 3] == 0 and out[360, 640, 3] == 255 and out[360, 640, 0] == 90


def test_frame_at_equals_the_written_frame_on_a_canvas(avatar, voice, tmp_path):
    """What ``write_batches`` hands the encoder (batches out of order, as the lanes take them) equals
    ``frame(i)`` of a fresh renderer; the MP4 has the canvas's size."""
    import av

    s = RenderSettings(engine="classic", device="cpu", canvas="1280x720", fit="face", background="#204060", batch=8)

    class Recorder:  # the encoder's end of the loop: keeps what it is handed
        takes_nv12, alpha = False, False
        frames: dict = {}

        def takes_gpu_frames(self):
            return False

        def write(self, frames, indices):
            for i, f in zip(indices, frames):
                self.frames[int(i)] = f.numpy().copy()

    r = Renderer(avatar, voice, s)
    rec = Recorder()
    order = [np.arange(a, min(a + 8, r.plan.frames)) for a in range(0, r.plan.frames, 8)][::-1]
    for _ in r.write_batches(rec, order):
        pass
    scrub = Renderer(avatar, voice, s)
    for i in (0, 13, 29, 40, r.plan.frames - 1):
        got = scrub.frame(i)
        assert got.shape == (720, 1280, 3) and np.array_equal(got, rec.frames[i]), i
    res = Renderer(avatar, voice, s).render(tmp_path / "canvas.mp4")
    assert (res.width, res.height) == (1280, 720)
    with av.open(res.output) as c:
        f = next(c.decode(video=0)).to_ndarray(format="rgb24")
    assert f.shape == (720, 1280, 3) and np.abs(f.astype(int) - rec.frames[0].astype(int)).mean() < 3


def test_transparent_canvas_writes_alpha_with_prores4444(avatar, voice, tmp_path):
    import av

    s = RenderSettings(engine="classic", device="cpu", canvas="640x360", background="transparent", codec="prores4444")
    res = Renderer(avatar, voice, s).render(tmp_path / "alpha.mov")
    assert res.alpha == "kept"
    with av.open(res.output) as c:
        f = next(c.decode(video=0)).to_ndarray(format="rgba")
    assert f.shape == (360, 640, 4)
    assert f[180, 5, 3] == 0 and f[180, 320, 3] == 255  # transparent bars, an opaque presenter


def test_a_delivery_sets_values_and_an_explicit_one_wins():
    from studio.core.render.resolve import resolve

    s = resolve({"delivery": "Broadcast HD"}).settings
    assert (s.canvas, s.fps, s.codec, s.loudness, s.true_peak, s.start_tc, s.delivery) == (
        "1920x1080",
        "25",
        "prores",
        -23.0,
        -1.0,
        "10:00:00:00",
        "Broadcast HD",  # kept as provenance
    )
    from studio.core.settings import parse_dict

    assert parse_dict({"delivery": "Broadcast HD"}).canvas == "avatar"  # parsing alone applies nothing
    assert from_dict({"delivery": "Broadcast HD"}) == s  # a form's or a folder's settings: the same rule
    s = resolve({"delivery": "web-1080p", "crf": 18, "canvas": "1280x720"}).settings
    assert (s.crf, s.canvas, s.loudness) == (18, "1280x720", -16.0)
    s = resolve({"delivery": "social-vertical", "codec": "h264", "fps": "25"}, {"delivery", "codec", "fps"}).settings
    assert (s.canvas, s.fps, s.loudness) == ("1080x1920", "25", -14.0)
    # a value at its default given explicitly wins too (fit over the delivery's face), and resolving the
    # resolved settings again with the same explicit keys gives them back
    r = resolve({"delivery": "social-vertical", "fit": "fit"}, {"delivery", "fit"})
    assert (r.settings.fit, r.settings.canvas, r.suffix) == ("fit", "1080x1920", ".mp4")
    assert resolve(r.settings, r.explicit) == r
    assert resolve({"delivery": "broadcast-hd"}).suffix == ".mov"


def test_a_users_delivery_is_saved_listed_and_used(tmp_path):
    from studio.core import delivery
    from studio.core.store import deliveries

    d = deliveries.save("Promo square", {"canvas": "1080x1080", "crf": 18, "fit": "face"}, "square promos")
    assert d.name == "promo-square" and not d.builtin
    from studio.core.render.resolve import resolve

    assert resolve({"delivery": "promo square"}).settings.canvas == "1080x1080"
    assert "promo-square" in delivery.all_deliveries()
    with pytest.raises(InputError, match="shipped with Studio"):
        deliveries.save("broadcast-hd", {"crf": 18})
    with pytest.raises(InputError, match="exists"):
        deliveries.save("Promo square", {"crf": 19})
    r = subprocess.run(
        [sys.executable, "-m", "studio", "delivery", "list", "--json"], capture_output=True, text=True, timeout=60
    )
    names = [x["name"] for x in json.loads(r.stdout)["deliveries"]]
    assert r.returncode == 0 and names[:3] == ["broadcast-hd", "broadcast-hd-2997", "broadcast-uhd"]
    assert "promo-square" in names


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--canvas", "0x0"], "canvas 0x0 is out of range"),
        (["--canvas", "20000x20000"], "canvas 20000x20000 is out of range"),
        (["--delivery", "nope"], "there is no delivery named 'nope'"),
        (["--start-tc", "25:00"], "start timecode '25:00' is not HH:MM:SS:FF"),
        (["--background", "not-a-colour"], "background 'not-a-colour' is not a colour"),
    ],
)
def test_bad_delivery_inputs_get_one_sentence(argv, says, voice, tmp_path):
    cmd = [sys.executable, "-m", "studio", "render", "--avatar", str(DEMO_AVATAR), "--audio", str(voice)]
    r = subprocess.run(cmd + ["-o", str(tmp_path / "o.mp4"), *argv], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and says in r.stderr and len(r.stderr.strip().splitlines()) <= 3, r.stderr
    assert not (tmp_path / "o.mp4").exists()


@pytest.mark.parametrize(
    "text, says",
    [
        ("  \n", "the script is empty; write the text the presenter says in it"),
        ("x" * 50_000, "the script is 50000 characters; a render's script holds at most 20000"),
    ],
)
def test_a_bad_script_file_gets_one_sentence(text, says, voice, tmp_path):
    script = tmp_path / "script.txt"
    script.write_text(text)
    cmd = [sys.executable, "-m", "studio", "render", "--avatar", str(DEMO_AVATAR), "--audio", str(voice)]
    cmd += ["-o", str(tmp_path / "o.mp4"), "--script", str(script), "--captions", "srt"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and says in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "o.mp4").exists()


def test_timecode_track_chapters_and_otio_round_trip(avatar, voice, tmp_path):
    """A broadcast-style MOV at 29.97: a tmcd track starting at the drop-frame label, the markers and the
    pause as chapters; the .otio loads, round-trips, and its markers sit on their frames."""
    import av
    import opentimelineio as otio

    from studio.service.driver import Render
    from studio.service.request import RenderRequest

    s = from_dict(
        {"engine": "classic", "device": "cpu", "codec": "prores", "fps": "29.97", "start_tc": "01:00:00:00"}
        | {"markers": "0.5=Intro, 2.7=Outro", "otio": True}
    )
    req = RenderRequest(str(DEMO_AVATAR), str(voice), str(tmp_path / "news.mov"), s)
    render = Render(req)
    for _ in render.run():
        pass
    res = render.result
    with av.open(res.output) as c:
        tmcd = [st for st in c.streams if st.metadata.get("handler_name") == "TimeCodeHandler"]
        assert tmcd and tmcd[0].metadata["timecode"] == "01:00:00;00"
        chapters = [(round(ch["start"] * ch["time_base"], 2), ch["metadata"]["title"]) for ch in c.chapters()]
    assert [t for _, t in chapters] == ["Start", "Intro", "Pause 1", "Outro"]
    assert chapters[1][0] == pytest.approx(0.5, abs=0.04)
    path = res.files["otio"]
    tl = otio.adapters.read_from_file(path)
    assert otio.adapters.read_from_string(otio.adapters.write_to_string(tl, "otio_json"), "otio_json").is_equivalent_to(
        tl
    )
    rate = 30000 / 1001
    assert tl.global_start_time.rate == pytest.approx(rate)
    assert otio.opentime.to_timecode(tl.global_start_time, rate, drop_frame=True) == "01:00:00;00"
    v1, a1 = tl.tracks[0], tl.tracks[1]
    assert v1[0].source_range.duration.value == res.frames and a1[0].source_range.start_time.value == 0
    marks = {m.name: round(m.marked_range.start_time.value) for m in tl.tracks.markers}
    # the nearest frame of the output rate (issue 44: 0.5 s at 29.97 is frame 15, 14.985 frames)
    assert marks["Intro"] == round(0.5 * Fraction(30000, 1001)) and marks["Outro"] == round(2.7 * Fraction(30000, 1001))
    assert "Pause 1" in marks and marks["Pause 1"] == pytest.approx(1.2 * rate, abs=3)
    assert os.path.basename(v1[0].media_reference.target_url) == "news.mov"


def test_delivery_save_show_and_remove_from_the_command_line(tmp_path):
    def studio(*argv):
        return subprocess.run([sys.executable, "-m", "studio", *argv], capture_output=True, text=True, timeout=60)

    r = studio("delivery", "save", "Promo", "--canvas", "1080x1080", "--crf", "18", "--description", "square")
    assert r.returncode == 0 and "canvas=1080x1080" in r.stdout, r.stderr
    shown = json.loads(studio("delivery", "show", "promo", "--json").stdout)
    assert shown["settings"] == {"canvas": "1080x1080", "crf": 18} and shown["description"] == "square"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"name": "x", "settings": {"canvas": "0x0"}}))
    r = studio("delivery", "save", "x", "--from-file", str(bad))
    assert r.returncode == 2 and "canvas 0x0 is out of range" in r.stderr
    assert studio("delivery", "remove", "broadcast-hd").returncode == 2
    r = studio("delivery", "save", "Broadcast HD", "--crf", "18")
    assert r.returncode == 2 and "is a delivery shipped with Studio" in r.stderr
    assert studio("delivery", "remove", "promo").returncode == 0
    assert "promo" not in studio("delivery", "list").stdout


def test_the_face_track_smoothing_is_scipys_savgol_of_order_1():
    """``line_fit_smooth`` (numpy, no ``scipy.signal`` import at render time) equals
    ``savgol_filter(x, win, 1, mode="interp")``: the moving line fit inside, the end lines at the edges."""
    signal = pytest.importorskip("scipy.signal")
    from studio.core.render.canvas import line_fit_smooth

    rng = np.random.default_rng(3)
    for n, win in ((50, 49), (50, 3), (7, 7), (300, 51)):
        x = 500 + np.cumsum(rng.normal(0, 8, n))
        x[n // 3] += 40  # a jump: the ends and the middle all differ from a plain moving mean
        got, want = line_fit_smooth(x, win), signal.savgol_filter(x, win, 1, mode="interp")
        assert np.abs(got - want).max() < 1e-8, (n, win)
        assert np.abs(got - x).max() > 1  # it smooths


def test_a_reframe_resizes_only_what_shows_and_each_frame_is_its_own():
    """A 16:9 source on a 9:16 canvas shows under a third of its scaled width: each frame resizes only
    its visible source (plus the filter's reach) at the presenter's exact scale. The placed frame is
    the whole resize's window to within half a pixel's shift (smooth image: <= 3 levels), and a
    frame placed alone equals the same frame placed in a batch."""
    import torch

    from studio.core.render import canvas as cv

    n = 12
    xs = np.linspace(0, 260, n)
    a = _stub(320, 180, np.stack([xs, np.full(n, 40), xs + 60, np.full(n, 120)], 1))
    c = Canvas.make(a, 180, 320, from_dict({"canvas": "180x320", "fit": "face"}))
    assert c.croppable() and c.scaled_w > 2 * 180
    yy, xx = np.mgrid[0:180, 0:320]
    img = np.stack([127 + 100 * np.sin(xx / 18 + yy / 13), 127 + 100 * np.cos(xx / 15), yy / 180 * 255], -1)
    frames = torch.from_numpy(np.repeat(img[None].astype(np.uint8), n, 0).copy())
    batch = c.place(frames, np.arange(n), alpha=False)
    whole = cv.resize(frames[:1], (c.scaled_h, c.scaled_w))[0].int()
    for k in range(n):
        ox, oy = int(c.ox[k]), int(c.oy[k])
        assert torch.equal(batch[k], c.place(frames[k : k + 1], [k], alpha=False)[0]), k
        window = whole[-oy : -oy + 320, -ox : -ox + 180]
        assert int((batch[k].int() - window).abs().max()) <= 3, k
    assert len(set(c.ox.tolist())) > 6  # the crop moved across the source


def _timecode_and_chapters(path):
    import av

    with av.open(str(path)) as c:
        tmcd = [st.metadata["timecode"] for st in c.streams if st.metadata.get("handler_name") == "TimeCodeHandler"]
        chapters = [(round(float(ch["start"] * ch["time_base"]), 3), ch["metadata"]["title"]) for ch in c.chapters()]
    return tmcd, chapters


def test_a_chunked_render_has_the_timecode_track_and_chapters_of_a_one_process_render(avatar, voice, tmp_path):
    """``--chunks 2``: the joined MP4 starts its drop-frame timecode track where the one-process render's
    does, and has the same chapters (the markers and the pause), read back with PyAV."""
    from studio.core.scale.chunks import ChunkedRender

    s = from_dict(
        {"engine": "classic", "device": "cpu", "encoder": "x264", "preset": "ultrafast", "fps": "29.97"}
        | {"start_tc": "01:00:00:00", "markers": "0.5=Intro, 2.7=Outro"}
    )
    one = Renderer(avatar, voice, s).render(tmp_path / "one.mp4")
    job = ChunkedRender(avatar, voice, s, chunks=2)
    for _ in job.run(tmp_path / "chunked.mp4"):
        pass
    want = _timecode_and_chapters(one.output)
    got = _timecode_and_chapters(job.result.output)
    assert got == want and got[0] == ["01:00:00;00"]
    assert [t for _, t in got[1]] == ["Start", "Intro", "Pause 1", "Outro"]
    # without markers or chapters the joined file still carries the timecode track (25 fps: non-drop)
    plain = ChunkedRender(avatar, voice, s.with_(fps="25", start_tc="10:00:00:00", chapters=False), chunks=2)
    for _ in plain.run(tmp_path / "plain.mp4"):
        pass
    assert _timecode_and_chapters(plain.result.output) == (["10:00:00:00"], [])

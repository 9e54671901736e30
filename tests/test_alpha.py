"""A transparent presenter: RGBA photos, --matte and videos with alpha keep it through tracking,
compositing and encoding; prores4444 and vp9 write it (0 where transparent, opaque on the face); an
alpha codec for an opaque avatar writes opaque alpha and says so; a codec without alpha says it drops it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest
from conftest import DEMO_AVATAR, speech_pause_speech
from PIL import Image

from studio.core.avatars import library
from studio.core.avatars.assets import AvatarParams
from studio.core.errors import AvatarError
from studio.core.render.renderer import Renderer
from studio.core.settings import RenderSettings

TRANSPARENT = np.s_[0:96, 0:96]  # the astronaut photo's top-left corner: sky, no face
FACE = np.s_[140:190, 190:260]  # around the nose and mouth


def _matte(size=(512, 512)) -> np.ndarray:
    """Opaque but for the top-left quarter's corner and a strip on the right (for 512: 128 and 40 px)."""
    w = size[0]
    m = np.full(size[::-1], 255, np.uint8)
    m[: w // 4, : w // 4] = 0  # a transparent corner
    m[:, -(w * 5 // 64) :] = 0  # and a transparent strip on the right
    return m


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    h = tmp_path_factory.mktemp("alpha_home")
    old = os.environ.get("STUDIO_HOME")
    os.environ["STUDIO_HOME"] = str(h)
    yield h
    if old is None:
        os.environ.pop("STUDIO_HOME", None)
    else:
        os.environ["STUDIO_HOME"] = old


@pytest.fixture(scope="module")
def rgba_png(tmp_path_factory):
    rgb = np.asarray(Image.open(DEMO_AVATAR).convert("RGB")).copy()
    alpha = _matte()
    rgb[alpha == 0] = (0, 0, 0)  # what a transparent area often holds: black the tracker must not see
    path = tmp_path_factory.mktemp("png") / "astro_rgba.png"
    Image.fromarray(np.dstack([rgb, alpha])).save(path)
    return path


@pytest.fixture(scope="module")
def glass(home, rgba_png):
    return library.prepare("glass", rgba_png)


@pytest.fixture(scope="module")
def voice(tmp_path_factory):
    return speech_pause_speech(tmp_path_factory.mktemp("voice") / "voice.wav", 0.3, 0.1, 0.2)


def _decoded_rgba(path) -> list[np.ndarray]:
    """Every frame of ``path`` as RGBA, through libvpx for VP9 (its alpha is in the block side data)."""
    import av

    with av.open(str(path)) as c:
        s = c.streams.video[0]
        if s.codec_context.name == "vp9":
            ctx = av.CodecContext.create("libvpx-vp9", "r")
            frames = [f for pkt in c.demux(s) for f in ctx.decode(pkt)]
        else:
            frames = list(c.decode(s))
        return [f.to_ndarray(format="rgba") for f in frames]


def test_an_rgba_photo_keeps_its_alpha_and_its_face_is_tracked_over_grey(glass):
    assert glass.has_alpha and glass.meta["alpha"] == "source" and glass.alpha.shape == (1, 512, 512)
    assert np.array_equal(np.asarray(glass.alpha[0]), _matte())
    assert glass.face_ok.all()
    plain = library.prepare("plain", DEMO_AVATAR)
    assert plain.alpha is None and np.abs(glass.boxes[0].astype(int) - plain.boxes[0].astype(int)).max() <= 4


@pytest.mark.parametrize("codec, suffix, pix", [("prores4444", ".mov", "yuva444p12le"), ("vp9", ".webm", "yuva420p")])
def test_alpha_codecs_write_the_presenters_alpha(glass, voice, tmp_path, codec, suffix, pix):
    import av

    out = tmp_path / f"glass{suffix}"
    s = RenderSettings(engine="classic", device="cpu", codec=codec)
    r = Renderer(glass, voice, s)
    r.render(out)
    assert r.result.alpha == "kept"
    frames = _decoded_rgba(out)
    assert len(frames) == r.plan.frames == 15
    if codec == "prores4444":
        with av.open(str(out)) as c:
            assert next(c.decode(video=0)).format.name == pix
    for k in (0, 4, 9):  # speech frames too: the generated mouth lies on the opaque face
        a = frames[k][..., 3]
        assert a[TRANSPARENT].max() <= 2 and a[FACE].min() >= 253, (codec, k)
        assert a[:, -30:].max() <= 2
    want = Renderer(glass, voice, s).frame(4)  # RGBA: the alpha as written
    assert want.shape == (512, 512, 4) and np.array_equal(want[..., 3], _matte())


def test_a_matte_gives_a_photo_alpha_and_the_cli_says_it(home, voice, tmp_path):
    jpg = tmp_path / "astro.jpg"
    Image.open(DEMO_AVATAR).convert("RGB").save(jpg, quality=92)
    matte = tmp_path / "matte.png"
    Image.fromarray(_matte((256, 256))).save(matte)  # half the size: scaled to the photo's
    env = dict(os.environ)  # this test's data folder (conftest.studio_home)

    def run(*a):
        return subprocess.run([sys.executable, "-m", "studio", *map(str, a)], capture_output=True, text=True, env=env)

    r = run("avatar", "add", "matted", jpg, "--matte", matte)
    assert r.returncode == 0, r.stderr
    assert "alpha:         from --matte" in r.stdout
    a = library.load("matted")
    assert a.has_alpha and a.meta["alpha"] == "matte" and a.params.matte == str(matte)
    assert (np.asarray(a.alpha[0])[:120, :120] == 0).all() and (np.asarray(a.alpha[0])[200:300, 200:300] == 255).all()
    out = tmp_path / "m.webm"
    r = run(
        "render", "--avatar", "matted", "--audio", voice, "-o", out, "--codec", "vp9", "--engine", "classic", "--json"
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["alpha"] == "kept"
    alpha = _decoded_rgba(out)[3][..., 3]
    assert alpha[:100, :100].max() <= 2 and alpha[FACE].min() >= 253
    # a codec without alpha: the file is opaque and the command says what to use
    r = run("render", "--avatar", "matted", "--audio", voice, "-o", tmp_path / "m.mp4", "--engine", "classic")
    assert r.returncode == 0 and "has no alpha channel; render with --codec prores4444 or vp9" in r.stderr
    # the exact frame as a PNG keeps the alpha
    png = tmp_path / "f.png"
    r = run("frame", "--avatar", "matted", "--audio", voice, "-t", "0.2", "-o", png, "--engine", "classic")
    assert r.returncode == 0, r.stderr
    im = Image.open(png)
    assert im.mode == "RGBA" and np.asarray(im)[:100, :100, 3].max() == 0
    # a new matte file rebuilds the frames stage; the same file again reuses everything
    m2 = _matte((256, 256))
    m2[:, 200:] = 255  # the strip on the right is opaque now
    Image.fromarray(m2).save(matte)
    b = library.prepare("matted", jpg, AvatarParams(matte=str(matte)), force=True)
    assert b.meta["rebuilt"] == ["frames", "crops", "masks"] and np.asarray(b.alpha[0])[256, -5] == 255
    before = (b.folder / "alpha.npy").stat().st_ino
    c = library.prepare("matted", jpg, AvatarParams(matte=str(matte)), force=True)
    assert c.meta["stages"] == b.meta["stages"] and (c.folder / "alpha.npy").stat().st_ino == before
    # without the matte again: no alpha, and its file is gone
    d = library.prepare("matted", jpg, force=True)
    assert d.alpha is None and "alpha" not in d.meta["files"] and not (d.folder / "alpha.npy").exists()


def test_matte_mistakes_are_one_sentence(home, tmp_path):
    jpg = tmp_path / "astro.jpg"
    Image.open(DEMO_AVATAR).convert("RGB").save(jpg)
    wide = tmp_path / "wide.png"
    Image.fromarray(np.zeros((100, 300), np.uint8)).save(wide)
    with pytest.raises(AvatarError, match="the matte is 300x100 but the photo is 512x512"):
        library.prepare("m1", jpg, AvatarParams(matte=str(wide)))
    with pytest.raises(AvatarError, match="--matte .*: no such file"):
        library.prepare("m2", jpg, AvatarParams(matte=str(tmp_path / "none.png")))
    assert not (library.library_dir() / "m1").exists()


def test_an_alpha_codec_for_an_opaque_avatar_writes_opaque_alpha_and_says_so(home, voice, tmp_path):
    plain = library.prepare("opaque", DEMO_AVATAR)
    out = tmp_path / "o.mov"
    r = Renderer(plain, voice, RenderSettings(engine="classic", device="cpu", codec="prores4444"))
    r.render(out)
    assert r.result.alpha == "opaque"
    frames = _decoded_rgba(out)
    assert all(f[..., 3].min() == 255 for f in frames[:3])
    env = dict(os.environ)  # this test's data folder (conftest.studio_home)
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "studio",
            "render",
            "--avatar",
            "opaque",
            "--audio",
            str(voice),
            "-o",
            str(tmp_path / "p.webm"),
        ]
        + ["--codec", "vp9", "--engine", "classic"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert p.returncode == 0 and "this avatar has no transparency, so it is opaque everywhere" in p.stderr


def test_a_video_with_alpha_keeps_it(home, voice, tmp_path):
    """A ProRes 4444 clip with alpha as the avatar: its alpha per frame is kept and written again."""
    import av

    rgb = np.asarray(Image.open(DEMO_AVATAR).convert("RGB").resize((256, 256)))
    src = tmp_path / "key.mov"
    with av.open(str(src), "w") as c:
        s = c.add_stream("prores_ks", rate=25)
        s.width, s.height, s.pix_fmt = 256, 256, "yuva444p10le"
        s.options = {"profile": "4", "alpha_bits": "16"}
        for i in range(10):
            alpha = np.full((256, 256), 255, np.uint8)
            alpha[:, : 20 + 2 * i] = 0  # the transparent strip grows frame by frame
            f = av.VideoFrame.from_ndarray(np.dstack([rgb, alpha]), format="rgba").reformat(format="yuva444p10le")
            f.pts = i
            for pkt in s.encode(f):
                c.mux(pkt)
        for pkt in s.encode():
            c.mux(pkt)
    a = library.prepare("keyed", src)
    assert a.has_alpha and a.N == 10 and a.fps == 25 and a.face_ok.all()
    for i in (0, 9):
        col = np.asarray(a.alpha[i])[128]
        assert col[: 18 + 2 * i].max() <= 2 and col[22 + 2 * i :].min() >= 253
    out = tmp_path / "again.mov"
    r = Renderer("keyed", voice, RenderSettings(engine="classic", device="cpu", codec="prores4444"))
    r.render(out)
    frames = _decoded_rgba(out)
    idx = r.plan.avatar_idx
    for k in (0, 7, 12):
        i = int(idx[k])
        assert frames[k][128, : 18 + 2 * i, 3].max() <= 2 and frames[k][128, 22 + 2 * i :, 3].min() >= 253
    assert Fraction(r.rate) == 25


@pytest.fixture(scope="module")
def feathered(home, tmp_path_factory):
    """A presenter whose alpha fades over 40 px at the edge of an ellipse (as a soft matte does), black
    under its transparent pixels: where a premultiplied or straight-resized colour shows as a fringe."""
    rgb = np.asarray(Image.open(DEMO_AVATAR).convert("RGB")).copy()
    yy, xx = np.mgrid[0:512, 0:512]
    r = np.sqrt(((xx - 256) / 230.0) ** 2 + ((yy - 256) / 250.0) ** 2)
    alpha = np.clip((1.0 - r) * 230.0 / 40.0, 0, 1)
    a8 = np.round(alpha * 255).astype(np.uint8)
    rgb[a8 == 0] = 0
    path = tmp_path_factory.mktemp("feather") / "feathered.png"
    Image.fromarray(np.dstack([rgb, a8])).save(path)
    return library.prepare("feathered", path)


def _ffmpeg_overlay_on(colour: str, path) -> list[np.ndarray]:
    """Every frame of ``path`` laid by FFmpeg's own ``overlay`` filter (straight alpha, its default) on a
    plain ``colour``, in RGB: what an editor or a play-out graphics chain does with the file."""
    import av
    from av.filter import Graph

    out = []
    with av.open(str(path)) as c:
        for f in c.decode(video=0):
            g = Graph()
            base = g.add("color", f"c={colour}:s={f.width}x{f.height}:r=25:d=1")
            top = g.add_buffer(template=c.streams.video[0], width=f.width, height=f.height, format=f.format.name)
            ov = g.add("overlay", "format=rgb:alpha=straight")
            conv = g.add("format", "rgb24")
            sink = g.add("buffersink")
            base.link_to(ov, 0, 0)
            top.link_to(ov, 0, 1)
            ov.link_to(conv)
            conv.link_to(sink)
            g.configure()
            f.pts = 0  # one graph a frame: each frame meets the colour's first frame
            top.push(f)
            top.push(None)
            out.append(sink.pull().to_ndarray(format="rgb24"))
    return out


def test_alpha_is_straight_and_composites_like_studios_own_background(feathered, voice, tmp_path):
    """ProRes 4444 holds straight (unassociated) alpha, as NLEs and FFmpeg expect: FFmpeg's overlay of the
    transparent render on a colour equals Studio's own render on that colour within 2 levels (before,
    the colour was premultiplied and the edge resized with the black under it: a fringe of -20 levels on
    average, 57 at the 99th percentile)."""
    import av

    common = dict(engine="classic", device="cpu", codec="prores4444", canvas="640x360", fit="fit")
    clear_r = Renderer(feathered, voice, RenderSettings(**common, background="transparent"))
    solid_r = Renderer(feathered, voice, RenderSettings(**common, background="#3366cc"))
    # the frames as handed to the encoder: a straight "over" of the transparent one is the solid one
    fc, fs = clear_r.frame(7), solid_r.frame(7)[..., :3]
    a = fc[..., 3:4] / 255.0
    assert np.abs(fc[..., :3] * a + np.array([0x33, 0x66, 0xCC]) * (1 - a) - fs).max() <= 1.0
    clear = clear_r.render(tmp_path / "a.mov")
    solid = solid_r.render(tmp_path / "b.mov")
    assert clear.alpha == "kept"
    laid = _ffmpeg_overlay_on("#3366cc", clear.output)
    with av.open(solid.output) as c:
        own = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
    with av.open(clear.output) as c:
        rgba = next(c.decode(video=0)).to_ndarray(format="rgba")
    assert len(laid) == len(own) == 15
    soft = (rgba[..., 3] > 8) & (rgba[..., 3] < 247)  # the feathered edge, where the two used to differ
    assert soft.sum() > 2000
    for k in (0, 7, 14):  # ProRes is lossy on its own (about +-5 levels on this detailed photo, both files)
        d = (laid[k].astype(int) - own[k].astype(int))[soft]
        assert abs(d.mean()) <= 0.5 and np.abs(d).mean() <= 1.0 and np.percentile(np.abs(d), 99) <= 2, k

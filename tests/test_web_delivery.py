"""The web and social deliveries write H.264 as platforms take it (issue 44, item 6): High profile with
B-frames, a closed GOP of at most 2 s (every GOP checked, with one x264 and with parallel chunks), the
moov before the media (+faststart); a plain render keeps the speed default (ultrafast: Constrained
Baseline, no B-frames)."""

from __future__ import annotations

from fractions import Fraction

import pytest
from conftest import prepare_demo_avatar, speechlike

from studio.core.delivery import BUILTIN
from studio.core.render.renderer import Renderer
from studio.core.settings import RenderSettings, from_dict

WEB = ("web-1080p", "web-720p", "social-vertical", "social-square")


@pytest.fixture(scope="module")
def avatar(tmp_path_factory):
    return prepare_demo_avatar(tmp_path_factory.mktemp("web_home"))


@pytest.fixture(scope="module")
def voice(tmp_path_factory):
    import soundfile as sf

    path = tmp_path_factory.mktemp("voice") / "speech.wav"
    sf.write(path, speechlike(5.2, 16_000, seed=3), 16_000, subtype="PCM_16")
    return path


def _read(path):
    """(profile, keyframe positions, frame count, rate, has B-frames, moov offset, mdat offset)."""
    import av
    from av.video.frame import PictureType

    with av.open(str(path)) as c:
        v = c.streams.video[0]
        profile = v.codec_context.profile
        rate = Fraction(v.average_rate)
        keys, n, kinds = [], 0, set()
        for f in c.decode(v):
            if f.key_frame:
                keys.append(n)
            kinds.add(PictureType(f.pict_type))
            n += 1
    data = open(path, "rb").read()
    return profile, keys, n, rate, PictureType.B in kinds, data.find(b"moov"), data.find(b"mdat")


@pytest.mark.parametrize("name", WEB)
def test_every_web_delivery_asks_for_high_profile_b_frames_and_a_2s_gop(name):
    s = from_dict({"delivery": name})
    assert (s.codec, s.preset, s.keyint) == ("h264", "veryfast", 2.0), name
    assert "B-frames" in BUILTIN[name].description


@pytest.mark.parametrize("encoder", ["x264", "x264-parallel"])
def test_a_web_delivery_writes_high_profile_with_b_frames_and_closed_gops_of_2s(avatar, voice, tmp_path, encoder):
    s = from_dict(
        {"delivery": "web-720p", "canvas": "640x360", "engine": "classic", "device": "cpu", "encoder": encoder}
    )
    res = Renderer(avatar, voice, s).render(tmp_path / "web.mp4")
    profile, keys, n, rate, bframes, moov, mdat = _read(res.output)
    assert profile == "High" and bframes, (profile, bframes)
    assert n == 130 and rate == 25
    gops = [b - a for a, b in zip(keys, keys[1:] + [n])]
    assert keys[0] == 0 and len(keys) >= 3 and max(gops) <= 50, keys  # every GOP, not the first
    assert 0 < moov < mdat  # faststart: a player starts before the download ends


def test_a_plain_render_keeps_the_speed_default(avatar, voice, tmp_path):
    res = Renderer(avatar, voice, RenderSettings(engine="classic", device="cpu", canvas="640x360")).render(
        tmp_path / "plain.mp4"
    )
    profile, keys, n, _, bframes, _, _ = _read(res.output)
    assert profile == "Constrained Baseline" and not bframes and keys == [0]


def test_keyint_is_a_setting_on_every_face():
    s = from_dict({"keyint": 0.5, "fps": "30"})
    assert s.keyint == 0.5
    with pytest.raises(Exception, match="keyint"):
        from_dict({"keyint": -1})

"""The classic engine on real speech: espeak-ng says words whose phonemes we know (with their times),
the renderer renders them on the demo photo (smiling, teeth showing) and on a closed-mouth face, and
the project's face tracker measures the lips on the rendered frames.

The closed-mouth face is ours: the demo photo (public domain) with its lips closed by the engine
itself (controls: close), pasted back into the photo, saved and prepared like any avatar.
"""

from __future__ import annotations

import espeak_speech as es
import numpy as np
import pytest
from conftest import prepare_demo_avatar

pytestmark = pytest.mark.skipif(not es.available(), reason="needs espeak-ng's library (Debian espeak-ng)")

# bilabials inside phrases (not after a pause) and known vowels: open /a/, spread /i/, rounded /u/
TEXT = (
    "Happy Bob maps a humble temple. Emma, my mom, ripped a rubber tube and a paper lamp. "
    "Father saw a large car far away. Keep the cheese, see the sea. Blue moon, two shoes, soon."
)


@pytest.fixture(scope="module")
def speech(tmp_path_factory):
    samples, phonemes = es.speak(TEXT)
    path = es.write_wav(tmp_path_factory.mktemp("speech") / "speech.wav", samples)
    return path, phonemes


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    return tmp_path_factory.mktemp("classic_home")


@pytest.fixture(scope="module")
def astro(home):
    return prepare_demo_avatar(home, "astro")


@pytest.fixture(scope="module")
def closed(home, astro):
    """The demo photo with its lips closed (no teeth showing), prepared as an avatar."""
    import os

    import PIL.Image
    import torch

    from studio.core.avatars import library as avatar_mod
    from studio.core.engines.classic import rig_geometry, warp_mouth
    from studio.core.render.composite import Compositor

    rig = rig_geometry(np.asarray(astro.crop_landmarks), astro.crops)
    face = warp_mouth(
        torch.from_numpy(np.array(astro.crops[:1])), *rig.rows([0]), np.array([[0, 0, 1, 0, 0]], np.float32), "cpu"
    )
    img = Compositor(astro.frames, astro.boxes, astro.masks).paste(face, [0], [1.0])[0].numpy()
    path = home / "closed.png"
    PIL.Image.fromarray(img).save(path)
    old = os.environ.get("STUDIO_HOME")
    os.environ["STUDIO_HOME"] = str(home)
    try:
        return avatar_mod.prepare("closed", path)
    finally:
        if old is None:
            os.environ.pop("STUDIO_HOME", None)
        else:
            os.environ["STUDIO_HOME"] = old


def _render_and_measure(avatar, wav):
    """Every frame of the render, and per frame the tracked inner-lip gap and mouth width (pixels)."""
    from studio.core.avatars.faces import FaceTracker
    from studio.core.render.renderer import Renderer
    from studio.core.settings import RenderSettings

    r = Renderer(avatar, wav, RenderSettings(engine="classic", device="cpu"))
    frames = np.concatenate([f.numpy() for _, f in r.iter_frames()])
    gap = np.full(len(frames), np.nan)
    width = np.full(len(frames), np.nan)
    with FaceTracker(video=False) as track:
        for i, f in enumerate(frames):
            lm = track(f)
            if lm is not None:
                gap[i] = np.linalg.norm(lm[13] - lm[14])
                width[i] = np.linalg.norm(lm[61] - lm[291])
    return r.plan, frames, gap, width


@pytest.fixture(scope="module")
def rendered(speech, astro, closed):
    wav, _ = speech
    return {"astro": _render_and_measure(astro, wav), "closed": _render_and_measure(closed, wav)}


def _frames_of(a: float, b: float, total: int) -> list[int]:
    return [i for i in range(int(a * 25), int(np.ceil(b * 25))) if 0 <= i < total]


@pytest.mark.parametrize("face", ["astro", "closed"])
def test_lips_close_at_bilabial_stops(rendered, speech, face):
    plan, frames, gap, _ = rendered[face]
    _, phonemes = speech
    assert np.isfinite(gap).mean() > 0.95  # the tracker follows the rendered face
    biggest = np.nanmax(gap)
    closed, counted = 0, 0
    for p in phonemes:
        if p.name not in es.BILABIAL:
            continue
        span = _frames_of(*es.closure_span(p), len(frames))
        if not span or plan.weight[span].max() == 0:  # inside a pause: the avatar itself
            continue
        counted += 1
        closed += np.nanmin(gap[span]) <= 0.15 * biggest
    assert counted >= 20
    assert closed / counted >= 0.8, f"{closed}/{counted} bilabials closed on {face}"


@pytest.mark.parametrize("face", ["astro", "closed"])
def test_open_vowels_open_more_and_rounded_ones_are_narrower(rendered, speech, face):
    _, frames, gap, width = rendered[face]
    _, phonemes = speech

    def at(kind):
        idx = [int((p.start + p.end) / 2 * 25) for p in phonemes if p.name in kind]
        assert len(idx) >= 5
        return np.nanmean(gap[idx]), np.nanmean(width[idx])

    (g_open, _), (g_spread, w_spread), (g_round, w_round) = at(es.OPEN), at(es.SPREAD), at(es.ROUND)
    assert g_open > 1.2 * g_spread and g_open > 1.2 * g_round
    assert w_round < 0.95 * w_spread
    assert np.nanmax(gap) > 2.5 * np.nanmin(gap)  # the mouth moves through a real range


@pytest.mark.parametrize("face", ["astro", "closed"])
def test_silent_frames_stay_the_avatar_bit_for_bit(rendered, face, astro, closed):
    plan, frames, _, _ = rendered[face]
    still = np.asarray({"astro": astro, "closed": closed}[face].frames[0])
    silent = np.flatnonzero(plan.weight == 0)
    assert len(silent) >= 10
    for t in silent:
        assert np.array_equal(frames[t], still)


def test_rest_controls_give_the_crop_itself(astro, closed):
    import torch

    from studio.core.engines.classic import rig_geometry, warp_mouth

    for av in (astro, closed):
        rig = rig_geometry(np.asarray(av.crop_landmarks), av.crops)
        crop = torch.from_numpy(np.array(av.crops[:1]))
        out = warp_mouth(crop, *rig.rows([0]), np.zeros((1, 5), np.float32), "cpu")
        assert torch.equal(out, crop)


def test_open_mouth_on_a_closed_face_has_a_shaded_warm_interior(closed):
    """Teeth warm (never blue-grey), a dark cavity, shading (no flat fill), and the lips' texture kept."""
    import cv2
    import torch

    from studio.core.engines.classic import rig_geometry, warp_mouth

    rig = rig_geometry(np.asarray(closed.crop_landmarks), closed.crops)
    assert rig.colours[0, 6] < 0.3  # the photo shows no teeth: the engine knows
    crop = np.array(closed.crops[:1])
    out = warp_mouth(torch.from_numpy(crop), *rig.rows([0]), np.array([[1, 0, 0, 0, 0]], np.float32), "cpu")[0].numpy()
    cx, cy, hw = int(rig.scalars[0, 0]), int(rig.scalars[0, 1]), float(rig.scalars[0, 4])
    box = out[cy - int(0.15 * hw) : cy + int(0.5 * hw), cx - int(0.6 * hw) : cx + int(0.6 * hw)].reshape(-1, 3)
    box = box.astype(np.float32)
    lum = box.mean(1)
    teeth = box[lum > 150]
    dark = box[lum < 60]
    assert len(teeth) > 30 and len(dark) > 30
    assert (teeth[:, 0] >= teeth[:, 2]).mean() > 0.95  # warm: red over blue
    assert lum.std() > 25
    # no flat fill: the cavity and the teeth vary
    assert teeth.mean(1).std() > 3 and dark.mean(1).std() > 2
    # the lower lip moved, but kept its texture (high frequencies of the real pixels)
    lo = rig.contours[0, 3, len(rig.contours[0, 3]) // 2]  # lower outer lip, below the centre
    li = rig.contours[0, 2, len(rig.contours[0, 2]) // 2]
    src_band = crop[0, int(cy + li) : int(cy + lo), cx - int(0.4 * hw) : cx + int(0.4 * hw)]
    drop = int(round(0.78 * 0.62 * hw))  # the lower lip's drop at full opening (MAX_OPEN, its share)
    out_band = out[int(cy + li) + drop : int(cy + lo) + drop, cx - int(0.4 * hw) : cx + int(0.4 * hw)]

    def detail(img):
        return cv2.Laplacian(cv2.cvtColor(np.ascontiguousarray(img), cv2.COLOR_RGB2GRAY).astype(np.float32), -1).var()

    assert detail(out_band) > 0.6 * detail(src_band)


@pytest.mark.parametrize("threshold", [0.008, 0.03])
def test_speech_edges_ease_the_mouth_in_and_out(speech, astro, threshold):
    """Where the renderer crossfades into the still avatar, the mouth is near rest: no open-mouth ghost.
    The edges are the plan's, at the render's own threshold (not the default's)."""
    from studio.core.render.renderer import Renderer
    from studio.core.settings import RenderSettings

    wav, _ = speech
    r = Renderer(astro, wav, RenderSettings(engine="classic", device="cpu", threshold=threshold))
    w = r.plan.weight
    engine = r.engine
    engine.bind(engine.audio_features(r.wave))
    idx = np.arange(len(w))
    eased, full = engine.controls(idx, w), engine.controls(idx)
    ramp = (w > 0) & (w < 1)
    assert ramp.sum() >= 10
    assert np.allclose(eased, full * w[:, None], atol=1e-6)
    assert (np.abs(eased[ramp, 0]) <= np.abs(full[ramp, 0]) * w[ramp] + 1e-6).all() and (eased[w == 0] == 0).all()
    assert eased[w == 1, 0].max() > 0.8 * engine.strength  # and it opens fully inside phrases


def test_a_batch_gives_the_same_faces_as_one_at_a_time(astro, closed):
    """The batched path (the one CUDA runs) equals per-sample generation, across different faces."""
    import torch

    from studio.core.engines.classic import rig_geometry, warp_mouth

    rigs = [rig_geometry(np.asarray(a.crop_landmarks), a.crops) for a in (astro, closed)]
    crops = np.concatenate([np.array(a.crops[:1]) for a in (astro, closed)] * 2)
    rows = [np.concatenate([r.rows([0])[k] for r in rigs] * 2) for k in range(3)]
    # and a face 40 px to the right and 25 px lower (its window differs from the others')
    crops = torch.from_numpy(np.concatenate([crops, np.roll(crops[:1], (25, 40), (1, 2))]))
    moved = rows[0][:1].copy()
    moved[0, :2] += (40, 25)
    rows = [np.concatenate([rows[0], moved]), *(np.concatenate([r, r[:1]]) for r in rows[1:])]
    params = np.array(
        [[1, 0, 0, 0, 0], [0.3, -0.8, 0, 0, 0], [0, 0, 1, 0, 0], [0.2, 0.8, 0, 0.5, 0.3], [0.8, 1, 0, 0, 0]], np.float32
    )
    batch = warp_mouth(crops, *rows, params, "cpu")
    for i in range(5):
        one = warp_mouth(crops[i : i + 1], *[r[i : i + 1] for r in rows], params[i : i + 1], "cpu")
        assert torch.equal(one[0], batch[i]), i


def test_a_turned_closed_mouth_face_still_closes_and_opens(speech, closed, home):
    """The closed-mouth photo seen as a plane turned 35 degrees about the vertical and rolled 12
    (a perspective stand-in for a turned head: we have no photo of one that is ours)."""
    import os

    import cv2
    import PIL.Image

    from studio.core.avatars import library as avatar_mod

    img = np.asarray(PIL.Image.open(home / "closed.png").convert("RGB"))
    h, w = img.shape[:2]
    f, cx, a = 1.2 * w, 230.0, np.deg2rad(35)
    pts = np.float32([[0, 0], [w, 0], [w, h], [0, h]])
    dst = np.float32(
        [
            [
                cx + (x - cx) * np.cos(a) * f / (f + (x - cx) * np.sin(a)),
                h / 2 + (y - h / 2) * f / (f + (x - cx) * np.sin(a)),
            ]
            for x, y in pts
        ]
    )
    hom = np.vstack([cv2.getRotationMatrix2D((cx, 140), 12, 1.0), [0, 0, 1]]) @ cv2.getPerspectiveTransform(pts, dst)
    turned = cv2.warpPerspective(img, hom, (w, h), flags=cv2.INTER_CUBIC, borderMode=cv2.BORDER_REPLICATE)
    path = home / "turned.png"
    PIL.Image.fromarray(turned).save(path)
    old = os.environ.get("STUDIO_HOME")
    os.environ["STUDIO_HOME"] = str(home)
    try:
        av = avatar_mod.prepare("turned", path)
    finally:
        if old is None:
            os.environ.pop("STUDIO_HOME", None)
        else:
            os.environ["STUDIO_HOME"] = old
    wav, phonemes = speech
    plan, frames, gap, _ = _render_and_measure(av, wav)
    biggest = np.nanmax(gap)
    shut = [
        np.nanmin(gap[s]) <= 0.15 * biggest
        for p in phonemes
        if p.name in es.BILABIAL
        for s in [_frames_of(*es.closure_span(p), len(frames))]
        if s and plan.weight[s].max() > 0
    ]
    assert len(shut) >= 20 and np.mean(shut) >= 0.8
    opened = [gap[int((p.start + p.end) / 2 * 25)] for p in phonemes if p.name in es.OPEN]
    assert np.nanmean(opened) > 0.6 * biggest


def test_a_video_avatar_speaks_and_stays_itself_in_silence(speech, tmp_path):
    """The presenter loop of ``studio bench`` (a video avatar whose face moves): per-frame rig geometry."""
    from studio.bench.reference import synthetic_avatar
    from studio.core.render.renderer import Renderer
    from studio.core.settings import RenderSettings

    av = synthetic_avatar(tmp_path, 360, loop_frames=10)
    wav, _ = speech
    r = Renderer(av, wav, RenderSettings(engine="classic", device="cpu"))
    plan = r.plan
    frames = np.concatenate([f.numpy() for _, f in r.iter_frames([(0, 120)])])
    for t in range(120):
        same = np.array_equal(frames[t], np.asarray(av.frames[plan.avatar_idx[t]]))
        assert same == (plan.weight[t] == 0), t
    assert (plan.weight[:120] == 0).sum() >= 3 and (plan.weight[:120] == 1).sum() >= 60


def test_controls_stay_in_range_on_odd_input():
    from studio.core.engines.classic_visemes import mouth_controls

    rng = np.random.default_rng(3)
    t = np.arange(16_000) / 16_000
    for x, frames in (
        (np.zeros(16_000, np.float32), 25),
        ((0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), 25),
        ((0.2 * rng.standard_normal(8_000)).astype(np.float32), 25),
        (np.zeros(0, np.float32), 3),
    ):
        c = mouth_controls(x, frames)
        assert len(c) == frames
        for v in (c.open, c.close, c.teeth, c.tuck):
            assert np.isfinite(v).all() and (v >= 0).all() and (v <= 1).all()
        assert np.isfinite(c.width).all() and (np.abs(c.width) <= 1).all()
    assert len(mouth_controls(np.zeros(100, np.float32), 0)) == 0
    # silence: the plan gives every frame weight 0 (the avatar itself; the engine eases to rest by it)
    from studio.core.media.analysis import frame_rms, silence_mask
    from studio.core.render.plan import crossfade_weights

    quiet = np.zeros(16_000, np.float32)
    w = crossfade_weights(~silence_mask(frame_rms(quiet, 25)), 3)
    assert (w == 0).all() and (mouth_controls(quiet, 25).rows(np.arange(25)) * w[:, None]).max() == 0

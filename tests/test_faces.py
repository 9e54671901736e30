"""Face tracking, the MuseTalk box, blend masks and smoothing on the real astronaut photo."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import DEMO_AVATAR

from studio.core.avatars import faces
from studio.core.constants import FACE_SIZE


@pytest.fixture(scope="module")
def astronaut():
    from PIL import Image

    rgb = np.asarray(Image.open(DEMO_AVATAR).convert("RGB"))
    with faces.FaceTracker() as tracker:
        lm = tracker(rgb)
    assert lm is not None
    return rgb, lm


def _alpha_at(mask, pts):
    return np.array([mask[int(round(y)), int(round(x))] for x, y in pts])


def test_tracker_finds_the_astronaut_face_and_nothing_in_a_blank_image(astronaut):
    rgb, lm = astronaut
    assert lm.shape == (478, 2) and lm.dtype == np.float32
    # The face mesh spans about x 179..271, y 71..177 on this 512x512 photo.
    assert 170 < lm[:, 0].min() < 190 and 260 < lm[:, 0].max() < 280
    assert 60 < lm[:, 1].min() < 80 and 170 < lm[:, 1].max() < 185
    with faces.FaceTracker() as tracker:
        assert tracker(np.full((240, 320, 3), 128, np.uint8)) is None


def test_box_follows_the_musetalk_rule_on_mesh_landmarks(astronaut):
    rgb, lm = astronaut
    box = faces.musetalk_box(lm, 512, 512, bbox_shift=0, extra_margin=0)
    x1, y1, x2, y2 = box.tolist()
    chin = lm[faces.JAW, 1].max()
    mid = lm[faces.BOX_MID, 1]
    assert y2 == round(chin)
    assert abs((y1 + y2) / 2 - mid) <= 1  # symmetric about the lower nose bridge
    assert abs(x1 - lm[faces.JAW, 0].min()) <= 1 and abs(x2 - lm[faces.JAW, 0].max()) <= 1
    # Point 29 of iBUG sits between the nasion (168) and the nose tip (1).
    assert lm[168, 1] < mid < lm[faces.NOSE_TIP, 1]
    # v1.5 margin is added to y2 only; bbox_shift moves the mirror line, so y1 moves twice as far.
    assert faces.musetalk_box(lm, 512, 512, 0, 10).tolist() == [x1, y1, x2, y2 + 10]
    shifted = faces.musetalk_box(lm, 512, 512, bbox_shift=5, extra_margin=0)
    assert shifted[1] == pytest.approx(y1 + 10, abs=1) and shifted[3] == y2
    # Clipped to the frame.
    assert faces.musetalk_box(lm, 250, 150, 0, 10).tolist()[2:] == [250, 150]
    lo, hi = faces.bbox_shift_range(lm[None])
    assert lo < 0 < hi


def test_jaw_mask_takes_lips_and_jaw_but_not_nose_or_eyes(astronaut):
    rgb, lm = astronaut
    box = faces.musetalk_box(lm, 512, 512)
    clm = faces.to_crop(lm, box)
    mask = faces.blend_mask(clm, box, cheek_width=90, feather=24, mode="jaw")
    assert mask.shape == (FACE_SIZE, FACE_SIZE) and mask.dtype == np.uint8
    assert _alpha_at(mask, clm[list(faces.LIPS_OUTER + faces.LIPS_INNER)]).min() >= 250
    assert _alpha_at(mask, clm[[faces.CHIN]])[0] > 100  # the jaw line is blended
    assert _alpha_at(mask, clm[[faces.NOSE_TIP, 4]]).max() == 0
    eyes = [33, 133, 263, 362, 468, 473, 159, 386]
    assert _alpha_at(mask, clm[eyes]).max() == 0
    assert mask[: FACE_SIZE // 2 - 13].max() == 0  # nothing above the mid line beyond the feather
    border = np.concatenate([mask[0], mask[-1], mask[:, 0], mask[:, -1]])
    assert border.max() == 0


def test_mask_modes_feather_and_cheek_width_change_the_mask(astronaut):
    rgb, lm = astronaut
    box = faces.musetalk_box(lm, 512, 512)
    clm = faces.to_crop(lm, box)
    jaw = faces.blend_mask(clm, box, 90, 24, "jaw").astype(int)
    raw = faces.blend_mask(clm, box, 90, 24, "raw").astype(int)
    narrow = faces.blend_mask(clm, box, 30, 24, "jaw").astype(int)
    hard = faces.blend_mask(clm, box, 90, 0, "jaw")
    soft = faces.blend_mask(clm, box, 90, 48, "jaw")
    # raw keeps the cheek edges that jaw mode leaves to the original frame
    cheek = (slice(150, 200), slice(12, 40))
    assert raw[cheek].mean() > jaw[cheek].mean() + 50
    assert narrow.sum() < jaw.sum()
    assert set(np.unique(hard)) <= {0, 255}
    partial = lambda m: int(((m > 10) & (m < 245)).sum())  # noqa: E731
    assert partial(soft) > 1.5 * partial(jaw.astype(np.uint8)) > 0
    with pytest.raises(ValueError):
        faces.blend_mask(clm, box, mode="neck")


def test_crop_is_the_box_stretched_to_256(astronaut):
    rgb, lm = astronaut
    box = np.array([100, 50, 200, 250], np.int32)
    crop = faces.crop_face(rgb, box)
    assert crop.shape == (256, 256, 3) and crop.dtype == np.uint8
    # The crop's centre is the box's centre pixel (within Lanczos ringing of a smooth area).
    assert np.abs(crop[128, 128].astype(int) - rgb[150, 150].astype(int)).max() < 40
    pts = faces.to_crop(np.array([[100, 50], [200, 250], [150, 150]], np.float32), box)
    assert np.allclose(pts, [[0, 0], [256, 256], [128, 128]])


def test_smoothing_removes_jitter_keeps_motion_and_does_not_cross_gaps():
    rng = np.random.default_rng(0)
    n = 60
    t = np.arange(n, dtype=np.float32)
    true = np.zeros((n, 478, 2), np.float32)
    true[:, :, 0] = 100 + 2.0 * t[:, None]  # a steady pan of 2 px per frame
    true[:, :, 1] = 80
    noisy = true + rng.normal(0, 1.5, true.shape).astype(np.float32)
    ok = np.ones(n, bool)
    ok[30:33] = False  # a cut: after it the face is 200 px further
    noisy[33:] += 200
    true[33:] += 200
    out = faces.smooth_landmarks(noisy, ok, 0.5)
    valid = ok.copy()
    err_raw = np.abs(noisy - true)[valid].mean()
    err_smooth = np.abs(out - true)[valid].mean()
    assert err_smooth < 0.6 * err_raw
    assert np.abs(out[29] - true[29]).max() < 5 and np.abs(out[33] - true[33]).max() < 5  # no smear over the cut
    assert np.array_equal(out[30], out[29]) and np.array_equal(out[32], out[33])  # gap filled by nearest
    assert np.array_equal(faces.smooth_landmarks(noisy, ok, 0.0)[ok], noisy[ok])
    with pytest.raises(ValueError):
        faces.smooth_landmarks(noisy, ok, 1.5)


def test_fill_nearest_prefers_the_earlier_frame_on_a_tie():
    v = np.arange(7, dtype=np.float32)[:, None].repeat(2, 1)
    ok = np.array([False, True, False, False, True, False, False])
    out = faces.fill_nearest(v.copy(), ok)
    assert out[:, 0].tolist() == [1, 1, 1, 4, 4, 4, 4]


def test_overlay_draws_box_and_tint_only_around_the_face(astronaut):
    rgb, lm = astronaut
    box = faces.musetalk_box(lm, 512, 512)
    mask = faces.blend_mask(faces.to_crop(lm, box), box)
    img = faces.overlay_image(rgb, box, mask, lm)
    assert img.shape == rgb.shape
    diff = np.abs(img.astype(int) - rgb.astype(int)).sum(axis=2) > 0
    ys, xs = np.nonzero(diff)
    x1, y1, x2, y2 = box.tolist()
    assert xs.min() >= x1 - 2 and xs.max() <= x2 + 2 and ys.min() >= y1 - 2 and ys.max() <= y2 + 2
    lips = lm[list(faces.LIPS_OUTER)].mean(axis=0).round().astype(int)
    r, g, b = img[lips[1], lips[0]].astype(int)
    assert r > g and b > g  # magenta tint on the mouth

"""Video hints for video avatars (issue 16): the macroblocks that can change are found from the
avatar's own frames and face boxes, cached, turned into few rectangles, and an encode with them
decodes to the same quality as one without."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import av
import numpy as np
import pytest
from test_encode import talking_frames

from studio.core.media.hints import MB, changing_macroblocks, changing_region, mask_rects
from studio.core.media.writer import open_video
from studio.core.render.composite import rgb_to_nv12
from studio.core.render.plan import stripes

W, H = 320, 240


def tripod_avatar(folder: Path, n: int = 12):
    """A still backdrop (a texture) with a presenter patch that moves at x 96..208, y 48..176."""
    rng = np.random.default_rng(5)
    backdrop = rng.integers(0, 255, (H, W, 3), dtype=np.uint8)
    frames = np.repeat(backdrop[None], n, axis=0)
    moving = talking_frames(0, n, W, H)
    frames[:, 48:176, 96:208] = moving[:, 48:176, 96:208]
    boxes = np.array([[120, 64, 184, 128]] * n, np.float32)
    folder.mkdir(parents=True, exist_ok=True)

    def engine_dir(key):
        p = folder / "engines" / key
        p.mkdir(parents=True, exist_ok=True)
        return p

    return SimpleNamespace(frames=frames, boxes=boxes, N=n, engine_dir=engine_dir)


def test_the_moving_parts_and_the_face_boxes_are_marked_and_cached(tmp_path):
    a = tripod_avatar(tmp_path / "av")
    mask = changing_macroblocks(a)
    assert mask.shape == (H // MB, W // MB)
    expect = np.zeros_like(mask)
    moved = (a.frames != a.frames[0]).any(axis=(0, 3))  # where the frames really differ
    ys, xs = np.nonzero(moved)
    expect[ys // MB, xs // MB] = True
    expect[64 // MB - 1 : 128 // MB + 1, 120 // MB - 1 : 184 // MB + 1] = True  # the box, one MB wider
    assert np.array_equal(mask, expect)
    assert not mask[:, :5].any() and not mask[-2:].any()  # the still backdrop is never marked
    cached = list((tmp_path / "av" / "engines" / "hints").glob("changing-*.npy"))
    assert len(cached) == 1
    a.frames[:, 0:16, 0:16] = 0  # a later call reads the cache, not the frames
    a.frames[0, 0:16, 0:16] = 255
    assert np.array_equal(changing_macroblocks(a), mask)


def test_rectangles_cover_exactly_the_marked_macroblocks():
    rng = np.random.default_rng(1)
    for _ in range(20):
        mask = rng.random((9, 13)) > 0.6
        mask[2:6, 3:9] = True  # a block that merges into one rectangle
        rects = mask_rects(mask, 13 * MB - 8, 9 * MB - 4)  # a frame not a multiple of 16
        back = np.zeros_like(mask)
        for x, y, w, h in rects:
            assert x % MB == 0 and y % MB == 0 and x + w <= 13 * MB - 8 and y + h <= 9 * MB - 4
            assert not back[y // MB : -(-(y + h) // MB), x // MB : -(-(x + w) // MB)].any()  # no overlaps
            back[y // MB : -(-(y + h) // MB), x // MB : -(-(x + w) // MB)] = True
        assert np.array_equal(back, mask)
        assert len(rects) < mask.sum()  # merged, not one per macroblock


def test_a_moving_everywhere_avatar_gets_no_hints_and_a_photo_its_box(tmp_path):
    a = tripod_avatar(tmp_path / "av")
    a.frames[1:] = 255 - a.frames[1:]  # every pixel changes
    assert changing_macroblocks(a) is None and changing_region(a) is None
    photo = SimpleNamespace(frames=a.frames[:1], boxes=a.boxes[:1], N=1)
    assert changing_region(photo).tolist() == [120, 64, 184, 128]


def test_an_encode_with_the_mask_decodes_like_one_without_and_is_not_larger(tmp_path):
    from studio.core.media.hints import hints_available

    if not hints_available():
        pytest.skip("this PyAV's FFmpeg takes no video hints")
    n = 48
    a = tripod_avatar(tmp_path / "av", n=12)
    frames = a.frames[np.arange(n) % 12]
    mask = changing_macroblocks(a)
    nv12 = rgb_to_nv12(frames)
    decoded = {}
    for name, hint in (("plain", None), ("hint", mask)):
        out = tmp_path / f"{name}.mp4"
        with open_video(
            out, W, H, encoder="x264-parallel", workers=2, total_frames=n, changing=hint, preset="ultrafast"
        ) as wr:
            assert (wr.changing is None) == (hint is None) and (hint is None or len(wr.changing) >= 1)
            for idx in stripes(n, 8, wr.chunks, window=wr.window):
                wr.write(nv12[idx], indices=idx)
        with av.open(str(out)) as c:
            decoded[name] = np.stack([f.to_ndarray(format="nv12") for f in c.decode(video=0)]).astype(float)
    ref = nv12.astype(float)
    psnr = {k: 10 * np.log10(255**2 / np.mean((v - ref) ** 2)) for k, v in decoded.items()}
    assert len(decoded["hint"]) == n and psnr["hint"] > 30 and psnr["hint"] > psnr["plain"] - 0.5
    assert (tmp_path / "hint.mp4").stat().st_size <= 1.02 * (tmp_path / "plain.mp4").stat().st_size

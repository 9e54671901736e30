"""Compositing on the CPU: batched paste into per-frame boxes, feathered blend, BT.709 NV12."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from studio.core.constants import FACE_SIZE
from studio.core.render.composite import Compositor, pad_even, rgb_to_nv12, rgb_to_yuv420p

RNG = np.random.default_rng(7)


def _avatar(n=4, h=97, w=131):
    """Random frames (so any stray write shows), boxes of different sizes, opaque masks."""
    frames = RNG.integers(0, 256, (n, h, w, 3), dtype=np.uint8)
    boxes = np.array([[10, 12, 60, 72], [0, 0, w, h], [30, 20, 95, 61], [5, 40, 25, 90]], np.int32)[:n]
    masks = np.full((n, FACE_SIZE, FACE_SIZE), 255, np.uint8)
    return frames, boxes, masks


def _faces(n):
    # Smooth faces: bilinear resampling of a smooth image has no rounding-tie ambiguity.
    y, x = np.mgrid[0:FACE_SIZE, 0:FACE_SIZE] / FACE_SIZE
    base = np.stack([200 * x + 20, 150 * y + 50, 100 * (x * y) + 80], -1)
    return torch.from_numpy(np.stack([base + 10 * k for k in range(n)]).round().astype(np.uint8))


def _resize_ref(face: torch.Tensor, h: int, w: int) -> np.ndarray:
    x = face.permute(2, 0, 1)[None].double()
    r = F.interpolate(x, size=(h, w), mode="bilinear", align_corners=False)
    return r[0].permute(1, 2, 0).round().clamp(0, 255).numpy()


def test_weight_zero_is_bit_identical_to_the_avatar_frame():
    frames, boxes, masks = _avatar()
    comp = Compositor(frames, boxes, masks)
    idx = np.array([2, 0, 3, 1])
    out = comp.paste(_faces(4), idx, np.zeros(4, np.float32))
    assert out.dtype == torch.uint8 and tuple(out.shape) == (4, 97, 131, 3)
    assert np.array_equal(out.numpy(), frames[idx])
    mixed = comp.paste(_faces(4), idx, np.array([0, 1, 0, 1], np.float32))
    assert np.array_equal(mixed[0].numpy(), frames[2]) and np.array_equal(mixed[2].numpy(), frames[3])
    assert not np.array_equal(mixed[1].numpy(), frames[0])


def test_full_weight_and_opaque_mask_put_the_resized_face_in_each_box():
    frames, boxes, masks = _avatar()
    faces = _faces(4)
    out = Compositor(frames, boxes, masks).paste(faces, np.arange(4)).numpy()
    for k, (x1, y1, x2, y2) in enumerate(boxes):
        ref = _resize_ref(faces[k], y2 - y1, x2 - x1)
        got = out[k, y1:y2, x1:x2].astype(np.float64)
        assert np.abs(got - ref).max() <= 1, k
        outside = out[k].copy()
        outside[y1:y2, x1:x2] = frames[k, y1:y2, x1:x2]
        assert np.array_equal(outside, frames[k]), f"pixels outside box {k} changed"


def test_each_item_of_a_mixed_batch_equals_pasting_it_alone():
    frames, boxes, masks = _avatar()
    faces = _faces(4)
    comp = Compositor(frames, boxes, masks)
    weight = np.array([1.0, 0.3, 0.7, 1.0], np.float32)
    batch = comp.paste(faces, np.arange(4), weight).numpy()
    for k in range(4):
        alone = comp.paste(faces[k : k + 1], np.array([k]), weight[k : k + 1]).numpy()[0]
        assert np.array_equal(batch[k], alone)


def test_feathered_blend_is_the_fused_multiply_add():
    h, w = 40, 50
    frames = np.full((1, h, w, 3), 100, np.uint8)
    boxes = np.array([[0, 0, w, h]], np.int32)
    ramp = np.tile(np.linspace(0, 255, FACE_SIZE).round().astype(np.uint8), (FACE_SIZE, 1))
    faces = torch.full((1, FACE_SIZE, FACE_SIZE, 3), 200, dtype=torch.uint8)
    comp = Compositor(frames, boxes, ramp[None])
    for weight in (1.0, 0.5):
        out = comp.paste(faces, np.array([0]), np.array([weight], np.float32)).numpy()[0, :, :, 0]
        alpha = _resize_ref(torch.from_numpy(np.repeat(ramp[:, :, None], 3, 2)), h, w)[:, :, 0]
        expect = np.round(100 + alpha / 255 * weight * 100)
        assert np.abs(out - expect).max() <= 1
        assert out[:, 0].max() <= 101 and out[:, -1].min() >= round(100 + 100 * weight) - 1
        assert 100 < out[:, w // 2].mean() < 100 + 100 * weight  # strictly in between mid-way
    half = Compositor(frames, boxes, np.full((1, FACE_SIZE, FACE_SIZE), 128, np.uint8))
    out = half.paste(faces, np.array([0]), np.array([0.5], np.float32)).numpy()
    assert np.all(out == round(100 + 128 / 255 * 0.5 * 100))  # 125


def test_boxes_past_the_frame_edge_and_odd_frame_sizes():
    h, w = 71, 97  # odd both ways
    frames = RNG.integers(0, 256, (2, h, w, 3), dtype=np.uint8)
    boxes = np.array([[70, 50, 130, 110], [-20, -10, 40, 50]], np.int32)  # each 60x60, half outside
    faces = _faces(2)
    out = (
        Compositor(frames, boxes, np.full((2, FACE_SIZE, FACE_SIZE), 255, np.uint8)).paste(faces, np.arange(2)).numpy()
    )
    assert out.shape == (2, h, w, 3)
    ref0 = _resize_ref(faces[0], 60, 60)
    assert np.abs(out[0, 50:, 70:] - ref0[: h - 50, : w - 70]).max() <= 1
    assert np.array_equal(out[0, :50], frames[0, :50]) and np.array_equal(out[0, :, :70], frames[0, :, :70])
    ref1 = _resize_ref(faces[1], 60, 60)
    assert np.abs(out[1, :50, :40] - ref1[10:, 20:]).max() <= 1
    assert np.array_equal(out[1, 50:], frames[1, 50:])


def test_paste_in_place_into_given_frames_equals_paste():
    frames, boxes, masks = _avatar()
    comp = Compositor(frames, boxes, masks)
    idx, weight = np.array([1, 3]), np.array([0.6, 1.0], np.float32)
    expect = comp.paste(_faces(2), idx, weight)
    buf = comp.background(idx)
    got = comp.paste(_faces(2), idx, weight, out=buf)
    assert got is buf and torch.equal(buf, expect)
    with pytest.raises(ValueError, match="out must be"):
        comp.paste(_faces(2), idx, weight, out=buf[:, :10])


def test_background_returns_the_untouched_frames():
    frames, boxes, masks = _avatar()
    comp = Compositor(frames, boxes, masks)
    bg = comp.background(np.array([3, 3, 1]))
    assert np.array_equal(bg.numpy(), frames[[3, 3, 1]])
    bg[0] = 0  # a fresh tensor: writing into it must not touch the avatar
    assert frames[3].any()


def test_pad_even_replicates_edges_and_never_rescales():
    img = RNG.integers(0, 256, (2, 5, 7, 3), dtype=np.uint8)
    for x in (img, torch.from_numpy(img)):
        p = pad_even(x)
        p = p.numpy() if isinstance(p, torch.Tensor) else p
        assert p.shape == (2, 6, 8, 3)
        assert np.array_equal(p[:, :5, :7], img)
        assert np.array_equal(p[:, 5, :7], img[:, 4]) and np.array_equal(p[:, :5, 7], img[:, :, 6])
    even = img[:, :4, :6]
    assert pad_even(even) is even


def _yuv_reference(rgb: np.ndarray):
    """BT.709 limited range in float64, chroma from the 2x2 mean of RGB."""
    f = rgb.astype(np.float64)
    kr, kb = 0.2126, 0.0722
    kg = 1 - kr - kb

    def conv(p):
        r, g, b = p[..., 0], p[..., 1], p[..., 2]
        y = kr * r + kg * g + kb * b
        return (16 + 219 * y / 255, 128 + 224 * (b - y) / (1.8556 * 255), 128 + 224 * (r - y) / (1.5748 * 255))

    y, _, _ = conv(f)
    n, h, w, _ = f.shape
    m = f.reshape(n, h // 2, 2, w // 2, 2, 3).mean(axis=(2, 4))
    _, u, v = conv(m)
    return y, u, v


@pytest.mark.parametrize("backend", ["cv2", "torch"])
def test_nv12_matches_a_float64_bt709_limited_range_reference(backend):
    grad = np.stack(np.meshgrid(np.linspace(0, 255, 64), np.linspace(0, 255, 48)), -1)
    smooth = np.concatenate([grad, grad[..., :1][..., ::-1]], -1).round().astype(np.uint8)
    rgb = np.concatenate([RNG.integers(0, 256, (3, 48, 64, 3), dtype=np.uint8), smooth[None]])
    nv12 = rgb_to_nv12(rgb, backend=backend)
    assert nv12.shape == (4, 72, 64) and nv12.dtype == np.uint8
    y, u, v = _yuv_reference(rgb)
    assert np.abs(nv12[:, :48] - y).max() <= 1
    assert np.abs(nv12[:, 48:, 0::2] - u).max() <= 1
    assert np.abs(nv12[:, 48:, 1::2] - v).max() <= 1
    py, pu, pv = rgb_to_yuv420p(torch.from_numpy(rgb), backend=backend)
    assert isinstance(py, torch.Tensor)
    assert np.array_equal(py.numpy(), nv12[:, :48]) and np.array_equal(pu.numpy(), nv12[:, 48:, 0::2])
    assert np.array_equal(pv.numpy(), nv12[:, 48:, 1::2])


def test_nv12_known_colours_and_limited_range():
    colours = np.array([[255, 255, 255], [0, 0, 0], [255, 0, 0], [0, 0, 255]], np.uint8)
    rgb = np.broadcast_to(colours[:, None, None, :], (4, 2, 2, 3)).copy()
    nv12 = rgb_to_nv12(rgb)
    assert nv12[:, 0, 0].tolist() == [235, 16, 63, 32]
    assert nv12[:, 2, 0].tolist() == [128, 128, 102, 240]  # Cb
    assert nv12[:, 2, 1].tolist() == [128, 128, 240, 118]  # Cr


def test_nv12_rejects_odd_sizes():
    with pytest.raises(ValueError, match="even"):
        rgb_to_nv12(np.zeros((1, 5, 6, 3), np.uint8))


def _nv12_case(h=96, w=132):
    frames = RNG.integers(0, 256, (5, h, w, 3), dtype=np.uint8)
    # odd corners, a box past the top-left and one past the bottom-right edge, a tiny one
    boxes = np.array(
        [[11, 13, 61, 74], [-20, -9, 41, 50], [97, 61, 160, 120], [30, 21, 95, 60], [5, 5, 8, 9]], np.int32
    )
    masks = RNG.integers(0, 256, (5, FACE_SIZE, FACE_SIZE), dtype=np.uint8)
    return frames, boxes, masks


@pytest.mark.parametrize(
    "device",
    [
        "cpu",
        pytest.param(
            "cuda",
            marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")],
        ),
    ],
)
def test_nv12_compositing_is_bit_identical_to_converting_the_rgb_paste(device):
    frames, boxes, masks = _nv12_case()
    comp = Compositor(frames, boxes, masks, device=device)
    assert comp.nv12_ready
    idx = np.array([0, 1, 2, 3, 4, 2, 0])
    weight = np.array([1.0, 0.6, 1.0, 0.0, 1.0, 0.3, 0.9], np.float32)
    faces = torch.from_numpy(RNG.integers(0, 256, (7, FACE_SIZE, FACE_SIZE, 3), dtype=np.uint8)).to(device)
    ref = rgb_to_nv12(comp.paste(faces, idx, weight), backend="torch")
    bg = comp.background_nv12(idx)
    assert torch.equal(bg.cpu(), torch.from_numpy(rgb_to_nv12(frames[idx], backend="torch")))
    out = comp.paste_nv12(faces, idx, weight, bg)
    assert out.shape == (7, 96 * 3 // 2, 132) and out.device.type == device
    assert torch.equal(out.cpu(), ref.cpu())
    changed = (out != comp.background_nv12(idx)).flatten(1).any(1).cpu().tolist()
    assert changed == [True, True, True, False, True, True, True]  # weight 0 leaves frame 3 alone
    assert not Compositor(frames[:, :95], boxes, masks).nv12_ready  # odd height: the RGB path only


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_gives_the_cpu_result():
    frames, boxes, masks = _avatar()
    masks[:, :, :40] = 90  # a feathered edge too
    faces = _faces(4)
    weight = np.array([1.0, 0.5, 0.0, 0.8], np.float32)
    cpu = Compositor(frames, boxes, masks).paste(faces, np.arange(4), weight)
    gpu = Compositor(frames, boxes, masks, device="cuda").paste(faces.cuda(), np.arange(4), weight)
    assert gpu.device.type == "cuda"
    assert (gpu.cpu().int() - cpu.int()).abs().max() <= 1
    assert torch.equal(gpu[2].cpu(), torch.from_numpy(frames[2]))
    rgb = torch.from_numpy(RNG.integers(0, 256, (2, 48, 64, 3), dtype=np.uint8))
    on_gpu = rgb_to_nv12(rgb.cuda())
    assert on_gpu.device.type == "cuda"
    assert (on_gpu.cpu().int() - torch.from_numpy(rgb_to_nv12(rgb.numpy(), backend="torch")).int()).abs().max() <= 1

"""Pixel formats for the encoders: RGB -> NV12 / YUV 4:2:0 (BT.709, limited range), back for previews.

    nv12 = rgb_to_nv12(pad_even(frames))      # uint8 [B,H*3//2,W]: the Y plane, then interleaved U,V
    y, u, v = rgb_to_yuv420p(frames)          # planar
    rgb = nv12_to_rgb(nv12)                   # a preview of NV12 frames (not for re-encoding)

Numpy in, numpy out (OpenCV on the CPU); torch in, torch out on the same device. The compositor
(``studio.core.render.composite``) blends faces straight into NV12 with ``nv12_torch``.
"""

from __future__ import annotations

import numpy as np

# BT.709 luma coefficients and the limited ("tv") range scales.
_KR, _KB = 0.2126, 0.0722
_KG = 1.0 - _KR - _KB


def pad_even(frames):
    """Pad odd heights/widths by one row/column of edge replication (never rescales).

    Accepts numpy or torch [B,H,W,C] (or [H,W,C]); returns the same type, unchanged when even.
    """
    h, w = frames.shape[-3], frames.shape[-2]
    ph, pw = h % 2, w % 2
    if not ph and not pw:
        return frames
    if isinstance(frames, np.ndarray):
        pad = [(0, 0)] * frames.ndim
        pad[-3], pad[-2] = (0, ph), (0, pw)
        return np.pad(frames, pad, mode="edge")
    import torch

    out = frames
    if ph:
        out = torch.cat([out, out[..., -1:, :, :]], dim=-3)
    if pw:
        out = torch.cat([out, out[..., :, -1:, :]], dim=-2)
    return out


def nv12_to_rgb(nv12):
    """NV12 uint8 torch [B,H*3//2,W] -> RGB uint8 [B,H,W,3] (BT.709 limited range, chroma
    repeated over its 2x2 block): for previews of NV12 frames, not for re-encoding."""
    import torch

    b, h3, w = nv12.shape
    h = h3 * 2 // 3
    y = nv12[:, :h].float() - _OFF709[0]
    uv = nv12[:, h:].float().view(b, h // 2, w // 2, 2) - 128.0
    uv = uv.repeat_interleave(2, dim=1).repeat_interleave(2, dim=2)
    m = _INV709.get(nv12.device)
    if m is None:  # once a device: a copy from the host waits for the GPU's queue (a preview a batch)
        m = _INV709[nv12.device] = torch.linalg.inv(torch.tensor(_M709, dtype=torch.float64)).float().to(nv12.device)
    yuv = torch.stack([y, uv[..., 0], uv[..., 1]], dim=-1)
    return (yuv @ m.T).round_().clamp_(0, 255).to(torch.uint8)


def rgb_to_yuv420p(frames, backend: str = "auto"):
    """uint8 RGB [B,H,W,3] (torch or numpy; H and W even) -> planar (Y [B,H,W], U, V [B,H/2,W/2]).

    BT.709, limited range (Y 16..235, Cb/Cr 16..240); chroma from the 2x2 mean of RGB. Torch in,
    torch out on the same device; numpy in, numpy out. ``backend``: "torch" (any device), "cv2"
    (CPU, ~10x faster there) or "auto" (torch on CUDA, cv2 on the CPU). The two agree within 1.
    """
    nv12 = rgb_to_nv12(frames, backend)
    h = nv12.shape[1] * 2 // 3
    y, uv = nv12[:, :h], nv12[:, h:]
    return y, uv[..., 0::2], uv[..., 1::2]


def rgb_to_nv12(frames, backend: str = "auto", out: np.ndarray | None = None):
    """uint8 RGB [B,H,W,3] -> NV12 [B,H*3//2,W]: the Y plane, then rows of interleaved U,V.

    Same maths and arguments as :func:`rgb_to_yuv420p`. ``out``: a numpy buffer to reuse on the
    cv2 path (saves the page faults of a fresh allocation per batch).
    """
    import torch

    is_np = isinstance(frames, np.ndarray)
    if frames.ndim == 3:
        frames = frames[None]
    b, h, w, c = frames.shape
    if c != 3 or (frames.dtype != np.uint8 if is_np else frames.dtype != torch.uint8):
        raise ValueError(f"expected uint8 [B,H,W,3] RGB, got {frames.dtype} {tuple(frames.shape)}")
    if h % 2 or w % 2:
        raise ValueError(f"frame size must be even for 4:2:0, got {w}x{h} (use pad_even)")
    on_cpu = is_np or frames.device.type == "cpu"
    if backend == "cv2" or (backend == "auto" and on_cpu):
        rgb = frames if is_np else frames.cpu().numpy()
        out = _nv12_cv2(rgb, out)
        return out if is_np else torch.from_numpy(out)
    x = torch.from_numpy(np.ascontiguousarray(frames)) if is_np else frames
    nv12 = nv12_torch(x)
    return nv12.numpy() if is_np else nv12


# Rows: Y, Cb, Cr as functions of R, G, B (0..255) in BT.709 limited range, plus the offsets.
_M709 = np.array(
    [
        [_KR, _KG, _KB],
        [-_KR / (2 * (1 - _KB)), -_KG / (2 * (1 - _KB)), 0.5],
        [0.5, -_KG / (2 * (1 - _KR)), -_KB / (2 * (1 - _KR))],
    ]
) * (np.array([[219.0], [224.0], [224.0]]) / 255.0)
_OFF709 = np.array([16.0, 128.0, 128.0])
_INV709: dict = {}  # device -> the inverse of _M709 there (float32), for nv12_to_rgb


def _nv12_cv2(rgb: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    import cv2

    b, h, w, _ = rgb.shape
    if out is None:
        out = np.empty((b, h * 3 // 2, w), np.uint8)
    elif out.shape != (b, h * 3 // 2, w) or out.dtype != np.uint8:
        raise ValueError(f"out must be uint8 {(b, h * 3 // 2, w)}, got {out.dtype} {out.shape}")
    # cv2.transform is only vectorised for 3 output channels: compute 3, keep what is needed.
    m = np.hstack([_M709, _OFF709[:, None]]).astype(np.float32)
    m_uv = np.vstack([m[1:], m[1:2]])
    for i in range(b):
        src = np.ascontiguousarray(rgb[i])
        out[i, :h] = cv2.transform(src, m)[..., 0]
        half = cv2.resize(src, (w // 2, h // 2), interpolation=cv2.INTER_AREA)  # exact 2x2 mean
        out[i, h:] = cv2.transform(half, m_uv)[..., :2].reshape(h // 2, w)
    return out


def nv12_torch(x):
    """NV12 with elementwise ops (no K=3 matmuls): a handful of bandwidth-bound kernels."""
    import torch

    b, h, w, _ = x.shape
    m, off = _M709.tolist(), _OFF709.tolist()
    f = x.to(torch.float32)
    out = torch.empty((b, h * 3 // 2, w), dtype=torch.uint8, device=x.device)
    r, g, bl = f[..., 0], f[..., 1], f[..., 2]
    y = r * m[0][0] + g * m[0][1] + bl * m[0][2] + off[0]
    out[:, :h] = y.round_().clamp_(0, 255)
    s = f.view(b, h // 2, 2, w // 2, 2, 3).sum(dim=(2, 4)).mul_(0.25)  # the 2x2 means
    r, g, bl = s[..., 0], s[..., 1], s[..., 2]
    u = r * m[1][0] + g * m[1][1] + bl * m[1][2] + off[1]
    v = r * m[2][0] + g * m[2][1] + bl * m[2][2] + off[2]
    out[:, h:] = torch.stack([u, v], dim=-1).round_().clamp_(0, 255).view(b, h // 2, w)
    return out

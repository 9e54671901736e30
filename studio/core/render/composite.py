"""Compositing: paste generated faces back into the avatar frames (in RGB, or straight into NV12).

    comp = Compositor(assets.frames, assets.boxes, assets.masks, device="cuda")
    out = comp.paste(faces, idx, weight)      # uint8 [B,H,W,3] RGB on the device
    nv12 = rgb_to_nv12(pad_even(out))         # uint8 [B,H*3//2,W], BT.709 limited range

The same torch code runs on the CPU and on CUDA. The faces and their blend masks live in crop
coordinates (the box resampled to FACE_SIZE x FACE_SIZE); each box has its own size, so the
resize is one batched ``grid_sample`` over a window as large as the largest box in the batch, and
the blend is one fused multiply-add ``bg + a * (fg - bg)`` with ``a = mask / 255 * weight``.
Where ``a == 0`` (weight 0, or outside the mask) the output is bit-identical to the avatar frame,
and each frame's result does not depend on the rest of its batch (so a single-frame preview equals
the same frame of a full render).
"""

from __future__ import annotations

import logging

import numpy as np

from studio.core.constants import FACE_SIZE
from studio.core.devices import to_device

# the pixel formats the encoders take (studio.core.media.pixels), here for the renderer's callers
from studio.core.media.pixels import nv12_to_rgb, nv12_torch, pad_even, rgb_to_nv12, rgb_to_yuv420p

__all__ = ["Compositor", "nv12_to_rgb", "nv12_torch", "pad_even", "rgb_to_nv12", "rgb_to_yuv420p"]

log = logging.getLogger(__name__)

# Avatar frames are copied to the GPU once when they fit in this budget (and a quarter of the
# GPU's memory); else per batch.
GPU_FRAME_CACHE_BYTES = 4 << 30


def _cache_budget(device) -> int:
    """Bytes of avatar frames kept on ``device``: GPU_FRAME_CACHE_BYTES, at most a quarter of a
    GPU's memory (an 8 GB card keeps 2 GB; the engine and the frames in flight need the rest)."""
    if device.type != "cuda":
        return GPU_FRAME_CACHE_BYTES
    import torch

    total = torch.cuda.get_device_properties(device).total_memory
    return min(GPU_FRAME_CACHE_BYTES, total // 4)


# The avatar frames last uploaded, per device, kept for the next render of the same avatar
# (a warm render starts without re-uploading the clip): device -> [key, source array, RGB, NV12].
_DEVICE_FRAMES: dict = {}


def _device_frames(frames, device, nv12: bool = False):
    """``frames`` as one uint8 tensor on ``device``, reused while the same avatar is rendered.

    The key is the memory-mapped file (path, size, mtime) or, for in-memory arrays, the array
    object itself (held by the cache, so its id cannot be reused by another array)."""
    import os

    import torch

    name = getattr(frames, "filename", None)
    if name:
        st = os.stat(name)
        key: tuple = (str(name), st.st_size, st.st_mtime_ns, tuple(np.shape(frames)))
    else:
        key = (id(frames), tuple(np.shape(frames)))
    hit = _DEVICE_FRAMES.get(str(device))
    if hit is None or hit[0] != key:
        _DEVICE_FRAMES.pop(str(device), None)  # free the previous avatar first
        n, h, w, _ = np.shape(frames)
        cache = torch.empty((n, h, w, 3), dtype=torch.uint8, device=device)
        for s in range(0, n, 64):  # upload in slices: no full host copy of a memory map
            cache[s : s + 64] = torch.from_numpy(np.array(frames[s : s + 64], dtype=np.uint8))
        hit = _DEVICE_FRAMES[str(device)] = [key, None if name else frames, cache, None]
    if not nv12:
        return hit[2]
    if hit[3] is None:  # NV12 of every frame, converted once
        hit[3] = torch.cat([nv12_torch(hit[2][s : s + 64]) for s in range(0, len(hit[2]), 64)])
    return hit[3]


class Compositor:
    """Pastes batches of 256x256 faces into their avatar frames (boxes differ per frame).

    ``frames`` [N,H,W,3] uint8 RGB, ``boxes`` [N,4] int x1,y1,x2,y2 in frame pixels (a box may
    reach past the frame edge: only its visible part is drawn), ``masks`` [N,256,256] uint8 blend
    alpha in crop coordinates. The arrays may be memory-mapped: only the frames of a batch are
    read, unless the whole clip fits the device cache.
    """

    def __init__(self, frames, boxes, masks, device="cpu"):
        import torch

        frames_shape = tuple(np.shape(frames))
        if len(frames_shape) != 4 or frames_shape[3] != 3:
            raise ValueError(f"frames must be [N,H,W,3] uint8, got shape {frames_shape}")
        n = frames_shape[0]
        if np.shape(boxes) != (n, 4) or tuple(np.shape(masks)) != (n, FACE_SIZE, FACE_SIZE):
            raise ValueError(
                f"boxes must be [{n},4] and masks [{n},{FACE_SIZE},{FACE_SIZE}], "
                f"got {np.shape(boxes)} and {np.shape(masks)}"
            )
        self.frames = frames
        self.device = torch.device(device)
        self.n, self.height, self.width = frames_shape[:3]
        self.boxes = np.asarray(boxes, dtype=np.int64)
        self._masks_np = masks
        self._masks_t = None  # uint8 [N,1,256,256] on the device, on first use
        self._frames_t = None  # the whole clip on the device, when it fits the cache budget
        nbytes = int(np.prod(frames_shape))
        budget = _cache_budget(self.device)
        self._cache_frames = self.device.type != "cpu" and nbytes <= budget
        self._fits_nv12 = nbytes * 3 // 2 <= budget  # the RGB clip and its NV12 copy together

    # ------------------------------------------------------------------ public API

    def background(self, idx):
        """The untouched avatar frames ``idx`` as uint8 [B,H,W,3] on the device (a fresh tensor)."""
        import torch

        idx = np.asarray(idx, dtype=np.int64).reshape(-1)
        if self._cache_frames:
            return self._rgb_t().index_select(0, to_device(idx, self.device))
        batch = torch.from_numpy(np.ascontiguousarray(self.frames[idx]))  # fancy index = a copy
        if self.device.type != "cpu":
            batch = batch.pin_memory().to(self.device, non_blocking=True)
        return batch

    @property
    def nv12_ready(self) -> bool:
        """Whether ``background_nv12``/``paste_nv12`` are available: the clip fits the device
        cache and its size is even (then each 2x2 chroma block lies inside or outside a window)."""
        return self._fits_nv12 and self.height % 2 == 0 and self.width % 2 == 0

    def background_nv12(self, idx):
        """The untouched avatar frames ``idx`` as NV12 uint8 [B,H*3//2,W] on the device (converted
        once per avatar, then gathered)."""
        if not self.nv12_ready:
            raise RuntimeError("NV12 compositing needs a clip that fits the device cache and an even frame size")
        idx = np.asarray(idx, dtype=np.int64).reshape(-1)
        return self._nv12_t().index_select(0, to_device(idx, self.device))

    def paste_nv12(self, faces, idx, weight, out, rows=None):
        """``paste`` straight into NV12 frames ``out`` (= ``background_nv12``): only each face's
        window is blended in RGB and converted. Bit-identical to ``rgb_to_nv12(paste(...))``.
        ``rows``: the row of ``out`` for each face (default: face k goes into row k)."""
        import torch

        idx = np.asarray(idx, dtype=np.int64).reshape(-1)
        b = len(idx)
        if tuple(faces.shape) != (b, FACE_SIZE, FACE_SIZE, 3):
            raise ValueError(f"faces must be [{b},{FACE_SIZE},{FACE_SIZE},3], got {tuple(faces.shape)}")
        if tuple(out.shape[1:]) != (self.height * 3 // 2, self.width) or out.dtype != torch.uint8:
            raise ValueError(f"out must be uint8 [B,{self.height * 3 // 2},{self.width}], got {tuple(out.shape)}")
        rows = np.arange(b) if rows is None else np.asarray(rows, np.int64).reshape(-1)
        w = np.asarray(weight, np.float32).reshape(-1)
        live = np.flatnonzero(w > 0)
        vis = self._visible(idx)
        live = live[(vis[live, 2] > vis[live, 0]) & (vis[live, 3] > vis[live, 1])]
        if len(live):
            faces = faces.to(self.device)
            if len(live) < b:
                faces = faces.index_select(0, to_device(live, self.device))
            self._blend_into(out, faces, idx[live], w[live], vis[live], rows[live], nv12=True)
        return out

    def paste(self, faces, idx, weight=None, out=None):
        """Blend ``faces`` (uint8 [B,256,256,3] RGB) into avatar frames ``idx`` with ``weight`` 0..1.

        Returns uint8 [B,H,W,3] RGB on the device. ``out``: blend in place into these frames
        instead (uint8 [B,H,W,3] on the device, normally ``background(idx)``), saving a copy.
        """
        import torch

        idx = np.asarray(idx, dtype=np.int64).reshape(-1)
        b = len(idx)
        if tuple(faces.shape) != (b, FACE_SIZE, FACE_SIZE, 3):
            raise ValueError(f"faces must be [{b},{FACE_SIZE},{FACE_SIZE},3], got {tuple(faces.shape)}")
        w = np.ones(b, np.float32) if weight is None else np.asarray(weight, np.float32).reshape(-1)
        if len(w) != b:
            raise ValueError(f"weight must have {b} values, got {len(w)}")
        if out is None:
            out = self.background(idx)
        elif tuple(out.shape) != (b, self.height, self.width, 3) or out.dtype != torch.uint8:
            raise ValueError(f"out must be uint8 [{b},{self.height},{self.width},3], got {tuple(out.shape)}")
        live = np.flatnonzero(w > 0)
        vis = self._visible(idx)
        live = live[(vis[live, 2] > vis[live, 0]) & (vis[live, 3] > vis[live, 1])]
        if len(live) == 0:
            return out
        faces = faces.to(self.device)
        if len(live) < b:
            live_t = to_device(live, self.device)
            faces = faces.index_select(0, live_t)
        self._blend_into(out, faces, idx[live], w[live], vis[live], live)
        return out

    # ------------------------------------------------------------------ the maths

    def _visible(self, idx: np.ndarray) -> np.ndarray:
        """Boxes clipped to the frame: [B,4] int64 x1,y1,x2,y2 (empty when x2 <= x1)."""
        box = self.boxes[idx]
        vis = box.copy()
        vis[:, [0, 2]] = np.clip(box[:, [0, 2]], 0, self.width)
        vis[:, [1, 3]] = np.clip(box[:, [1, 3]], 0, self.height)
        return vis

    def _rgb_t(self):
        if self._frames_t is None:
            self._frames_t = _device_frames(self.frames, self.device)
        return self._frames_t

    def _nv12_t(self):
        return _device_frames(self.frames, self.device, nv12=True)

    def _masks(self):
        if self._masks_t is None:  # pinned and not waited for: a pageable copy waits for the GPU's queue
            self._masks_t = to_device(np.array(self._masks_np, dtype=np.uint8)[:, None], self.device)
        return self._masks_t

    def _blend_into(self, out, faces, idx, w, vis, rows, nv12=False):
        """Resize faces+masks to their boxes over one shared window, blend, scatter into ``out``
        (RGB frames, or NV12 frames: then windows start on even pixels and span even sizes, their
        background comes from the RGB cache, and only they are converted)."""
        import torch
        import torch.nn.functional as F

        dev = self.device
        if nv12:  # even-aligned windows covering each visible box
            y0, x0 = vis[:, 1] // 2 * 2, vis[:, 0] // 2 * 2
            win_h = int((-(-vis[:, 3] // 2) * 2 - y0).max())
            win_w = int((-(-vis[:, 2] // 2) * 2 - x0).max())
            oy = np.minimum(y0, self.height - win_h)
            ox = np.minimum(x0, self.width - win_w)
        else:
            win_h = int((vis[:, 3] - vis[:, 1]).max())
            win_w = int((vis[:, 2] - vis[:, 0]).max())
            # Window origin: the visible box's corner, moved left/up so the window stays in the frame.
            oy = np.minimum(vis[:, 1], self.height - win_h)
            ox = np.minimum(vis[:, 0], self.width - win_w)

        # float32 also on CUDA: half-precision grids are off by ~0.25 px at 1080p.
        src = faces.permute(0, 3, 1, 2).float()
        alpha = self._masks()[to_device(idx, dev)].float()
        src = torch.cat([src, alpha], dim=1)  # [n,4,256,256]: RGB + mask, resampled together
        box = to_device(self.boxes[idx].astype(np.float32), dev)
        oy_t = to_device(oy.astype(np.float32), dev)
        ox_t = to_device(ox.astype(np.float32), dev)
        ys = oy_t[:, None] + torch.arange(win_h, device=dev, dtype=torch.float32)[None] + 0.5
        xs = ox_t[:, None] + torch.arange(win_w, device=dev, dtype=torch.float32)[None] + 0.5
        # Pixel centres in the box -> normalised crop coordinates (align_corners=False convention).
        gy = 2.0 * (ys - box[:, 1:2]) / (box[:, 3:4] - box[:, 1:2]) - 1.0
        gx = 2.0 * (xs - box[:, 0:1]) / (box[:, 2:3] - box[:, 0:1]) - 1.0
        grid = torch.stack(torch.broadcast_tensors(gx[:, None, :], gy[:, :, None]), dim=-1)
        res = F.grid_sample(src, grid, mode="bilinear", padding_mode="border", align_corners=False)  # [n,4,win_h,win_w]

        # Alpha: mask/255 * weight, zero outside each item's own visible box.
        vis_t = to_device(vis.astype(np.float32), dev)
        inside_y = (ys >= vis_t[:, 1:2]) & (ys < vis_t[:, 3:4])
        inside_x = (xs >= vis_t[:, 0:1]) & (xs < vis_t[:, 2:3])
        inside = inside_y[:, :, None] & inside_x[:, None, :]
        wt = to_device(np.asarray(w, np.float32), dev)
        a = res[:, 3].clamp_(0, 255) * (wt[:, None, None] / 255.0) * inside
        fg = res[:, :3].permute(0, 2, 3, 1)

        # Gather each item's window from its background, blend, scatter back (no overlaps).
        if nv12:
            bg = self._windows(self._rgb_t(), idx, oy, ox, win_h, win_w).float()
        else:
            bg = self._windows(out, rows, oy, ox, win_h, win_w).float()  # [n,win_h,win_w,3]
        blended = torch.addcmul(bg, a.unsqueeze(-1), fg - bg).round_().clamp_(0, 255).to(torch.uint8)
        if not nv12:
            self._windows(out, rows, oy, ox, win_h, win_w, put=blended)
            return
        win = nv12_torch(blended)  # [n, win_h*3//2, win_w]: Y rows, then interleaved UV rows
        h = self.height
        self._windows(out[..., None], rows, oy, ox, win_h, win_w, put=win[:, :win_h, :, None])
        self._windows(out[:, h:, :, None], rows, oy // 2, ox, win_h // 2, win_w, put=win[:, win_h:, :, None])

    def _windows(self, out, rows, oy, ox, win_h, win_w, put=None):
        """Read (or write ``put`` into) the [n,win_h,win_w,3] windows of ``out`` at (oy, ox).

        One gather/scatter kernel on CUDA; on the CPU plain slices are ~3x faster than that.
        """
        import torch

        if out.device.type == "cpu":
            views = [out[r, y : y + win_h, x : x + win_w] for r, y, x in zip(rows, oy, ox)]
            if put is None:
                return torch.stack(views)
            for v, p in zip(views, put):
                v.copy_(p)
            return None
        dev = out.device
        yi = to_device(oy, dev)[:, None] + torch.arange(win_h, device=dev)[None]
        xi = to_device(ox, dev)[:, None] + torch.arange(win_w, device=dev)[None]
        bi, yy, xx = to_device(rows, dev)[:, None, None], yi[:, :, None], xi[:, None, :]
        if put is None:
            return out[bi, yy, xx]
        out[bi, yy, xx] = put
        return None

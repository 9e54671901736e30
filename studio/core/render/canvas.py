"""The output canvas: the rendered avatar frames placed on a canvas of the delivery's size.

    canvas = Canvas.for_render(settings, avatar, device)   # None: the avatar's own size, unchanged
    out = canvas.place(frames, avatar_idx, alpha)          # [B,H,W,3|4] -> [B,ch,cw,3] (or 4 with alpha)

The presenter is scaled once per batch with an antialiased bicubic filter (``torch``'s, the same as
Pillow's: sharp when enlarging, no aliasing when shrinking) on the render's device, then pasted at its
place over the background (a colour, an image scaled to cover the canvas, or transparent). The
placement is ``fit`` (all of the avatar, centred), ``fill`` (the canvas covered, centred) or ``face``
(covered, the crop centred on the face): the face's centre is the avatar's face boxes smoothed over
the avatar's own frames with a Gaussian of ``FACE_SMOOTH_S`` seconds (zero phase, so no lag; a frame
without a face takes the neighbours'), so the crop glides with the presenter and never jitters, and
each output frame still depends only on its avatar frame (``frame_at`` equals the written frame).
``scale`` and ``offset_x/offset_y`` move the presenter from there. The scale never enlarges past
``max_upscale`` (``note`` says when it was held back).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

FACE_SMOOTH_S = 0.8  # sigma of the face track's smoothing, in seconds of the avatar's frames


@dataclass
class Canvas:
    width: int
    height: int
    scaled_w: int  # the presenter's size on the canvas
    scaled_h: int
    ox: np.ndarray  # [N] int: the presenter's left edge on the canvas, per avatar frame
    oy: np.ndarray  # [N] int: its top edge
    background: Any  # uint8 [H,W,3] torch on the device
    transparent: bool
    device: Any
    note: str = ""

    @classmethod
    def for_render(cls, settings, avatar, device="cpu", quiet: bool = False) -> Canvas | None:
        """The canvas ``settings`` ask for, or None when the output is the avatar frames as they are."""
        size = settings.canvas_size
        aw, ah = int(avatar.width), int(avatar.height)
        cw, ch = size or (aw, ah)
        bg = settings.background.strip().lower()
        identity = (
            (cw, ch) == (aw, ah)
            and settings.scale == 1.0
            and settings.offset_x == 0.0
            and settings.offset_y == 0.0
            and settings.fit in ("fit", "fill", "face")
            and (avatar.alpha is None or (size is None and bg == "black"))
        )
        if identity:  # the avatar's own size: nothing to place (bit-identical to a render without a canvas)
            return None
        return cls.make(avatar, cw, ch, settings, device, quiet)

    @classmethod
    def make(cls, avatar, cw: int, ch: int, settings, device="cpu", quiet: bool = False) -> Canvas:
        import torch

        aw, ah = int(avatar.width), int(avatar.height)
        fit = settings.fit
        base = min(cw / aw, ch / ah) if fit == "fit" else max(cw / aw, ch / ah)
        s = base * float(settings.scale)
        note = ""
        if s > settings.max_upscale:
            note = (
                f"the {aw}x{ah} avatar would be enlarged {s:.1f}x to {'fit' if fit == 'fit' else 'fill'} the "
                f"{cw}x{ch} canvas; it is kept at "
                f"{settings.max_upscale:g}x (raise --max-upscale to enlarge it further, softer)"
            )
            if not quiet:
                log.warning(note)
            s = float(settings.max_upscale)
        sw, sh = max(1, round(aw * s)), max(1, round(ah * s))
        dx, dy = settings.offset_x * cw, settings.offset_y * ch
        n = int(avatar.N)
        if fit == "face":
            cx, cy = face_track(avatar)
            fx = cw / 2 - cx * s
            fy = ch / 2 - cy * s
            ox = _clamp_cover(fx, sw, cw) + dx
            oy = _clamp_cover(fy, sh, ch) + dy
        else:
            ox = np.full(n, (cw - sw) / 2 + dx)
            oy = np.full(n, (ch - sh) / 2 + dy)
        dev = torch.device(device)
        transparent = settings.background.strip().lower() == "transparent"
        return cls(
            cw,
            ch,
            sw,
            sh,
            np.round(ox).astype(np.int64),
            np.round(oy).astype(np.int64),
            _background(settings.background, cw, ch, dev),
            transparent,
            dev,
            note,
            aw,
            ah,
        )

    @property
    def static(self) -> bool:
        """Whether the presenter sits at one place in every frame (fit, fill, or a photo)."""
        return bool((self.ox == self.ox[0]).all() and (self.oy == self.oy[0]).all())

    def changing(self, box) -> tuple[int, int, int, int] | None:
        """A photo's face box (avatar pixels) where it lands on the canvas, for the encoder's hints."""
        if box is None or not self.static or np.ndim(box) != 1:
            return None
        sx, sy = self.scaled_w / self.src_w, self.scaled_h / self.src_h
        x1, y1, x2, y2 = (float(v) for v in box)
        r = (
            int(x1 * sx + self.ox[0]) - 2,
            int(y1 * sy + self.oy[0]) - 2,
            int(x2 * sx + self.ox[0]) + 3,
            int(y2 * sy + self.oy[0]) + 3,
        )
        r = (max(0, r[0]), max(0, r[1]), min(self.width, r[2]), min(self.height, r[3]))
        return r if r[2] > r[0] and r[3] > r[1] else None

    src_w: int = 0
    src_h: int = 0

    def place(self, frames, avatar_idx, alpha: bool):
        """Avatar-sized frames ``[B,h,w,3|4]`` (uint8 torch; a fourth channel is the presenter's alpha)
        on the canvas: ``[B,H,W,3]``, or ``[B,H,W,4]`` with ``alpha`` (the output keeps an alpha channel)."""
        import torch
        import torch.nn.functional as F

        b, h, w, c = frames.shape
        x = frames.permute(0, 3, 1, 2).float()
        if (self.scaled_h, self.scaled_w) != (h, w):
            x = F.interpolate(
                x, size=(self.scaled_h, self.scaled_w), mode="bicubic", antialias=True, align_corners=False
            )
            x = x.round_().clamp_(0, 255)
        bg = self.background.permute(2, 0, 1).float()  # [3,H,W]
        out = bg.unsqueeze(0).repeat(b, 1, 1, 1)
        bg_alpha = 0.0 if self.transparent else 255.0
        out_a = torch.full((b, 1, self.height, self.width), bg_alpha, device=x.device)
        idx = np.asarray(avatar_idx, np.int64).reshape(-1)
        for k in range(b):
            ox, oy = int(self.ox[idx[k]]), int(self.oy[idx[k]])
            x0, y0 = max(0, ox), max(0, oy)
            x1, y1 = min(self.width, ox + self.scaled_w), min(self.height, oy + self.scaled_h)
            if x1 <= x0 or y1 <= y0:
                continue
            src = x[k, :, y0 - oy : y1 - oy, x0 - ox : x1 - ox]
            if c == 4:  # over: the presenter's alpha on the background
                a = src[3:4] / 255.0
                dst = out[k, :, y0:y1, x0:x1]
                out[k, :, y0:y1, x0:x1] = dst + a * (src[:3] - dst)
                out_a[k, :, y0:y1, x0:x1] = src[3:4] + out_a[k, :, y0:y1, x0:x1] * (1 - a)
            else:
                out[k, :, y0:y1, x0:x1] = src
                out_a[k, :, y0:y1, x0:x1] = 255.0
        if alpha:
            out = torch.cat([out, out_a], dim=1)
        return out.round_().clamp_(0, 255).to(torch.uint8).permute(0, 2, 3, 1).contiguous()


def _clamp_cover(pos: np.ndarray, size: int, extent: int) -> np.ndarray:
    """The edge positions ``pos`` kept so a presenter of ``size`` covers ``0..extent`` (centred when smaller)."""
    if size <= extent:
        return np.full_like(pos, (extent - size) / 2)
    return np.clip(pos, extent - size, 0)


def face_track(avatar) -> tuple[np.ndarray, np.ndarray]:
    """The face centre (x, y) per avatar frame, in avatar pixels, smoothed (Gaussian, zero phase; the
    ends reflected, as the ping-pong loop plays them); frames without a face take their neighbours'."""
    from scipy.ndimage import gaussian_filter1d

    boxes = np.asarray(avatar.boxes, np.float64)
    ok = np.asarray(avatar.face_ok, bool)
    n = len(boxes)
    cx = (boxes[:, 0] + boxes[:, 2]) / 2
    cy = (boxes[:, 1] + boxes[:, 3]) / 2
    if not ok.any():
        return np.full(n, avatar.width / 2), np.full(n, avatar.height / 2)
    if not ok.all():
        t = np.arange(n)
        cx = np.interp(t, t[ok], cx[ok])
        cy = np.interp(t, t[ok], cy[ok])
    if n > 1:
        sigma = max(1.0, FACE_SMOOTH_S * float(avatar.fps))
        cx = gaussian_filter1d(cx, sigma, mode="reflect")
        cy = gaussian_filter1d(cy, sigma, mode="reflect")
    return cx, cy


def _background(spec: str, cw: int, ch: int, device):
    """The background as uint8 [H,W,3] on ``device``: a colour, an image scaled to cover (centred), or
    black under a transparent canvas."""
    import torch

    from studio.core.delivery import background_rgb

    t = spec.strip()
    rgb = None if t.lower() == "transparent" else background_rgb(t)
    if t.lower() == "transparent" or rgb is not None:
        col = torch.tensor(rgb or (0, 0, 0), dtype=torch.uint8, device=device)
        return col.view(1, 1, 3).expand(ch, cw, 3).contiguous()
    from PIL import Image, ImageOps

    from studio.core.errors import InputError

    try:
        with Image.open(t) as src:
            img = ImageOps.exif_transpose(src).convert("RGB")
            arr = np.asarray(ImageOps.fit(img, (cw, ch), Image.Resampling.LANCZOS), np.uint8)
    except (OSError, ValueError) as exc:
        raise InputError(
            f"the background image {t} cannot be read ({type(exc).__name__}); give a PNG or JPEG"
        ) from None
    return torch.from_numpy(arr.copy()).to(device)


def output_size(settings, avatar) -> tuple[int, int]:
    """The written frames' (width, height): the canvas, or the avatar's own size."""
    return settings.canvas_size or (int(avatar.width), int(avatar.height))


def changing_for(settings, avatar):
    """``open_video(changing=...)`` for a render of ``avatar`` with ``settings``: the avatar's own hints
    without a canvas; on a canvas, a photo's face box where it lands (a still placement), else None."""
    from studio.core.media.hints import changing_region

    canvas = Canvas.for_render(settings, avatar, quiet=True)
    if canvas is None:
        return changing_region(avatar)
    if getattr(avatar, "N", 0) != 1:
        return None
    return canvas.changing(np.asarray(avatar.boxes[0]))

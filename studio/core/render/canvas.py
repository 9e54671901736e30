"""The output canvas: the rendered avatar frames placed on a canvas of the delivery's size.

    canvas = Canvas.for_render(settings, avatar, device)   # None: the avatar's own size, unchanged
    out = canvas.place(frames, avatar_idx, alpha)          # [B,H,W,3|4] -> [B,ch,cw,3] (or 4 with alpha)

The presenter is scaled once per batch with an antialiased bicubic filter (``torch``'s, the same as
Pillow's: sharp when enlarging, no aliasing when shrinking) on the render's device, then pasted at its
place over the background (a colour, an image scaled to cover the canvas, or transparent). The
placement is ``fit`` (all of the avatar, centred), ``fill`` (the canvas covered, centred) or ``face``
(covered, the crop centred on the face): the face's centre is the avatar's face boxes smoothed over
the avatar's own frames by a local straight-line fit over ``FACE_SMOOTH_S`` seconds (Savitzky-Golay of
order 1: zero phase, no lag, and no pull toward the middle at the clip's ends as a Gaussian has; a frame
without a face takes the neighbours'), so the crop glides with the presenter and never jitters, and
each output frame still depends only on its avatar frame (``frame_at`` equals the written frame).
``scale`` and ``offset_x/offset_y`` move the presenter from there. The scale never enlarges past
``max_upscale`` (``note`` says when it was held back).
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

FACE_SMOOTH_S = 2.0  # the face track's smoothing window, in seconds of the avatar's frames


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
        s = needed_upscale(settings, aw, ah, (cw, ch))
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

    def covers(self, avatar_idx) -> bool:
        """Whether the presenter covers all of the canvas in the frames of ``avatar_idx``."""
        ox, oy = self.ox[avatar_idx], self.oy[avatar_idx]
        return bool(
            ((ox <= 0) & (oy <= 0) & (ox + self.scaled_w >= self.width) & (oy + self.scaled_h >= self.height)).all()
        )

    def croppable(self) -> bool:
        """Whether most of the scaled presenter falls outside the canvas (fill and face reframes
        across the aspect): then each frame resizes only the part of its source that shows."""
        return self.scaled_w > self.width * 1.25 or self.scaled_h > self.height * 1.25

    def _visible(self, frame, ox: int, oy: int):
        """``frame`` ``[1,h,w,c]`` resized to the presenter's scale where it shows at ``(ox, oy)``:
        ``(part, jx, jy)``, the part's pixel ``(0, 0)`` at the scaled presenter's ``(jx, jy)``.
        The source crop (the visible part and the filter's reach of 2 output pixels' worth) has one
        size for every frame and is resized at the presenter's exact scale, so a frame's pixels
        depend only on the frame and its placement; the crop's start is whole source pixels, so
        the part sits within half a canvas pixel of where the whole resize puts it (the placement
        itself is rounded to whole pixels)."""
        _, h, w, _ = frame.shape
        ax = _axis(ox, self.scaled_w, self.width, w)
        ay = _axis(oy, self.scaled_h, self.height, h)
        part = frame[:, ay[0] : ay[0] + ay[1], ax[0] : ax[0] + ax[1]]
        scale = (self.scaled_h / h, self.scaled_w / w)
        return resize(part, (ay[3], ax[3]), scale), ax[2], ay[2]

    src_w: int = 0
    src_h: int = 0
    _bg_cache: Any = None  # the background with the output's channels, on the device

    def place(self, frames, avatar_idx, alpha: bool):
        """Avatar-sized frames ``[B,h,w,3|4]`` (uint8 torch; a fourth channel is the presenter's alpha)
        on the canvas: ``[B,H,W,3]``, or ``[B,H,W,4]`` with ``alpha`` (the output keeps an alpha channel).
        Only the resize runs in float; the canvas is filled and pasted in uint8 (blended where the
        presenter is transparent)."""
        import torch

        b, h, w, c = frames.shape
        if c == 4:  # resized and laid over premultiplied: a transparent pixel's colour never bleeds in
            frames = premultiplied(frames)
        size = (self.scaled_h, self.scaled_w)
        crop = size != (h, w) and self.croppable()
        if size != (h, w) and not crop:
            pres = resize(frames, size)
        else:
            pres = frames
        oc = 4 if alpha else 3
        idx = np.asarray(avatar_idx, np.int64).reshape(-1)
        if c != 4 and self.covers(idx):  # an opaque presenter over all of every frame: no background
            out = torch.empty((b, self.height, self.width, oc), dtype=torch.uint8, device=frames.device)
        else:
            if self._bg_cache is None or self._bg_cache.shape[-1] != oc or self._bg_cache.device != frames.device:
                bg = self.background.to(frames.device)
                if alpha:
                    a0 = torch.full_like(bg[..., :1], 0 if self.transparent else 255)
                    bg = torch.cat([bg, a0], dim=-1)
                self._bg_cache = bg.contiguous()
            out = self._bg_cache.unsqueeze(0).repeat(b, 1, 1, 1)
        for k in range(b):
            ox, oy = int(self.ox[idx[k]]), int(self.oy[idx[k]])
            x0, y0 = max(0, ox), max(0, oy)
            x1, y1 = min(self.width, ox + self.scaled_w), min(self.height, oy + self.scaled_h)
            if x1 <= x0 or y1 <= y0:
                continue
            if crop:  # only the source pixels this frame shows (and the filter's reach) are resized
                part, jx, jy = self._visible(frames[k : k + 1], ox, oy)
                ys, xs = slice(y0 - oy - jy, y1 - oy - jy), slice(x0 - ox - jx, x1 - ox - jx)
                if min(ys.start, xs.start) >= 0 and ys.stop <= part.shape[1] and xs.stop <= part.shape[2]:
                    src = part[0, ys, xs]
                else:  # past the crop (rounding at an edge): the whole frame resized
                    src = resize(frames[k : k + 1], size)[0, y0 - oy : y1 - oy, x0 - ox : x1 - ox]
            else:
                src = pres[k, y0 - oy : y1 - oy, x0 - ox : x1 - ox]
            if src.dtype != torch.uint8:  # elementwise: the same values as rounding all of it first
                src = src.round().clamp_(0, 255).to(torch.uint8)
            dst = out[k, y0:y1, x0:x1]
            if c == 4:  # over (Porter-Duff), the presenter premultiplied; written straight (unassociated)
                a = src[..., 3:4].float() / 255.0
                d = dst[..., :3].float()
                sp = torch.minimum(src[..., :3], src[..., 3:4]).float()  # a resize's ringing: never over alpha
                if alpha:
                    da = dst[..., 3:4].float() / 255.0
                    oa = a + da * (1 - a)
                    pm = sp + d * da * (1 - a)
                    rgb = torch.where(oa > 0, pm / oa.clamp(min=1e-6), torch.zeros_like(pm))
                    dst[..., 3:4] = (oa * 255).round_().clamp_(0, 255).to(torch.uint8)
                else:
                    rgb = sp + d * (1 - a)
                dst[..., :3] = rgb.round_().clamp_(0, 255).to(torch.uint8)
            elif alpha:
                dst[..., :3] = src[..., :3]
                dst[..., 3] = 255
            else:
                dst.copy_(src)
        return out


def premultiplied(frames):
    """RGBA uint8 frames ``[B,h,w,4]`` (straight alpha) with their colour multiplied by their alpha: what a
    resize must filter (a straight-alpha resize mixes the colour hidden under transparent pixels,
    often black, into the edges: the dark fringe) and what ``over`` adds."""
    import torch

    a = frames[..., 3:4].to(torch.int32)
    rgb = (frames[..., :3].to(torch.int32) * a + 127) // 255
    return torch.cat([rgb.to(torch.uint8), frames[..., 3:4]], dim=-1)


def resize(frames, size, scale=None):
    """``[B,h,w,c]`` uint8 -> ``[B,H,W,c]`` (antialiased bicubic; ``scale``: the mapping's
    (y, x) factors where the output is a crop of the whole): uint8 on the CPU (torch's uint8
    kernel, ~13x the float one there), float elsewhere (rounded where it is pasted)."""
    import torch
    import torch.nn.functional as F

    if frames.device.type == "cpu":
        x = frames.permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last)
    else:
        x = frames.permute(0, 3, 1, 2).float()
    if scale is not None:  # a crop of the whole: its size, at the whole's scale (F.interpolate takes one)
        return torch.ops.aten._upsample_bicubic2d_aa.default(x, list(size), False, *scale).permute(0, 2, 3, 1)
    return F.interpolate(x, size=size, mode="bicubic", antialias=True, align_corners=False).permute(0, 2, 3, 1)


def _axis(o: int, scaled: int, extent: int, src: int) -> tuple[int, int, int, int]:
    """One axis of ``Canvas._visible``: (source start, source length, its start on the scaled
    presenter, its scaled length) for a presenter of ``scaled`` at ``o`` on ``extent``."""
    r = src / scaled
    m = int(np.ceil(2 * max(1.0, r))) + 2  # source pixels of margin: the filter's reach
    n = min(src, int(np.ceil(extent * r)) + 2 * m + 2)
    a = min(max(int(np.floor(max(0, -o) * r)) - m, 0), src - n)
    return a, n, int(round(a / r)), int(np.ceil(n / r)) + 1  # past the source's end: never pasted


def _clamp_cover(pos: np.ndarray, size: int, extent: int) -> np.ndarray:
    """The edge positions ``pos`` kept so a presenter of ``size`` covers ``0..extent`` (centred when smaller)."""
    if size <= extent:
        return np.full_like(pos, (extent - size) / 2)
    return np.clip(pos, extent - size, 0)


def face_track(avatar) -> tuple[np.ndarray, np.ndarray]:
    """The face centre (x, y) per avatar frame, in avatar pixels, smoothed (a local straight-line fit over
    ``FACE_SMOOTH_S``); frames without a face take their neighbours'."""
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
    win = min(int(round(FACE_SMOOTH_S * float(avatar.fps))) | 1, n if n % 2 else n - 1)
    if win >= 3:
        cx, cy = line_fit_smooth(cx, win), line_fit_smooth(cy, win)
    return cx, cy


def line_fit_smooth(x: np.ndarray, win: int) -> np.ndarray:
    """``scipy.signal.savgol_filter(x, win, 1, mode="interp")`` in numpy: a straight line fitted over
    each odd ``win`` of samples, evaluated at its centre (which for order 1 is the window's mean), and
    at the first and last ``win // 2`` samples the line fitted to the first or last window.

    Written here because importing ``scipy.signal`` costs about a second (1.3 s on the 2-core dev
    machine), paid by the first face-reframed render of a process (the ``open`` stage of the
    1080x1920 benchmark row) for a filter that is a moving mean and two line fits."""
    x = np.asarray(x, np.float64)
    n, h = len(x), win // 2
    out = np.empty(n)
    c = np.concatenate([[0.0], np.cumsum(x)])
    out[h : n - h] = (c[win:] - c[: n - win + 1]) / win
    t = np.arange(win, dtype=np.float64)
    for lo, dst in ((0, slice(0, h)), (n - win, slice(n - h, n))):
        slope, icept = np.polyfit(t, x[lo : lo + win], 1)
        out[dst] = icept + slope * (np.arange(n)[dst] - lo)
    return out


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

    from studio.core.avatars.sources import open_image
    from studio.core.errors import AvatarError, InputError

    try:
        with open_image(Path(t), what="background image") as src:  # its size from the header first
            img = ImageOps.exif_transpose(src).convert("RGB")
            arr = np.asarray(ImageOps.fit(img, (cw, ch), Image.Resampling.LANCZOS), np.uint8)
    except AvatarError as exc:
        raise InputError(str(exc).replace("and add it again", "and give it again")) from None
    except (OSError, ValueError) as exc:
        raise InputError(
            f"the background image {t} cannot be read ({type(exc).__name__}); give a PNG or JPEG"
        ) from None
    return torch.from_numpy(arr.copy()).to(device)


def needed_upscale(settings, aw: int, ah: int, canvas: tuple[int, int] | None = None) -> float:
    """How much ``settings`` place an ``aw`` x ``ah`` avatar enlarged on their canvas (``canvas``:
    that size instead): ``fit`` shows all of it, ``fill`` and ``face`` cover the canvas; times ``scale``."""
    cw, ch = canvas or settings.canvas_size or (aw, ah)
    base = min(cw / aw, ch / ah) if settings.fit == "fit" else max(cw / aw, ch / ah)
    return base * float(settings.scale)


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


class Delivered:
    """What happens to a batch of rendered avatar frames before the file: placed on the canvas
    (``Canvas``), the captions burnt in (``captions.burn``). ``active`` is False when neither is asked:
    the frames go to the writer as they are (then NV12 compositing on a GPU stays possible)."""

    def __init__(self, settings, avatar, device, cues: Callable[[], list]):
        self.avatar = avatar
        self.canvas = Canvas.for_render(settings, avatar, device)
        self.burn = settings.captions == "burn"
        self.style = settings.caption_style
        self._cues = cues
        self._painter: Any = None
        self._gpu: collections.deque = collections.deque(maxlen=4096)  # CUDA events around the canvas work
        if self.burn:
            cues()  # no script to caption: one sentence before any frame

    @property
    def active(self) -> bool:
        return self.canvas is not None or self.burn

    @property
    def transparent(self) -> bool:
        return self.canvas is not None and self.canvas.transparent

    @property
    def notes(self) -> list[str]:
        return [self.canvas.note] if self.canvas is not None and self.canvas.note else []

    def apply(self, frames, idx_f, avatar_idx, rate, stage: Callable[[str, float], None]):
        """The batch on the canvas (RGBA where the presenter or the background is transparent), captioned."""
        import time

        if self.canvas is not None:
            t0 = time.perf_counter()
            e0 = _event(frames)
            alpha = self.avatar.alpha
            if alpha is not None:
                frames = with_alpha(frames, alpha, avatar_idx)
            frames = self.canvas.place(frames, avatar_idx, alpha=alpha is not None or self.canvas.transparent)
            if e0 is not None:
                self._gpu.append((e0, _event(frames)))
            stage("canvas", t0)
        if self.burn:
            from studio.core.captions import CaptionPainter, burn

            t0 = time.perf_counter()
            if self._painter is None:
                self._painter = CaptionPainter(int(frames.shape[2]), int(frames.shape[1]), self.style)
            times = [float(i / rate) for i in np.asarray(idx_f).reshape(-1)]
            frames = burn(frames, times, self._cues(), self._painter)
            stage("captions", t0)
        return frames

    def gpu_ms(self) -> float:
        """The GPU's time on the canvas work since the last call (CUDA events; 0 on the CPU). The
        ``canvas`` stage counts only the launching: on a GPU the work runs behind, and the next
        stage that waits for the GPU (the engine's) shows it. Waits for the last event."""
        if not self._gpu:
            return 0.0
        self._gpu[-1][1].synchronize()
        ms = sum(a.elapsed_time(b) for a, b in self._gpu)
        self._gpu.clear()
        return float(ms)

    def for_writer(self, frames, alpha: bool):
        """Placed frames with the channels the writer takes: RGB, or RGBA for an alpha codec."""
        import torch

        if frames.shape[-1] == 4 and not alpha:
            return frames[..., :3].contiguous()
        if frames.shape[-1] == 3 and alpha:
            return torch.cat([frames, torch.full_like(frames[..., :1], 255)], dim=-1)
        return frames


def _event(frames):
    """A timing CUDA event recorded on the current stream where ``frames`` are on a GPU, else None."""
    if not frames.is_cuda:
        return None
    import torch

    e = torch.cuda.Event(enable_timing=True)
    e.record()
    return e


def with_alpha(frames, alpha, avatar_idx):
    """RGB frames ``[B,H,W,3]`` (torch) with the avatar frames' alpha as a fourth channel: the generated
    mouth lies on the face, which is opaque, so the avatar's alpha is the output's."""
    import torch

    a = torch.from_numpy(np.ascontiguousarray(np.asarray(alpha[np.asarray(avatar_idx)]))).to(frames.device)
    return torch.cat([frames, a[..., None]], dim=-1)

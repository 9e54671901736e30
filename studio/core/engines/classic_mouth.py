"""The classic engine's mouth: a landmark mesh warp of the lips and jaw, and a rendered mouth interior.

Everything is in the avatar's 256x256 face-crop coordinates, in a frame of reference per avatar
frame: ``u`` along the mouth (corner to corner, 1 = a corner), ``v`` down the face in pixels
from the mouth centre. From the face mesh (``rig_geometry``) each avatar frame gets, sampled at
``U``, the four lip contours (upper outer, upper inner, lower inner, lower outer) and the jaw line,
plus the nose base. A frame's controls (``classic_visemes.MouthControls``) give a target for the
gap between the inner lips at every ``u``; the change splits into a small lift of the upper lip
and a larger drop of the lower lip, and the jaw follows the lower lip.

**The warp** is a structured mesh: every column ``u`` is cut at the contours into segments (nose
base - upper outer lip - upper inner lip - lower inner lip - lower outer lip - jaw line - crop
bottom), and each target segment maps linearly onto its source segment, so the lips are the
source's own pixels stretched or squeezed (never blended or blurred), the skin between the nose
and the lip and between the lip and the chin takes up the motion, and nothing moves above the
nose or at the crop's bottom edge. Spreading and rounding scale ``u`` around the mouth (fading
over the cheeks). The map is evaluated backwards (output pixel -> source pixel) in closed form
and applied with one ``grid_sample``.

**The interior** fills the new gap between the inner lips, with edges softened over about a
pixel along the inner-lip contours: a dark oral cavity shaded from the avatar's own lip colour
(darker at the back and in the corners), the upper teeth hanging from the upper lip and showing
more as the lip lifts, the lower teeth rising from the lower lip and a tongue when the mouth is
wide, and a shadow under the upper lip. Teeth take the colour of the avatar's own teeth when the
photo shows them (bright, low-saturation pixels between its inner lips), else a warm off-white;
when the photo shows teeth, the real pixels are kept, the upper row fixed to the upper lip and
the lower row carried down with the jaw. Lips that must close over a gap the photo has (a smile
with teeth, for /p/ /b/ /m/) meet in the middle.

Every operation is per sample (no reductions across the batch), so a face is the same whether it
is generated alone (scrubbing) or in a batch (rendering). A sample whose controls are all zero is
the crop itself, exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from studio.core.constants import FACE_SIZE

# face-mesh landmark indices (MediaPipe 468/478 topology), each contour from the left corner to the right
UPPER_OUTER = (61, 185, 40, 39, 37, 0, 267, 269, 270, 409, 291)
LOWER_OUTER = (61, 146, 91, 181, 84, 17, 314, 405, 321, 375, 291)
UPPER_INNER = (78, 191, 80, 81, 82, 13, 312, 311, 310, 415, 308)
LOWER_INNER = (78, 95, 88, 178, 87, 14, 317, 402, 318, 324, 308)
JAW_LINE = (132, 58, 172, 136, 150, 149, 176, 148, 152, 377, 400, 378, 379, 365, 397, 288, 361)
NOSE_BASE = (2, 97, 326, 164)
LIP_CORNER_L, LIP_CORNER_R = 61, 291
INNER_UPPER, INNER_LOWER = 13, 14

U = np.linspace(-2.8, 2.8, 57).astype(np.float32)  # mouth-axis sample positions (1 = a corner)
N_CONTOURS = 5  # upper outer, upper inner, lower inner, lower outer, jaw
N_SCALARS = 8  # cx, cy, ax, ay, hw, nose, bottom, lip thickness

WARM_TEETH = (228.0, 214.0, 199.0)  # a warm off-white for faces whose photo shows no teeth
MAX_OPEN = 0.62  # the widest gap between the inner lips, in mouth half-widths (/a/ at full voice)


@dataclass(frozen=True, eq=False)
class RigGeometry:
    """Per avatar frame, ``[N, ...]`` float32: see ``rig_geometry``."""

    scalars: np.ndarray  # [N, N_SCALARS]
    contours: np.ndarray  # [N, N_CONTOURS, len(U)] v of each contour at U (pixels, + = down)
    colours: np.ndarray  # [N, 7]: teeth RGB, lip RGB, own-teeth flag 0..1

    def rows(self, idx) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        idx = np.asarray(idx, np.int64)
        return self.scalars[idx], self.contours[idx], self.colours[idx]


def rig_geometry(crop_landmarks: np.ndarray, crops=None) -> RigGeometry:
    """Mouth frames of reference, contours and colours from ``[N,478,2]`` crop landmarks
    (and the ``[N,256,256,3]`` crops, for the colours; sampled on a few frames, the same for all)."""
    lm = np.asarray(crop_landmarks, np.float32)
    n = len(lm)
    left, right = lm[:, LIP_CORNER_L], lm[:, LIP_CORNER_R]
    axis = right - left
    width = np.linalg.norm(axis, axis=1) + 1e-6
    axis = axis / width[:, None]
    normal = np.stack([-axis[:, 1], axis[:, 0]], 1)  # points down the face
    hw = width / 2
    centre = (lm[:, INNER_UPPER] + lm[:, INNER_LOWER]) / 2

    def uv(ids):
        d = lm[:, list(ids)] - centre[:, None, :]
        return (d * axis[:, None, :]).sum(2) / hw[:, None], (d * normal[:, None, :]).sum(2)

    contours = np.zeros((n, N_CONTOURS, len(U)), np.float32)
    for k, ids in enumerate((UPPER_OUTER, UPPER_INNER, LOWER_INNER, LOWER_OUTER, JAW_LINE)):
        pu, pv = uv(ids)
        for i in range(n):
            order = np.argsort(pu[i])
            contours[i, k] = np.interp(U, pu[i][order], pv[i][order])
    uo, ui, li, lo, jaw = (contours[:, k] for k in range(N_CONTOURS))
    # keep the contours ordered (a landmark glitch must not fold the mesh)
    ui = np.maximum(ui, uo + 0.5)
    li = np.maximum(li, ui)
    lo = np.maximum(lo, li + 0.5)
    jaw = np.maximum(jaw, lo + 0.25 * hw[:, None])
    contours = np.stack([uo, ui, li, lo, jaw], 1)
    nose = np.minimum(uv(NOSE_BASE)[1].mean(1), uo.min(1) - 2.0)
    # distance from the mouth centre to the crop's bottom edge along the normal (moved 2 px in)
    bottom = (FACE_SIZE - 2.0 - centre[:, 1]) / np.maximum(normal[:, 1], 0.3)
    thick = np.maximum((lo[:, len(U) // 2] - uo[:, len(U) // 2]) / 2, 0.1 * hw)
    scalars = np.stack([centre[:, 0], centre[:, 1], axis[:, 0], axis[:, 1], hw, nose, bottom, thick], 1)
    colours = np.tile(np.array([*WARM_TEETH, 150.0, 80.0, 80.0, 0.0], np.float32), (n, 1))
    if crops is not None and n:
        colours[:] = _mouth_colours(crops, lm)
    return RigGeometry(scalars.astype(np.float32), contours.astype(np.float32), colours)


def _mouth_colours(crops, lm: np.ndarray) -> np.ndarray:
    """Teeth RGB, lip RGB and whether the photo shows teeth, from up to 8 frames spread over the clip."""
    import cv2

    n = len(lm)
    teeth_px, lip_px = [], []
    for i in np.unique(np.linspace(0, n - 1, min(n, 8)).round().astype(int)):
        img = np.asarray(crops[i])
        inner = np.zeros(img.shape[:2], np.uint8)
        ring: np.ndarray = np.zeros(img.shape[:2], np.uint8)
        inner_poly = np.concatenate([lm[i, list(UPPER_INNER)], lm[i, list(LOWER_INNER)][::-1]])
        outer_poly = np.concatenate([lm[i, list(UPPER_OUTER)], lm[i, list(LOWER_OUTER)][::-1]])
        cv2.fillPoly(inner, [np.round(inner_poly).astype(np.int32)], 1)
        cv2.fillPoly(ring, [np.round(outer_poly).astype(np.int32)], 1)
        ring[inner > 0] = 0
        ring = cv2.erode(ring, np.ones((2, 2), np.uint8))
        px = img[inner > 0].astype(np.float32)
        if len(px):
            lum = px.mean(1)
            sat = px.max(1) - px.min(1)
            lip_lum = float(np.median(img[ring > 0].mean(1))) if (ring > 0).any() else 128.0
            teeth_px.append(px[(lum > max(120.0, lip_lum + 25)) & (sat < 0.35 * lum)])
        lip_px.append(img[ring > 0].astype(np.float32))
    teeth = np.concatenate(teeth_px) if teeth_px else np.zeros((0, 3), np.float32)
    lips = np.concatenate(lip_px) if lip_px else np.zeros((0, 3), np.float32)
    lip = np.median(lips, 0) if len(lips) >= 10 else np.array([150.0, 80.0, 80.0])
    own = float(np.clip((len(teeth) / max(1, len(teeth_px)) - 8) / 24, 0, 1))  # bright pixels per frame
    colour = np.median(teeth, 0) if len(teeth) >= 8 else np.array(WARM_TEETH)
    # never a cold (blue-grey) tint: green and blue no higher than red
    colour = colour.copy()
    colour[1] = min(colour[1], colour[0])
    colour[2] = min(colour[2], colour[0] * 0.97)
    colour = own * colour + (1 - own) * np.array(WARM_TEETH)
    return np.array([*colour, *lip, own], np.float32)


# --------------------------------------------------------------------------------------------
# The warp and the interior


def warp_mouth(crops, scalars: np.ndarray, contours: np.ndarray, colours: np.ndarray, params: np.ndarray, device):
    """Faces ``uint8 [B,256,256,3]`` from ``crops`` (uint8, same shape) and per-sample rig rows and
    controls ``params [B,5]`` (open, width, close, teeth, tuck)."""
    import torch
    import torch.nn.functional as F

    S = FACE_SIZE
    dev = device
    t = lambda a: torch.as_tensor(np.ascontiguousarray(a, np.float32), device=dev)  # noqa: E731
    sc, ct, col, p = t(scalars), t(contours), t(colours), t(params)
    tables = _targets(sc, ct, p, col[:, 6:7])  # [B, 12, K]
    cx, cy, ax, ay, hw, nose, bottom, thick = (sc[:, k] for k in range(N_SCALARS))
    src = crops.to(dev)
    out = src.clone()
    srcf = src.permute(0, 3, 1, 2).float()

    # 1. the lips layer: the warp, over the region it can touch (from the nose down, over the
    #    mouth and the jaw; the rest of the crop is the crop)
    reach = float((hw * 2.9).max())
    x0 = int(max(0, np.floor(float((cx - reach).min()))))
    x1 = int(min(S, np.ceil(float((cx + reach).max()))))
    y0 = int(max(0, np.floor(float((cy + nose * 1.15).min()) - 2)))
    y1 = S
    if x1 - x0 < 2 or y1 - y0 < 2:
        return out
    win = _Window(sc, p, tables, y0, y1, x0, x1, dev)
    vt, us = win.vt, win.us
    s_uo, s_ui, s_li, s_lo, s_jaw, d_uo, d_ui, d_li, d_lo, d_jaw = win.look(range(10))
    t_uo, t_ui, t_li, t_lo, t_jaw = s_uo + d_uo, s_ui + d_ui, s_li + d_li, s_lo + d_lo, s_jaw + d_jaw
    v4 = win.v4
    top, bot = v4(nose), v4(bottom)
    # vertical: piecewise linear target segment -> source segment, per column
    vs = vt.expand_as(t_uo).clone()
    segs = (
        (top, t_uo, top, s_uo),
        (t_uo, t_ui, s_uo, s_ui),
        (t_li, t_lo, s_li, s_lo),
        (t_lo, t_jaw, s_lo, s_jaw),
        (t_jaw, bot, s_jaw, bot),
    )
    for ta, tb, sa, sb in segs:
        inside = (vt >= ta) & (vt < tb)
        k = (sb - sa) / (tb - ta).clamp(min=1e-3)
        vs = torch.where(inside, sa + (vt - ta) * k, vs)
    # the gap: stretched from the photo's gap while it opens (the interior covers it); while lips
    # close over a wider gap of the photo they meet, each lip's edge taken to the middle
    in_gap = (vt >= t_ui) & (vt < t_li)
    stretched = s_ui + (vt - t_ui) * (s_li - s_ui) / (t_li - t_ui).clamp(min=1e-3)
    edges = torch.where(vt < (t_ui + t_li) / 2, s_ui - 0.5, s_li + 0.5)
    closing = (t_li - t_ui) < (s_li - s_ui) - 0.5
    vs = torch.where(in_gap, torch.where(closing, edges, stretched), vs)
    lips = F.grid_sample(srcf, win.grid(us, vs), mode="bilinear", padding_mode="border", align_corners=False)
    out[:, y0:y1, x0:x1] = lips.round().clamp_(0, 255).to(torch.uint8).permute(0, 2, 3, 1)

    # 2. the interior, over the window of the gap between the inner lips
    gap_t = tables[:, 2] + tables[:, 7] - tables[:, 1] - tables[:, 6]  # target gap at U
    src_gap = tables[:, 2] - tables[:, 1]
    live = (gap_t > 0.2) | (src_gap > 0.2)
    if not bool(live.any()):
        return out
    v_top = float(torch.where(live, tables[:, 1] + tables[:, 6], torch.inf).min()) - 2
    v_bot = float(torch.where(live, tables[:, 2] + tables[:, 7], -torch.inf).max()) + 2
    corners = [(sgn * 1.25, v) for sgn in (-1, 1) for v in (v_top, v_bot)]
    xs_ = [float((cx + uu * ax * hw - v * ay).min()) for uu, v in corners] + [
        float((cx + uu * ax * hw - v * ay).max()) for uu, v in corners
    ]
    ys_ = [float((cy + uu * ay * hw + v * ax).min()) for uu, v in corners] + [
        float((cy + uu * ay * hw + v * ax).max()) for uu, v in corners
    ]
    ix0, ix1 = max(x0, int(np.floor(min(xs_)))), min(x1, int(np.ceil(max(xs_))))
    iy0, iy1 = max(y0, int(np.floor(min(ys_)))), min(y1, int(np.ceil(max(ys_))))
    if ix1 - ix0 < 1 or iy1 - iy0 < 1:
        return out
    w2 = _Window(sc, p, tables, iy0, iy1, ix0, ix1, dev)
    inner, a_in = _interior(w2, col, srcf)
    lips2 = out[:, iy0:iy1, ix0:ix1].permute(0, 3, 1, 2).float()
    region = lips2 + a_in.unsqueeze(1) * (inner - lips2)
    out[:, iy0:iy1, ix0:ix1] = region.round_().clamp_(0, 255).to(torch.uint8).permute(0, 2, 3, 1)
    return out


class _Window:
    """Pixel centres of a crop window in each sample's mouth coordinates (``vt`` pixels down the
    face, ``us`` along the mouth in the source, after undoing the spread / round scaling)."""

    def __init__(self, sc, p, tables, y0, y1, x0, x1, dev):
        import torch

        B = sc.shape[0]
        self.B, self.tables, self.sc = B, tables, sc
        cx, cy, ax, ay, hw, nose, _, thick = (sc[:, k] for k in range(N_SCALARS))
        v4 = self.v4
        ys = torch.arange(y0, y1, device=dev, dtype=torch.float32).view(1, -1, 1) + 0.5
        xs = torch.arange(x0, x1, device=dev, dtype=torch.float32).view(1, 1, -1) + 0.5
        dx, dy = xs - v4(cx), ys - v4(cy)
        ut = (dx * v4(ax) + dy * v4(ay)) / v4(hw)
        self.vt = dx * -v4(ay) + dy * v4(ax)
        # horizontal: spread / round scale u near the lips, fading over the cheeks and off the lip band
        w = p[:, 1]
        s_minus_1 = torch.where(w > 0, 0.10 * w, 0.20 * w)
        # (nothing moves from the nose up: outside its own window a sample is exactly the crop, so a
        # face does not depend on the window its batch neighbours need)
        band = torch.exp(-((self.vt / (1.8 * v4(thick))) ** 2)) * ((self.vt - v4(nose)) / (-0.5 * v4(nose))).clamp(0, 1)
        us = ut
        for _ in range(2):
            au = us.abs()
            du = v4(s_minus_1) * torch.sign(us) * torch.minimum(au, ((2.2 - au) / 1.2).clamp(min=0))
            us = ut - du * band
        self.us = us
        self._cache = None

    def v4(self, a):
        return a.view(self.B, 1, 1)

    def look(self, rows):
        """The tables' rows ``rows`` at each pixel's ``us``."""
        rows = list(rows)
        return list(_lookup(self.tables[:, rows], self.us).unbind(1))

    def grid(self, us, vs):
        """``grid_sample`` coordinates of source points (us, vs)."""
        import torch

        cx, cy, ax, ay, hw = (self.v4(self.sc[:, k]) for k in range(5))
        S = FACE_SIZE
        sx = cx + us * hw * ax - vs * ay
        sy = cy + us * hw * ay + vs * ax
        return torch.stack([sx / S * 2 - 1, sy / S * 2 - 1], -1)


def _interior(w: _Window, col, srcf):
    """Colour ``[B,3,h,w]`` and alpha ``[B,h,w]`` of the mouth interior over window ``w``."""
    import torch
    import torch.nn.functional as F

    B = w.B
    v4 = w.v4
    dev = w.vt.device
    vt, us = w.vt, w.us
    s_ui, s_li, d_ui, d_li, h_up, h_low = w.look((1, 2, 6, 7, 10, 11))
    t_ui, t_li = s_ui + d_ui, s_li + d_li
    hw = w.sc[:, 4]
    gap = (t_li - t_ui).clamp(min=0)
    depth = vt - t_ui
    depth_l = t_li - vt
    # soft edges over 2 px along the inner lips, exactly 0 outside (so the window's size never
    # shows, and a face does not depend on the window its batch neighbours need)
    a_in = _smoothstep(depth * 0.5 + 0.5) * _smoothstep(depth_l * 0.5 + 0.5) * (gap / 1.5).clamp(0, 1)
    frac = (depth / gap.clamp(min=0.5)).clamp(0, 1)
    au = us.abs()
    teeth_c = col[:, 0:3].view(B, 3, 1, 1)
    lip_c = col[:, 3:6].view(B, 3, 1, 1)
    lateral = 1 - (au / 1.05).clamp(max=1) ** 2  # 1 in the middle, 0 at the corners
    bump = torch.sin(np.pi * frac) * lateral
    warm = torch.tensor([1.12, 0.82, 0.84], device=dev).view(1, 3, 1, 1)
    cavity = lip_c * warm * (0.23 - 0.15 * bump - 0.07 * (1 - lateral)).unsqueeze(1) + 2.0
    # tongue: low in a wide-open mouth, shaded darker towards the back
    hw4 = v4(hw)
    tongue_on = ((gap - 0.25 * hw4) / (0.12 * hw4)).clamp(0, 1)
    tv = (vt - (t_li - 0.16 * gap)) / (0.17 * gap).clamp(min=0.5)
    tongue_a = torch.sigmoid((1 - torch.sqrt(tv**2 + (us / 0.45) ** 2)) / 0.2) * tongue_on
    tongue_c = lip_c * warm * (0.36 + 0.2 * (tv.clamp(-1, 1) * 0.5 + 0.5)).unsqueeze(1)
    inner = cavity + (tongue_c - cavity) * tongue_a.unsqueeze(1) * 0.8
    # lower teeth: a row rising from the lower lip, in shadow
    low_a = torch.sigmoid((h_low - depth_l) / 0.7) * (h_low > 0.3)
    low_shade = (0.55 + 0.2 * (depth_l / h_low.clamp(min=0.5)).clamp(0, 1)) * (1 - 0.45 * (au / 0.9).clamp(max=1) ** 2)
    low_c = (0.75 * teeth_c + 0.25 * lip_c) * low_shade.unsqueeze(1)
    inner = inner + (low_c - inner) * low_a.unsqueeze(1)
    # upper teeth: hang from the upper lip, shadowed just under it, darker towards the corners
    up_a = torch.sigmoid((h_up - depth) / 0.7) * (h_up > 0.3)
    under_lip = 0.72 + 0.28 * _smoothstep(depth / (0.45 * h_up).clamp(min=0.5))
    # tooth edges: incisors widest, the rest narrowing round the arch (u of each boundary)
    seams = torch.ones_like(us)
    for edge, depth_k in ((0.0, 0.05), (0.23, 0.035), (0.40, 0.03), (0.54, 0.03), (0.65, 0.025)):
        seams = seams - depth_k * torch.exp(-(((au - edge) / 0.022) ** 2))
    up_shade = under_lip * seams * (1 - 0.5 * (au / 0.95).clamp(max=1) ** 2)
    inner = inner + (teeth_c * up_shade.unsqueeze(1) - inner) * up_a.unsqueeze(1)
    # the photo's own gap (teeth, or the dark line between closed lips): its upper part stays with
    # the upper lip, its lower part goes down with the jaw; at rest the two weights add up to 1
    g_src = (s_li - s_ui).clamp(min=0)
    grid = torch.cat([w.grid(us, s_ui + depth), w.grid(us, s_li - depth_l)], 1)
    real2 = F.grid_sample(srcf, grid, mode="bilinear", padding_mode="border", align_corners=False)
    h = vt.shape[1]
    real_up, real_lo = real2[:, :, :h], real2[:, :, h:]
    w_up = torch.sigmoid((0.6 * g_src - depth) / 0.6)
    w_lo = torch.sigmoid((0.4 * g_src - depth_l) / 0.6)
    cover = (w_up + w_lo).clamp(max=1)
    real = (real_up * w_up.unsqueeze(1) + real_lo * w_lo.unsqueeze(1)) / (w_up + w_lo).clamp(min=1e-4).unsqueeze(1)
    inner = inner + (real - inner) * cover.unsqueeze(1)
    # lips closing over the photo's gap meet in a soft darker line
    seam = lip_c * 0.55
    closing_f = (g_src - gap).clamp(0, 2) / 2
    inner = inner + (seam - inner) * (closing_f * (1 - (gap / 2.0).clamp(0, 1))).unsqueeze(1)
    return inner, a_in


def _targets(sc, ct, p, own):
    """Per sample and ``U``: source contours and their displacements, and teeth heights: ``[B,12,K]``
    (s_uo, s_ui, s_li, s_lo, s_jaw, d_uo, d_ui, d_li, d_lo, d_jaw, h_up, h_low)."""
    import torch

    dev = ct.device
    u = torch.as_tensor(U, device=dev).view(1, -1)
    hw = sc[:, 4:5]
    bottom = sc[:, 6:7]
    thick = sc[:, 7:8]
    s_uo, s_ui, s_li, s_lo, s_jaw = (ct[:, k] for k in range(N_CONTOURS))
    o, w, c, te, tu = (p[:, k : k + 1] for k in range(5))
    rnd = (-w).clamp(min=0)
    spr = w.clamp(min=0)
    g = (s_li - s_ui).clamp(min=0)
    # the target gap across the mouth: a rounder, narrower opening when the lips round
    reach = 0.86 - 0.30 * rnd + 0.06 * spr
    power = 0.55 + 0.6 * rnd - 0.2 * spr
    prof = (1 - (u.abs() / reach).clamp(max=1) ** 2).clamp(min=0) ** power
    M = MAX_OPEN * hw
    gap = g + (o * M + te * 0.10 * M) * prof
    gap = gap * (1 - c)
    # /f/ /v/: the lower lip comes up to the upper teeth
    teeth_rest = 0.14 * hw * prof
    gap = gap + (teeth_rest + 0.06 * M * prof - gap) * tu
    dg = gap - g
    opening = dg > 0
    d_ui = torch.where(opening, -0.22 * dg, -0.5 * dg) - tu * 0.06 * M * prof
    d_li = d_ui + dg  # keeps the gap exact: t_li - t_ui = gap
    d_uo = torch.where(opening, 0.55 * d_ui, 0.25 * d_ui) - rnd * 0.18 * thick * prof
    d_lo = torch.where(opening, 0.92 * d_li, 0.45 * d_li) + rnd * 0.18 * thick * prof
    # the jaw follows the lower lip's drop at the middle of the mouth, broadly, limited by the room below the chin
    centre = d_li[:, U.size // 2 : U.size // 2 + 1]
    jaw_prof = (1 - (u / 2.6) ** 2).clamp(min=0) ** 2
    room = (bottom - s_jaw).clamp(min=0)
    d_jaw = torch.minimum(0.6 * centre.clamp(min=0) * jaw_prof, 0.5 * room)
    # teeth: the upper row shows more as the upper lip lifts and the mouth opens; the lower row a little
    arch = (1 - (u.abs() / 0.82).clamp(max=1) ** 2).clamp(min=0) ** 0.4
    h_up = torch.minimum(0.07 * hw + (-d_ui).clamp(min=0) + 0.18 * gap, 0.55 * gap) * arch
    h_low = torch.minimum(0.02 * hw + 0.08 * gap, 0.18 * gap) * arch * (1 - tu)
    fill = torch.maximum(tu, 0.8 * te)  # fricatives: teeth fill the small gap
    h_up = h_up + (0.6 * gap * arch - h_up) * fill
    # a photo with teeth: its own upper row (it moves with the upper lip) is the row, no longer
    h_up = h_up + (torch.minimum(h_up, 0.6 * g) - h_up) * own
    h_low = h_low + (0.4 * gap * arch - h_low) * te * 0.8
    return torch.stack([s_uo, s_ui, s_li, s_lo, s_jaw, d_uo, d_ui, d_li, d_lo, d_jaw, h_up, h_low], 1)


def _lookup(tables, u):
    """Linear interpolation of ``tables [B,C,K]`` (sampled at ``U``) at positions ``u [B,H,W]`` -> ``[B,C,H,W]``."""
    import torch

    B, C, K = tables.shape
    pos = ((u - float(U[0])) / float(U[1] - U[0])).clamp(0, K - 1.001)
    i0 = pos.floor().long()
    frac = (pos - i0).unsqueeze(1)
    flat = i0.view(B, 1, -1).expand(B, C, -1)
    a = torch.gather(tables, 2, flat)
    b = torch.gather(tables, 2, (flat + 1).clamp(max=K - 1))
    shape = (B, C) + tuple(u.shape[1:])
    return (a + (b - a) * frac.view(B, 1, -1)).view(shape)


def _smoothstep(x):
    x = x.clamp(0, 1)
    return x * x * (3 - 2 * x)

"""A frozen copy of the classic engine before issue 17, for before/after figures and pictures
(tests/benchmarks/bench_classic.py); not used by Studio itself.

The classic engine: a weights-free, audio-driven 2D mouth rig on the face-mesh landmarks.

Per video frame the audio gives three controls (``mouth_controls``):

- **open** 0..1 from the speech envelope (frame energy in dB relative to the clip's speech level,
  smoothed with a fast attack and a slower release, so syllables open and close the jaw);
- **width** -1..1 from the spectrum: the voiced-band spectral centroid, normalised over the clip
  (high F2 vowels such as /i/ /e/ spread the lips, low ones such as /o/ /u/ round them);
- **teeth** 0..1 from the fricative ratio (energy above 3.5 kHz against the voiced band: /s/ /f/
  /t/ show the teeth with a small opening).

The rig works in the avatar's 256x256 face-crop coordinates. From each frame's landmarks it takes
the mouth centre, its axis (corner to corner), the lip thicknesses and the chin. It then builds a
smooth displacement field: the lower lip and chin drop with the jaw (rigid across the jaw, lens
shaped at the lips, fading to nothing at the crop's bottom edge), the upper lip lifts a little,
and the corners move out (spread) or in (round). The field is inverted by fixed-point iteration
and applied with ``grid_sample``. The gap between the lips becomes a mouth cavity: a dark throat
gradient, an upper-teeth band, lower teeth on fricatives and a tongue when wide open, all with
anti-aliased edges. The compositor's feathered mask blends the result into the frame.

The maths is per-pixel and per-sample (no cross-sample reductions), so a frame comes out the same
whether it is generated alone (scrubbing) or inside a batch (rendering).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from studio.core.constants import FACE_SIZE, SAMPLE_RATE, SAMPLES_PER_FRAME
from studio.core.devices import to_device
from studio.core.engines.base import LipSyncEngine

log = logging.getLogger(__name__)

# face-mesh landmark indices (MediaPipe 468/478 topology)
LIP_CORNER_L, LIP_CORNER_R = 61, 291
INNER_UPPER, INNER_LOWER = 13, 14
OUTER_UPPER, OUTER_LOWER = 0, 17
CHIN = 152
NOSE_TIP = 1

INNER_LOWER_LIP = (78, 95, 88, 178, 87, 14, 317, 402, 318, 324, 308)  # left corner -> right corner
SPLIT_U = np.linspace(-1.3, 1.3, 27).astype(np.float32)  # mouth-axis positions (1 = a corner)

HOP = 160  # 10 ms analysis hop: 4 hops per video frame
WIN = 512


@dataclass(frozen=True, eq=False)
class MouthControls:
    """Per-frame rig controls for one clip: ``open``, ``width``, ``teeth``, each ``[T]`` float32."""

    open: np.ndarray
    width: np.ndarray
    teeth: np.ndarray

    def __len__(self) -> int:
        return len(self.open)


@dataclass(frozen=True, eq=False)
class RigGeometry:
    """Per avatar frame: mouth frame of reference in crop pixels (``[N, ...]`` float32)."""

    centre: np.ndarray  # [N,2]
    axis: np.ndarray  # [N,2] unit vector from the left to the right corner
    half_width: np.ndarray  # [N]
    upper: np.ndarray  # [N] upper lip thickness
    lower: np.ndarray  # [N] lower lip thickness
    chin: np.ndarray  # [N] distance from the mouth centre to the chin along the normal
    gap: np.ndarray  # [N] existing opening between the inner lips
    split: np.ndarray  # [N,K] the lower lip's inner edge (normal offset) sampled at SPLIT_U


@dataclass(frozen=True, eq=False)
class ClassicPrepared:
    crops: object  # torch uint8 [N,256,256,3] on the engine device (or a numpy memmap on CPU)
    rig: RigGeometry


class ClassicEngine(LipSyncEngine):
    name = "classic"
    label = "Classic mouth rig (weights-free)"

    def __init__(self, device: str | None = None, strength: float = 1.0, **_ignored):
        import torch

        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        super().__init__(device)
        self.strength = float(strength)

    def preferred_batch(self) -> int:
        return 64 if self.device.type == "cuda" else 8

    def prepare(self, avatar) -> ClassicPrepared:
        import torch

        crops = avatar.crops
        if self.device.type == "cuda":
            crops = torch.from_numpy(np.ascontiguousarray(crops)).to(self.device)
        return ClassicPrepared(crops=crops, rig=rig_geometry(np.asarray(avatar.crop_landmarks, np.float32)))

    def audio_features(self, wave) -> MouthControls:
        return mouth_controls(wave.samples, wave.frames)

    def generate(self, prepared: ClassicPrepared, avatar_idx, feat_idx):
        import torch

        avatar_idx = np.asarray(avatar_idx, np.int64)
        feat_idx = np.asarray(feat_idx, np.int64)
        ctl: MouthControls = self.features
        params = np.stack(
            [ctl.open[feat_idx] * self.strength, ctl.width[feat_idx] * self.strength, ctl.teeth[feat_idx]], 1
        ).astype(np.float32)
        if self.device.type == "cuda":
            crops = prepared.crops[to_device(avatar_idx, self.device)]
            return warp_mouth(crops, _rig_rows(prepared.rig, avatar_idx), params, self.device)
        # CPU: one sample at a time, so a face never depends on its batch neighbours
        outs = []
        for j, i in enumerate(avatar_idx):
            crop = torch.from_numpy(np.array(prepared.crops[i : i + 1]))
            outs.append(
                warp_mouth(crop, _rig_rows(prepared.rig, avatar_idx[j : j + 1]), params[j : j + 1], self.device)
            )
        return torch.cat(outs, 0)


# --------------------------------------------------------------------------------------------
# Audio -> controls


def mouth_controls(samples: np.ndarray, frames: int, attack: float = 0.75, release: float = 0.45) -> MouthControls:
    """Per-frame open/width/teeth controls from 16 kHz mono samples (see the module docstring)."""
    n = frames * SAMPLES_PER_FRAME
    x = np.zeros(n + WIN, np.float32)
    take = min(n, len(samples))
    x[WIN // 2 : WIN // 2 + take] = samples[:take]
    hops = frames * (SAMPLES_PER_FRAME // HOP)
    if frames == 0:
        z = np.zeros(0, np.float32)
        return MouthControls(z, z, z)
    # frame the signal in blocks of hops to bound memory on long clips
    window = np.hanning(WIN).astype(np.float32)
    freqs = np.fft.rfftfreq(WIN, 1 / SAMPLE_RATE)
    voiced = (freqs >= 150) & (freqs < 3500)
    fric = freqs >= 3500
    energy = np.zeros(hops, np.float32)
    centroid = np.zeros(hops, np.float32)
    fric_ratio = np.zeros(hops, np.float32)
    step = 4096
    for a in range(0, hops, step):
        b = min(hops, a + step)
        idx = (np.arange(a, b) * HOP)[:, None] + np.arange(WIN)[None, :]
        spec = np.abs(np.fft.rfft(x[idx] * window, axis=1)) ** 2
        ev = spec[:, voiced].sum(1) + 1e-12
        ef = spec[:, fric].sum(1) + 1e-12
        energy[a:b] = (ev + ef) / WIN
        centroid[a:b] = (spec[:, voiced] * freqs[voiced]).sum(1) / ev
        fric_ratio[a:b] = ef / (ev + ef)
    per = SAMPLES_PER_FRAME // HOP
    energy_f = energy.reshape(frames, per).mean(1)
    db = 10 * np.log10(energy_f + 1e-10)
    loud = db[db > db.max() - 45] if np.isfinite(db).any() else db
    peak = float(np.percentile(loud, 90)) if len(loud) else 0.0
    floor = peak - 28.0
    open_raw = np.clip((db - floor) / (peak - floor), 0.0, 1.0) ** 1.4
    weights = energy.reshape(frames, per) + 1e-12
    cent_f = (centroid.reshape(frames, per) * weights).sum(1) / weights.sum(1)
    fric_f = (fric_ratio.reshape(frames, per) * weights).sum(1) / weights.sum(1)
    voiced_frames = open_raw > 0.15
    if voiced_frames.sum() >= 3:
        mu, sd = float(np.median(cent_f[voiced_frames])), float(cent_f[voiced_frames].std() + 1e-6)
    else:
        mu, sd = 1200.0, 400.0
    width_raw = np.tanh((cent_f - mu) / (1.5 * sd)) * np.clip(open_raw * 2, 0, 1)
    teeth_raw = np.clip((fric_f - 0.35) / 0.4, 0, 1) * (db > floor)
    # fricatives open the mouth only a little
    open_raw = open_raw * (1 - 0.6 * teeth_raw)
    return MouthControls(
        open=_attack_release(open_raw, attack, release),
        width=_attack_release(width_raw, 0.6, 0.6),
        teeth=_attack_release(teeth_raw, 0.7, 0.5),
    )


def _attack_release(x: np.ndarray, attack: float, release: float) -> np.ndarray:
    """One-pole smoothing that rises with ``attack`` and falls with ``release`` (0..1 per frame)."""
    out = np.empty(len(x), np.float32)
    y = 0.0
    for i, v in enumerate(x.astype(np.float64)):
        k = attack if v > y else release
        y = y + k * (v - y)
        out[i] = y
    return out


# --------------------------------------------------------------------------------------------
# Geometry and the warp


def rig_geometry(crop_landmarks: np.ndarray) -> RigGeometry:
    lm = crop_landmarks.astype(np.float32)
    left, right = lm[:, LIP_CORNER_L], lm[:, LIP_CORNER_R]
    axis = right - left
    width = np.linalg.norm(axis, axis=1) + 1e-6
    axis = axis / width[:, None]
    normal = np.stack([-axis[:, 1], axis[:, 0]], 1)  # points down the face
    centre = (lm[:, INNER_UPPER] + lm[:, INNER_LOWER]) / 2

    def along(a, b):
        return np.abs(((b - a) * normal).sum(1))

    half = width / 2
    pts = lm[:, INNER_LOWER_LIP] - centre[:, None, :]
    pu = (pts * axis[:, None, :]).sum(2) / half[:, None]
    pv = (pts * normal[:, None, :]).sum(2)
    split = np.stack([np.interp(SPLIT_U, pu[i][np.argsort(pu[i])], pv[i][np.argsort(pu[i])]) for i in range(len(lm))])
    return RigGeometry(
        centre=centre,
        axis=axis,
        half_width=width / 2,
        upper=np.maximum(along(lm[:, OUTER_UPPER], lm[:, INNER_UPPER]), 0.04 * width),
        lower=np.maximum(along(lm[:, INNER_LOWER], lm[:, OUTER_LOWER]), 0.05 * width),
        chin=np.maximum(((lm[:, CHIN] - centre) * normal).sum(1), 0.3 * width),
        gap=((lm[:, INNER_LOWER] - lm[:, INNER_UPPER]) * normal).sum(1).clip(0, None),
        split=split.astype(np.float32),
    )


def _rig_rows(rig: RigGeometry, idx: np.ndarray) -> np.ndarray:
    """Pack frames ``idx`` into ``[B,9+K]``: cx, cy, ax, ay, hw, up, lo, chin, gap, split[K]."""
    scalars = np.stack([rig.half_width[idx], rig.upper[idx], rig.lower[idx], rig.chin[idx], rig.gap[idx]], 1)
    return np.concatenate([rig.centre[idx], rig.axis[idx], scalars, rig.split[idx]], 1).astype(np.float32)


def _lookup(table, u):
    """Linear interpolation of per-sample ``table [B,K]`` (sampled at SPLIT_U) at positions ``u [B,H,W]``."""
    import torch

    K = table.shape[1]
    pos = ((u - float(SPLIT_U[0])) / float(SPLIT_U[1] - SPLIT_U[0])).clamp(0, K - 1.001)
    i0 = pos.floor().long()
    frac = pos - i0
    flat = i0.view(u.shape[0], -1)
    a = torch.gather(table, 1, flat).view_as(u)
    b = torch.gather(table, 1, (flat + 1).clamp(max=K - 1)).view_as(u)
    return a + (b - a) * frac


INNER = 0.8  # the opening spans 80 % of the corner-to-corner width (corners stay put)


def _smoothstep(x):
    x = x.clamp(0, 1)
    return x * x * (3 - 2 * x)


_TEETH = (232.0, 226.0, 214.0)
_THROAT = (34.0, 12.0, 13.0)
_TONGUE = (150.0, 62.0, 68.0)


def warp_mouth(crops, rig: np.ndarray, params: np.ndarray, device):
    """Apply the rig to ``crops`` (uint8 ``[B,256,256,3]``). ``params`` is ``[B,3]`` open/width/teeth."""
    import torch
    import torch.nn.functional as F

    B = crops.shape[0]
    S = FACE_SIZE
    r = to_device(rig, device)
    p = to_device(params, device)
    cx, cy, ax, ay, hw, up, lo, chin, gap = (r[:, k].view(B, 1, 1) for k in range(9))
    split_table = r[:, 9:].contiguous()
    o, w, th = (p[:, k].view(B, 1, 1) for k in range(3))

    ys, xs = torch.meshgrid(
        torch.arange(S, device=device, dtype=torch.float32),
        torch.arange(S, device=device, dtype=torch.float32),
        indexing="ij",
    )
    xs = xs.expand(B, S, S) + 0.5
    ys = ys.expand(B, S, S) + 0.5
    nx, ny = -ay, ax  # the normal, pointing down the face

    opening = o * 0.48 * hw  # max opening ~0.24 of the mouth width: speech, not a yawn
    drop = opening * 0.8  # lower lip and jaw
    lift = opening * 0.2  # upper lip (with any teeth the source already shows)
    spread = torch.where(w > 0, 0.10, 0.16) * w * hw  # corners out (spread) or in (round)
    bottom = S - cy  # distance from the mouth centre down to the crop's bottom edge (approx.)
    pexp = 0.8 - 0.3 * (-w).clamp(min=0)  # rounder opening when the lips round
    # the lower lip's inner edge (a curve: smiles bend it): below it moves with the jaw, above with the upper lip

    def displacement(px, py):
        dx, dy = px - cx, py - cy
        u = (dx * ax + dy * ay) / hw
        v = dx * nx + dy * ny - _lookup(split_table, u)
        au = u.abs()
        lens = (1 - (au / INNER).clamp(max=1) ** 2).clamp(min=0) ** pexp
        jaw_u = torch.exp(-(((au - 0.9).clamp(min=0) / 0.9) ** 2))
        t_lip = _smoothstep(v / (lo * 2.0))
        jaw = jaw_u * 0.85 * _smoothstep(v / (chin * 0.7))
        prof = lens * (1 - t_lip) + torch.maximum(jaw, lens * 0.85) * t_lip
        fade = (1 - ((v - chin * 0.6) / (bottom - chin * 0.6).clamp(min=4)).clamp(0, 1)) ** 1.5
        d_low = drop * prof * fade * (v > 0)
        d_up = -lift * lens * torch.exp(-((v / ((up + gap) * 1.8)) ** 2)) * (v <= 0)
        dv = d_low + d_up
        side = torch.exp(-((v / (hw * 0.7)) ** 2)) * torch.exp(-(((au - 1.0).clamp(min=0) / 0.6) ** 2))
        du = spread * u.clamp(-1.2, 1.2) * side
        return du * ax + dv * nx, du * ay + dv * ny

    # invert the forward field: find p with p + D(p) = q
    px, py = xs, ys
    for _ in range(4):
        ddx, ddy = displacement(px, py)
        px, py = xs - ddx, ys - ddy
    grid = torch.stack([px / S * 2 - 1, py / S * 2 - 1], -1)
    src = crops.permute(0, 3, 1, 2).float()
    warped = F.grid_sample(src, grid, mode="bilinear", padding_mode="border", align_corners=False)

    # the cavity opened between the split line and the dropped lower lip, in output coordinates
    dx, dy = xs - cx, ys - cy
    u = (dx * ax + dy * ay) / (hw * (1 + spread / hw * 0.9))
    v = dx * nx + dy * ny - _lookup(split_table, u)
    au = u.abs()
    inner = INNER
    lens_c = (1 - (au / inner).clamp(max=1) ** 2).clamp(min=0) ** pexp
    top = -lift * lens_c
    low = drop * lens_c
    aa = 0.9  # anti-aliasing width in pixels
    inside = torch.sigmoid((v - top) / aa) * torch.sigmoid((low - v) / aa) * (au < inner) * (opening > 0.6)
    depth = ((v - top) / (low - top).clamp(min=1)).clamp(0, 1)
    throat = torch.tensor(_THROAT, device=device).view(1, 3, 1, 1)
    teeth_c = torch.tensor(_TEETH, device=device).view(1, 3, 1, 1)
    tongue_c = torch.tensor(_TONGUE, device=device).view(1, 3, 1, 1)
    shade = (1 - 0.55 * au.clamp(max=1) ** 2).unsqueeze(1)
    mouth = throat * (0.7 + 0.3 * shade)
    tongue_w = (torch.sigmoid((depth - 0.72) / 0.06) * (o > 0.45) * (1 - au / inner).clamp(0, 1) ** 0.5).unsqueeze(1)
    mouth = mouth + (tongue_c * shade - mouth) * tongue_w * 0.8
    # synthesise upper teeth only where the source shows none (a closed-mouth portrait)
    own_teeth = (gap / (0.12 * hw)).clamp(0, 1)
    band = torch.minimum(opening * 0.4, 0.25 * hw) * lens_c**0.35 * (1 - own_teeth)
    gaps = 0.85 + 0.15 * torch.cos(u * np.pi * 4.5).abs() ** 0.2
    upper_teeth = (torch.sigmoid((top + band - v) / aa) * (band > 0.5)).unsqueeze(1)
    lower_band = torch.minimum(opening * 0.35, 0.2 * hw) * lens_c**0.35 * th
    lower_teeth = (torch.sigmoid((v - (low - lower_band)) / aa) * (th > 0.05)).unsqueeze(1)
    teeth_shaded = teeth_c * (shade * 0.85 + 0.15) * gaps.unsqueeze(1)
    mouth = mouth + (teeth_shaded - mouth) * torch.clamp(upper_teeth + lower_teeth, max=1)
    a = inside.unsqueeze(1)
    out = warped + a * (mouth - warped)
    return out.round_().clamp_(0, 255).to(torch.uint8).permute(0, 2, 3, 1).contiguous()

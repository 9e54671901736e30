"""The classic engine: a weights-free, audio-driven mouth rig on the face-mesh landmarks.

Two parts, each in its own module:

- ``classic_visemes``: the voice-over -> per-frame mouth controls (``open``, ``width`` spread /
  rounded, ``close`` for /p/ /b/ /m/, ``teeth`` for /s/, ``tuck`` for /f/ /v/), from band levels
  and LPC formants, normalised over the clip and smoothed without lag;
- ``classic_mouth``: the controls -> a face: a structured mesh warp of the real lip and jaw
  pixels between the face mesh's lip contours, and a rendered mouth interior (cavity, teeth,
  tongue) coloured from the avatar itself.

Silent frames never reach the engine (the renderer uses the avatar frame, bit for bit), and a
frame whose controls are all zero is the avatar's crop. The maths is per sample, so a face is the
same whether it is generated alone (scrubbing) or inside a batch (rendering).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from studio.core.devices import to_device
from studio.core.engines.base import LipSyncEngine
from studio.core.engines.classic_mouth import RigGeometry, rig_geometry, warp_mouth
from studio.core.engines.classic_visemes import MouthControls, mouth_controls

log = logging.getLogger(__name__)

__all__ = [
    "ClassicEngine",
    "ClassicPrepared",
    "MouthControls",
    "RigGeometry",
    "mouth_controls",
    "rig_geometry",
    "warp_mouth",
]


@dataclass(frozen=True, eq=False)
class ClassicPrepared:
    crops: Any  # torch uint8 [N,256,256,3] on the engine device (or a numpy memmap on CPU)
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
        rig = rig_geometry(np.asarray(avatar.crop_landmarks, np.float32), crops)
        if self.device.type == "cuda":
            crops = torch.from_numpy(np.ascontiguousarray(crops)).to(self.device)
        return ClassicPrepared(crops=crops, rig=rig)

    def audio_features(self, wave) -> MouthControls:
        """The clip's controls; for a wave that holds only a stretch (``wave.span``, an in/out
        range) the controls of that stretch, normalised as the whole clip is (``sampled_stats``
        for a clip over 5 minutes), zeros elsewhere."""
        from studio.core.engines.classic_visemes import HOP, STATS_HOPS, first_hop, sampled_stats
        from studio.core.media.rates import DEFAULT_RATE, first_sample

        rate = getattr(wave, "rate", DEFAULT_RATE)
        first, end = getattr(wave, "span", (0, wave.frames))
        info = getattr(wave, "info", None)
        hops = first_hop(wave.frames, rate)
        stats = sampled_stats(info) if info is not None and hops > STATS_HOPS else None
        if (first, end) == (0, wave.frames):
            return mouth_controls(wave.samples, wave.frames, stats, rate)
        if stats is None:  # a short clip read in part: its statistics from all of it, as a whole render
            assert info is not None, "a part of a clip is read from a file"
            from studio.core.engines.classic_visemes import clip_stats, features
            from studio.core.media.audio import read_frames

            whole = read_frames(info, 0, info.frames)
            stats = clip_stats(features(whole, hops))
        part = wave.samples[first_hop(first, rate) * HOP : int(first_sample(end, rate))]
        return mouth_controls(part, end - first, stats, rate, first).placed(first, wave.frames)

    def features_key(self) -> tuple:
        """The mouth controls are numpy arrays: the same for every device."""
        return (type(self).__module__, type(self).__qualname__)

    def controls(self, feat_idx, weight=None) -> np.ndarray:
        """``[B,5]`` mouth controls (open, width, close, teeth, tuck) ``generate`` uses for frames
        ``feat_idx`` of the bound clip: eased to rest by the plan's ``weight`` over speech edges, so
        the renderer's crossfade never shows a half-faded open mouth over the still one."""
        params = self.features.rows(np.asarray(feat_idx, np.int64))
        if weight is not None:
            params *= np.asarray(weight, np.float32)[:, None]
        params[:, :2] *= self.strength  # open, width
        return params

    def generate(self, prepared: ClassicPrepared, avatar_idx, feat_idx, weight=None):
        import torch

        avatar_idx = np.asarray(avatar_idx, np.int64)
        params = self.controls(feat_idx, weight)
        sc, ct, col = prepared.rig.rows(avatar_idx)
        if self.device.type == "cuda":
            crops = prepared.crops[to_device(avatar_idx, self.device)]
        else:
            crops = torch.from_numpy(np.array(prepared.crops[avatar_idx]))
        # a whole batch at once: each sample touches only its own mouth window, so a face does not
        # depend on its batch neighbours (tests/test_classic_speech.py checks it)
        return warp_mouth(crops, sc, ct, col, params, self.device)

    def generate_many(self, items) -> list:
        """Several clips' batches as one rig call (each clip's own controls, crops and geometry)."""
        import torch

        if len(items) == 1:
            prepared, features, a, f, w = items[0]
            self.bind(features)
            return [self.generate(prepared, a, f, w)]
        crops, rows, params, sizes = [], [], [], []
        for prepared, features, avatar_idx, feat_idx, weight in items:
            avatar_idx = np.asarray(avatar_idx, np.int64)
            self.bind(features)
            params.append(self.controls(feat_idx, weight))
            rows.append(prepared.rig.rows(avatar_idx))
            if self.device.type == "cuda":
                crops.append(prepared.crops[to_device(avatar_idx, self.device)])
            else:
                crops.append(torch.from_numpy(np.array(prepared.crops[avatar_idx])))
            sizes.append(len(avatar_idx))
        sc, ct, col = (np.concatenate([r[i] for r in rows]) for i in range(3))
        faces = warp_mouth(torch.cat(crops), sc, ct, col, np.concatenate(params), self.device)
        return list(torch.split(faces, sizes))

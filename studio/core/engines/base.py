"""The engine interface every lip-sync engine implements (auto-selection is ``engines.selection``).

An engine turns (avatar frame, audio frame) pairs into 256x256 faces:

    engine = select_engine("auto").engine           # engines.selection
    prepared = engine.prepare(avatar)              # per-avatar work, cached by the engine
    feats = engine.audio_features(wave)            # per-clip work, indexable by video frame
    engine.bind(feats)                             # the clip generate() indexes into
    faces = engine.generate(prepared, avatar_idx, feat_idx)   # torch uint8 [B,256,256,3] RGB

``avatar_idx`` are indices into the avatar's frames (the renderer resolves the ping-pong cycle);
``feat_idx`` are video-frame indices into the clip. Faces are in the avatar's face-crop
coordinates (the crop box resampled to 256x256) and live on ``engine.device``.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


class LipSyncEngine(ABC):
    """One lip-sync model behind the renderer. Subclasses set ``name`` and ``device``."""

    name: str = "engine"
    #: a short description shown in the GUI and in ``render --json``
    label: str = ""

    def __init__(self, device: str | None = None):
        import torch

        self.device = torch.device(device) if device else torch.device("cpu")

    @abstractmethod
    def prepare(self, avatar) -> Any:
        """Per-avatar state (e.g. latents, rig geometry); may read/write the avatar's cache."""

    @abstractmethod
    def audio_features(self, wave) -> Any:
        """Per-clip audio features; ``len(features)`` equals ``wave.frames``."""

    def bind(self, features) -> None:
        """Make ``features`` (from ``audio_features``) the clip that ``generate`` indexes into.

        The renderer calls it before generating, so one warm engine can serve several clips.
        """
        self.features = features

    @abstractmethod
    def generate(self, prepared, avatar_idx, feat_idx, weight=None):
        """Faces for a batch: torch uint8 tensor ``[B,256,256,3]`` RGB on ``self.device``.

        ``feat_idx`` indexes the features last given to ``bind`` (video-frame indices). ``weight``
        (float ``[B]``, or None: 1) is the plan's blend weight of each face: the renderer crossfades
        the face into the avatar frame by it; an engine may use it too (the classic mouth eases to
        rest), never re-derive it.
        """

    def generate_many(self, items) -> list:
        """Faces for several clips' batches at once (jobs in flight on one device sharing the
        engine's batch): ``items`` are ``(prepared, features, avatar_idx, feat_idx, weight)``, one
        per clip; one tensor per item, each what ``bind(features)`` then ``generate`` gives. This
        default runs them in turn; an engine whose work batches (MuseTalk's networks, the classic
        rig) merges them into one call."""
        out = []
        for prepared, features, avatar_idx, feat_idx, weight in items:
            self.bind(features)
            out.append(self.generate(prepared, avatar_idx, feat_idx, weight))
        return out

    def preferred_batch(self) -> int:
        """Batch size that keeps this engine efficient on its device."""
        return 16

    def features_key(self) -> tuple:
        """What ``audio_features`` depends on besides the clip: engines with equal keys share a
        clip's features (``studio.core.render.clip.Clip``). Default: the engine's class and device."""
        return (type(self).__module__, type(self).__qualname__, str(self.device))

    def describe(self) -> dict:
        return {"engine": self.name, "label": self.label, "device": str(self.device)}

    def held_networks(self) -> list:
        """The networks the engine holds now (torch modules and the like; none before it loads):
        the engine cache counts their parameters' and buffers' bytes."""
        return []

    def close(self) -> None:  # noqa: B027 - optional: release GPU memory, sessions
        """Release what the engine holds (GPU memory, sessions); nothing by default."""


@dataclass(frozen=True)
class Availability:
    """Whether an engine can run here, and why (or why not, with the fix)."""

    name: str
    ready: bool
    reason: str  # "weights-free mouth rig, runs on any machine" / "no weights imported: run ..."

    def __str__(self) -> str:  # the one-line form the CLI, the doctor and tooltips show
        return f"{'ready' if self.ready else 'unavailable'}: {self.reason}"

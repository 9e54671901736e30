"""The engine interface every lip-sync engine implements, and auto-selection.

An engine turns (avatar frame, audio frame) pairs into 256x256 faces:

    engine = select_engine("auto").engine
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
from dataclasses import dataclass, field
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

    def close(self) -> None:  # noqa: B027 - optional: release GPU memory, sessions
        """Release what the engine holds (GPU memory, sessions); nothing by default."""


@dataclass(frozen=True)
class EngineChoice:
    """What auto-selection picked and why (shown in the CLI, the GUI and the logs)."""

    engine: LipSyncEngine
    reason: str
    alternatives: dict[str, Availability] = field(default_factory=dict)


@dataclass(frozen=True)
class Availability:
    """Whether an engine can run here, and why (or why not, with the fix)."""

    name: str
    ready: bool
    reason: str  # "weights-free mouth rig, runs on any machine" / "no weights imported: run ..."

    def __str__(self) -> str:  # the one-line form the CLI, the doctor and tooltips show
        return f"{'ready' if self.ready else 'unavailable'}: {self.reason}"


def engine_status() -> dict[str, Availability]:
    """Engine name -> ``Availability`` (cheap: no torch, no hashing)."""
    out = {"classic": Availability("classic", True, "weights-free mouth rig, runs on any machine")}
    try:
        from studio.core.engines import musetalk

        out["musetalk"] = musetalk.availability()
    except ImportError as exc:
        out["musetalk"] = Availability("musetalk", False, str(exc))
    return out


def auto_engine(status: dict[str, Availability] | None = None) -> str:
    """What ``engine=auto`` means, everywhere (the renderer, the engine cache, the window, the server,
    the doctor): MuseTalk when its weights are imported and whole, else classic."""
    status = status if status is not None else engine_status()
    return "musetalk" if status["musetalk"].ready else "classic"


def select_for(settings) -> EngineChoice:
    """A new engine for ``settings`` (a ``RenderSettings``): its engine, device and MuseTalk's options."""
    return select_engine(
        settings.engine,
        device=settings.device,
        precision=settings.precision,
        decoder=settings.decoder,
        batch=settings.batch,
        runtime=settings.runtime,
        **({"compile": True} if settings.compile else {}),
    )


def select_engine(name: str = "auto", device: str | None = None, **options) -> EngineChoice:
    """Pick an engine: MuseTalk (TensorRT, then PyTorch) when its weights are imported, else classic.

    ``name`` is ``auto``, ``classic`` or ``musetalk``. Raises ``StudioError`` when a named engine
    cannot run, with the reason.
    """
    from studio.core.errors import StudioError

    status = engine_status()
    if name == "auto":
        name = auto_engine(status)
        if name == "musetalk":
            reason = f"MuseTalk weights are imported ({status['musetalk']})"
            # TensorRT hook (issue 7): say which runtime MuseTalk is expected to use, and why
            from studio.core.engines.tensorrt_runner import runtime_note

            reason += f"; {runtime_note(device, options.get('runtime', 'auto'))}"
        else:
            reason = f"classic: MuseTalk unavailable: {status['musetalk'].reason}"
    else:
        reason = f"{name}: chosen explicitly"
    if name == "classic":
        from studio.core.engines.classic import ClassicEngine

        engine: LipSyncEngine = ClassicEngine(device=device, **options)
    elif name == "musetalk":
        if not status["musetalk"].ready:
            raise StudioError(f"the MuseTalk engine cannot run: {status['musetalk']}")
        from studio.core.engines.musetalk import MuseTalkEngine

        engine = MuseTalkEngine(device=device, **options)
    else:
        raise StudioError(f"unknown engine {name!r}; use auto, classic or musetalk")
    log.info("engine: %s (%s)", engine.name, reason)
    return EngineChoice(engine, reason, status)

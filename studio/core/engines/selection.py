"""Which engine runs: what each can do here (``engine_status``), what ``auto`` means
(``auto_engine``) and a new engine for a choice (``select_engine``, ``select_for``). Above the
engines (it builds them); they and the interface (``engines.base``) never import it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from studio.core.engines.base import Availability, LipSyncEngine

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EngineChoice:
    """What auto-selection picked and why (shown in the CLI, the GUI and the logs)."""

    engine: LipSyncEngine
    reason: str
    alternatives: dict[str, Availability] = field(default_factory=dict)


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

"""Load what a cold render needs while the command does its other work (issue 48, item 6).

A fresh ``studio render`` spends most of its first seconds importing PyTorch (3.3-4.2 s on the
H100 machine, docs/server.md "Cold starts") and creating the CUDA context, before the engine can be
built; meanwhile the command resolves its settings, probes the voice-over, checks the output and
opens the avatar, which need neither. ``start(engine, device)`` begins that loading on a daemon
thread at once; whoever needs torch later imports it as usual (Python's import lock makes the
second import wait for the first, not redo it), so nothing changes but the order.

``STUDIO_PRELOAD=0`` turns it off (the bench compares both).
"""

from __future__ import annotations

import logging
import threading
import time

log = logging.getLogger(__name__)

#: seconds since ``start`` at which each step finished (the cold bench reads them)
timeline: dict[str, float] = {}
#: ``time.time()`` when ``start`` began loading (0: not started)
started_at = 0.0


def start(engine: str | None = None, device: str | None = None) -> threading.Thread | None:
    """Import torch (and MuseTalk's networks for ``engine`` musetalk/auto), then create the CUDA
    context unless ``device`` names the CPU, on a daemon thread; None when ``STUDIO_PRELOAD=0``."""
    from studio.core import env

    global started_at
    if not env.flag("STUDIO_PRELOAD"):
        return None
    started_at = time.time()
    t = threading.Thread(target=_load, args=(engine or "auto", device or ""), name="studio-preload", daemon=True)
    t.start()
    return t


def _load(engine: str, device: str) -> None:
    t0 = time.perf_counter()
    try:
        import torch

        timeline["torch"] = round(time.perf_counter() - t0, 3)
        if engine in ("auto", "musetalk"):
            import studio.core.engines.nets  # the UNet and VAE classes
            import studio.core.engines.whisper_net  # noqa: F401 - the audio encoder

            timeline["nets"] = round(time.perf_counter() - t0, 3)
        if not device.startswith("cpu") and torch.cuda.is_available():
            torch.cuda.init()  # the context: a few hundred ms the engine's first upload would pay
            timeline["cuda"] = round(time.perf_counter() - t0, 3)
    except Exception:  # only a head start: the render imports again and says what failed
        log.debug("preload failed", exc_info=True)

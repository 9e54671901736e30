"""The render service, Qt-free: what every front end (window, command line, HTTP server) runs on.

    RenderRequest / Placement   what to render, with which settings, which frames, and where
    Render                      one driver for every placement: run() -> Progress ..., cancel(), result
    EnginePool / default_pool   warm engines keyed by everything that picks one; scrub frames
    QueueService                the job queue over jobs.sqlite: add, cancel, retry, hold, move, run
    preflight                   everything a render would refuse later, refused before it is queued

Layers: ``ui``, ``cli`` and ``api`` import this package; it imports ``core``; ``core`` imports
neither (``tests/test_architecture.py`` checks it). Names are imported lazily so that
``import studio.service`` stays cheap.
"""

from __future__ import annotations

_NAMES = {
    "RenderRequest": "request",
    "Placement": "request",
    "Render": "driver",
    "Progress": "driver",
    "EnginePool": "pool",
    "default_pool": "pool",
    "QueueService": "queue",
    "QueueEvent": "queue",
    "QueueFull": "queue",
    "request_of": "job_requests",
    "gpus_here": "queue",
    "unique_output": "job_requests",
    "owned_output": "job_requests",
    "preflight": "preflight",
}

__all__ = sorted(_NAMES)


def __getattr__(name):
    mod = _NAMES.get(name)
    if mod is None:
        raise AttributeError(name)
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{mod}"), name)

"""Warm engines, kept by everything that picks one: ``EngineCache`` and ``EngineKey``.

    cache = EngineCache()
    engine, reason = cache.get(settings)          # loaded once per key, then the warm one
    with cache.locked(engine):                    # renders and scrub frames take turns per batch
        faces = engine.generate(...)
    cache.close()

An engine is keyed by everything that picks it (``EngineKey.of``): the engine (``auto`` resolved by
the one rule, ``auto_engine``), the device (resolved: ``None`` and ``"cuda"`` name the same GPU), and
for MuseTalk the runtime, decoder, precision, ``compile`` and the imported weights (the model store's
manifest), plus the batch. So importing new weights, choosing another GPU or compiling loads a new
engine, and nothing else does (encoder settings, silence settings, the clip). The service's engine
pool (``studio.service.pool``) and the farm's workers (``studio.core.scale.farm``) both keep their
engines here.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EngineKey:
    """Everything that picks an engine (two settings with equal keys share one warm engine)."""

    engine: str
    device: str
    runtime: str
    decoder: str
    precision: str
    batch: int
    weights: str
    compile: bool = False

    @classmethod
    def of(cls, settings: Any) -> EngineKey:
        """The key of ``settings`` (a ``RenderSettings``): MuseTalk's own options count only for it."""
        from studio.core.engines.base import auto_engine

        name = auto_engine() if settings.engine == "auto" else settings.engine
        musetalk = name == "musetalk"
        return cls(
            name,
            resolve_device_name(settings.device),
            settings.runtime if musetalk else "",
            settings.decoder if musetalk else "",
            settings.precision if musetalk else "",
            int(settings.batch),
            weights_id() if musetalk else "",
            bool(settings.compile) and musetalk,
        )


def resolve_device_name(device: str | None) -> str:
    """``None`` -> ``cuda:0`` when a GPU is present, else ``cpu``; ``cuda`` -> ``cuda:<current>``."""
    import torch

    if device is None:
        return "cuda:0" if torch.cuda.is_available() else "cpu"
    d = torch.device(device)
    if d.type == "cuda" and d.index is None:
        return f"cuda:{torch.cuda.current_device() if torch.cuda.is_available() else 0}"
    return str(d)


def weights_id() -> str:
    """A short identity of the imported weights (the model store's manifest); '' when none."""
    try:
        from studio.core.engines.weights import read_manifest

        manifest = read_manifest()
    except Exception:  # noqa: BLE001 - no store, a damaged one: no MuseTalk either
        return ""
    return hashlib.sha256(json.dumps(manifest, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass(frozen=True, eq=False)
class _Warm:
    engine: Any
    reason: str
    lock: threading.Lock


class EngineCache:
    """Warm engines by ``EngineKey``; thread-safe. ``close()`` releases them all."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._engines: dict[EngineKey, _Warm] = {}
        #: engines loaded since this cache was made (a second one for a key counts too)
        self.loaded = 0

    def key(self, settings: Any) -> EngineKey:
        return EngineKey.of(settings)

    def __len__(self) -> int:
        with self._lock:
            return len(self._engines)

    def get(self, settings: Any, fresh: bool = False) -> tuple[Any, str]:
        """``(engine, reason)`` for ``settings``: the warm one, else a new one (kept). ``fresh``: a
        second engine for the same key (two parts of one clip on one device), not kept."""
        key = self.key(settings)
        with self._lock:
            warm = self._engines.get(key)
            if warm is not None and not fresh:
                return warm.engine, warm.reason
        from studio.core.engines.base import select_for

        choice = select_for(settings)
        with self._lock:
            self.loaded += 1
            if fresh:
                return choice.engine, choice.reason
            warm = self._engines.setdefault(key, _Warm(choice.engine, choice.reason, threading.Lock()))
        if warm.engine is not choice.engine:  # another thread loaded it meanwhile
            choice.engine.close()
        log.info("engine cache: %s on %s loaded (%d warm)", key.engine, key.device, len(self))
        return warm.engine, warm.reason

    def lock_for(self, engine: Any) -> threading.Lock | None:
        """The lock a batch holds on ``engine`` (None: not one of these engines)."""
        with self._lock:
            for w in self._engines.values():
                if w.engine is engine:
                    return w.lock
        return None

    @contextlib.contextmanager
    def locked(self, engine: Any) -> Iterator[None]:
        """Hold ``engine`` for one batch (renders and scrub frames take turns on one engine)."""
        lock = self.lock_for(engine)
        if lock is None:
            yield
            return
        with lock:
            yield

    def warm(self) -> list[dict]:
        """The warm engines: engine, device, runtime, decoder, precision and why each was chosen."""
        with self._lock:
            return [
                dict(
                    engine=k.engine,
                    device=k.device,
                    runtime=k.runtime,
                    decoder=k.decoder,
                    precision=k.precision,
                    reason=w.reason,
                )
                for k, w in self._engines.items()
            ]

    def close(self) -> None:
        with self._lock:
            engines, self._engines = list(self._engines.values()), {}
        for w in engines:
            try:
                w.engine.close()
            except Exception:
                log.debug("engine close failed", exc_info=True)

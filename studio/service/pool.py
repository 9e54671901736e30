"""Warm engines shared by every caller: ``EnginePool``.

    pool = default_pool()                         # one per process
    engine, reason = pool.get(settings)           # the warm engine for these settings (loaded once)
    img = pool.frame_at("anna", "voice.flac", settings, 12.48)   # the exact frame, warm

An engine is keyed by everything that picks it: engine name, device (resolved: ``None`` and
``"cuda"`` name the same GPU), runtime, decoder, precision, batch and the imported weights (the
model store's manifest), so importing new weights or choosing another GPU loads a new engine and
nothing else does. Each engine has a lock: a render holds it per batch (``Renderer`` calls
``generate`` through ``locked``), so a scrub frame asked for during a render runs between two
batches instead of waiting for the whole render.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import threading
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EngineKey:
    engine: str
    device: str
    runtime: str
    decoder: str
    precision: str
    batch: int
    weights: str
    compile: bool = False


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
        from studio.core.store.models import read_manifest

        manifest = read_manifest()
    except Exception:  # noqa: BLE001 - no store, a damaged one: no MuseTalk either
        return ""
    return hashlib.sha256(json.dumps(manifest, sort_keys=True, default=str).encode()).hexdigest()[:16]


class EnginePool:
    """Warm engines by ``EngineKey``; thread-safe. ``close()`` releases them all."""

    def __init__(self):
        self._lock = threading.Lock()
        self._engines: dict[EngineKey, tuple] = {}  # key -> (engine, reason, lock)
        self._scrub: dict[tuple, object] = {}  # (avatar, audio, settings, generation) -> Renderer
        self.generation = 0

    def key(self, settings) -> EngineKey:
        name = settings.engine
        if name == "auto":
            from studio.core.engines import engine_status

            name = "musetalk" if engine_status()["musetalk"].ready else "classic"
        musetalk = name == "musetalk"
        return EngineKey(
            name,
            resolve_device_name(settings.device),
            settings.runtime if musetalk else "",
            settings.decoder if musetalk else "",
            settings.precision if musetalk else "",
            int(settings.batch),
            weights_id() if musetalk else "",
            bool(getattr(settings, "compile", False)) and musetalk,
        )

    def get(self, settings, fresh: bool = False):
        """``(engine, reason)`` for ``settings``: the warm one, else a new one (kept). ``fresh``: a
        second engine for the same key (two parts of one clip on one device), not kept."""
        key = self.key(settings)
        with self._lock:
            warm = self._engines.get(key)
            if warm is not None and not fresh:
                return warm[0], warm[1]
        from studio.core.engines import select_engine

        choice = select_engine(
            settings.engine,
            device=settings.device,
            precision=settings.precision,
            decoder=settings.decoder,
            batch=settings.batch,
            runtime=settings.runtime,
            **({"compile": True} if key.compile else {}),
        )
        if fresh:
            return choice.engine, choice.reason
        with self._lock:
            warm = self._engines.setdefault(key, (choice.engine, choice.reason, threading.Lock()))
        if warm[0] is not choice.engine:  # another thread loaded it meanwhile
            choice.engine.close()
        log.info("engine pool: %s on %s loaded (%d warm)", key.engine, key.device, len(self._engines))
        return warm[0], warm[1]

    def lock_for(self, engine) -> threading.Lock | None:
        with self._lock:
            for e, _, lock in self._engines.values():
                if e is engine:
                    return lock
        return None

    @contextlib.contextmanager
    def locked(self, engine):
        """Hold ``engine`` for one batch (renders and scrub frames take turns on one engine)."""
        lock = self.lock_for(engine)
        if lock is None:
            yield
            return
        with lock:
            yield

    def renderer(self, avatar, audio, settings):
        """A ``Renderer`` on the warm engine for ``settings``."""
        from studio.core.render.renderer import Renderer

        engine, reason = self.get(settings)
        r = Renderer(avatar, audio, settings, engine=engine)
        r._engine_reason = reason
        r.engine_lock = self.lock_for(engine)
        return r

    def frame_at(self, avatar, audio, settings, seconds: float):
        """The exact frame a render writes at ``seconds`` ([H,W,3] uint8 RGB), on a warm engine.

        The renderer for (avatar, audio, settings) is kept, so scrubbing one clip costs one frame.
        Its engine is shared with renders; they take turns per batch.
        """
        key = (str(avatar), str(audio), settings, self.generation)
        with self._lock:
            r = self._scrub.get(key)
        if r is None:
            r = self.renderer(avatar, audio, settings)
            with self._lock:
                if len(self._scrub) >= 4:  # a few clips scrubbed in turn stay warm
                    self._scrub.pop(next(iter(self._scrub)))
                self._scrub[key] = r
        try:
            return r.frame_at(seconds)
        except BaseException:
            with self._lock:
                self._scrub.pop(key, None)
            raise

    def invalidate(self) -> None:
        """Forget prepared scrub clips (an avatar was re-prepared or removed)."""
        with self._lock:
            self.generation += 1
            self._scrub.clear()

    def warm(self) -> list[dict]:
        with self._lock:
            return [
                dict(
                    engine=k.engine,
                    device=k.device,
                    runtime=k.runtime,
                    decoder=k.decoder,
                    precision=k.precision,
                    reason=v[1],
                )
                for k, v in self._engines.items()
            ]

    def close(self) -> None:
        with self._lock:
            engines, self._engines = list(self._engines.values()), {}
            self._scrub.clear()
        for engine, _, _ in engines:
            try:
                engine.close()
            except Exception:
                log.debug("engine close failed", exc_info=True)


_default: EnginePool | None = None
_default_lock = threading.Lock()


def default_pool() -> EnginePool:
    """The process-wide pool (the window, the queue runner and the server share it)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = EnginePool()
        return _default

"""Warm engines shared by every caller: ``EnginePool``.

    pool = default_pool()                         # one per process
    engine, reason = pool.get(settings)           # the warm engine for these settings (loaded once)
    img = pool.frame_at("anna", "voice.flac", settings, 12.48)   # the exact frame, warm

The engines are core's ``EngineCache`` (``studio.core.engines.cache``): keyed by everything that
picks one (engine name, device, runtime, decoder, precision, batch, compile and the imported
weights), so importing new weights or choosing another GPU loads a new engine and nothing else
does. Each engine has a lock: a render holds it per batch (``Renderer`` calls ``generate`` under
``engine_lock``), so a scrub frame asked for during a render runs between two batches instead of
waiting for the whole render. The pool adds the scrub renderers kept warm per clip, and, with
``batching`` on (``studio serve``), a ``Batcher`` per engine: the renderers of jobs running at
once on one device get views of the engine whose batches are merged into one engine call
(``studio.service.batching``). ``warm_up`` loads an engine and captures every batch size it will
use before a server says it is ready.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from studio.core.engines.cache import EngineCache, EngineKey, resolve_device_name, weights_id

log = logging.getLogger(__name__)

__all__ = ["EngineKey", "EnginePool", "default_pool", "resolve_device_name", "weights_id"]


class EnginePool(EngineCache):
    """Warm engines by ``EngineKey`` and warm scrub renderers; thread-safe. ``close()`` releases them all."""

    def __init__(self, max_engines: int | None = None, max_fraction: float | None = None) -> None:
        super().__init__(max_engines, max_fraction)
        self._scrub_lock = threading.Lock()
        self._scrub: dict[tuple, Any] = {}  # (avatar, audio, settings, generation) -> Renderer
        self.generation = 0
        #: merge the engine calls of jobs running at once on one device (``studio serve``)
        self.batching = False
        self._batchers: dict[int, Any] = {}  # id(engine) -> Batcher
        #: ``studio serve``: the queue's ``Scheduler`` (lanes, fair shares) orders every batcher's batches
        self.scheduler: Any = None
        self.on_evict = self._evicted

    def renderer(self, avatar, audio, settings, *, slot: int = 0, hold: bool = False, ticket=None):
        """A ``Renderer`` on the warm engine for ``settings`` (``slot``: which of several engines of
        one device). ``hold``: the engine is not evicted until ``release(renderer.engine)``. With
        ``batching`` the renderer's engine is a view whose batches join other jobs' (no lock per
        batch: the batcher takes the engine's lock around each merged call)."""
        from studio.core.render.renderer import Renderer

        engine, reason = self.get(settings, hold=hold, slot=slot)
        try:
            if self.batching:
                view = self.batcher(engine).view(ticket, join=False)  # the queue counts its jobs
                try:
                    return Renderer(avatar, audio, settings, engine=view, engine_reason=reason)
                except BaseException:
                    view.done()  # the scheduler no longer counts it in flight
                    raise
            r = Renderer(avatar, audio, settings, engine=engine, engine_reason=reason)
        except BaseException:
            if hold:
                self.release(engine)  # no render will run on it
            raise
        r.engine_lock = self.lock_for(engine)
        return r

    def batcher(self, engine):
        """The ``Batcher`` of a warm engine (made on first use)."""
        from studio.service.batching import Batcher

        with self._scrub_lock:
            b = self._batchers.get(id(engine))
            if b is None or b.engine is not engine:
                b = self._batchers[id(engine)] = Batcher(engine, self.lock_for(engine), scheduler=self.scheduler)
            return b

    def batchers(self) -> list:
        with self._scrub_lock:
            return list(self._batchers.values())

    def warm_up(self, settings, *, slot: int = 0, on_step=None) -> Any:
        """Load the engine for ``settings`` and make it ready for a render's first batch: its
        networks, its audio model, and every batch size it will use (CUDA graphs); the engine."""
        say = on_step or (lambda text: None)
        engine, _ = self.get(settings, slot=slot)
        warm = getattr(engine, "warm", None)
        if warm is not None:
            say(f"loading {engine.name} on {engine.device}")
            with self.locked(engine):
                warm()
        self.measure(engine)
        return engine

    def _evicted(self, engine) -> None:
        with self._scrub_lock:
            self._batchers.pop(id(engine), None)
            for k, r in list(self._scrub.items()):
                if r.chosen_engine is engine:
                    del self._scrub[k]

    def frame_at(self, avatar, audio, settings, seconds: float):
        """The exact frame a render writes at ``seconds`` ([H,W,3] uint8 RGB), on a warm engine.

        The renderer for (avatar, audio, settings) is kept, so scrubbing one clip costs one frame.
        Its engine is shared with renders; they take turns per batch.
        """
        key = (str(avatar), str(audio), settings, self.generation)
        with self._scrub_lock:
            r = self._scrub.get(key)
        if r is None:
            r = self.renderer(avatar, audio, settings)
            with self._scrub_lock:
                if len(self._scrub) >= 4:  # a few clips scrubbed in turn stay warm
                    self._scrub.pop(next(iter(self._scrub)))
                self._scrub[key] = r
        try:
            return r.frame_at(seconds)
        except BaseException:
            with self._scrub_lock:
                self._scrub.pop(key, None)
            raise

    def invalidate(self) -> None:
        """Forget prepared scrub clips (an avatar was re-prepared or removed)."""
        with self._scrub_lock:
            self.generation += 1
            self._scrub.clear()

    def close(self) -> None:
        with self._scrub_lock:
            self._scrub.clear()
            self._batchers.clear()
        super().close()


_default: EnginePool | None = None
_default_lock = threading.Lock()


def default_pool() -> EnginePool:
    """The process-wide pool (the window, the queue runner and the server share it)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = EnginePool()
        return _default

"""Warm engines, kept by everything that picks one: ``EngineCache`` and ``EngineKey``.

    cache = EngineCache()                         # at most 2 engines or 60 % of the device's memory
    engine, reason = cache.get(settings)          # loaded once per key, then the warm one
    with cache.locked(engine):                    # renders and scrub frames take turns per batch
        faces = engine.generate(...)
    engine, reason = cache.get(settings, hold=True)   # a render: never evicted until ...
    cache.release(engine)                         # ... it is done
    cache.close()

An engine is keyed by everything that picks it (``EngineKey.of``): the engine (``auto`` resolved by
the one rule, ``auto_engine``), the device (resolved: ``None`` and ``"cuda"`` name the same GPU), and
for MuseTalk the runtime, decoder, precision, ``compile`` and the imported weights (the model store's
manifest). So importing new weights, choosing another GPU or compiling loads a new engine, and
nothing else does (encoder settings, silence settings, the clip). ``batch`` only changes speed: it
is not in the key; a render's batch runs on the warm engine's batch buckets (CUDA graphs for each
bucket up to its preferred batch; a larger batch runs in pieces of the largest). ``slot`` tells two
engines of one device apart (several "devices" that are one CPU, in tests and on a CPU server).

The cache is bounded, least recently used first, as ComfyUI's model management is: at most
``max_engines`` engines, and a new engine is loaded only after the least recently used ones are
evicted while the device's memory in use is over ``max_fraction`` of it (on a CPU device: the
engines' own bytes against the machine's memory). An engine held by a render (``hold``) is never
evicted; a request that needs room while every engine is held waits for one to be released.
Eviction closes the engine (its networks, CUDA graphs and cached memory are released:
``engine.close``) and drops every reference the cache has. The service's engine pool
(``studio.service.pool``) and the farm's workers (``studio.core.scale.farm``) both keep their
engines here.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

MAX_ENGINES = 2  # warm engines kept at most (per cache: a server's, a farm worker's)
MAX_FRACTION = 0.6  # ... and no new one while more than this share of the device's memory is in use
HOLD_WAIT_S = 600.0  # a request for an engine waits this long for a held one to be released


SHOWN = ("engine", "device", "runtime", "decoder", "precision")  # what ``warm()`` says of a key (not its weights)


@dataclass(frozen=True)
class EngineKey:
    """Everything that picks an engine (two settings with equal keys share one warm engine)."""

    engine: str
    device: str
    runtime: str
    decoder: str
    precision: str
    weights: str
    compile: bool = False
    slot: int = 0

    @classmethod
    def of(cls, settings: Any, slot: int = 0) -> EngineKey:
        """The key of ``settings`` (a ``RenderSettings``): MuseTalk's own options count only for it."""
        from studio.core.engines.selection import auto_engine

        name = auto_engine() if settings.engine == "auto" else settings.engine
        musetalk = name == "musetalk"
        device = resolve_device_name(settings.device)
        return cls(
            name,
            device,
            settings.runtime if musetalk else "",
            {"vae": "sd-vae", "sd-vae-ft-mse": "sd-vae"}.get(settings.decoder, settings.decoder) if musetalk else "",
            effective_precision(device, settings.precision) if musetalk else "",
            weights_id() if musetalk else "",
            bool(settings.compile) and musetalk,
            int(slot),
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


def effective_precision(device: str, precision: str) -> str:
    """The precision an engine runs at (``runtime_torch.resolve_dtype``'s rule): fp32 on a CPU,
    ``auto`` is fp16 on CUDA; so two spellings of one engine share it."""
    if not device.startswith("cuda"):
        return "fp32"
    return "fp16" if precision == "auto" else precision


def weights_id() -> str:
    """A short identity of the imported weights (the model store's manifest); '' when none."""
    try:
        from studio.core.engines.weights import read_manifest

        manifest = read_manifest()
    except Exception:  # noqa: BLE001 - no store, a damaged one: no MuseTalk either
        return ""
    return hashlib.sha256(json.dumps(manifest, sort_keys=True, default=str).encode()).hexdigest()[:16]


def engine_bytes(engine: Any) -> int:
    """Bytes an engine's networks and prepared tensors hold (its parameters and buffers): what the
    cache counts for a CPU device, where no allocator says how much memory is in use."""
    seen: set[int] = set()
    total = 0
    held = getattr(engine, "held_networks", None)  # a LipSyncEngine's (a test's stand-in may have none)
    for net in held() if callable(held) else []:
        tensors = []
        for attr in ("parameters", "buffers"):
            fn = getattr(net, attr, None)
            if callable(fn):
                with contextlib.suppress(Exception):
                    tensors.extend(fn())
        for t in tensors:
            if id(t) not in seen:
                seen.add(id(t))
                total += int(t.numel()) * int(t.element_size())
    return total


def device_memory(device: str, engines_bytes: int) -> tuple[int, int]:
    """``(bytes in use, bytes in all)`` of ``device``: the CUDA allocator's view of the GPU (every
    process's use), or for the CPU the engines' own bytes against the machine's memory."""
    if device.startswith("cuda"):
        import torch

        free, total = torch.cuda.mem_get_info(torch.device(device))
        return int(total - free), int(total)
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        total = 1 << 40
    return engines_bytes, int(total)


@dataclass(eq=False)
class _Warm:
    engine: Any
    reason: str
    lock: threading.Lock
    holds: int = 0
    bytes: int = 0
    used: float = field(default_factory=time.monotonic)


class EngineCache:
    """Warm engines by ``EngineKey``, least recently used evicted first; thread-safe. ``close()``
    releases them all."""

    def __init__(self, max_engines: int | None = None, max_fraction: float | None = None) -> None:
        from studio.core import env

        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._engines: OrderedDict[EngineKey, _Warm] = OrderedDict()
        self._loading: dict[EngineKey, threading.Event] = {}
        #: engines loaded since this cache was made (a second one for a key counts too)
        self.loaded = 0
        #: engines evicted to stay under the bound
        self.evictions = 0
        self.max_engines = max(1, int(max_engines or env.get_int("STUDIO_MAX_ENGINES") or MAX_ENGINES))
        frac = max_fraction if max_fraction is not None else float(env.get("STUDIO_MAX_ENGINE_MEMORY") or MAX_FRACTION)
        self.max_fraction = min(1.0, max(0.0, frac))
        #: called with the engine after it is evicted (the pool drops its scrub renderers)
        self.on_evict: Any = None

    def key(self, settings: Any, slot: int = 0) -> EngineKey:
        return EngineKey.of(settings, slot)

    def __len__(self) -> int:
        with self._lock:
            return len(self._engines)

    def keys(self) -> list[EngineKey]:
        """The keys of the engines held now, the least recently used first."""
        with self._lock:
            return list(self._engines)

    def get(self, settings: Any, fresh: bool = False, *, hold: bool = False, slot: int = 0) -> tuple[Any, str]:
        """``(engine, reason)`` for ``settings``: the warm one, else a new one (kept; the least
        recently used go first when the cache is full). ``fresh``: a second engine for the same key
        (two parts of one clip on one device), not kept. ``hold``: the engine stays until
        ``release`` (a render runs on it). Two threads asking for one key load it once."""
        key = self.key(settings, slot)
        if fresh:
            from studio.core.engines.selection import select_for

            choice = select_for(settings.with_(batch=0))
            with self._lock:
                self.loaded += 1
            return choice.engine, choice.reason
        while True:
            with self._lock:
                warm = self._engines.get(key)
                if warm is not None:
                    self._engines.move_to_end(key)
                    warm.used = time.monotonic()
                    warm.holds += hold
                    return warm.engine, warm.reason
                loading = self._loading.get(key)
                if loading is None:
                    self._loading[key] = threading.Event()
                    break
            loading.wait()  # another thread loads it: take the engine it made (or load it if it failed)
        try:
            self._make_room(key)
            from studio.core.engines.selection import select_for

            choice = select_for(settings.with_(batch=0))
            with self._lock:
                self.loaded += 1
                warm = _Warm(choice.engine, choice.reason, threading.Lock(), holds=int(hold))
                self._engines[key] = warm
        finally:
            with self._lock:
                self._loading.pop(key).set()
                self._changed.notify_all()  # a request waiting for room may evict it now
        log.info("engine cache: %s on %s loaded (%d warm)", key.engine, key.device, len(self))
        return warm.engine, warm.reason

    def measure(self, engine: Any) -> int:
        """Count ``engine``'s bytes now (after it loaded its networks); what the bound weighs."""
        size = engine_bytes(engine)
        with self._lock:
            for w in self._engines.values():
                if w.engine is engine:
                    w.bytes = size
        return size

    def release(self, engine: Any) -> None:
        """A render on ``engine`` (got with ``hold``) is done: it may be evicted again."""
        engine = getattr(engine, "base_engine", engine)
        with self._lock:
            for w in self._engines.values():
                if w.engine is engine and w.holds > 0:
                    w.holds -= 1
            self._changed.notify_all()

    def _over(self, key: EngineKey) -> bool:
        """Whether loading one more engine for ``key`` needs room first (called with the lock)."""
        ahead = list(self._loading).index(key) if key in self._loading else 0  # loads that began before this one
        if len(self._engines) + ahead >= self.max_engines:
            return True
        if not self._engines:
            return False
        same = [w.bytes for k, w in self._engines.items() if k.device == key.device]
        if not same:
            return False
        try:
            used, total = device_memory(key.device, sum(same))
        except Exception:
            log.debug("device memory not read", exc_info=True)
            return False
        guess = max(same)  # the next engine is about as large as the largest held now
        return used + guess > self.max_fraction * total

    def _make_room(self, key: EngineKey) -> None:
        deadline = time.monotonic() + HOLD_WAIT_S
        while True:
            with self._lock:
                if not self._over(key):
                    return
                idle = [k for k, w in self._engines.items() if w.holds == 0]  # oldest first
                if not idle:
                    if time.monotonic() > deadline:
                        from studio.core.errors import StudioError

                        raise StudioError(
                            f"every warm engine is busy and the server keeps at most {self.max_engines}; "
                            "try again when a render has finished"
                        )
                    self._changed.wait(1.0)
                    continue
                victim = self._engines.pop(idle[0])
                self.evictions += 1
            self._evict(idle[0], victim)

    def _evict(self, key: EngineKey, warm: _Warm) -> None:
        with warm.lock:  # a scrub frame on it finishes first
            try:
                warm.engine.close()
            except Exception:
                log.debug("engine close failed", exc_info=True)
        if self.on_evict is not None:
            self.on_evict(warm.engine)
        del warm
        gc.collect()
        if key.device.startswith("cuda"):
            import torch

            torch.cuda.empty_cache()  # the allocator's cached blocks go back to the device
        trim_host_memory()
        log.info(
            "engine cache: %s on %s evicted (%d warm, bound %d)", key.engine, key.device, len(self), self.max_engines
        )

    def lock_for(self, engine: Any) -> threading.Lock | None:
        """The lock a batch holds on ``engine`` (None: not one of these engines)."""
        engine = getattr(engine, "base_engine", engine)
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

    def engines(self) -> list:
        """The warm engines, least recently used first."""
        with self._lock:
            return [w.engine for w in self._engines.values()]

    def held_bytes(self) -> int:
        """Bytes the warm engines hold (as last measured)."""
        with self._lock:
            return sum(w.bytes for w in self._engines.values())

    def warm(self) -> list[dict]:
        """The warm engines: engine, device, runtime, decoder, precision and why each was chosen."""
        with self._lock:
            return [{**{f: getattr(k, f) for f in SHOWN}, "reason": w.reason} for k, w in self._engines.items()]

    def close(self) -> None:
        with self._lock:
            engines, self._engines = list(self._engines.values()), OrderedDict()
        for w in engines:
            try:
                w.engine.close()
            except Exception:
                log.debug("engine close failed", exc_info=True)


def trim_host_memory() -> None:
    """Give the C allocator's free heap back to the system (glibc ``malloc_trim``): an evicted
    engine's host copies (weights read before upload, pinned staging) leave the process's RSS."""
    import sys

    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc (musl): nothing to trim this way
        log.debug("malloc_trim is not available", exc_info=True)

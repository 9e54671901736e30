"""The farm's replicas: one Ray actor class for every farm render (whole jobs and chunks of a clip).

    replica = replica_class().options(num_cpus=1, max_concurrency=6).remote("cpu0", "cpu", 2, 1, make_pool)
    ray.get(replica.ready.remote())             # {"pid", "node", "host", "data"}
    ref = replica.run.remote(task)              # a whole job, or frames [a, b) of one: {"result"|"segment", "sha256", "size", "shared"}
    replica.progress.remote()                   # the ONE progress call: {"tasks": {key: (done, total, fps, finishing)}, ...}
    replica.cancel.remote(key)                  # the ONE cancel: stops after the current batch; nothing is written
    replica.read.remote(key, offset, size)      # the ONE file protocol: the finished file in pieces (``fetch_file``)
    replica.discard.remote(key)

The head (``studio.core.scale.dispatch``: its controller starts and watches replicas, its router picks
one by frames queued) sends a ``task`` (``task_spec``): the inputs as ``ship_avatar``/``ship_file``
specs (fetched once per node), the settings, and either nothing (a whole job: ``Renderer.run`` writes
the finished file with its audio) or ``range=(a, b)`` (a chunk: ``chunks.render_segment`` writes a
video-only segment the head joins). Progress is read by the head (never pushed per batch); a cancel
names the task's key.

The file a task writes goes straight to the head's output when a whole job's replica shares the
head's data folder (``task["share"]``: the same path, holding a token file only the head wrote),
else into a registered temporary in this node's ``renders/``, kept until the head has read it in
pieces (``read``: their SHA-256 and size checked on the head) and ``discard``-ed it; a replica that
dies leaves only a registered temporary, which the next task on this node's data folder sweeps
(``sweep_dead_temps``).

A replica renders up to ``capacity`` tasks at once on threads of its own (a threaded Ray actor), on
the engines of the pool ``make_pool`` makes (the service's ``EnginePool`` with cross-job batching:
the core does not import the service); without one, core's ``EngineCache`` with one lock per engine.
A whole job whose frames have all left the engine reports ``finishing`` (its encoders drain and its
file is muxed): the head may then send the next job, so the engine does not idle during a file's finish.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

from studio.core.errors import Cancelled
from studio.core.scale.cluster import local_avatar, local_file

log = logging.getLogger(__name__)

READ_CHUNK = 4 << 20  # bytes of a finished file per ``read`` call
KEEP_PREPARED = 2  # chunked jobs whose prepared renderer (audio features) a replica keeps

_CLASS: dict = {}


def replica_class():
    """The Ray actor class (made on first use: importing this module does not import Ray)."""
    if "replica" not in _CLASS:
        import ray

        _CLASS["replica"] = ray.remote(Replica)
    return _CLASS["replica"]


def shared_folder(share: dict | None) -> bool:
    """Whether this replica shares the head's data folder: its own data folder is the head's path and
    holds the token file the head wrote there (a shared ``STUDIO_HOME``, or the head's own host)."""
    from studio.core.env import data_dir

    if not share:
        return False
    try:
        if os.path.realpath(data_dir()) != os.path.realpath(share["path"]):
            return False
        return (Path(share["path"]) / share["name"]).read_text() == share["token"]
    except (OSError, KeyError, TypeError):
        return False


class _Task:
    """A task running on a replica: what ``progress`` reports and ``cancel`` reaches."""

    def __init__(self, total: int):
        self.done, self.total, self.fps = 0, total, 0.0
        self.finishing = False
        self.cancelled = threading.Event()
        self.renderer: Any = None

    def row(self) -> tuple:
        return (self.done, self.total, self.fps, self.finishing)


class Replica:
    """One device (a GPU, or a CPU slot) of the farm, rendering up to ``capacity`` tasks at once."""

    def __init__(self, label: str, device: str, capacity: int, torch_threads: int, make_pool: Any = None):
        from studio.core.engines.cache import EngineCache
        from studio.core.store.temps import sweep_dead_temps

        with contextlib.suppress(Exception):  # a killed replica's files (its records say which): gone now
            sweep_dead_temps()
        self.label = label
        self.device = device
        self.capacity = max(1, int(capacity))
        self.engines = EngineCache()
        self.pool = make_pool() if make_pool is not None else None
        self.counts = {"engines_loaded": 0, "jobs": 0, "chunks": 0, "avatar_fetches": 0, "cancelled": 0}
        self.lock = threading.Lock()
        self.engine_locks: dict[int, threading.Lock] = {}
        self.tasks: dict[str, _Task] = {}
        self.outputs: dict[str, str] = {}  # key -> a finished file waiting for the head to read it
        self.prepared: dict[str, Any] = {}  # chunked job id -> its Renderer (kept for its next chunks)
        self.frames_done = 0
        if torch_threads:
            with contextlib.suppress(Exception):
                import torch

                torch.set_num_threads(torch_threads)

    # ---- who and where ----------------------------------------------------------------------

    def ready(self) -> dict:
        """Where this replica runs (the head shows it and checks nothing else)."""
        import ray

        from studio.core.env import data_dir

        return dict(
            pid=os.getpid(),
            node=ray.get_runtime_context().get_node_id(),
            host=socket.gethostname(),
            data=str(data_dir()),
        )

    def pid(self) -> int:
        return os.getpid()

    def stats(self) -> dict:
        """What this replica's process loaded: engines, jobs, chunks, avatars fetched from the object store."""
        return dict(self.counts, pid=os.getpid())

    def warm(self, settings) -> str:
        """Load the engine of ``settings`` on this replica's device (before the head sends tasks)."""
        s = self._settings(settings)
        if self.pool is not None:
            return str(self.pool.warm_up(s).name)
        engine, _ = self.engines.get(s)
        return str(engine.name)

    # ---- the one protocol: progress, cancel, run, read ---------------------------------------

    def progress(self) -> dict:
        """Every running task's (done, total, fps, finishing: its frames have left the engine), the
        frames this replica rendered, its warm engines."""
        with self.lock:
            tasks = {k: t.row() for k, t in self.tasks.items()}
            done = self.frames_done
        cache = self.pool if self.pool is not None else self.engines
        try:
            warm = [f"{e['engine']} on {e['device']}" for e in cache.warm()]
        except Exception:  # noqa: BLE001 - a cache that cannot list says nothing
            warm = []
        return dict(tasks=tasks, frames_done=done, warm_engines=warm, pid=os.getpid())

    def cancel(self, key: str) -> bool:
        """Stop the task ``key`` after its current batch (nothing is written); False when none runs."""
        with self.lock:
            task = self.tasks.get(key)
            if task is None:
                return False
            task.cancelled.set()
            if task.renderer is not None:
                task.renderer.cancel()
            return True

    def run(self, task: dict) -> dict:
        """Render one task; its file goes to the head's folder (shared) or waits here for ``read``."""
        from studio.core.store.fsutil import file_sha256
        from studio.core.store.temps import release_temp, sweep_dead_temps, temp_file

        with contextlib.suppress(Exception):
            sweep_dead_temps()  # what replicas that died on this data folder left
        key, s, span = task["key"], self._settings(task["settings"]), task.get("range")
        entry = _Task(span[1] - span[0] if span else 0)
        with self.lock:
            self.tasks[key] = entry
        shared = span is None and shared_folder(task.get("share"))
        target = None
        try:
            avatar, fetched = local_avatar(task["avatar"])
            audio = local_file(task["audio"])
            self.counts["avatar_fetches"] += fetched
            if shared:
                target, overwrite = task["output"], bool(task["overwrite"])
            else:
                from studio.core.env import sub_dir
                from studio.core.media.codecs import spec

                target = str(temp_file(sub_dir("renders"), ".farm-", f".part{spec(s.codec).suffix}"))
                overwrite = True
            out: dict = dict(shared=shared, sha256="", size=0)
            if span:
                out["segment"] = self._segment(task, entry, avatar, audio, s, target, span)
            else:
                out["result"] = self._whole(entry, avatar, audio, s, target, task.get("frames"), overwrite)
            if not shared:
                out.update(sha256=file_sha256(target), size=os.path.getsize(target))
                with self.lock:
                    self.outputs[key] = target
            return out
        except BaseException as exc:
            if isinstance(exc, Cancelled):
                self.counts["cancelled"] += 1  # the one cancel reached this task
            if target is not None and not shared:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(target)
                release_temp(target)
            raise
        finally:
            with self.lock:
                self.tasks.pop(key, None)

    def read(self, key: str, offset: int, size: int = READ_CHUNK) -> bytes:
        """``size`` bytes of a finished file from ``offset`` (b"" at its end)."""
        with self.lock:
            path = self.outputs[key]
        with open(path, "rb") as fh:
            fh.seek(offset)
            return fh.read(size)

    def discard(self, key: str) -> None:
        """The head has the file (or gave up on it): remove it here."""
        from studio.core.store.temps import release_temp

        with self.lock:
            path = self.outputs.pop(key, None)
        if path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            release_temp(path)

    # ---- rendering ----------------------------------------------------------------------------

    def _settings(self, s):
        return s.with_(device="cpu") if self.device == "cpu" and s.device in (None, "", "auto") else s

    def _count(self, entry: _Task, done: int) -> None:
        with self.lock:
            self.frames_done += max(0, done - entry.done)
            entry.done = done

    def _segment(self, task: dict, entry: _Task, avatar, audio, s, target: str, span) -> dict:
        """Frames [a, b) of the task's clip into a video-only segment at ``target`` (its fields, no path)."""
        from studio.core.render.renderer import Renderer
        from studio.core.scale.chunks import render_segment

        job = task["job"]
        with self.lock:
            r = self.prepared.get(job)
        if r is None:
            engine, reason = self.engines.get(s)  # kept for later chunks and jobs
            r = Renderer(avatar, audio, s, engine=engine, engine_reason=reason)
            with self.lock:
                r.engine_lock = self.engine_locks.setdefault(id(engine), threading.Lock())
                while len(self.prepared) >= KEEP_PREPARED:
                    self.prepared.pop(next(iter(self.prepared)))
                self.prepared[job] = r
                self.counts["jobs"] += 1
        self.counts["engines_loaded"] = self.engines.loaded
        self.counts["chunks"] += 1
        t0 = time.perf_counter()

        def on_batch(n: int) -> None:
            self._count(entry, entry.done + n)
            entry.fps = round(entry.done / max(1e-9, time.perf_counter() - t0), 2)

        seg = render_segment(r, span[0], span[1], target, on_batch=on_batch, should_stop=entry.cancelled.is_set)
        return {k: v for k, v in dataclasses.asdict(seg).items() if k != "path"}  # the head's path differs

    def _whole(self, entry: _Task, avatar, audio, s, target: str, frames, overwrite: bool):
        from studio.core.render.renderer import Renderer

        self.counts["jobs"] += 1
        release: Any = None
        if self.pool is not None:
            r = self.pool.renderer(avatar, audio, s, hold=True)
            engine, pool = r.engine, self.pool

            def release():
                if hasattr(engine, "done"):
                    engine.done()  # a batcher's view: no more batches from this job
                pool.release(engine)

        else:
            engine, reason = self.engines.get(s)
            r = Renderer(avatar, audio, s, engine=engine, engine_reason=reason)
            with self.lock:
                r.engine_lock = self.engine_locks.setdefault(id(engine), threading.Lock())
        self.counts["engines_loaded"] = (self.pool or self.engines).loaded
        try:
            with self.lock:
                entry.renderer = r
            if entry.cancelled.is_set():
                r.cancel()
            for p in r.run(target, frames=tuple(frames) if frames else None, overwrite=overwrite):
                self._count(entry, p.done)
                with self.lock:
                    entry.total, entry.fps = p.total, p.fps
                    ending = not p.finished and 0 < p.total <= p.done and not entry.finishing
                    entry.finishing = entry.finishing or ending
                if ending and hasattr(engine, "done"):  # what is left is the encoders' drain and the file
                    engine.done()  # a batcher's view: the next job's batches wait for none of ours
            if r.result is None:
                raise Cancelled("render cancelled; nothing was written")
            return r.result
        finally:
            if release is not None:
                release()

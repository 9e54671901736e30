"""The warm render actors of ``studio serve --farm``: whole jobs on a Ray cluster, several at once.

    worker = serve_worker_class().options(num_cpus=1, max_concurrency=6).remote("cpu0", "cpu", 2, 1, make_pool)
    ray.get(worker.ready.remote())              # {"pid", "node", "host", "data"}
    ref = worker.run_job.remote(job)            # a whole job: {"result", "sha256", "size", "shared"}
    worker.progress.remote()                    # {"jobs": {key: (done, total, fps, finishing)}, ...}
    worker.cancel_job.remote(key)               # stops after the current batch; nothing is written
    worker.read.remote(key, offset, size)       # the finished file, in pieces, when it was not shared
    worker.discard.remote(key)

A ``ServeWorker`` is the farm's chunk worker (``farm._Worker``: ``render`` of a chunk, ``pid``,
``stats``), so a long clip asked to be split (``placement: farm``) runs on the same warm actors.
It renders up to ``capacity`` jobs at once on threads of its own (a threaded Ray actor), on the
engines of the pool ``make_pool`` makes (the service's ``EnginePool`` with cross-job batching: the
core does not import the service; without one, core's ``EngineCache`` with one engine lock).

Inputs arrive as ``ship_avatar``/``ship_file`` specs (fetched once per node). The finished file goes
straight to the head's output when this worker's data folder is the head's (``job["share"]``: the
same path, holding a token file only the head wrote), else into a registered temporary in this node's ``renders/``,
kept until the head has read it (``read``) and ``discard``-ed it; a worker that dies leaves only a
registered temporary, which the next job on this node's data folder sweeps (``sweep_dead_temps``).

A job whose frames have all left the engine reports ``finishing`` (its encoders drain and its file
is muxed): the head may then send the next job, so the engine does not idle during a file's finish.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

from studio.core.scale.farm import _CLASSES, _Worker, local_avatar, local_file

log = logging.getLogger(__name__)

READ_CHUNK = 4 << 20  # bytes of the finished file per ``read`` call


def serve_worker_class():
    """The Ray actor class (made on first use: importing this module does not import Ray)."""
    if "serve" not in _CLASSES:
        import ray

        _CLASSES["serve"] = ray.remote(ServeWorker)
    return _CLASSES["serve"]


def shared_folder(share: dict | None) -> bool:
    """Whether this worker shares the head's data folder: its own data folder is the head's path and
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


class ServeWorker(_Worker):
    """One device (a GPU, or a CPU slot) of the farm, rendering up to ``capacity`` whole jobs at once."""

    def __init__(self, label: str, device: str, capacity: int, torch_threads: int, make_pool: Any = None):
        super().__init__(label, torch_threads)
        self.device = device
        self.capacity = max(1, int(capacity))
        self.pool = make_pool() if make_pool is not None else None
        self._lock = threading.Lock()
        self._engine_locks: dict[int, threading.Lock] = {}
        self.running: dict[str, dict] = {}  # key -> {"renderer", "done", "total", "fps", "cancel"}
        self.outputs: dict[str, str] = {}  # key -> a finished file waiting for the head to read it
        self.frames_done = 0
        self.started = time.monotonic()

    def ready(self) -> dict:
        """Where this worker runs (the head shows it and checks nothing else)."""
        import ray

        from studio.core.env import data_dir

        return dict(
            pid=os.getpid(),
            node=ray.get_runtime_context().get_node_id(),
            host=socket.gethostname(),
            data=str(data_dir()),
        )

    def warm(self, settings) -> str:
        """Load the engine of ``settings`` on this worker's device (before the head sends jobs)."""
        s = settings.with_(device=self.device) if self.device == "cpu" else settings
        if self.pool is not None:
            return str(self.pool.warm_up(s).name)
        engine, _ = self.engines.get(s)
        return str(engine.name)

    def progress(self) -> dict:
        """Every running job's (done, total, fps, finishing: its frames have left the engine), the
        frames this worker rendered, its warm engines."""
        with self._lock:
            jobs = {k: (e["done"], e["total"], e["fps"], e["finishing"]) for k, e in self.running.items()}
            done = self.frames_done
        cache = self.pool if self.pool is not None else self.engines
        try:
            warm = [f"{e['engine']} on {e['device']}" for e in cache.warm()]
        except Exception:  # noqa: BLE001 - a cache that cannot list says nothing
            warm = []
        return dict(jobs=jobs, frames_done=done, warm_engines=warm, pid=os.getpid())

    def cancel_job(self, key: str) -> None:
        with self._lock:
            entry = self.running.get(key)
            if entry is not None:
                entry["cancel"] = True
                if entry["renderer"] is not None:
                    entry["renderer"].cancel()

    def run_job(self, job: dict) -> dict:
        """Render one whole job; its file goes to the head's folder (shared) or waits here for ``read``."""
        from studio.core.store.fsutil import file_sha256
        from studio.core.store.temps import release_temp, sweep_dead_temps, temp_file

        with contextlib.suppress(Exception):
            sweep_dead_temps()  # what workers that died on this data folder left
        key, s = job["key"], job["settings"]
        if self.device == "cpu" and s.device in (None, "", "auto"):
            s = s.with_(device="cpu")
        entry: dict = dict(renderer=None, done=0, total=0, fps=0.0, cancel=False, finishing=False)
        with self._lock:
            self.running[key] = entry
        shared = shared_folder(job.get("share"))
        target = None
        try:
            avatar, fetched = local_avatar(job["avatar"])
            audio = local_file(job["audio"])
            self.counts["avatar_fetches"] += fetched
            self.counts["jobs"] += 1
            if shared:
                target, overwrite = job["output"], bool(job["overwrite"])
            else:
                from studio.core.env import sub_dir
                from studio.core.media.codecs import spec

                target = str(temp_file(sub_dir("renders"), ".farm-", f".part{spec(s.codec).suffix}"))
                overwrite = True
            result = self._render(entry, avatar, audio, s, target, job.get("frames"), overwrite)
            out: dict = dict(result=result, shared=shared, sha256="", size=0)
            if not shared:
                out.update(sha256=file_sha256(target), size=os.path.getsize(target))
                with self._lock:
                    self.outputs[key] = target
            return out
        except BaseException:
            if target is not None and not shared:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(target)
                release_temp(target)
            raise
        finally:
            with self._lock:
                self.running.pop(key, None)

    def _render(self, entry: dict, avatar, audio, s, target: str, frames, overwrite: bool):
        from studio.core.errors import Cancelled
        from studio.core.render.renderer import Renderer

        release: Any = None
        if self.pool is not None:
            r = self.pool.renderer(avatar, audio, s, hold=True)
            engine = r._engine

            def release():
                if hasattr(engine, "done"):
                    engine.done()  # a batcher's view: no more batches from this job
                self.pool.release(engine)

        else:
            engine, reason = self.engines.get(s)
            r = Renderer(avatar, audio, s, engine=engine, engine_reason=reason)
            with self._lock:
                r.engine_lock = self._engine_locks.setdefault(id(engine), threading.Lock())
        self.counts["engines_loaded"] = (self.pool or self.engines).loaded
        try:
            with self._lock:
                entry["renderer"] = r
                if entry["cancel"]:
                    r.cancel()
            last = 0
            for p in r.run(target, frames=tuple(frames) if frames else None, overwrite=overwrite):
                with self._lock:
                    entry.update(done=p.done, total=p.total, fps=p.fps)
                    self.frames_done += max(0, p.done - last)
                    last = p.done
                    if not p.finished and 0 < p.total <= p.done and not entry["finishing"]:
                        entry["finishing"] = True  # what is left is the encoders' drain and the file
                        if hasattr(r._engine, "done"):
                            r._engine.done()  # a batcher's view: the next job's batches wait for none of ours
            if r.result is None:
                raise Cancelled("render cancelled; nothing was written")
            return r.result
        finally:
            if release is not None:
                release()

    def read(self, key: str, offset: int, size: int = READ_CHUNK) -> bytes:
        """``size`` bytes of a finished file from ``offset`` (b"" at its end)."""
        with self._lock:
            path = self.outputs[key]
        with open(path, "rb") as fh:
            fh.seek(offset)
            return fh.read(size)

    def discard(self, key: str) -> None:
        """The head has the file (or gave up on it): remove it here."""
        from studio.core.store.temps import release_temp

        with self._lock:
            path = self.outputs.pop(key, None)
        if path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            release_temp(path)

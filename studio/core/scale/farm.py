"""The render farm: chunked renders on a Ray cluster, one warm worker per GPU (or per CPU slot).

    farm = Farm.connect()                     # a cluster started by `studio farm up`, else a local one
    for p in farm.render(avatar, "voice.wav", "out.mp4", RenderSettings(engine="classic")):
        bar.update(p.done, p.total, p.fps)     # p.workers: frames/s per worker
    farm.result                               # a RenderResult, as Renderer.result

Each worker is a Ray actor (``num_gpus=1`` where the cluster has GPUs, else ``num_cpus=1``) that
keeps its engine and the job's prepared avatar and audio features between chunks and jobs. The
avatar cache travels once per node: the driver puts its files into the object store once per job,
and a worker fetches them only when its node holds no copy yet (a shared folder with the same
cache, or an earlier worker on that node, needs no transfer). Model weights are read from each
node's own model store (``studio models import`` there, or a shared ``STUDIO_HOME``).

A chunk whose worker dies (process killed, node lost) is retried on another worker; the job still
completes and only the finished file ever appears. ``cancel()`` stops every chunk after its current
batch. Local clusters bind 127.0.0.1 only and run without the dashboard.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import tempfile
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from studio.core.errors import Cancelled, RenderError, StudioError
from studio.core.scale.chunks import (
    avatar_reference,
    check_chunk_codec,
    join_segments,
    render_segment,
    segment_suffix,
    segments_result,
    split,
)

if TYPE_CHECKING:
    from studio.core.render.results import RenderProgress, RenderResult

log = logging.getLogger(__name__)

NAMESPACE = "studio"
MAX_ATTEMPTS = 3  # a chunk is tried this often before the job fails
ACTOR_RESTARTS = 2  # Ray restarts a dead worker process this often
POLL_S = 0.25


def ray_available() -> tuple[bool, str]:
    """(importable, why not): the farm needs the ``farm`` extra (``pip install 'studio[farm]'``)."""
    try:
        import ray  # noqa: F401
    except Exception as exc:  # noqa: BLE001
        return False, f"ray is not installed ({type(exc).__name__}: {exc}); pip install 'studio[farm]'"
    return True, "ray importable"


def init_ray(address: str | None = None, *, num_cpus: int | None = None, num_gpus: int | None = None) -> str:
    """Connect to the cluster at ``address`` ("auto": the one started on this host), or start a
    local one bound to 127.0.0.1 without the dashboard when ``address`` is None."""
    ok, why = ray_available()
    if not ok:
        raise RenderError(f"The render farm needs Ray: {why}.")
    import ray

    if ray.is_initialized():
        return "already connected"
    common: dict[str, Any] = dict(namespace=NAMESPACE, configure_logging=False, log_to_driver=False)
    if address:
        if address == "auto" or address.split(":")[0] in LOOPBACK:
            loopback_only()
        if address != "auto":
            _check_reachable(address)
            _token_auth_as_for_auto()
        try:
            ray.init(address=address, **common)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            raise RenderError(f"No Ray cluster answers at {address} ({exc}): start one with `studio farm up`.") from exc
        return f"joined {address}"
    loopback_only()
    # "local": a new cluster even where `studio farm up` runs one (or left its address file behind)
    ray.init(address="local", num_cpus=num_cpus, num_gpus=num_gpus, include_dashboard=False, **common)
    return "local cluster on 127.0.0.1"


def _token_auth_as_for_auto() -> None:
    """Send this host's Ray token to a HOST:PORT farm too, as Ray itself does for "auto".

    ``studio farm up`` clusters use Ray's token authentication when a token exists
    (``~/.ray/auth_token``, ``RAY_AUTH_TOKEN[_PATH]``); Ray enables it in the driver only when it
    finds the cluster itself, so a HOST:PORT connection was refused ("InvalidAuthToken").
    """
    from studio.core import env

    if env.other("RAY_AUTH_MODE"):
        return
    if (
        env.other("RAY_AUTH_TOKEN")
        or env.other("RAY_AUTH_TOKEN_PATH")
        or (Path.home() / ".ray" / "auth_token").is_file()
    ):
        env.put("RAY_AUTH_MODE", "token")


LOOPBACK = ("127.0.0.1", "localhost")


def _check_reachable(address: str, timeout: float = 3.0) -> None:
    """Fail in seconds, not after Ray's long connection retries, when nothing listens at ``address``."""
    import socket

    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout):
            return
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__
        raise RenderError(f"No Ray cluster answers at {address} ({reason}): start one with `studio farm up`.") from exc


def loopback_only() -> dict:
    """Make Ray processes started from here use 127.0.0.1 as the node address and listen on it only.

    Ray turns an explicit 127.0.0.1 into the host's public address (so that clusters work), but
    on its loopback setting (the one it uses on macOS/Windows) every server binds 127.0.0.1.
    Returns the environment entry for Ray processes started as commands (``ray start``).
    """
    from studio.core.env import put

    env = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    for name, value in env.items():
        put(name, value)
    with contextlib.suppress(Exception):
        from ray._private import ray_constants

        ray_constants.ENABLE_RAY_CLUSTER = False  # read at call time; the variable covers child processes
    return env


class Farm:
    """A pool of warm render workers on the connected Ray cluster."""

    def __init__(self, workers: int | None = None, *, gpus: bool | None = None, detached: bool = False, actors=None):
        """``actors``: label -> workers already running (``studio serve --farm``'s): none is started."""
        import ray

        res = ray.cluster_resources()
        self.gpus = bool(res.get("GPU", 0)) if gpus is None else gpus
        self._actors = dict(actors) if actors else self._start(workers, detached, res)
        n = len(self._actors)
        self._board = _board_class().options(num_cpus=0).remote()
        self.pids: dict[str, int] = dict(zip(self._actors, ray.get([a.pid.remote() for a in self._actors.values()])))
        self._cancel = threading.Event()
        self._reviving: dict = {}  # pid ref of a restarting worker -> label
        self._shipped: dict = {}
        self.result: RenderResult | None = None
        self.retries = 0
        log.info("farm: %d %s worker(s)", n, "GPU" if self.gpus else "CPU")

    def _start(self, workers: int | None, detached: bool, res: dict) -> dict:
        n = max(1, int(workers) if workers else int(res.get("GPU", 0) if self.gpus else res.get("CPU", 1)))
        opts: dict[str, Any] = dict(num_gpus=1, num_cpus=1) if self.gpus else dict(num_cpus=1)
        opts.update(max_restarts=ACTOR_RESTARTS, max_task_retries=0)
        actors = {}
        for label in (f"{'gpu' if self.gpus else 'cpu'}{i}" for i in range(n)):
            kw = dict(opts)
            if detached:  # stays warm between CLI runs on a long-lived cluster
                kw.update(name=f"studio-worker-{label}", lifetime="detached", get_if_exists=True)
            actors[label] = _worker_class().options(**kw).remote(label, 1 if not self.gpus else 0)
        return actors

    @classmethod
    def connect(cls, address: str | None = None, workers: int | None = None, **init_kw) -> Farm:
        """``address``: a Ray address, "auto" (the cluster `studio farm up` started here), or None:
        that cluster when there is one, else a local cluster on 127.0.0.1."""
        if address is None:
            try:
                init_ray("auto")
                detached = True
            except RenderError:
                init_ray(None, **init_kw)
                detached = False
        else:
            init_ray(address)
            detached = True
        return cls(workers, detached=detached)

    @property
    def workers(self) -> list[str]:
        return list(self._actors)

    def cancel(self) -> None:
        """Stop the running job: every chunk stops after its current batch; nothing is written."""
        self._cancel.set()

    def render(
        self, avatar, audio, output, settings=None, *, chunks: int | None = None, overwrite: bool = True
    ) -> Iterator[RenderProgress]:
        """Render on the farm, yielding ``RenderProgress`` (with per-worker fps and chunk counts)
        about four times a second.

        ``chunks``: how many segments (default: one per worker). The last progress has
        ``finished=True``; ``self.result`` then holds a ``RenderResult``.
        """
        import ray

        from studio.core.media.writer import check_output
        from studio.core.render.clip import Clip
        from studio.core.render.results import RenderProgress
        from studio.core.settings import RenderSettings

        settings = settings or RenderSettings()
        check_chunk_codec(settings.codec)  # before any work: the join takes these codecs
        self._cancel.clear()
        self.result = None
        t0 = time.perf_counter()
        check_output(output)
        clip = Clip(avatar, audio, settings)
        T = clip.plan.frames
        ranges = split(T, chunks or len(self._actors))
        job = dict(
            id=uuid.uuid4().hex,
            avatar=self._ship(clip.avatar),
            audio=ship_file(audio),
            settings=settings,
            board=self._board,
        )
        todo = deque((a, b, 1) for a, b in ranges)
        idle = deque(self._actors)
        running: dict = {}  # ref -> (label, start, end, attempt)
        failures: dict[str, int] = {}
        segments = []
        per_worker: dict = {}
        self.retries = 0
        try:
            while todo or running:
                if self._cancel.is_set():
                    self._stop(job, running)
                    raise Cancelled("render cancelled; nothing was written")
                while todo and idle:
                    label = idle.popleft()
                    a, b, attempt = todo.popleft()
                    ref = self._actors[label].render.remote(job, a, b, attempt)
                    running[ref] = (label, a, b, attempt)
                self._revived(idle)
                if not running:  # every worker is restarting
                    if not self._actors:
                        raise RenderError("Every farm worker died: check the farm's nodes and start them again.")
                    time.sleep(POLL_S)
                ready, _ = ray.wait(list(running), num_returns=1, timeout=POLL_S) if running else ([], [])
                for ref in ready:
                    label, a, b, attempt = running.pop(ref)
                    try:
                        segments.append(ray.get(ref))
                        idle.append(label)
                    except ray.exceptions.RayActorError as exc:  # the worker died mid-chunk
                        self._worker_died(label, a, b, attempt, exc, failures, idle, todo)
                    except ray.exceptions.RayTaskError as exc:
                        cause = getattr(exc, "cause", None)
                        if isinstance(cause, Cancelled) and self._cancel.is_set():
                            continue
                        self._stop(job, running)
                        if isinstance(cause, StudioError):
                            raise cause from None
                        raise RenderError(f"Chunk {a}..{b} failed on worker {label}: {cause or exc}.") from exc
                try:
                    done, per_worker = ray.get(self._board.poll.remote(job["id"]))
                except Exception as exc:
                    raise RenderError(
                        f"The farm stopped answering during the job ({type(exc).__name__}): "
                        "check `studio farm status` and render again."
                    ) from exc
                yield RenderProgress.measured(
                    done,
                    T,
                    time.perf_counter() - t0,
                    workers=per_worker,
                    chunks_done=len(segments),
                    chunks=len(ranges),
                    retries=self.retries,
                )
        except BaseException:  # an error, Ctrl-C or the caller dropping the generator: stop the chunks
            self._stop(job, running)
            with contextlib.suppress(Exception):
                self._board.forget.remote(job["id"])
            raise
        loud = None
        try:
            from studio.core.media.loudness import delivered_audio

            with delivered_audio(audio, settings) as (sound, loud):
                path = join_segments(
                    [(g.start, g.end, data) for g, data in segments],
                    output,
                    audio=sound,
                    fps=clip.rate,
                    overwrite=overwrite,
                    codec=settings.codec,
                    clip=clip,  # the timecode track and chapters of a one-process render
                )
        finally:
            with contextlib.suppress(Exception):
                self._board.forget.remote(job["id"])
        seconds = time.perf_counter() - t0
        self.result = segments_result(clip, [g for g, _ in segments], path, seconds, loud, farm=seconds * 1e3)
        yield RenderProgress.final(
            self.result,
            seconds,
            workers=per_worker,
            chunks_done=len(ranges),
            chunks=len(ranges),
            retries=self.retries,
        )

    def stats(self, timeout: float | None = None) -> dict[str, dict]:
        """Per worker: engines loaded, jobs, chunks and avatar fetches since its process started.
        ``timeout``: seconds to wait for every worker's answer (Ray's ``GetTimeoutError`` after it)."""
        import ray

        answers = ray.get([a.stats.remote() for a in self._actors.values()], timeout=timeout)
        return dict(zip(self._actors, answers))

    def shutdown(self) -> None:
        """Kill this farm's workers (a detached pool on a shared cluster stays unless killed here)."""
        import ray

        for actor in self._actors.values():
            with contextlib.suppress(Exception):
                ray.kill(actor)
        self._actors.clear()

    # -- helpers -----------------------------------------------------------------------------

    def _worker_died(self, label, a, b, attempt, exc, failures, idle, todo) -> None:
        import ray

        failures[label] = failures.get(label, 0) + 1
        self.retries += 1
        log.warning(
            "farm: worker %s died during chunk %d..%d (attempt %d): %s", label, a, b, attempt, type(exc).__name__
        )
        if attempt >= MAX_ATTEMPTS:
            raise RenderError(f"Chunk {a}..{b} failed {attempt} times as its workers died: check the farm's nodes.")
        todo.appendleft((a, b, attempt + 1))  # taken by the next idle worker, another one where any is idle
        if failures[label] <= ACTOR_RESTARTS:  # Ray restarts its process: it rejoins the pool once it answers
            self.pids.pop(label, None)
            self._reviving[self._actors[label].pid.remote()] = label
        else:
            with contextlib.suppress(Exception):
                ray.kill(self._actors.pop(label))
            if not self._actors:
                raise RenderError("Every farm worker died: check the farm's nodes and start them again.")

    def _ship(self, assets) -> dict:
        """The avatar's files in the object store, put once per avatar version for this farm."""
        key = _avatar_key(assets.folder)
        if key not in self._shipped:
            self._shipped = {key: ship_avatar(assets)}  # the newest only: the store is memory
        return self._shipped[key]

    def _revived(self, idle) -> None:
        """Workers restarted by Ray rejoin the idle pool once they answer again."""
        import ray

        if not self._reviving:
            return
        ready, _ = ray.wait(list(self._reviving), num_returns=len(self._reviving), timeout=0)
        for ref in ready:
            label = self._reviving.pop(ref)
            try:
                self.pids[label] = ray.get(ref)
                idle.append(label)
            except ray.exceptions.ActorUnavailableError:  # still restarting
                self._reviving[self._actors[label].pid.remote()] = label
            except ray.exceptions.RayActorError:  # out of restarts
                self._actors.pop(label, None)

    def _stop(self, job, running) -> None:
        """Tell every chunk to stop, then wait (briefly) until they have."""
        import ray

        with contextlib.suppress(Exception):
            ray.get(self._board.cancel.remote(job["id"]))
        refs = list(running)
        for ref in refs:
            with contextlib.suppress(Exception):
                ray.cancel(ref)
        with contextlib.suppress(Exception):
            ray.wait(refs, num_returns=len(refs), timeout=30)
        running.clear()


# ------------------------------------------------------------------------------------------------
# What travels: the avatar cache folder and the audio file, once per job through the object store


def ship_avatar(assets) -> dict:
    """An avatar's cache files in the object store, and where the driver has them (``local_avatar``
    on a worker reads the driver's folder when its node shares it, else fetches the files once)."""
    import ray

    folder, name = avatar_reference(assets)
    files = {}
    for p in sorted(Path(folder).rglob("*")):
        if p.is_file() and not p.name.startswith("."):
            files[str(p.relative_to(folder))] = p.read_bytes()
    return dict(
        key=_avatar_key(folder), folder=folder, name=name, files=[ray.put(files)]
    )  # a list: not resolved by Ray


def _avatar_key(folder) -> str:
    """An avatar cache version: its meta.json holds every file's size and checksum."""
    return hashlib.sha256((Path(folder) / "meta.json").read_bytes()).hexdigest()[:24]


def ship_file(path) -> dict:
    """A file (the voice-over) in the object store, keyed by its content (``local_file`` on a worker)."""
    import ray

    path = Path(path)
    data = path.read_bytes()
    return dict(key=hashlib.sha256(data).hexdigest()[:24], name=path.name, data=[ray.put(data)])


def local_avatar(spec: dict):
    """``(assets, fetched)``: the shipped avatar on this node: the driver's folder when this node
    shares it, else a node-local copy made once from the object store (``fetched`` = 1 then) and
    reused by every worker and job here."""
    from studio.core.env import sub_dir
    from studio.core.scale.chunks import open_avatar

    src = Path(spec["folder"])
    meta = src / "meta.json"
    if meta.is_file() and _avatar_key(src) == spec["key"]:
        return open_avatar((str(src), spec["name"])), 0
    dest = sub_dir("cache/farm/avatars") / spec["key"]
    fetched = 0
    if not (dest / "meta.json").is_file():
        import ray

        fetched = 1
        files = ray.get(spec["files"][0])
        tmp = Path(tempfile.mkdtemp(prefix=".incoming.", dir=dest.parent))
        for rel, data in files.items():
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp / rel).write_bytes(data)
        try:
            os.replace(tmp, dest)
        except OSError:  # another worker on this node was first
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    return open_avatar((str(dest), spec["name"])), fetched


def local_file(spec: dict) -> str:
    """The shipped file on this node (fetched once into ``<data>/cache/farm/audio``)."""
    from studio.core.env import sub_dir

    suffix = Path(spec["name"]).suffix
    dest = sub_dir("cache/farm/audio") / f"{spec['key']}{suffix}"
    if not dest.is_file():
        import ray

        from studio.core.store.fsutil import atomic_write_bytes

        atomic_write_bytes(dest, ray.get(spec["data"][0]))
    return str(dest)


# ------------------------------------------------------------------------------------------------
# Ray actors (classes made on first use, so importing this module does not import Ray)

_CLASSES: dict = {}


def _worker_class():
    if "worker" not in _CLASSES:
        import ray

        _CLASSES["worker"] = ray.remote(_Worker)
    return _CLASSES["worker"]


def _board_class():
    if "board" not in _CLASSES:
        import ray

        _CLASSES["board"] = ray.remote(_Board)
    return _CLASSES["board"]


class _Worker:
    """One render slot. Keeps engines (core's ``EngineCache``: keyed by everything that picks one,
    compile and the imported weights included) and the last jobs' renderers warm."""

    KEEP_JOBS = 2

    def __init__(self, label: str, torch_threads: int):
        from studio.core.engines.cache import EngineCache
        from studio.core.store.temps import sweep_dead_temps

        with contextlib.suppress(Exception):  # a killed actor's chunk files (its records say which): gone now
            sweep_dead_temps()
        self.label = label
        self.engines = EngineCache()
        self.jobs: dict = {}
        self.counts = {"engines_loaded": 0, "jobs": 0, "chunks": 0, "avatar_fetches": 0}
        if torch_threads:
            with contextlib.suppress(Exception):
                import torch

                torch.set_num_threads(torch_threads)

    def pid(self) -> int:
        return os.getpid()

    def stats(self) -> dict:
        """What this worker process loaded: engines, jobs, chunks, avatars fetched from the object store."""
        return dict(self.counts, pid=os.getpid())

    def render(self, job: dict, start: int, end: int, attempt: int):
        import ray

        renderer = self._renderer(job)
        self.counts["chunks"] += 1
        board, t0, done = job["board"], time.perf_counter(), 0

        def on_batch(n):
            nonlocal done
            done += n
            fps = done / max(1e-9, time.perf_counter() - t0)
            self._stop = ray.get(board.report.remote(job["id"], start, attempt, self.label, done, fps))

        self._stop = False
        fd, tmp = tempfile.mkstemp(prefix="studio-chunk-", suffix=segment_suffix(renderer.settings.codec))
        os.close(fd)
        os.unlink(tmp)
        try:
            segment = render_segment(renderer, start, end, tmp, on_batch=on_batch, should_stop=lambda: self._stop)
            data = Path(tmp).read_bytes()
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        return segment, data  # the segment's file travels as bytes (the driver may be elsewhere)

    def _renderer(self, job: dict):
        from studio.core.render.renderer import Renderer

        if job["id"] in self.jobs:
            return self.jobs[job["id"]]
        s = job["settings"]
        avatar, fetched = local_avatar(job["avatar"])
        audio = local_file(job["audio"])
        engine, reason = self.engines.get(s)  # kept for later chunks and jobs
        self.counts["engines_loaded"] = self.engines.loaded
        self.counts["avatar_fetches"] += fetched
        self.counts["jobs"] += 1
        r = Renderer(avatar, audio, s, engine=engine, engine_reason=reason)
        while len(self.jobs) >= self.KEEP_JOBS:
            self.jobs.pop(next(iter(self.jobs)))
        self.jobs[job["id"]] = r
        return r


class _Board:
    """Progress and cancel flags of the running jobs (a tiny actor the workers report to)."""

    def __init__(self):
        self.chunks: dict = {}  # job -> {start: (attempt, done)}
        self.fps: dict = {}  # job -> {worker: fps}
        self.cancelled: set = set()

    def report(self, job: str, start: int, attempt: int, worker: str, done: int, fps: float) -> bool:
        chunks = self.chunks.setdefault(job, {})
        if chunks.get(start, (0, 0))[0] <= attempt:
            chunks[start] = (attempt, done)
        self.fps.setdefault(job, {})[worker] = round(fps, 2)
        return job in self.cancelled

    def poll(self, job: str):
        return sum(d for _, d in self.chunks.get(job, {}).values()), dict(self.fps.get(job, {}))

    def cancel(self, job: str) -> None:
        self.cancelled.add(job)

    def forget(self, job: str) -> None:
        self.chunks.pop(job, None)
        self.fps.pop(job, None)
        self.cancelled.discard(job)

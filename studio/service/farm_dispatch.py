"""``studio serve --farm``: one queue on the head, its jobs rendered by warm actors on a Ray cluster.

    d = FarmDispatcher("10.0.0.5:6379", jobs_per_device=2)     # "": the farm started here, else a local one
    d.start()                                  # connect, one actor per GPU (or CPU slot) of every node
    actor = d.reserve(job_id)                  # the actor with the fewest frames queued and a free slot
    job = d.job(job_id, request, cancel_event)     # what ``Render`` runs for a job of the queue
    for p in job.run(on_started): ...          # RenderProgress from the worker; job.result, job.extra
    d.status()                                 # nodes, actors, jobs in flight (GET /v1/farm)
    d.close()

The HTTP API, the SQLite queue and retention stay on the head. The head's queue claims a job when an
actor has a free slot (``free_slots``) and reserves it on the actor with the fewest frames queued
(not round-robin), never more than its ``capacity`` (``--jobs-per-device``) jobs on its engine. A job
whose frames have left the engine (the actor reports it ``finishing``: its encoders drain, its file
is muxed and comes back) frees its slot for the next job, at most one such job more per actor: the
rule of the local pipelined queue, so the actor's engine does not idle while a file finishes.
Inputs travel through Ray's object store (``ship_avatar``/``ship_file``: once per node); the finished
file comes back to the head in pieces, its SHA-256 checked, into a temporary claimed under the
output's name as a local render's is (``fsutil.atomic_output``), unless the worker's node sees the
head's data folder (a token file), where the worker writes it in place.

A monitor thread polls every actor's progress (which becomes the job's progress: SSE, webhooks and
/metrics as locally) and rediscovers the cluster's nodes every ``STUDIO_FARM_DISCOVER_S`` seconds:
a node that joins gets actors; the actors of one that leaves are dead, and a job whose actor died
(its process killed, its node lost) is rendered once more on another actor; a second loss fails it
with one sentence. ``drain(name)`` lets an actor finish its jobs and take no new ones.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import secrets
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from studio.core.errors import Cancelled, RenderError, StudioError

log = logging.getLogger(__name__)

POLL_S = 0.25  # the monitor polls the actors this often
KEEP_DEAD_S = 300.0  # a dead actor stays listed this long
SHARE_FILE = "farm-share"  # in the head's data folder: a worker that reads its token shares the folder


def serve_pool(batching: bool):
    """A worker's engine pool (made on the worker: the service's ``EnginePool``, its batches merged)."""
    from studio.service.pool import EnginePool

    pool = EnginePool()
    pool.batching = batching
    return pool


class _Actor:
    """The head's view of one worker actor."""

    def __init__(self, name: str, node: str, label: str, device: str, capacity: int, handle):
        self.name, self.node, self.label, self.device, self.capacity = name, node, label, device, capacity
        self.handle = handle
        self.host = ""
        self.state = "starting"  # starting | idle | busy | draining | dead
        self.draining = False
        self.ready_ref: Any = handle.ready.remote()
        self.poll_ref: Any = None
        self.jobs: dict[int, int] = {}  # job id -> frames it is expected to render (estimate)
        self.finishing: set[int] = set()  # jobs whose frames have left the engine (their file finishes)
        self.progress: dict[str, tuple] = {}  # key -> (done, total, fps)
        self.keys: dict[str, int] = {}  # key -> job id
        self.warm: list[str] = []
        self.frames_done = 0
        self.fps = 0.0
        self._last = (time.monotonic(), 0)
        self.died = 0.0

    @property
    def usable(self) -> bool:
        return self.state in ("idle", "busy") and not self.draining

    @property
    def free(self) -> int:
        """Jobs it can take now: ``capacity`` on the engine, and at most one more finishing its file."""
        if not self.usable:
            return 0
        on_engine = len(self.jobs) - len(self.finishing & self.jobs.keys())
        return max(0, min(self.capacity - on_engine, self.capacity + 1 - len(self.jobs)))

    def queued_frames(self) -> int:
        left = {self.keys[k]: max(0, p[1] - p[0]) for k, p in self.progress.items() if k in self.keys and p[1]}
        return sum(0 if j in self.finishing else left.get(j, est) for j, est in self.jobs.items())

    def settle(self) -> None:
        if self.state != "dead" and self.state != "starting":
            self.state = "draining" if self.draining else "busy" if self.jobs else "idle"

    def row(self) -> dict:
        return dict(
            name=self.name,
            node=self.node,
            device=self.device,
            state="draining" if self.state == "starting" else self.state,
            warm_engines=list(self.warm),
            jobs_in_flight=sorted(self.jobs),
            queued_frames=self.queued_frames(),
            capacity=self.capacity,
            frames_per_s=round(self.fps, 2),
            frames_done=self.frames_done,
        )


class FarmDispatcher:
    """Whole jobs of the head's queue on the farm's warm actors (see the module's docstring)."""

    def __init__(
        self,
        address: str = "",
        *,
        jobs_per_device: int = 1,
        batching: bool = True,
        warm: list | None = None,
        discover_s: float | None = None,
    ):
        from studio.core import env

        self.address = address or ""
        self.jobs_per_device = max(1, int(jobs_per_device))
        self.batching = batching
        self.warm_settings = list(warm or [])
        self.discover_s = discover_s if discover_s is not None else env.get_float("STUDIO_FARM_DISCOVER_S", 5.0)
        self.token = secrets.token_hex(4)
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._actors: dict[str, _Actor] = {}
        self._nodes: list[dict] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._shipped: dict[str, dict] = {}
        self._share: dict | None = None
        self.connected = False
        # what /v1/ready says while the farm starts (``ready``, ``error``, ``status_text()``, ``seconds``)
        self.ready = False
        self.error: str | None = None
        self.doing = "connecting to the farm"
        self.seconds: float | None = None
        self.started = time.monotonic()
        #: called (outside the lock) when a slot frees because a job's frames left its actor's engine
        self.on_free: Callable[[], None] | None = None

    # ---- life ---------------------------------------------------------------------------

    def start(self, then: Callable[[], None] | None = None) -> None:
        """Connect, start the actors and monitor them on one thread; ``then`` (the queue runner) once
        an actor is ready. One thread for all of it: a local cluster's processes die with the thread
        that started them (Ray sets their parent-death signal), so it lives as long as the farm."""
        self._thread = threading.Thread(target=self._run, args=(then,), name="studio-farm", daemon=True)
        self._thread.start()

    def _run(self, then) -> None:
        try:
            self.connect()
        except StudioError as exc:
            self.error = str(exc)
            return
        except Exception as exc:
            log.exception("the farm did not start")
            self.error = f"the farm did not start ({type(exc).__name__}: {exc})"
            return
        self.doing = "starting the farm's render actors"
        self._monitor(then)

    def connect(self) -> None:
        """Join the cluster (``init_ray``; "": the farm started here, else a local one), write the
        share token, discover the nodes."""
        from studio.core.env import data_dir
        from studio.core.scale.farm import init_ray
        from studio.core.store.fsutil import atomic_write_bytes

        if self.address:
            init_ray(self.address)
        else:
            try:
                init_ray("auto")
            except RenderError:
                init_ray(None)
        self.connected = True
        token = secrets.token_hex(16)
        atomic_write_bytes(data_dir() / SHARE_FILE, token.encode())
        self._share = dict(path=str(data_dir()), name=SHARE_FILE, token=token)
        self._discover()

    def wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not self.ready and self.error is None and time.monotonic() < deadline:
            time.sleep(0.1)
        return self.ready

    def status_text(self) -> str:
        if self.error is not None:
            return f"the farm did not start: {self.error}"
        return f"warming up: {self.doing} ({time.monotonic() - self.started:.0f} s so far)"

    def close(self) -> None:
        """Stop monitoring and leave the cluster (this head's actors end with it)."""
        import ray

        self._stop.set()
        with self._changed:
            self._changed.notify_all()
        if self._thread is not None:
            self._thread.join(5)
        with self._lock:
            actors = list(self._actors.values())
        for a in actors:
            with contextlib.suppress(Exception):
                ray.kill(a.handle)
        if self.connected:
            with contextlib.suppress(Exception):
                ray.shutdown()
        self.connected = False

    # ---- dispatch -----------------------------------------------------------------------

    def free_slots(self) -> int:
        """Jobs the farm can start now (its usable actors' free slots)."""
        with self._lock:
            return sum(a.free for a in self._actors.values())

    def reserve(self, job_id: int, frames: int = 0, exclude: tuple[str, ...] = ()) -> _Actor | None:
        """A slot for ``job_id`` on the actor with the fewest frames queued (then fewest jobs, then
        name) among those with a free slot; None when none has one."""
        with self._lock:
            held = self.actor_of(job_id)
            if held is not None:
                return held
            free = [a for a in self._actors.values() if a.free > 0 and a.name not in exclude]
            if not free:
                return None
            best = min(free, key=lambda a: (a.queued_frames(), len(a.jobs), a.name))
            best.jobs[job_id] = frames
            best.settle()
            return best

    def reserve_all(self, job_id: int, frames: int, cancel: threading.Event) -> list[_Actor]:
        """A slot on every actor with one free (a long clip split in chunks), at least one (waited for)."""
        first = self.actor_of(job_id) or self.wait_reserve(job_id, frames, (), cancel)
        with self._changed:
            more = [a for a in self._actors.values() if a.free > 0 and a is not first]
            for a in more:
                a.jobs[job_id] = frames // (len(more) + 1)
                a.settle()
        return [first, *more]

    def wait_reserve(self, job_id: int, frames: int, exclude: tuple[str, ...], cancel: threading.Event) -> _Actor:
        """``reserve``, waiting for a slot (another actor first: ``exclude`` only while one exists)."""
        while True:
            with self._changed:
                a = self.reserve(job_id, frames, exclude)
                if a is None and exclude and not any(x.usable and x.name not in exclude for x in self._actors.values()):
                    a = self.reserve(job_id, frames)
                if a is not None:
                    return a
                if cancel.is_set() or self._stop.is_set():
                    raise Cancelled("render cancelled; nothing was written")
                self._changed.wait(POLL_S)

    def actor_of(self, job_id: int) -> _Actor | None:
        with self._lock:
            return next((a for a in self._actors.values() if job_id in a.jobs), None)

    def release(self, job_id: int) -> None:
        """The job left its actor (done, failed, moved): its slot is free."""
        with self._changed:
            for a in self._actors.values():
                a.finishing.discard(job_id)
                if a.jobs.pop(job_id, None) is not None or job_id in a.keys.values():
                    a.keys = {k: j for k, j in a.keys.items() if j != job_id}
                    a.settle()
            self._changed.notify_all()

    def drain(self, name: str) -> None:
        """``name`` takes no new job; its running ones finish."""
        with self._lock:
            a = self._actors.get(name)
            if a is not None:
                a.draining = True
                a.settle()

    def job(self, job_id: int, request, cancel: threading.Event):
        """What ``Render`` runs for a queued job (``farm_job.FarmJob``)."""
        from studio.service.farm_job import FarmJob

        return FarmJob(self, job_id, request, cancel)

    def status(self) -> dict:
        """Nodes, actors and jobs in flight, for ``GET /v1/farm`` and ``studio farm status``.

        An actor's state is idle, busy (jobs in flight), draining (takes no new job: asked to drain,
        or still starting) or dead (its process or node gone; listed for ``KEEP_DEAD_S``)."""
        with self._lock:
            actors = [a.row() for a in self._actors.values()]
            nodes = [dict(n) for n in self._nodes]
        return dict(
            address=self.address or "this machine",
            nodes=nodes,
            actors=actors,
            jobs_in_flight=sum(len(a["jobs_in_flight"]) for a in actors),
        )

    @property
    def actors(self) -> list[str]:
        with self._lock:
            return [a.name for a in self._actors.values() if a.state != "dead"]

    # ---- the cluster --------------------------------------------------------------------

    def _monitor(self, then=None) -> None:
        last = time.monotonic()
        while not self._stop.is_set():
            try:
                if time.monotonic() - last >= self.discover_s:
                    last = time.monotonic()
                    self._discover()
                self._poll()
            except Exception:
                log.warning("farm monitor: a round failed", exc_info=True)
            if not self.ready and any(a.usable for a in list(self._actors.values())):
                self.ready, self.seconds = True, time.monotonic() - self.started
                if then is not None:
                    then()
            self._stop.wait(POLL_S)

    def _discover(self) -> None:
        """Every alive node gets its actors (one per GPU, else one per CPU); a gone node's are dead."""
        import ray

        nodes = ray.nodes()
        alive = {n["NodeID"]: n for n in nodes if n.get("Alive")}
        rows = [
            dict(
                id=n["NodeID"],
                host=str(n.get("NodeManagerHostname") or n.get("NodeManagerAddress") or ""),
                alive=bool(n.get("Alive")),
                cpus=float(n.get("Resources", {}).get("CPU", 0.0)),
                gpus=float(n.get("Resources", {}).get("GPU", 0.0)),
            )
            for n in nodes
        ]
        with self._changed:
            self._nodes = rows
            for a in list(self._actors.values()):
                if a.node not in alive and a.state != "dead":
                    self._dead(a, "its node left the cluster")
                if a.state == "dead" and time.monotonic() - a.died > KEEP_DEAD_S and not a.jobs:
                    del self._actors[a.name]
            have = {(a.node, a.label) for a in self._actors.values() if a.state != "dead"}
        for node_id, n in alive.items():
            res = n.get("Resources", {})
            gpus, cpus = int(res.get("GPU", 0)), int(res.get("CPU", 0))
            slots = [(f"gpu{i}", "cuda") for i in range(gpus)] if gpus else [(f"cpu{i}", "cpu") for i in range(cpus)]
            for label, device in slots:
                if (node_id, label) not in have:
                    self._start_actor(node_id, label, device)

    def _start_actor(self, node_id: str, label: str, device: str) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from studio.core.scale.serve_worker import serve_worker_class

        name = f"studio-serve-{self.token}-{node_id[:8]}-{label}"
        with self._lock:
            if name in self._actors:  # a dead one of that name: a new name for its successor
                name = f"{name}-{uuid.uuid4().hex[:4]}"
        res = dict(num_gpus=1, num_cpus=1) if device == "cuda" else dict(num_cpus=1)
        handle = (
            serve_worker_class()
            .options(
                name=name,
                max_concurrency=self.jobs_per_device + 5,  # the jobs, one finishing, and progress/read/cancel
                max_restarts=0,
                max_task_retries=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
                **res,
            )
            .remote(
                label,
                device,
                self.jobs_per_device,
                1 if device == "cpu" else 0,
                functools.partial(serve_pool, self.batching),
            )
        )
        actor = _Actor(name, node_id, label, device, self.jobs_per_device, handle)
        with self._lock:
            self._actors[name] = actor
        log.info("farm: started actor %s (%s) on node %s", name, device, node_id[:8])

    def _poll(self) -> None:
        """Started actors become usable; every usable one's progress is read (a dead one noticed)."""
        import ray

        with self._lock:
            actors = [a for a in self._actors.values() if a.state != "dead"]
        for a in actors:
            if a.state == "starting":
                ready, _ = ray.wait([a.ready_ref], timeout=0)
                if ready:
                    try:
                        info = ray.get(a.ready_ref)
                    except Exception as exc:  # noqa: BLE001
                        with self._changed:
                            self._dead(a, f"it did not start ({type(exc).__name__})")
                        continue
                    with self._changed:
                        a.host, a.state = str(info.get("host", "")), "idle"
                        a.settle()
                        self._changed.notify_all()
                    for s in self.warm_settings:
                        a.handle.warm.remote(s)  # in the background: a job for it waits for the load
                continue
            if a.poll_ref is None:
                a.poll_ref = a.handle.progress.remote()
                continue
            ready, _ = ray.wait([a.poll_ref], timeout=0)
            if not ready:
                continue
            ref, a.poll_ref = a.poll_ref, None
            try:
                info = ray.get(ref)
            except ray.exceptions.RayActorError:
                with self._changed:
                    self._dead(a, "its process ended")
                continue
            except Exception:  # noqa: BLE001
                continue
            now = time.monotonic()
            with self._changed:
                a.progress = dict(info.get("jobs", {}))
                ends = {a.keys[k] for k, p in a.progress.items() if len(p) > 3 and p[3] and k in a.keys}
                freed = bool((ends & a.jobs.keys()) - a.finishing)
                a.finishing |= ends & a.jobs.keys()
                if freed:
                    self._changed.notify_all()
                a.warm = list(info.get("warm_engines", []))
                t, f = a._last
                done = int(info.get("frames_done", 0))
                if now - t >= 1.0:
                    rate = (done - f) / (now - t)
                    a.fps = rate if not a.fps else 0.5 * a.fps + 0.5 * rate
                    if not a.jobs and not a.progress:
                        a.fps = 0.0
                    a._last = (now, done)
                a.frames_done = done
            if freed and self.on_free is not None:
                self.on_free()  # the queue claims the next job now, not at its next look

    def _dead(self, a: _Actor, why: str) -> None:
        """(with the lock) ``a`` renders no more: its jobs' threads see it and move them."""
        if a.state != "dead":
            log.warning("farm: actor %s is gone (%s)", a.name, why)
        a.state, a.died = "dead", time.monotonic()
        self._changed.notify_all()

    # ---- what travels -------------------------------------------------------------------

    def spec(self, request) -> tuple[dict, int]:
        """The job as a worker gets it (its inputs in the object store), and its frames."""
        from studio.core.avatars.library import resolve
        from studio.core.media.audio import probe
        from studio.core.scale.farm import _avatar_key, ship_avatar, ship_file

        req = request
        assets = req.avatar if hasattr(req.avatar, "frames") else resolve(req.avatar)
        key = _avatar_key(assets.folder)
        with self._lock:
            avatar = self._shipped.get(key)
        if avatar is None:
            avatar = ship_avatar(assets)
            with self._lock:
                while len(self._shipped) >= 8:  # the object store is memory: the newest avatars only
                    self._shipped.pop(next(iter(self._shipped)))
                self._shipped[key] = avatar
        frames = (
            req.frames[1] - req.frames[0] if req.frames else probe(req.audio).frames_at(req.output_rate)
        )  # the rate the request resolved
        job = dict(
            avatar=avatar,
            audio=ship_file(req.audio),
            settings=req.render_settings,
            frames=req.frames,
            output=req.output,
            overwrite=req.overwrite,
            share=self._share if _inside_data(req.output) else None,
        )
        return job, int(frames)


def _inside_data(path: str) -> bool:
    from studio.core.env import data_dir
    from studio.core.store.files import inside

    return inside(path, data_dir())

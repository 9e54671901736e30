"""The farm's controller: it owns the replicas (Ray actors), their health and their nodes.

    c = Controller(jobs_per_device=2, make_pool=factory)    # connected to Ray already (``init_ray``)
    c.discover()          # every alive node gets its replicas (one per GPU, else one per CPU)
    c.poll()              # started replicas become usable; each one's progress is read (one call)
    c.actors()            # the head's views (``Actor``): state, jobs reserved, progress, frames/s
    c.status()            # nodes and replicas (``GET /v1/farm``, ``studio farm status``)

The controller's monitor (``Dispatcher``'s thread) calls ``poll`` four times a second and
``discover`` every few seconds. A replica whose process ends or whose node leaves is marked dead
(listed for ``KEEP_DEAD_S``) and a new one replaces it on its node at the next discovery (which
comes at once after a death); a job or chunk it held moves to another replica (the router's
callers retry it). A replica's progress call is the only way the head learns how far a task got.

The router (``studio.core.scale.router``) reads the actors' slots and frames queued; both use the
controller's lock and its ``changed`` condition (notified when a slot frees or a replica dies).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

KEEP_DEAD_S = 300.0  # a dead replica stays listed this long


class Actor:
    """The head's view of one replica."""

    def __init__(self, name: str, node: str, label: str, device: str, capacity: int, handle):
        self.name, self.node, self.label, self.device, self.capacity = name, node, label, device, capacity
        self.handle = handle
        self.host = ""
        self.pid = 0
        self.state = "starting"  # starting | idle | busy | draining | dead
        self.draining = False
        self.ready_ref: Any = handle.ready.remote()
        self.poll_ref: Any = None
        self.jobs: dict[int, int] = {}  # job id -> frames it is expected to render (estimate)
        self.finishing: set[int] = set()  # jobs whose frames have left the engine (their file finishes)
        self.progress: dict[str, tuple] = {}  # task key -> (done, total, fps, finishing)
        self.keys: dict[str, int] = {}  # task key -> job id
        self.warm: list[str] = []
        self.frames_done = 0
        self.fps = 0.0
        self.rate_mark = (time.monotonic(), 0)
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

    def task_progress(self, key: str) -> tuple | None:
        """(done, total, fps, finishing) of a task as last read, or None before the first read."""
        return self.progress.get(key)

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


class Controller:
    """The replicas of one head on the connected Ray cluster (see the module's docstring)."""

    def __init__(
        self,
        *,
        jobs_per_device: int = 1,
        make_pool: Any = None,
        warm: list | None = None,
        prefix: str = "",
        detached: bool = False,
        limit: int | None = None,
    ):
        """``prefix``: the replicas' names start with it (default ``studio-serve-<token>``);
        ``detached``: they outlive this process (warm between CLI runs on a ``studio farm up``
        cluster; their names are then the same for every run); ``limit``: at most this many."""
        import secrets

        self.jobs_per_device = max(1, int(jobs_per_device))
        self.make_pool = make_pool
        self.warm_settings = list(warm or [])
        self.prefix = prefix or f"studio-serve-{secrets.token_hex(4)}"
        self.detached = detached
        self.limit = limit
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.by_name: dict[str, Actor] = {}
        self.nodes: list[dict] = []
        self.rediscover = threading.Event()  # set when a replica died: discover (and replace it) now
        #: called (outside the lock) when a slot frees because a job's frames left its replica's engine
        self.on_free: Callable[[], None] | None = None

    # ---- views ----------------------------------------------------------------------------

    def actors(self) -> list[Actor]:
        with self.lock:
            return list(self.by_name.values())

    def live(self) -> list[Actor]:
        with self.lock:
            return [a for a in self.by_name.values() if a.state != "dead"]

    def usable(self) -> list[Actor]:
        with self.lock:
            return [a for a in self.by_name.values() if a.usable]

    def drain(self, name: str) -> None:
        """``name`` takes no new job; its running ones finish."""
        with self.lock:
            a = self.by_name.get(name)
            if a is not None:
                a.draining = True
                a.settle()

    def status(self) -> dict:
        """Nodes and replicas. A replica's state is idle, busy (jobs in flight), draining (takes no new
        job: asked to drain, or still starting) or dead (its process or node gone; listed for
        ``KEEP_DEAD_S``)."""
        with self.lock:
            actors = [a.row() for a in self.by_name.values()]
            nodes = [dict(n) for n in self.nodes]
        return dict(nodes=nodes, actors=actors, jobs_in_flight=sum(len(a["jobs_in_flight"]) for a in actors))

    def wait_usable(self, count: int, timeout: float) -> bool:
        """Until ``count`` replicas are usable (polling them meanwhile, for a caller without a monitor)."""
        deadline = time.monotonic() + timeout
        while len(self.usable()) < count and time.monotonic() < deadline:
            self.poll()
            time.sleep(0.05)
        return len(self.usable()) >= count

    # ---- health -----------------------------------------------------------------------------

    def discover(self) -> None:
        """Every alive node gets its replicas (one per GPU, else one per CPU); a gone node's are dead."""
        import ray

        self.rediscover.clear()
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
        with self.changed:
            self.nodes = rows
            for a in list(self.by_name.values()):
                if a.node not in alive and a.state != "dead":
                    self.dead(a, "its node left the cluster")
                if a.state == "dead" and time.monotonic() - a.died > KEEP_DEAD_S and not a.jobs:
                    del self.by_name[a.name]
            have = {(a.node, a.label) for a in self.by_name.values() if a.state != "dead"}
        count = len(have)
        for node_id, n in sorted(alive.items(), key=lambda kv: kv[1].get("NodeManagerAddress", "")):
            res = n.get("Resources", {})
            gpus, cpus = int(res.get("GPU", 0)), int(res.get("CPU", 0))
            slots = [(f"gpu{i}", "cuda") for i in range(gpus)] if gpus else [(f"cpu{i}", "cpu") for i in range(cpus)]
            for label, device in slots:
                if (node_id, label) not in have and (self.limit is None or count < self.limit):
                    self._start(node_id, label, device)
                    count += 1

    def _start(self, node_id: str, label: str, device: str) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from studio.core.scale.replica import replica_class

        name = f"{self.prefix}-{node_id[:8]}-{label}"
        with self.lock:
            if name in self.by_name:  # a dead one of that name: a new name for its successor
                name = f"{name}-{uuid.uuid4().hex[:4]}"
        res: dict[str, Any] = dict(num_gpus=1, num_cpus=1) if device == "cuda" else dict(num_cpus=1)
        if self.detached:
            res.update(lifetime="detached", get_if_exists=True)
        handle = (
            replica_class()
            .options(
                name=name,
                max_concurrency=self.jobs_per_device + 5,  # the tasks, one finishing, and progress/read/cancel
                max_restarts=0,  # a dead replica is replaced by the controller, not restarted under its name
                max_task_retries=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
                **res,
            )
            .remote(label, device, self.jobs_per_device, 1 if device == "cpu" else 0, self.make_pool)
        )
        actor = Actor(name, node_id, label, device, self.jobs_per_device, handle)
        with self.lock:
            self.by_name[name] = actor
        log.info("farm: started replica %s (%s) on node %s", name, device, node_id[:8])

    def poll(self) -> None:
        """Started replicas become usable; every usable one's progress is read (a dead one noticed)."""
        import ray

        for a in self.live():
            if a.state == "starting":
                self._started(a)
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
                with self.changed:
                    self.dead(a, "its process ended")
                continue
            except Exception:  # noqa: BLE001
                continue
            if self._read(a, info) and self.on_free is not None:
                self.on_free()  # the queue claims the next job now, not at its next look

    def _started(self, a: Actor) -> None:
        import ray

        ready, _ = ray.wait([a.ready_ref], timeout=0)
        if not ready:
            return
        try:
            info = ray.get(a.ready_ref)
        except Exception as exc:  # noqa: BLE001
            with self.changed:
                self.dead(a, f"it did not start ({type(exc).__name__})")
            return
        with self.changed:
            a.host, a.pid, a.state = str(info.get("host", "")), int(info.get("pid", 0)), "idle"
            a.settle()
            self.changed.notify_all()
        for s in self.warm_settings:
            a.handle.warm.remote(s)  # in the background: a job for it waits for the load

    def _read(self, a: Actor, info: dict) -> bool:
        """Take in one progress answer; True when a slot freed (a job's frames left the engine)."""
        now = time.monotonic()
        with self.changed:
            a.progress = dict(info.get("tasks", {}))
            ends = {a.keys[k] for k, p in a.progress.items() if len(p) > 3 and p[3] and k in a.keys}
            freed = bool((ends & a.jobs.keys()) - a.finishing)
            a.finishing |= ends & a.jobs.keys()
            self.changed.notify_all()  # followers of a task's progress look again
            a.warm = list(info.get("warm_engines", []))
            t, f = a.rate_mark
            done = int(info.get("frames_done", 0))
            if now - t >= 1.0:
                rate = (done - f) / (now - t)
                a.fps = rate if not a.fps else 0.5 * a.fps + 0.5 * rate
                if not a.jobs and not a.progress:
                    a.fps = 0.0
                a.rate_mark = (now, done)
            a.frames_done = done
        return freed

    def dead(self, a: Actor, why: str) -> None:
        """(with the lock) ``a`` renders no more: its tasks' followers see it and move them; the next
        discovery replaces it on its node."""
        if a.state != "dead":
            log.warning("farm: replica %s is gone (%s)", a.name, why)
        a.state, a.died = "dead", time.monotonic()
        self.rediscover.set()
        self.changed.notify_all()

    def kill_all(self) -> None:
        """End every replica of this controller (a detached one too)."""
        import ray

        for a in self.actors():
            with contextlib.suppress(Exception):
                ray.kill(a.handle)
        with self.changed:
            for a in self.by_name.values():
                a.state, a.died = "dead", time.monotonic()
            self.changed.notify_all()

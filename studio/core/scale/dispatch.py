"""The farm's one dispatcher: a controller, a router and the replicas' one task protocol.

    d = Dispatcher("10.0.0.5:6379", jobs_per_device=2)   # "": the farm started here, else a local one
    d.start(then)                           # connect and monitor on a thread of its own (``studio serve --farm``)
    d.attach()                              # or: already connected here (``Farm.connect``: CLI, the window's link)
    a = d.router.wait_reserve(job_id, frames, (), cancel)   # a replica, by frames queued
    call = d.call(a, job_id, task)          # a task on it: call.progress(), call.cancel(), call.outcome()
    call.fetch(path, cancel)                # its file in checked pieces (size and SHA-256)
    d.status(); d.close()

Three parts, as Ray Serve has them (docs/architecture.md draws them):

- the **controller** (``controller.Controller``) owns the replicas: it starts one per GPU (else per
  CPU) of every alive node, reads each one's progress (one call, four times a second, on the
  monitor thread), marks a replica dead when its process or node goes, and starts its successor;
- the **router** (``router.Router``) reserves a slot for a job on the replica with the fewest
  frames queued; a chunked render is one job holding slots on several replicas;
- the **replicas** (``replica.Replica``) run tasks (a whole job, or frames [a, b) of one) and
  answer one progress call, one cancel and one file-read protocol (``TaskCall`` here is its head side).

``studio serve --farm`` (``service.farm_dispatch.FarmDispatcher``, this class with the service's engine
pool), ``studio render --placement farm`` and the window's farm link (``Farm.connect``) all run on it.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import secrets
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from studio.core.errors import Cancelled, RenderError, StudioError
from studio.core.progress import Startup
from studio.core.scale.controller import Actor, Controller
from studio.core.scale.router import Router

log = logging.getLogger(__name__)

POLL_S = 0.25  # the monitor polls the replicas this often
READ_TIMEOUT_S = 120.0
SHARE_FILE = "farm-share"  # in the head's data folder: a replica that reads its token shares the folder


class Lost(RenderError):
    """The replica running a task went away (process killed, node lost, a file that stopped coming
    or arrived damaged): the task is to be run again elsewhere."""


class Dispatcher:
    """The farm's controller and router, and its monitor thread (see the module's docstring)."""

    def __init__(
        self,
        address: str = "",
        *,
        jobs_per_device: int = 1,
        make_pool: Any = None,
        warm: list | None = None,
        discover_s: float | None = None,
        prefix: str = "",
        detached: bool = False,
        limit: int | None = None,
    ):
        from studio.core import env

        self.address = address or ""
        self.discover_s = discover_s if discover_s is not None else env.get_float("STUDIO_FARM_DISCOVER_S", 5.0)
        self.controller = Controller(
            jobs_per_device=jobs_per_device,
            make_pool=make_pool,
            warm=warm,
            prefix=prefix,
            detached=detached,
            limit=limit,
        )
        self.router = Router(self.controller)
        self.detached = detached
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        self.shipped: dict[str, dict] = {}
        self.shipped_lock = threading.Lock()
        self.share: dict | None = None
        self.connected = False  # this dispatcher connected to Ray (and leaves it on close)
        self.startup = Startup("the farm did not start", "connecting to the farm")  # what /v1/ready says meanwhile

    @property
    def on_free(self) -> Callable[[], None] | None:
        """Called (outside the lock) when a slot frees because a job's frames left its replica's engine."""
        return self.controller.on_free

    @on_free.setter
    def on_free(self, fn: Callable[[], None] | None) -> None:
        self.controller.on_free = fn

    # ---- life ---------------------------------------------------------------------------

    def start(self, then: Callable[[], None] | None = None) -> None:
        """Connect, start the replicas and monitor them on one thread; ``then`` (the queue runner) once
        a replica is ready. One thread for all of it: a local cluster's processes die with the thread
        that started them (Ray sets their parent-death signal), so it lives as long as the farm."""
        self.thread = threading.Thread(target=self._run, args=(then,), name="studio-farm", daemon=True)
        self.thread.start()

    def attach(self, count: int = 1, timeout: float = 180.0) -> None:
        """Already connected on this thread: start the replicas, wait for ``count`` of them (at most
        as many as the cluster has slots for), then monitor them on a thread."""
        self._share_token()
        self.controller.discover()
        want = min(count, len(self.controller.live())) or 1
        if not self.controller.wait_usable(want, timeout):
            raise RenderError(
                f"The farm's render workers did not start within {timeout:.0f} s: check `studio farm status`."
            )
        self.startup.succeed()
        self.thread = threading.Thread(target=self._monitor, name="studio-farm", daemon=True)
        self.thread.start()

    def _run(self, then) -> None:
        try:
            self.connect()
        except StudioError as exc:
            self.startup.fail(str(exc))
            return
        except Exception as exc:
            log.exception("the farm did not start")
            self.startup.fail(f"{type(exc).__name__}: {exc}")
            return
        self.startup.doing = "starting the farm's render actors"
        self._monitor(then)

    def connect(self) -> None:
        """Join the cluster (``init_ray``; "": the farm started here, else a local one), write the
        share token, discover the nodes."""
        from studio.core.scale.cluster import init_ray

        if self.address:
            init_ray(self.address)
        else:
            try:
                init_ray("auto")
            except RenderError:
                init_ray(None)
        self.connected = True
        self._share_token()
        self.controller.discover()

    def _share_token(self) -> None:
        from studio.core.env import data_dir
        from studio.core.store.fsutil import atomic_write_bytes

        token = secrets.token_hex(16)
        atomic_write_bytes(data_dir() / SHARE_FILE, token.encode())
        self.share = dict(path=str(data_dir()), name=SHARE_FILE, token=token)

    def _monitor(self, then=None) -> None:
        last = time.monotonic()
        while not self.stop.is_set():
            try:
                if time.monotonic() - last >= self.discover_s or self.controller.rediscover.is_set():
                    last = time.monotonic()
                    self.controller.discover()
                self.controller.poll()
            except Exception:
                log.warning("farm monitor: a round failed", exc_info=True)
            if not self.startup.ready and self.controller.usable():
                self.startup.succeed()
            if self.startup.ready and then is not None:
                then, go = None, then
                go()
            self.stop.wait(POLL_S)

    def close(self) -> None:
        """Stop monitoring; end this head's replicas (a detached pool stays warm) and leave the
        cluster when this dispatcher joined it."""
        import ray

        self.stop.set()
        self.router.closed.set()
        with self.controller.changed:
            self.controller.changed.notify_all()
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join(5)
        if not self.detached:
            self.controller.kill_all()
        if self.connected:
            with contextlib.suppress(Exception):
                ray.shutdown()
        self.connected = False

    # ---- what the queue asks ------------------------------------------------------------

    def free_slots(self) -> int:
        return self.router.free_slots()

    def reserve(self, job_id: int, frames: int = 0) -> Actor | None:
        return self.router.reserve(job_id, frames)

    def release(self, job_id: int) -> None:
        self.router.release(job_id)

    def drain(self, name: str) -> None:
        self.controller.drain(name)

    def status(self) -> dict:
        """Nodes, replicas and jobs in flight, for ``GET /v1/farm`` and ``studio farm status``."""
        return dict(address=self.address or "this machine", **self.controller.status())

    @property
    def actors(self) -> list[str]:
        return [a.name for a in self.controller.live()]

    # ---- what travels -------------------------------------------------------------------

    def inputs(self, assets, audio) -> dict:
        """A task's inputs in the object store: the avatar (once per avatar version) and the audio."""
        from studio.core.scale.cluster import avatar_key, ship_avatar, ship_file

        key = avatar_key(assets.folder)
        with self.shipped_lock:
            avatar = self.shipped.get(key)
        if avatar is None:
            avatar = ship_avatar(assets)
            with self.shipped_lock:
                while len(self.shipped) >= 8:  # the object store is memory: the newest avatars only
                    self.shipped.pop(next(iter(self.shipped)))
                self.shipped[key] = avatar
        return dict(avatar=avatar, audio=ship_file(audio))

    def call(self, actor: Actor, job_id: int, task: dict, frames: int | None = None) -> TaskCall:
        """Send ``task`` (``inputs`` plus settings, and ``range`` for a chunk) to ``actor``."""
        return TaskCall(self.router, actor, job_id, task, frames)


class TaskCall:
    """The head's side of one task on one replica: send it, follow it, cancel it, fetch its file."""

    def __init__(self, router: Router, actor: Actor, job_id: int, task: dict, frames: int | None = None):
        self.router, self.actor, self.job_id = router, actor, job_id
        self.key = uuid.uuid4().hex
        self.in_flight = router.track(actor, self.key, job_id, frames)
        self.ref = actor.handle.run.remote(dict(task, key=self.key))
        self.fetched = False

    def progress(self) -> tuple[int, int, float, bool]:
        """(done, total, fps, finishing) as the controller last read them (zeros before that)."""
        p = self.actor.task_progress(self.key)
        return (int(p[0]), int(p[1]), float(p[2]), bool(p[3])) if p else (0, 0, 0.0, False)

    def cancel(self) -> None:
        """The one cancel: the replica stops the task after its current batch."""
        with contextlib.suppress(Exception):
            self.actor.handle.cancel.remote(self.key)

    def ended(self, timeout: float = 0) -> bool:
        import ray

        ready, _ = ray.wait([self.ref], timeout=timeout)
        return bool(ready)

    @property
    def lost(self) -> bool:
        return self.actor.state == "dead"

    def outcome(self) -> dict:
        """The replica's answer; ``Lost`` when it went away, its ``StudioError`` (``Cancelled``...) as is."""
        import ray

        try:
            return ray.get(self.ref)
        except ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, StudioError):
                raise cause from None
            raise RenderError(f"The render failed on farm worker {self.actor.name}: {cause or exc}.") from exc
        except lost_errors() as exc:
            raise Lost(type(exc).__name__) from exc

    def fetch(self, out: dict, path, cancel: threading.Event) -> None:
        """The one file protocol: the task's file, in pieces, into ``path``; its size and SHA-256 must
        match what the replica measured (a damaged or interrupted transfer raises ``Lost``)."""
        import ray

        from studio.core.scale.replica import READ_CHUNK

        h = hashlib.sha256()
        n = 0
        gone: tuple[type[BaseException], ...] = (*lost_errors(), ray.exceptions.GetTimeoutError)
        with open(path, "wb") as fh:
            while True:
                if cancel.is_set():
                    raise Cancelled("render cancelled; nothing was written")
                try:
                    data = ray.get(self.actor.handle.read.remote(self.key, n, READ_CHUNK), timeout=READ_TIMEOUT_S)
                except gone as exc:
                    raise Lost(f"the file stopped coming ({type(exc).__name__})") from exc
                if not data:
                    break
                fh.write(data)
                h.update(data)
                n += len(data)
        if n != out["size"] or h.hexdigest() != out["sha256"]:
            with contextlib.suppress(FileNotFoundError):
                Path(path).unlink()
            raise Lost(f"the file arrived damaged ({n} of {out['size']} bytes, SHA-256 differs)")
        self.fetched = True

    def close(self) -> None:
        """The task is over on the head: the replica's copy of its file goes; its progress is no longer followed."""
        import ray

        if ray.is_initialized():
            with contextlib.suppress(Exception):
                self.actor.handle.discard.remote(self.key)
        self.router.untrack(self.actor, self.key)


def lost_errors() -> tuple[type[BaseException], ...]:
    """Ray's errors that mean the replica (or its node) went away."""
    import ray

    e = ray.exceptions
    return tuple(
        getattr(e, n)
        for n in ("RayActorError", "WorkerCrashedError", "NodeDiedError", "ObjectLostError", "OwnerDiedError")
        if hasattr(e, n)
    )

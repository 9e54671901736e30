"""What the routers share: the options, the queue, the engine pool, the uploads and the event hub.

    st = ApiState(opts, queue=None, pool=None, uploads=UploadStore(...))   # app.state.studio
    def route(st: State): ...                      # a router's dependency (``get_state``)

The queue and the pool are made on first use (a test may hand in its own); ``open`` and ``close``
are the app's lifespan: the queue's events are fanned out to HTTP clients, the runner starts, and
on shutdown a running job is stopped, as when the window closes.
"""

from __future__ import annotations

import re
import socket
import time
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, Request

from studio.api.errors import ApiError
from studio.api.options import ServeOptions
from studio.api.sse import JobEvents, links, state_dict
from studio.api.uploads import UploadStore

#: seconds the server waits for a running job to stop when it shuts down: with uvicorn's graceful
#: shutdown (5 s) it stays under the 10 s a container runtime gives before SIGKILL
STOP_WAIT_S = 4.0
WHERE_LOCAL = "this computer"  # what the service's placement calls a render here (``request.WHERE_LOCAL``)


class ApiState:
    def __init__(self, opts: ServeOptions, queue, pool, uploads: UploadStore):
        self.opts = opts
        self._queue = queue
        self._pool = pool
        self._farm: Any = None
        self._scheduler: Any = None
        self.uploads = uploads
        self._events: JobEvents | None = None
        self.started = time.time()
        self._unsubscribe: Any = None
        self.webhooks: Any = None  # the webhook sender (``studio.api.webhooks``), when the server sends any
        self.warmup: Any = None  # the engines' warm-up (``studio.api.warmup``), once the app has started
        self._live: Any = None
        self.viewers: dict[str, Any] = {}  # WHEP viewers by id (``studio.api.live_rtc.Viewer``)
        from studio.api.metrics import Metrics

        self.metrics = Metrics(self)
        from studio.api.media import MediaSessions

        self.media = MediaSessions()  # the page's media cookie (``POST /v1/session``)
        uploads.on_stored = lambda kind, size: self.metrics.upload(kind, size)

    @property
    def queue(self):
        if self._queue is None:
            from studio.service.queue import QueueService

            o = self.opts
            self._queue = QueueService(
                pool=self.pool,
                retention=o.retention,
                devices=list(o.gpus) or None,
                jobs_per_device=o.jobs_per_device,
                dispatcher=self.farm,
                scheduler=self.scheduler,  # the farm claims in its order too (lanes, fair shares)
            )
        return self._queue

    @property
    def scheduler(self):
        """Lanes, fair shares and deadlines (``studio.service.scheduler``), the clients' weights from
        ``--clients``."""
        if self._scheduler is None:
            from studio.service.scheduler import Scheduler

            self._scheduler = Scheduler({c.name: c.weight for c in self.opts.clients})
        return self._scheduler

    @property
    def farm(self):
        """The ``FarmDispatcher`` of ``studio serve --farm`` (None without it): ``st.farm.status()``."""
        if self._farm is None and self.opts.farm is not None:
            from studio.service.farm_dispatch import FarmDispatcher

            o = self.opts
            warm = [] if not o.warm_engines else self._warm_settings()
            self._farm = FarmDispatcher(o.farm, jobs_per_device=o.jobs_per_device, batching=o.batching, warm=warm)
        return self._farm

    def _warm_settings(self) -> list:
        from studio.api.warmup import parse_warm

        return list(dict.fromkeys([parse_warm(""), *(parse_warm(w) for w in self.opts.warm)]))

    @property
    def pool(self):
        if self._pool is None:
            from studio.service.pool import default_pool

            self._pool = default_pool()
            self._pool.batching = self.opts.batching
        return self._pool

    @property
    def live(self):
        """The live sessions (``studio.service.live.LiveHub``), on the pool's warm engines."""
        if self._live is None:
            from studio.service.live import LiveHub

            self._live = LiveHub(self.pool, self.opts.max_live, observe=self.metrics.live)
        return self._live

    @property
    def events(self) -> JobEvents:
        """The event hub (made when the app starts)."""
        if self._events is None:
            raise RuntimeError("the app has not started: no event loop for job events yet")
        return self._events

    def open(self, loop) -> None:
        self._events = JobEvents(loop)
        q = self.queue
        if self.opts.max_queued is not None:
            q.max_queued = self.opts.max_queued
        subs = [q.subscribe(self.events.on_event), q.subscribe(self.metrics.on_event)]
        if self.opts.webhook_secret and self.opts.webhook_allow:
            from studio.api.webhooks import WebhookSender

            self.webhooks = WebhookSender(self)
            subs.append(q.subscribe(self.webhooks.on_event))
            self.webhooks.start()
        self._unsubscribe = lambda: [u() for u in subs]
        from studio.core.env import sub_dir
        from studio.service.retention import OWNED

        for name in OWNED:  # a fresh data folder is ready as soon as the engine is
            sub_dir(name)
        if self.farm is not None:  # ready once an actor of the farm is; each warms these engines
            self.warmup = self.farm.startup
            self.farm.start(then=q.start)
            return
        if not self.opts.warm_engines:
            q.start()
            return
        from studio.api.warmup import WarmUp

        self.warmup = WarmUp(self.pool, self._warm_settings(), list(self.opts.gpus), then=q.start)
        self.warmup.start()

    def close(self) -> None:
        """The server stops: as when the window closes, a running job is stopped (nothing written)."""
        if self._unsubscribe is not None:
            self._unsubscribe()
        if self.webhooks is not None:
            self.webhooks.stop()
        if self._live is not None:
            self._live.close_all()
        if self._queue is not None:
            self._queue.close(timeout=STOP_WAIT_S)

    def public_text(self, text: str) -> str:
        """A sentence for a client: paths inside the server's data folder become names (an upload:
        what the client called it; anything else: its file name), so no server path leaks."""
        from studio.core.env import data_dir

        root = str(data_dir())
        if root not in text:
            return text
        pattern = re.escape(root) + r"/[^\s'\",;:()]*"
        return re.sub(pattern, lambda m: self.uploads.display_name(m.group(0).rstrip(".")), text)

    # -- jobs ---------------------------------------------------------------------------------

    def job(self, job_id: int):
        """The job, or 404."""
        from studio.api.clients import sees
        from studio.core.errors import InputError

        try:
            job = self.queue.get(int(job_id))
        except InputError:
            job = None
        if job is None or not sees(job):  # another client's job is not there for this one
            raise ApiError(404, f"no render job {job_id}; see GET /v1/renders")
        return job

    def job_or_none(self, job_id: int):
        from studio.core.errors import InputError

        try:
            return self.queue.get(int(job_id))
        except InputError:
            return None

    def job_json(self, job, estimates: dict | None = None) -> dict:
        """A job as the API shows it (``models.Job``): names, never the server's paths. ``estimates``:
        the queue's positions and ETAs when already computed for a page of jobs."""
        from studio.api.side_files import side_files
        from studio.core.settings import SCHEMA
        from studio.service.job_requests import promises

        d = state_dict(job)
        d["reason"] = self.public_text(d["reason"])
        stored = dict(job.settings or {})
        frames = stored.get("frames")
        d.update(
            avatar=self.uploads.display_name(job.avatar) if "/" in job.avatar else job.avatar,
            audio=self.uploads.display_name(job.audio),
            output=Path(job.output).name,
            settings={k: v for k, v in stored.items() if k in SCHEMA},
            frame_range=list(frames) if frames else None,
            progress=job.progress,
            created=job.created,
            updated=job.updated,
            result=self.public_result(job.result),
            links=links(job.id),
            files=side_files(job),
            retry_of=job.retry_of,
            client=job.client or None,
        )
        d.update(promises(job, self.queue.timings.get(job.id)))
        if job.state in ("queued", "running"):
            est = (estimates if estimates is not None else self.queue.estimates()).get(job.id)
            if est is not None:
                d.update(position=est.position, eta_s=_round(est.eta_s), starts_in_s=_round(est.starts_in_s))
        if job.webhook:
            from studio.api.webhooks import describe

            d["webhook"] = describe(self, job)
        live = self._events.last_progress(job.id) if self._events is not None else None
        if live is not None and job.state == "running":
            d["live"] = live
        return d

    def public_result(self, result: dict | None) -> dict | None:
        """A job's result without server paths (``None`` before it is done); ``ran_on`` names this
        server rather than "this computer"."""
        if not result:
            return None
        r = dict(result)
        if r.get("output"):
            r["output"] = Path(r["output"]).name
        if "files" in r:
            from studio.api.side_files import public_files

            r["files"] = public_files(r["files"])
        if r.get("ran_on") == WHERE_LOCAL:
            r["ran_on"] = f"studio serve on {socket.gethostname()}"
        if isinstance(r.get("engine_reason"), str):
            r["engine_reason"] = self.public_text(r["engine_reason"])
        return r


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 1)


def get_state(request: Request) -> ApiState:
    return request.app.state.studio


State = Annotated[ApiState, Depends(get_state)]

"""``GET /metrics``: the server in Prometheus' text format (prometheus-client), every name ``studio_``.

    m = Metrics(state)                # one registry per app (not the process-wide default)
    m.on_event(queue_event)           # a job ended here: render seconds, frames/s, frames, jobs by end
    m.request("POST", "/v1/renders", 202, 0.031)
    body, content_type = m.render(accept)    # negotiated: Prometheus' text format or OpenMetrics

Counted as they happen (this process): ``studio_render_seconds`` and ``studio_render_fps``
(histograms of finished renders), ``studio_frames_rendered_total``, ``studio_jobs_finished_total``
{state}, ``studio_uploads_total`` / ``studio_upload_bytes_total`` {kind},
``studio_http_requests_total`` {method, route, status}, and per client (``""``: the operator's)
``studio_job_queue_seconds`` {client} (submitted to started), ``studio_job_first_frame_seconds``
{client} (submitted to its first frame), ``studio_job_fps`` {client} (histograms of finished jobs),
``studio_deadline_misses_total`` {client} (a job with a deadline cancelled at it or done after it),
``studio_jobs_refused_total`` {reason, client} (``deadline``: refused at submit), and ``studio_http_request_seconds`` {route}
(routes as templates, so ids do not make new series), ``studio_webhook_deliveries_total`` {ok}.
Read at each scrape: ``studio_jobs`` {state} (the whole shared queue, every face's jobs),
``studio_queue_depth``, ``studio_running_jobs``, ``studio_warm_engines``, ``studio_engine_limit``,
``studio_engine_loads_total``, ``studio_engine_evictions_total``, ``studio_engine_bytes``,
``studio_engine_calls_total`` / ``studio_engine_batches_total`` (jobs sharing batches), ``studio_storage_bytes``
{folder} (renders, uploads), the scheduler's counters (``studio_client_frames_served_total`` {client},
``studio_client_virtual_time`` {client}, ``studio_client_weight`` {client}, ``studio_lane_frames_served_total``
{lane}), ``studio_gpu_memory_bytes`` {device, kind} (allocated, reserved: when
torch and CUDA are in use) and ``studio_info`` {version}. With ``--farm``, per render actor that is not
dead {actor, node, device}: ``studio_farm_actor_frames_per_second``, ``studio_farm_actor_jobs_in_flight``,
``studio_farm_actor_queued_frames``, ``studio_farm_actor_frames_total``; and ``studio_farm_nodes_alive``.
"""

from __future__ import annotations

import logging
import sys

log = logging.getLogger(__name__)

SECONDS_BUCKETS = (0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
FPS_BUCKETS = (1, 2, 5, 10, 25, 50, 100, 200, 400, 800)
WAIT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800)
HTTP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 120)


class Metrics:
    def __init__(self, st):
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.st = st
        self.registry = CollectorRegistry()
        r = self.registry
        self.render_seconds = Histogram(
            "studio_render_seconds", "Seconds a finished render took", buckets=SECONDS_BUCKETS, registry=r
        )
        self.render_fps = Histogram(
            "studio_render_fps", "Frames per second of finished renders", buckets=FPS_BUCKETS, registry=r
        )
        self.frames = Counter("studio_frames_rendered", "Video frames written by finished renders", registry=r)
        self.finished = Counter("studio_jobs_finished", "Jobs that reached a final state here", ["state"], registry=r)
        self.uploads = Counter("studio_uploads", "Files uploaded (voice-overs, avatar sources)", ["kind"], registry=r)
        self.upload_bytes = Counter("studio_upload_bytes", "Bytes uploaded", ["kind"], registry=r)
        self.http = Counter("studio_http_requests", "HTTP requests answered", ["method", "route", "status"], registry=r)
        self.http_seconds = Histogram(
            "studio_http_request_seconds", "Seconds to answer", ["route"], buckets=HTTP_BUCKETS, registry=r
        )
        self.webhooks = Counter("studio_webhook_deliveries", "Webhook calls made", ["ok"], registry=r)
        # live sessions (docs/live.md): time to first frame, voice-in to frame-sent, frame intervals
        self.live_first = Histogram(
            "studio_live_first_frame_seconds",
            "Seconds from opening a live session to its first frame",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10),
            registry=r,
        )
        self.live_latency = Histogram(
            "studio_live_latency_seconds",
            "Seconds from a voice's samples arriving to the frame that shows them sent",
            buckets=(0.05, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 1, 2),
            registry=r,
        )
        self.live_interval = Histogram(
            "studio_live_frame_interval_seconds",
            "Seconds between a live session's frames sent",
            buckets=(0.01, 0.02, 0.03, 0.04, 0.048, 0.06, 0.08, 0.12, 0.2, 0.5),
            registry=r,
        )
        self.live_late = Counter(
            "studio_live_frames_late", "Live frames sent more than a frame after their time", registry=r
        )
        self.queue_seconds = Histogram(
            "studio_job_queue_seconds",
            "Seconds a job waited before it started",
            ["client"],
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.first_frame = Histogram(
            "studio_job_first_frame_seconds",
            "Seconds from a job's submission to its first frame",
            ["client"],
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.job_fps = Histogram(
            "studio_job_fps", "Frames per second of finished jobs", ["client"], buckets=FPS_BUCKETS, registry=r
        )
        self.deadline_misses = Counter(
            "studio_deadline_misses", "Jobs with a deadline cancelled at it or done after it", ["client"], registry=r
        )
        self.refusals = Counter("studio_jobs_refused", "Jobs refused at submit", ["reason", "client"], registry=r)
        r.register(_Scrape(st))

    def on_event(self, ev) -> None:
        if ev.kind != "state" or ev.job is None or ev.job.state not in ("done", "failed", "cancelled", "interrupted"):
            return
        self.finished.labels(ev.job.state).inc()
        self._promise(ev.job)
        if ev.job.state == "done":
            r = ev.job.result or {}
            if r.get("seconds"):
                self.render_seconds.observe(float(r["seconds"]))
            if r.get("fps"):
                self.render_fps.observe(float(r["fps"]))
            self.frames.inc(int(r.get("frames") or 0))

    def _promise(self, job) -> None:
        """A finished job's queue time, time to first frame, frames/s and deadline, by client."""
        r, client = job.result or {}, job.client or ""
        if job.state == "done":
            for name, hist in (("queue_s", self.queue_seconds), ("first_frame_s", self.first_frame)):
                if r.get(name) is not None:
                    hist.labels(client).observe(float(r[name]))
            if r.get("fps"):
                self.job_fps.labels(client).observe(float(r["fps"]))
        from studio.service.slots import DEADLINE_REASON

        if r.get("deadline_met") is False or (job.state == "cancelled" and job.reason == DEADLINE_REASON):
            self.deadline_misses.labels(client).inc()

    def refused(self, reason: str, client: str) -> None:
        self.refusals.labels(reason, client).inc()

    def request(self, method: str, route: str, status: int, seconds: float) -> None:
        self.http.labels(method, route, str(status)).inc()
        self.http_seconds.labels(route).observe(seconds)

    def upload(self, kind: str, size: int) -> None:
        self.uploads.labels(kind).inc()
        self.upload_bytes.labels(kind).inc(size)

    def live(self, kind: str, value: float) -> None:
        """A live session's figure (``studio.service.live``)."""
        if kind == "first_frame":
            self.live_first.observe(value)
        elif kind == "latency":
            self.live_latency.observe(value)
        elif kind == "interval":
            self.live_interval.observe(value)
        elif kind == "late":
            self.live_late.inc(value)

    def delivery(self, ok: bool) -> None:
        self.webhooks.labels(str(ok).lower()).inc()

    def render(self, accept: str | None = None) -> tuple[bytes, str]:
        """The samples in the format the scraper asks for (``Accept``: Prometheus' text format, or
        OpenMetrics), and its content type."""
        from prometheus_client.exposition import choose_encoder

        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type


class _Scrape:
    """What is read at each scrape: the shared queue, storage, warm engines, GPU memory."""

    def __init__(self, st):
        self.st = st

    def describe(self):
        return []  # no samples at registration (the queue may not be open yet)

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily

        from studio import __version__
        from studio.api.models import JOB_STATES

        info = InfoMetricFamily("studio", "This Studio server")
        info.add_metric([], {"version": __version__})
        yield info
        jobs = self.st.queue.list()
        by_state = GaugeMetricFamily("studio_jobs", "Jobs in the queue by state (every face's)", labels=["state"])
        for state in JOB_STATES:
            by_state.add_metric([state], sum(j.state == state for j in jobs))
        yield by_state
        yield GaugeMetricFamily(
            "studio_queue_depth", "Jobs waiting to render", value=sum(j.state == "queued" for j in jobs)
        )
        yield GaugeMetricFamily(
            "studio_running_jobs", "Jobs rendering now", value=sum(j.state == "running" for j in jobs)
        )
        live = self.st.live.sessions()
        yield GaugeMetricFamily("studio_live_sessions", "Live sessions open", value=len(live))
        dropped = CounterMetricFamily("studio_live_frames_dropped", "Live frames dropped (a session behind its clock)")
        dropped.add_metric([], sum(s.figures.dropped for s in live))
        yield dropped
        offset = GaugeMetricFamily(
            "studio_live_av_offset_ms", "Picture minus sound of the last frame sent", labels=["session"]
        )
        for s in live:
            offset.add_metric([s.id], s.figures.av_offset_ms)
        yield offset
        pool = self.st.pool
        yield GaugeMetricFamily("studio_warm_engines", "Engines loaded and kept warm", value=len(pool.warm()))
        yield GaugeMetricFamily("studio_engine_limit", "Warm engines kept at most", value=pool.max_engines)
        yield CounterMetricFamily("studio_engine_loads", "Engines loaded", value=pool.loaded)
        yield CounterMetricFamily(
            "studio_engine_evictions", "Warm engines evicted to stay under the bound", value=pool.evictions
        )
        yield GaugeMetricFamily("studio_engine_bytes", "Bytes the warm engines' networks hold", value=pool.held_bytes())
        batchers = pool.batchers() if hasattr(pool, "batchers") else []
        yield CounterMetricFamily(
            "studio_engine_calls", "Engine calls of jobs sharing batches", value=sum(b.calls for b in batchers)
        )
        yield CounterMetricFamily(
            "studio_engine_batches", "Job batches those calls carried", value=sum(b.batches for b in batchers)
        )
        yield from _scheduler(self.st.scheduler)
        storage = GaugeMetricFamily("studio_storage_bytes", "Bytes kept in the data folder", labels=["folder"])
        from studio.core.env import data_dir
        from studio.service.retention import OWNED

        for name in OWNED:
            storage.add_metric([name], _size(data_dir() / name))
        yield storage
        gpu = GaugeMetricFamily("studio_gpu_memory_bytes", "CUDA memory of this process", labels=["device", "kind"])
        for device, kind, value in _gpu_memory():
            gpu.add_metric([device, kind], value)
        yield gpu
        farm = self.st.farm
        if farm is not None:
            yield from _farm(farm.status())


FARM_ACTOR_GAUGES = (  # (name, help, the actor row's field)
    ("studio_farm_actor_frames_per_second", "Frames/s a farm render actor renders now", "frames_per_s"),
    ("studio_farm_actor_jobs_in_flight", "Jobs a farm render actor renders now", "jobs_in_flight"),
    ("studio_farm_actor_queued_frames", "Frames a farm render actor has still to render", "queued_frames"),
)


def _farm(status: dict):
    """The farm's gauges from ``FarmDispatcher.status()`` (live actors only: a dead one's series ends)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    labels = ["actor", "node", "device"]
    actors = [a for a in status.get("actors", []) if a.get("state") != "dead"]
    for name, text, field in FARM_ACTOR_GAUGES:
        g = GaugeMetricFamily(name, text, labels=labels)
        for a in actors:
            value = a.get(field) or 0
            g.add_metric([a["name"], a["node"], a["device"]], len(value) if isinstance(value, list) else float(value))
        yield g
    done = CounterMetricFamily("studio_farm_actor_frames", "Frames a farm render actor has rendered", labels=labels)
    for a in actors:
        done.add_metric([a["name"], a["node"], a["device"]], int(a.get("frames_done") or 0))
    yield done
    alive = sum(1 for n in status.get("nodes", []) if n.get("alive"))
    yield GaugeMetricFamily("studio_farm_nodes_alive", "Nodes of the farm's Ray cluster alive", value=alive)


def _scheduler(sched):
    """The scheduler's counters: frames served per client and lane, each client's weight and counter."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    if sched is None:
        return
    snap = sched.snapshot(since=float("inf"))
    frames = CounterMetricFamily("studio_client_frames_served", "Frames the engines served a client", labels=["client"])
    vt = GaugeMetricFamily(
        "studio_client_virtual_time", "A client's fair-share counter (frames / weight)", labels=["client"]
    )
    weight = GaugeMetricFamily("studio_client_weight", "A client's weight (--clients)", labels=["client"])
    for name, c in snap["clients"].items():
        frames.add_metric([name], c["frames"])
        vt.add_metric([name], c["virtual_time"])
        weight.add_metric([name], c["weight"])
    lanes = CounterMetricFamily("studio_lane_frames_served", "Frames the engines served a lane", labels=["lane"])
    for name, lane in snap["lanes"].items():
        lanes.add_metric([name], lane["frames"])
    yield from (frames, vt, weight, lanes)


def _size(folder) -> int:
    total = 0
    if not folder.is_dir():
        return 0
    for p in folder.rglob("*"):
        try:
            if p.is_file():
                total += p.stat().st_size
        except OSError:
            pass
    return total


def _gpu_memory() -> list[tuple[str, str, int]]:
    """(device, allocated|reserved, bytes) of each CUDA device, when this process uses torch on CUDA
    (torch is not imported for a scrape)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return []
    try:
        if not torch.cuda.is_available() or not torch.cuda.is_initialized():
            return []
        out = []
        for i in range(torch.cuda.device_count()):
            out.append((f"cuda:{i}", "allocated", int(torch.cuda.memory_allocated(i))))
            out.append((f"cuda:{i}", "reserved", int(torch.cuda.memory_reserved(i))))
        return out
    except Exception:  # a driver problem must not break the scrape (logged)
        log.debug("GPU memory not read", exc_info=True)
        return []

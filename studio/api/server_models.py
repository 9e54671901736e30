"""The server's own answers: liveness and readiness, its engines, and the Ray farm of ``studio
serve --farm`` (``/v1/health``, ``/v1/ready``, ``/v1/engines``, ``/v1/farm``); the rest of the API's
models are in ``studio.api.models``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from studio.api.models import Answer


class Health(Answer):
    ok: bool = Field(description="the server answers (liveness); see /v1/ready for whether it can render")
    version: str
    uptime_s: float
    queued: int | None = Field(None, description="jobs waiting in the queue (left out for a probe without the token)")
    running: int | None = Field(None, description="the id of the job rendering now")
    warm_engines: int | None = None
    max_queued: int | None = None
    max_upload_mb: float | None = None


class ReadyCheck(Answer):
    name: str = Field(description="engine | device | data folder | queue")
    ok: bool
    detail: str


class Ready(Answer):
    ready: bool
    checks: list[ReadyCheck]


class EngineInfo(Answer):
    name: str
    ready: bool = Field(description="it can run on this server now")
    detail: str = Field(description="why (or why not, with the fix)")


class WarmEngine(Answer):
    engine: str | None = None
    device: str | None = None
    runtime: str | None = None
    decoder: str | None = None
    precision: str | None = None
    reason: str | None = None


class Engines(Answer):
    auto: str = Field(description="the engine `engine=auto` picks here")
    engines: list[EngineInfo]
    warm: list[WarmEngine] = Field(description="engines loaded and kept warm between jobs")


class FarmNode(Answer):
    id: str = Field(description="the Ray node's id")
    host: str = Field(description="its address in the cluster")
    alive: bool = Field(description="false: the node left the cluster (its actors are dead)")
    cpus: float = Field(description="CPUs it offers (a render actor each when it has no GPU)")
    gpus: float = Field(description="GPUs it offers (a render actor each)")


class FarmActor(Answer):
    name: str = Field(description="the render actor (one per GPU, or per CPU slot, of a node)")
    node: str = Field(description="the id of the node it runs on")
    device: str = Field(description="cuda:0, cpu, ...")
    state: Literal["idle", "busy", "draining", "dead"]
    warm_engines: list[str] = Field(description="engines it keeps loaded between jobs")
    jobs_in_flight: list[int] = Field(description="ids of the jobs it renders now")
    queued_frames: int = Field(description="frames it has still to render (what dispatch compares)")
    capacity: int = Field(description="jobs it renders at once at most (--jobs-per-device)")
    frames_per_s: float = Field(description="frames/s it renders now (all its jobs together)")
    frames_done: int = Field(description="frames it has rendered since the server started")


class Farm(Answer):
    address: str = Field(description="the Ray cluster's HOST:PORT (or where it runs)")
    nodes: list[FarmNode]
    nodes_alive: int
    actors: list[FarmActor]
    jobs_in_flight: int = Field(description="jobs rendering on the farm now")
    frames_per_s: float = Field(description="the actors' frames/s together")


class SchedulerState(Answer):
    """The scheduler's counters (``studio.service.scheduler``; docs/server.md, "Priorities, shares and
    deadlines")."""

    now: float = Field(description="the server's monotonic clock, in seconds (what `calls` are timed by)")
    min_share: float = Field(description="the least share of the frames a waiting lane below gets")
    clients: dict[str, dict[str, float]] = Field(
        description="per client: weight, virtual_time (frames served / weight), frames, in_flight"
    )
    lanes: dict[str, dict[str, float]] = Field(description="per lane: level, frames served, owed, in_flight")
    calls: list[list[float | int | str]] = Field(
        description="the engine calls' batches since `since`: [seconds, client, lane, frames, job id, the calls "
        "made while it waited, the highest lane queued when it was taken]"
    )

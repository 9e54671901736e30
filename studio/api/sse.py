"""Job events for HTTP clients: the queue's events fanned out to asyncio, and the SSE stream.

The queue service calls back from its runner thread; ``JobEvents.on_event`` turns each event into
a small JSON-able dict there (and keeps the job's latest preview frame, one per job, dropped when
the job ends) and hands it to the event loop with ``call_soon_threadsafe``. Each listener has its
own queue; a slow client loses progress events beyond ``MAX_BACKLOG`` (the next one carries the
same figures, newer) but never a state change.

Stream (``GET /v1/renders/{id}/events``, sse-starlette): ``state`` first (the job as it is now),
then ``progress`` (frames done, fps, ETA, preview URL) and ``state`` events as they happen; the
stream ends after the state event of a final state.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading

MAX_BACKLOG = 64
FINAL_STATES = ("done", "failed", "cancelled", "interrupted")


class JobEvents:
    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self._listeners: dict[int, set[asyncio.Queue]] = {}
        self._everyone: set[asyncio.Queue] = set()  # listeners of every job (``GET /v1/events``)
        self._progress: dict[int, dict] = {}  # job id -> latest progress figures (loop thread)
        self._preview: dict[int, tuple[int | None, object]] = {}  # job id -> (frame index, RGB array)
        self._lock = threading.Lock()

    # -- runner thread ------------------------------------------------------------------------

    def on_event(self, ev) -> None:
        kind = ev.kind
        if kind == "progress" and ev.progress is not None:
            p = ev.progress
            if getattr(p, "preview", None) is not None:
                with self._lock:
                    self._preview[ev.job_id] = (getattr(p, "preview_index", None), p.preview)
            item = ("progress", progress_dict(ev.job_id, p, self.has_preview(ev.job_id)))
        elif kind in ("state", "added") and ev.job is not None:
            if ev.job.state in FINAL_STATES:
                with self._lock:
                    self._preview.pop(ev.job_id, None)
            item = ("state", state_dict(ev.job))
        elif kind == "removed":
            with self._lock:
                self._preview.pop(ev.job_id, None)
            item = ("state", {"id": ev.job_id, "state": "removed", "reason": "removed from the queue"})
        else:
            return
        with contextlib.suppress(RuntimeError):  # the loop is closing: nobody is listening
            self.loop.call_soon_threadsafe(self._dispatch, ev.job_id, item)

    def preview(self, job_id: int):
        with self._lock:
            return self._preview.get(job_id)

    def has_preview(self, job_id: int) -> bool:
        with self._lock:
            return job_id in self._preview

    # -- event loop ---------------------------------------------------------------------------

    def _dispatch(self, job_id: int, item) -> None:
        if item[0] == "progress":
            self._progress[job_id] = item[1]
        elif item[1].get("state") in FINAL_STATES + ("removed",):
            self._progress.pop(job_id, None)
        for q in [*self._listeners.get(job_id, ()), *self._everyone]:
            if item[0] == "progress" and q.qsize() >= MAX_BACKLOG:
                continue
            q.put_nowait(item)

    def listen(self, job_id: int) -> asyncio.Queue:
        q: asyncio.Queue = asyncio.Queue()
        self._listeners.setdefault(job_id, set()).add(q)
        return q

    def unlisten(self, job_id: int, q: asyncio.Queue) -> None:
        qs = self._listeners.get(job_id)
        if qs is not None:
            qs.discard(q)
            if not qs:
                self._listeners.pop(job_id, None)

    async def stream_all(self, visible):
        """Yield sse-starlette event dicts for every job ``visible(job_id)`` lets through: ``state``
        and ``progress`` as they happen (``hello`` first, so a client knows it is connected), until
        the client goes away. The page's queue follows this instead of polling the list."""
        q: asyncio.Queue = asyncio.Queue()
        self._everyone.add(q)
        shown: dict[int, bool] = {}
        try:
            yield _sse("hello", {"running": sorted(self._progress)})
            while True:
                kind, data = await q.get()
                job_id = int(data["id"])
                if job_id not in shown or kind == "state":
                    shown[job_id] = data.get("state") == "removed" or visible(job_id)
                if shown[job_id]:
                    yield _sse(kind, data)
        finally:
            self._everyone.discard(q)

    def last_progress(self, job_id: int) -> dict | None:
        return self._progress.get(job_id)

    async def wait_final(self, job_id: int, get_job, disconnected=None, poll_s: float = 0.5):
        """The job once it reaches a final state (``None`` if removed, or the client went away)."""
        import time

        q = self.listen(job_id)
        try:
            job = get_job(job_id)
            checked = time.monotonic()
            while job is not None and job.state not in FINAL_STATES:
                if disconnected is not None and time.monotonic() - checked >= poll_s:
                    checked = time.monotonic()
                    if await disconnected():
                        return None
                try:
                    kind, data = await asyncio.wait_for(q.get(), poll_s)
                except asyncio.TimeoutError:
                    continue
                if kind == "state":
                    if data["state"] == "removed":
                        return None
                    if data["state"] in FINAL_STATES:
                        job = get_job(job_id)
            return job
        finally:
            self.unlisten(job_id, q)

    async def stream(self, job_id: int, get_job):
        """Yield sse-starlette event dicts for one job, in order, until it reaches a final state."""
        q = self.listen(job_id)
        try:
            job = get_job(job_id)
            if job is None:
                return
            last_state = job.state
            yield _sse("state", state_dict(job))
            if job.state in FINAL_STATES:
                return
            if (p := self.last_progress(job_id)) is not None:
                yield _sse("progress", p)
            while True:
                kind, data = await q.get()
                if kind == "state":
                    if data["state"] == last_state and data["state"] not in FINAL_STATES:
                        continue
                    last_state = data["state"]
                yield _sse(kind, data)
                if kind == "state" and data["state"] in FINAL_STATES + ("removed",):
                    return
        finally:
            self.unlisten(job_id, q)


def _sse(event: str, data: dict) -> dict:
    return {"event": event, "data": json.dumps(data, separators=(",", ":"))}


def resource_links(base: str, *subs: str, **more: str) -> dict[str, str]:
    """A resource's links: ``self`` (``base``), ``{base}/{sub}`` under each sub's name, and each of
    ``more`` as ``base`` followed by its text (``cancel=""``: the resource itself, DELETE)."""
    return {"self": base, **{sub: f"{base}/{sub}" for sub in subs}, **{k: base + v for k, v in more.items()}}


def links(job_id: int) -> dict:
    return resource_links(
        f"/v1/renders/{job_id}", "events", "video", "preview", cancel="", retry="/retry", frame="/frame?t=0"
    )


def state_dict(job) -> dict:
    d = {"id": job.id, "state": job.state, "reason": job.reason or ""}
    if job.state == "done":
        r = job.result or {}
        d.update(video=links(job.id)["video"], frames=r.get("frames"), seconds=r.get("seconds"), fps=r.get("fps"))
    return d


def progress_dict(job_id: int, p, has_preview: bool) -> dict:
    d = {
        "id": job_id,
        "done": int(p.done),
        "total": int(p.total),
        "fps": round(float(p.fps), 2),
        "eta_s": round(float(p.eta_s), 2),
        "elapsed_s": round(float(p.elapsed_s), 3),
        "preview": links(job_id)["preview"] if has_preview else None,
    }
    for name in ("workers", "chunks_done", "chunks", "retries"):
        v = getattr(p, name, None)
        if v:
            d[name] = v
    return d

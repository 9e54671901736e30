"""Renders: ``POST /generate`` (answers the MP4) and ``/v1/renders`` (queue, follow, download, cancel,
retry). Jobs go into the service's queue, the same ``jobs.sqlite`` the window and ``studio queue`` use."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlencode

from fastapi import APIRouter, File, Query, Request
from fastapi import Path as PathParam
from fastapi.responses import FileResponse, Response
from starlette.concurrency import run_in_threadpool

from studio.api.errors import ApiError
from studio.api.idempotency import DOC as IDEMPOTENCY_DOC
from studio.api.idempotency import Idempotent
from studio.api.inputs import form_body, submit
from studio.api.models import (
    CURSOR_PATTERN,
    JOB_STATES,
    VIDEO_OUT,
    Job,
    JobId,
    JobPage,
    Removed,
    RenderForm,
    binary,
    binary_content,
    errors,
)
from studio.api.route import Route
from studio.api.routers.frames import inputs_here, jpeg_bytes
from studio.api.schema import INT64_MAX
from studio.api.side_files import MEDIA_TYPES, NAME_PATTERN
from studio.api.state import State
from studio.service.job_requests import owned_output

router = APIRouter(tags=["renders"], route_class=Route)

DEFAULT_PAGE, MAX_PAGE = 50, 500
JobStateQuery = Literal[JOB_STATES]  # type: ignore[valid-type]
MP4_HEADERS = {
    "X-Studio-Job": {"description": "the job's id", "schema": {"type": "integer"}},
    "X-Studio-Render-Seconds": {"description": "seconds the render took", "schema": {"type": "number"}},
}
SSE_DOC = {
    200: {
        "description": "Server-Sent Events: `state` first (the job now), then `progress` (models ProgressEvent) and "
        "`state` (StateEvent) as they happen; the stream ends after a final state's event.",
        "content": {
            "text/event-stream": {
                "schema": {  # one event: its name and its JSON data (StateEvent or ProgressEvent)
                    "type": "object",
                    "required": ["event", "data"],
                    "properties": {
                        "event": {"type": "string", "enum": ["state", "progress"]},
                        "data": {"type": "string", "contentMediaType": "application/json"},
                        "id": {"type": "string"},
                        "retry": {"type": "integer"},
                    },
                },
                "example": 'event: state\ndata: {"id":7,"state":"running","reason":""}\n\n'
                'event: progress\ndata: {"id":7,"done":16,"total":40,"fps":21.5,"eta_s":1.1,"elapsed_s":0.7,'
                '"preview":"/v1/renders/7/preview"}\n\n',
            }
        },
    },
    **errors(404, 422),
}


@router.post(
    "/generate",
    response_class=FileResponse,
    responses=binary(
        VIDEO_OUT,
        "the finished video (MP4; MOV for ProRes/DNxHR; WebM for VP9)",
        403,
        404,
        409,
        410,
        413,
        415,
        422,
        429,
        499,
        headers=MP4_HEADERS,
    ),
    openapi_extra={"parameters": [IDEMPOTENCY_DOC]},
)
async def generate(st: State, request: Request, form: Annotated[RenderForm, File()]):
    """Render and answer the finished MP4 in one request (the reference interface)"""
    form_body(request)
    async with Idempotent(st, request, form, dead=lambda got: _came_to_nothing(st, got)) as once:
        replayed = once.replayed is not None
        if once.replayed is not None:  # the same request again: the same job's video
            job = st.job(once.replayed["job_id"])
        else:
            job = await submit(st, form, request.headers)
            once.done(job_id=job.id)
    done = await st.events.wait_final(job.id, st.job_or_none, request.is_disconnected)
    if done is None:  # the client went away (or the job was removed): nobody wants the file
        with contextlib.suppress(Exception):
            st.queue.cancel(job.id)
        await once.release()  # a failed request frees its key: a retry renders again
        raise ApiError(499, "the client disconnected; the render was cancelled")
    if done.state != "done":
        await once.release()
        raise ApiError(500 if done.state == "failed" else 409, f"render job {done.id} {done.state}: {done.reason}")
    r = done.result or {}
    video = owned_output(done)  # the file this job wrote, never one that replaced it
    if video is None:
        raise ApiError(410, f"the video of render job {done.id} is no longer on the server")
    headers = {"X-Studio-Job": str(done.id), "X-Studio-Render-Seconds": f"{float(r.get('seconds') or 0):.4f}"}
    if replayed:
        headers["Idempotent-Replayed"] = "true"
    return FileResponse(video, media_type=video_type(video), filename=video.name, headers=headers)


def _came_to_nothing(st, got: dict) -> bool:
    """A ``/generate`` key whose job was cancelled, failed or removed: its request failed (the key is free)."""
    job = st.job_or_none(got["job_id"]) if got.get("job_id") is not None else None
    return job is None or job.state in ("cancelled", "failed", "interrupted")


@router.post(
    "/v1/renders",
    status_code=202,
    response_model=Job,
    responses=errors(403, 404, 409, 410, 413, 415, 422, 429),
    openapi_extra={"parameters": [IDEMPOTENCY_DOC]},
)
async def create_render(st: State, request: Request, response: Response, form: Annotated[RenderForm, File()]) -> dict:
    """Queue a render; answers the job (its id and links) at once"""
    form_body(request)
    async with Idempotent(st, request, form, response) as once:
        if once.replayed is not None:
            return _located(st, response, _made(st, once.replayed))
        job = await submit(st, form, request.headers)
        once.done(job_id=job.id)
    return _located(st, response, job)


@router.get("/v1/renders", response_model=JobPage, responses=errors(422))
def list_renders(
    st: State,
    request: Request,
    state: Annotated[JobStateQuery | None, Query(description="only jobs in this state")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="jobs per page")] = DEFAULT_PAGE,
    cursor: Annotated[
        str | None, Query(description="the `next` link's cursor (opaque)", pattern=CURSOR_PATTERN, max_length=19)
    ] = None,
) -> dict:
    """The jobs, newest first, a page at a time (the window's and `studio queue`'s too)"""
    before = _cursor(cursor)
    from studio.api.clients import current

    jobs = st.queue.page((state,) if state else None, before, limit + 1, client=current().owner)
    more, jobs = len(jobs) > limit, jobs[:limit]
    estimates = st.queue.estimates()
    nxt = None
    if more:
        q = {"limit": limit, "cursor": str(jobs[-1].id), **({"state": state} if state else {})}
        nxt = f"/v1/renders?{urlencode(q)}"
    return {"renders": [st.job_json(j, estimates) for j in jobs], "next": nxt}


@router.get("/v1/renders/{job_id}", response_model=Job, responses=errors(404, 422))
def get_render(st: State, job_id: JobId) -> dict:
    """One job"""
    return st.job_json(st.job(job_id))


@router.get("/v1/renders/{job_id}/events", response_class=Response, responses=SSE_DOC)
async def render_events(st: State, job_id: JobId):
    """Server-Sent Events: state, then progress (frames, fps, ETA, preview) until a final state"""
    from sse_starlette.sse import EventSourceResponse

    st.job(job_id)
    return EventSourceResponse(st.events.stream(job_id, st.job_or_none), ping=10)


@router.get(
    "/v1/events",
    response_class=Response,
    responses={
        200: {
            "description": "Server-Sent Events of every job this token sees: `hello` once, then `state` (StateEvent) "
            "and `progress` (ProgressEvent) as they happen, until the client goes away",
            "content": {"text/event-stream": SSE_DOC[200]["content"]["text/event-stream"]},
        },
        **errors(),
    },
)
async def queue_events(st: State):
    """Server-Sent Events of every job (the page's queue follows it instead of polling the list)"""
    from sse_starlette.sse import EventSourceResponse

    from studio.api.clients import acting_as, current, sees

    who = current()

    def visible(job_id: int) -> bool:
        job = st.job_or_none(job_id)
        with acting_as(who):
            return job is not None and sees(job)

    return EventSourceResponse(st.events.stream_all(visible), ping=10)


@router.get(
    "/v1/renders/{job_id}/video",
    response_class=FileResponse,
    responses={
        **binary(VIDEO_OUT, "the finished video (MP4; MOV for ProRes/DNxHR; WebM for VP9)", 404, 409, 410, 422),
        206: {
            "description": "the byte range asked for with `Range: bytes=a-b`",
            "content": binary_content(VIDEO_OUT),
        },
    },
)
def get_render_video(st: State, job_id: JobId, request: Request):
    """The finished MP4 (HTTP Range supported)"""
    job = st.job(job_id)
    if job.state == "expired":
        raise ApiError(410, f"the video of render job {job_id} is no longer on the server ({job.reason})")
    if job.state != "done":
        raise ApiError(409, f"render job {job_id} is {job.state}; its video is ready when it is done")
    video = owned_output(job)  # the file this job wrote, never one that replaced it
    if video is None:
        raise ApiError(410, f"the video of render job {job_id} is no longer on the server")
    return VideoResponse.to(request, video, media_type=video_type(video), filename=video.name)


RANGE_PATTERN = r"^bytes=([0-9]{1,19}-[0-9]{0,19}|-[0-9]{1,19})$"


class VideoResponse(FileResponse):
    """A FileResponse that answers one byte range (206) and ignores a ``Range`` that is not one byte
    range (RFC 9110 14.2: a range unit or form it does not take is ignored: the whole file, 200)."""

    def __init__(self, *args, honour_range: bool = True, **kw):
        super().__init__(*args, **kw)
        self.honour_range = honour_range

    @classmethod
    def to(cls, request: Request, path: Path, **kw) -> VideoResponse:
        """``path`` as the answer to ``request``: the one byte range its ``Range`` asks for (206; outside
        the file: 416), or the whole file (200) when there is no ``Range`` or it is not one byte range."""
        text = (request.headers.get("range") or "").strip()
        one = re.match(RANGE_PATTERN, text) is not None
        if one:
            check_range(text, path.stat().st_size)
        return cls(path, honour_range=one, **kw)

    async def __call__(self, scope, receive, send):
        if not self.honour_range:
            scope = {**scope, "headers": [(k, v) for k, v in scope.get("headers", ()) if k.lower() != b"range"]}
        await super().__call__(scope, receive, send)


def check_range(text: str, size: int) -> None:
    """One byte range (``bytes=a-b``, ``bytes=a-``, ``bytes=-n``: ``text`` matches ``RANGE_PATTERN``)
    inside the file, or 416 (with ``Content-Range: bytes */size``), as a JSON sentence like every
    other error; Starlette's FileResponse then sends the part (206). The bounds are compared here:
    Starlette parses a Range only in a private method, and one range is three comparisons."""
    first, _, last = text.strip().removeprefix("bytes=").partition("-")
    if first:  # bytes=a-b or bytes=a-: a inside the file, and not after b
        inside = int(first) < size and (not last or int(first) <= int(last))
    else:  # bytes=-n: the last n bytes of a file that has some
        inside = int(last) > 0 and size > 0
    if not inside:
        raise ApiError(
            416,
            f"Range {text[:60]!r} is outside the video, which has {size} bytes (0-{size - 1})",
            {"Content-Range": f"bytes */{size}"},
        )


# JSON side files (the job, its check, an OTIO timeline) are objects; the others are bytes
SIDE_FILE_200 = {
    "description": "the side file (captions, OTIO, check report, the job's JSON, ...)",
    "content": {**binary_content(MEDIA_TYPES), "application/json": {"schema": {"type": "object"}}},
}


@router.get(
    "/v1/renders/{job_id}/files/{name}",
    response_class=FileResponse,
    responses={
        **binary(MEDIA_TYPES, "the side file (captions, OTIO, check report, the job's JSON, ...)", 404, 422),
        200: SIDE_FILE_200,  # JSON side files are objects, the others bytes
        206: {
            "description": "the byte range asked for with `Range: bytes=a-b`",
            "content": binary_content(MEDIA_TYPES),
        },
    },
)
def get_render_file(
    st: State,
    job_id: JobId,
    request: Request,
    name: Annotated[str, PathParam(pattern=NAME_PATTERN, description="a name from the job's `files`")],
):
    """A side file of a job, by the name its `files` list gives (same authorisation as the video)"""
    from studio.api.side_files import find, media_type

    job = st.job(job_id)
    path, body = find(st, job, name)
    headers = {**SIDE_FILE_HEADERS, "Content-Disposition": f'attachment; filename="{name}"'}
    if body is not None:
        return Response(body, media_type="application/json", headers=headers)
    if path is None:
        raise ApiError(404, f"render job {job_id} has no file {name!r}; see the job's `files`")
    kind = media_type(name)
    if kind == "text/html":  # a report opens in the browser, sandboxed: no script, no access to this origin
        headers["Content-Disposition"] = f'inline; filename="{name}"'
    return VideoResponse.to(request, path, media_type=kind, headers=headers)


# a side file is data, never a page of this origin (a report's HTML runs in a sandbox: its own origin)
SIDE_FILE_HEADERS = {
    "Content-Security-Policy": "sandbox; default-src 'none'; style-src 'unsafe-inline'; img-src data:",
    "X-Content-Type-Options": "nosniff",
}


@router.get(
    "/v1/renders/{job_id}/preview",
    response_class=Response,
    responses=binary(
        "image/jpeg",
        "the latest preview frame",
        404,
        422,
        headers={"X-Studio-Frame": {"description": "its frame index", "schema": {"type": "integer"}}},
    ),
)
def get_render_preview(st: State, job_id: JobId):
    """The latest preview frame of a running job (JPEG)"""
    st.job(job_id)
    got = st.events.preview(job_id)
    if got is None:
        raise ApiError(404, f"render job {job_id} has no preview (it is not running, or none has arrived yet)")
    index, rgb = got
    return Response(
        jpeg_bytes(rgb),
        media_type="image/jpeg",
        headers={"X-Studio-Frame": str(index)} if index is not None else None,
    )


@router.delete("/v1/renders/{job_id}", response_model=Job | Removed, responses=errors(404, 409, 422))
def delete_render(
    st: State,
    job_id: JobId,
    purge: Annotated[
        bool, Query(description="a finished job: remove it and its video (without it a finished job stays: 409)")
    ] = False,
) -> dict:
    """Cancel a queued or running job (nothing is written); a finished one is 409 unless purge=true"""
    from studio.service.queue import JobFinished

    st.job(job_id)
    try:
        job, removed = st.queue.delete(job_id, purge=purge)
    except JobFinished as exc:
        raise ApiError(409, f"render job {job_id}: {str(exc).split(': ', 1)[-1]}; send ?purge=true") from None
    if job is not None:
        return st.job_json(job)
    return {
        "id": job_id,
        "state": "removed",
        "reason": "purged: the job and its files were removed",
        "files": [Path(p).name for p in removed],
    }


def _inputs_gone(job_id: int) -> str:
    return (
        f"render job {job_id} cannot be rendered again: its avatar or voice-over is no longer on the server "
        "(removed by retention, or the avatar renamed or removed); submit a new render with the files"
    )


@router.post(
    "/v1/renders/{job_id}/retry",
    status_code=202,
    response_model=Job,
    responses=errors(404, 409, 410, 422, 429),
    openapi_extra={"parameters": [IDEMPOTENCY_DOC]},
)
async def retry_render(st: State, request: Request, response: Response, job_id: JobId) -> dict:
    """Render a finished job again as a new job (retry_of names it); the original and its video stay"""
    from studio.core.errors import StudioError
    from studio.service.queue import JobActive

    st.job(job_id)
    async with Idempotent(st, request, None, response) as once:
        if once.replayed is not None:
            return _located(st, response, _made(st, once.replayed))
        job = st.job(job_id)
        if job.state in ("done", "failed", "cancelled", "interrupted", "expired"):  # what it reads is still here
            from studio.service.preflight import preflight

            if not inputs_here(job):  # a library avatar renamed or removed since: the new job could not start
                raise ApiError(410, _inputs_gone(job_id))
            try:
                await run_in_threadpool(preflight, st.queue.request(job_id).with_(overwrite=False))
            except StudioError as exc:
                if job.state == "expired" or not inputs_here(job):
                    raise ApiError(410, _inputs_gone(job_id)) from None
                raise exc from None
        made = await run_in_threadpool(st.queue.retries, job_id)
        if made >= st.opts.max_retries:  # a webhook or a script in a loop ends here
            raise ApiError(
                409,
                f"render job {job_id} was rendered again {made} times already (this server's --max-retries "
                f"{st.opts.max_retries}); submit it as a new job",
            )
        try:
            again = await run_in_threadpool(st.queue.retry, job_id)
        except JobActive as exc:
            raise ApiError(409, f"render job {job_id}: {str(exc).split('; ', 1)[-1]}") from None
        except StudioError as exc:
            if type(exc).__name__ == "QueueFull":
                raise ApiError(429, str(exc), {"Retry-After": "10"}) from None
            raise
        once.done(job_id=again.id)
    return _located(st, response, again)


def _located(st, response: Response, job) -> dict:
    """A job a request made (or made the first time): its JSON, with its URL in ``Location``."""
    response.headers["Location"] = f"/v1/renders/{job.id}"
    return st.job_json(job)


def _made(st, replayed: dict):
    """The job a replayed request made (410 when it was purged since)."""
    job = st.job_or_none(replayed["job_id"])
    if job is None:
        raise ApiError(410, f"render job {replayed['job_id']}, made by the first request with this key, was removed")
    return job


def _cursor(text: str | None) -> int | None:
    if text is None or text == "":
        return None
    if not text.isdigit():
        raise ApiError(422, "cursor: give the cursor of a `next` link")
    return min(int(text), INT64_MAX)  # past every job id: the first page


def video_type(path) -> str:
    """The MIME type of a finished render by its extension (the codec chose it)."""
    return {".mov": "video/quicktime", ".webm": "video/webm"}.get(Path(path).suffix.lower(), "video/mp4")

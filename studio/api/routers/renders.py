"""Renders: ``POST /generate`` (answers the MP4) and ``/v1/renders`` (queue, follow, download, cancel,
retry). Jobs go into the service's queue, the same ``jobs.sqlite`` the window and ``studio queue`` use."""

from __future__ import annotations

import contextlib
from typing import Annotated

from fastapi import APIRouter, File, Query, Request
from fastapi.responses import FileResponse, Response

from studio.api.errors import ApiError
from studio.api.inputs import form_body, renders_dir, submit
from studio.api.models import Job, JobList, Removed, RenderForm, binary, errors
from studio.api.routers.frames import jpeg_bytes
from studio.api.state import State
from studio.service.queue import owned_output

router = APIRouter(tags=["renders"])

ACTIVE_STATES = ("draft", "queued", "held", "running")
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
                "schema": {"type": "string"},
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
    operation_id="generate",
    response_class=FileResponse,
    responses=binary("video/mp4", "the finished MP4", 403, 404, 409, 413, 415, 422, 429, 499, headers=MP4_HEADERS),
    summary="Render and answer the finished MP4 in one request (the reference interface)",
)
async def generate(st: State, request: Request, form: Annotated[RenderForm, File()]):
    form_body(request)
    job = await submit(st, form)
    done = await st.events.wait_final(job.id, st.job_or_none, request.is_disconnected)
    if done is None:  # the client went away (or the job was removed): nobody wants the file
        with contextlib.suppress(Exception):
            st.queue.cancel(job.id)
        raise ApiError(499, "the client disconnected; the render was cancelled")
    if done.state != "done":
        raise ApiError(500 if done.state == "failed" else 409, f"render job {done.id} {done.state}: {done.reason}")
    r = done.result or {}
    video = owned_output(done)  # the file this job wrote, never one that replaced it
    if video is None:
        raise ApiError(410, f"the video of render job {done.id} is no longer on the server")
    return FileResponse(
        video,
        media_type="video/mp4",
        filename=video.name,
        headers={"X-Studio-Job": str(done.id), "X-Studio-Render-Seconds": f"{float(r.get('seconds') or 0):.4f}"},
    )


@router.post(
    "/v1/renders",
    operation_id="create_render",
    status_code=202,
    response_model=Job,
    responses=errors(403, 404, 413, 415, 422, 429),
    summary="Queue a render; answers the job (its id and links) at once",
)
async def create_render(st: State, request: Request, form: Annotated[RenderForm, File()]) -> dict:
    form_body(request)
    job = await submit(st, form)
    return st.job_json(job)


@router.get(
    "/v1/renders",
    operation_id="list_renders",
    response_model=JobList,
    responses=errors(422),
    summary="Every job in the queue (the window's too)",
)
def list_renders(st: State, state: Annotated[str | None, Query(description="only jobs in this state")] = None) -> dict:
    return {"renders": [st.job_json(j) for j in st.queue.list() if state is None or j.state == state]}


@router.get(
    "/v1/renders/{job_id}",
    operation_id="get_render",
    response_model=Job,
    responses=errors(404, 422),
    summary="One job",
)
def get_render(st: State, job_id: int) -> dict:
    return st.job_json(st.job(job_id))


@router.get(
    "/v1/renders/{job_id}/events",
    operation_id="render_events",
    response_class=Response,
    responses=SSE_DOC,
    summary="Server-Sent Events: state, then progress (frames, fps, ETA, preview) until a final state",
)
async def render_events(st: State, job_id: int):
    from sse_starlette.sse import EventSourceResponse

    st.job(job_id)
    return EventSourceResponse(st.events.stream(job_id, st.job_or_none), ping=10)


@router.get(
    "/v1/renders/{job_id}/video",
    operation_id="get_render_video",
    response_class=FileResponse,
    responses={
        **binary("video/mp4", "the finished MP4", 404, 409, 410, 422),
        206: {
            "description": "the byte range asked for with `Range: bytes=a-b`",
            "content": {"video/mp4": {"schema": {"type": "string", "format": "binary"}}},
        },
    },
    summary="The finished MP4 (HTTP Range supported)",
)
def get_render_video(st: State, job_id: int):
    job = st.job(job_id)
    if job.state != "done":
        raise ApiError(409, f"render job {job_id} is {job.state}; its video is ready when it is done")
    video = owned_output(job)  # the file this job wrote, never one that replaced it
    if video is None:
        raise ApiError(410, f"the video of render job {job_id} is no longer on the server")
    return FileResponse(video, media_type="video/mp4", filename=video.name)


@router.get(
    "/v1/renders/{job_id}/preview",
    operation_id="get_render_preview",
    response_class=Response,
    responses=binary(
        "image/jpeg",
        "the latest preview frame",
        404,
        422,
        headers={"X-Studio-Frame": {"description": "its frame index", "schema": {"type": "integer"}}},
    ),
    summary="The latest preview frame of a running job (JPEG)",
)
def get_render_preview(st: State, job_id: int):
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


@router.delete(
    "/v1/renders/{job_id}",
    operation_id="delete_render",
    response_model=Job | Removed,
    responses=errors(404, 422),
    summary="Cancel a queued or running job (nothing is written); remove a finished one and its file",
)
def delete_render(st: State, job_id: int) -> dict:
    job = st.job(job_id)
    if job.state in ACTIVE_STATES:
        st.queue.cancel(job_id)
        return st.job_json(st.job(job_id))
    st.queue.remove(job_id)
    out = owned_output(job)  # only this job's own file, never another job's under the same name
    if out is not None and out.parent == renders_dir():
        out.unlink()
    return {"id": job_id, "state": "removed", "reason": "removed from the queue"}


@router.post(
    "/v1/renders/{job_id}/retry",
    operation_id="retry_render",
    status_code=202,
    response_model=Job,
    responses=errors(404, 409, 422),
    summary="Queue a failed, cancelled, interrupted or done job again",
)
def retry_render(st: State, job_id: int) -> dict:
    job = st.job(job_id)
    if job.state in ACTIVE_STATES:
        raise ApiError(409, f"render job {job_id} is {job.state}; only a finished job can be retried")
    return st.job_json(st.queue.retry(job_id))

"""The exact frame a render writes at time t (PNG), for scrubbing over HTTP: ``GET /v1/frame`` (a
library avatar and an uploaded voice-over, with the frame settings) and ``GET /v1/renders/{id}/frame``
(a job's avatar, voice-over and settings). Two operations, so each declares the parameters it needs."""

from __future__ import annotations

import functools
import io
from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from studio.api.errors import ApiError
from studio.api.inputs import library_avatar
from studio.api.models import FrameQuery, JobFrameQuery, JobId, binary
from studio.api.route import Route
from studio.api.schema import sent_settings, settings_of
from studio.api.state import State

router = APIRouter(tags=["frames"], route_class=Route)

PNG_DOC = binary("image/png", "the frame, PNG", 403, 404, 422)
JOB_PNG_DOC = binary("image/png", "the frame, PNG", 403, 404, 410, 422)


@router.get("/v1/frame", response_class=Response, responses=PNG_DOC)
async def get_frame(st: State, q: Annotated[FrameQuery, Query()]):
    """The exact frame a render writes at time t (PNG): scrubbing over HTTP"""
    from studio.core.render.resolve import resolve
    from studio.service.preflight import runnable_here

    av = library_avatar(q.avatar)
    # resolved as a render's request is: the delivery's canvas, placement and rate under the fields sent
    res = await run_in_threadpool(resolve, settings_of(q, ("engine", "silence")), sent_settings(q), av)
    await run_in_threadpool(functools.partial(runnable_here, res.settings, frame=True))
    audio = str(st.uploads.audio_path(q.audio_id))
    return await _png(st, av, audio, res.settings, q.t)


@router.get("/v1/renders/{job_id}/frame", response_class=Response, responses=JOB_PNG_DOC)
async def get_render_frame(st: State, job_id: JobId, q: Annotated[JobFrameQuery, Query()]):
    """The exact frame of a render job at time t (PNG): its avatar, voice-over and settings"""
    from studio.service.job_requests import request_of

    job = st.job(job_id)
    if not inputs_here(job):
        raise ApiError(
            410, f"render job {job_id}'s avatar or voice-over is no longer on the server (removed), so it has no frames"
        )
    req = request_of(job)
    return await _png(st, req.avatar, req.audio, req.settings, q.t)


def inputs_here(job) -> bool:
    """The files a job reads are still there: an uploaded or server file, or a library avatar's folder."""
    from pathlib import Path

    from studio.core.avatars.library import library_dir

    avatar = Path(job.avatar) if "/" in job.avatar else library_dir() / job.avatar / "meta.json"
    return avatar.exists() and Path(job.audio).exists()


async def _png(st, avatar, audio, settings, t: float) -> Response:
    rgb = await run_in_threadpool(st.pool.frame_at, avatar, audio, settings, t)
    return Response(await run_in_threadpool(png_bytes, rgb), media_type="image/png")


def png_bytes(rgb) -> bytes:
    import PIL.Image

    buf = io.BytesIO()
    PIL.Image.fromarray(rgb).save(buf, format="PNG")
    return buf.getvalue()


def jpeg_bytes(rgb) -> bytes:
    import PIL.Image

    buf = io.BytesIO()
    PIL.Image.fromarray(rgb[..., :3]).save(buf, format="JPEG", quality=85)  # JPEG has no alpha
    return buf.getvalue()

"""``GET /v1/frame``: the exact frame a render writes at time t (PNG), for scrubbing over HTTP."""

from __future__ import annotations

import io
from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import Response

from studio.api.errors import ApiError
from studio.api.inputs import library_avatar
from studio.api.models import FrameQuery, binary
from studio.api.schema import settings_of
from studio.api.state import State

router = APIRouter(tags=["frames"])


@router.get(
    "/v1/frame",
    operation_id="get_frame",
    response_class=Response,
    responses=binary("image/png", "the frame, PNG", 404, 422),
    summary="The exact frame a render writes at time t (PNG): scrubbing over HTTP",
)
def frame(st: State, q: Annotated[FrameQuery, Query()]):
    from studio.core.settings import from_dict

    if q.job is not None:
        from studio.service import request_of

        req = request_of(st.job(q.job))
        av, audio, settings = req.avatar, req.audio, req.settings
    else:
        if not q.avatar or not q.audio_id:
            raise ApiError(422, "give avatar and audio_id (or job) with t")
        av, audio = library_avatar(q.avatar), str(st.uploads.audio_path(q.audio_id))
        settings = from_dict(settings_of(q, ("engine", "silence")))
    rgb = st.pool.frame_at(av, audio, settings, q.t)
    return Response(png_bytes(rgb), media_type="image/png")


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

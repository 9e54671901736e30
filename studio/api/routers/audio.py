"""``/v1/audio``: upload a voice-over once (renders and frames use its id); its silence analysis."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, File, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from studio.api.idempotency import DOC as IDEMPOTENCY_DOC
from studio.api.idempotency import Idempotent
from studio.api.models import AudioAnalysis, AudioForm, AudioId, SilenceQuery, errors
from studio.api.state import ApiState, State

router = APIRouter(tags=["audio"])


@router.post(
    "/v1/audio",
    status_code=201,
    response_model=AudioAnalysis,
    responses=errors(409, 413, 415, 422),
    summary="Upload a voice-over once; renders and frames use it by id. Answers its silence analysis",
    openapi_extra={"parameters": [IDEMPOTENCY_DOC]},
)
async def upload_audio(st: State, request: Request, response: Response, form: Annotated[AudioForm, File()]) -> dict:
    f = form
    async with Idempotent(st, request, form, response) as once:
        if once.replayed is not None:
            answer = await run_in_threadpool(analysis, st, once.replayed["answer"]["id"], f.threshold, f.min_silence)
        else:
            stored = await st.uploads.save_audio(f.file)
            answer = await run_in_threadpool(analysis, st, stored.id, f.threshold, f.min_silence)
            once.done(answer={"id": stored.id})
    response.headers["Location"] = f"/v1/audio/{answer['id']}"
    return answer


@router.get(
    "/v1/audio/{audio_id}",
    response_model=AudioAnalysis,
    responses=errors(404, 422),
    summary="An uploaded voice-over's silence analysis",
)
def get_audio(st: State, audio_id: AudioId, q: Annotated[SilenceQuery, Query()]) -> dict:
    return analysis(st, audio_id, q.threshold, q.min_silence)


def analysis(st: ApiState, audio_id: str, threshold: float, min_silence: int) -> dict:
    from studio.core.media.analysis import analyze

    meta = st.uploads.audio_meta(audio_id)
    summary = analyze(st.uploads.audio_path(audio_id)).summary(threshold, min_silence)
    summary.pop("path", None)
    summary.pop("silent_mask", None)  # the spans say the same, shorter
    return {"id": audio_id, "filename": meta["filename"], "bytes": meta["bytes"], **summary}

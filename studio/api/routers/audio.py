"""``/v1/audio``: upload a voice-over once (renders and frames use its id); its silence analysis; the
voice-overs a client has (list, rename, remove: a named client sees and removes only its own, as
with jobs) and the sound itself (``/file``, HTTP Range: the page plays it before rendering)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, File, Query, Request, Response
from fastapi.responses import FileResponse
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from studio.api.idempotency import DOC as IDEMPOTENCY_DOC
from studio.api.idempotency import Idempotent
from studio.api.models import Answer, AudioAnalysis, AudioForm, AudioId, AudioIdOut, SilenceQuery, binary, errors
from studio.api.route import Route
from studio.api.state import ApiState, State

router = APIRouter(tags=["audio"], route_class=Route)


@router.post(
    "/v1/audio",
    status_code=201,
    response_model=AudioAnalysis,
    responses=errors(409, 413, 415, 422),
    openapi_extra={"parameters": [IDEMPOTENCY_DOC]},
)
async def upload_audio(st: State, request: Request, response: Response, form: Annotated[AudioForm, File()]) -> dict:
    """Upload a voice-over once; renders and frames use it by id. Answers its silence analysis"""
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


@router.get("/v1/audio/{audio_id}", response_model=AudioAnalysis, responses=errors(404, 422))
def get_audio(st: State, audio_id: AudioId, q: Annotated[SilenceQuery, Query()]) -> dict:
    """An uploaded voice-over's silence analysis"""
    return analysis(st, audio_id, q.threshold, q.min_silence)


def analysis(st: ApiState, audio_id: str, threshold: float, min_silence: int) -> dict:
    from studio.core.media.analysis import analyze

    meta = st.uploads.audio_meta(audio_id)
    summary = analyze(st.uploads.audio_path(audio_id)).summary(threshold, min_silence)
    summary.pop("path", None)
    summary.pop("silent_mask", None)  # the spans say the same, shorter
    return {"id": audio_id, "filename": meta["filename"], "bytes": meta["bytes"], **summary}


AUDIO_OUT = {".wav": "audio/wav", ".flac": "audio/flac", ".ogg": "audio/ogg", ".mp3": "audio/mpeg", ".m4a": "audio/mp4"}


class VoiceOver(Answer):
    id: AudioIdOut
    filename: str = Field(description="its name (what the client called it, or what it was renamed to)")
    bytes: int
    file: str = Field(description="the sound's URL (GET; HTTP Range supported)")
    modified: float = Field(description="seconds since the epoch: when it was last uploaded or renamed")


class VoiceOverList(Answer):
    voiceovers: list[VoiceOver] = Field(description="newest first")


class Rename(BaseModel):
    filename: str = Field(min_length=1, max_length=200, description="the new name (display only, never a path)")


class AudioRemoved(Answer):
    removed: str
    deleted: bool = Field(description="the file went too (false: another client still has it)")


def _row(row: dict) -> dict:
    return {k: row[k] for k in ("id", "filename", "bytes", "modified") if k in row} | {
        "file": f"/v1/audio/{row['id']}/file"
    }


def _owner():
    from studio.api.clients import current

    return current().owner


@router.get("/v1/audio", response_model=VoiceOverList, responses=errors())
def list_audio(st: State) -> dict:
    """The voice-overs uploaded (newest first)"""
    return {"voiceovers": [_row(r) for r in st.uploads.list_audio(_owner())]}


@router.get(
    "/v1/audio/{audio_id}/file",
    response_class=FileResponse,
    responses=binary(" ".join(sorted(set(AUDIO_OUT.values()))), "the voice-over as uploaded", 404, 422),
)
def get_audio_file(st: State, audio_id: AudioId):
    """The voice-over's sound as uploaded (HTTP Range supported)"""
    row = st.uploads.owned_meta(audio_id, _owner())
    path = st.uploads.audio_path(audio_id)
    kind = AUDIO_OUT.get(path.suffix.lower(), "application/octet-stream")  # the documented types only
    return FileResponse(
        path,
        media_type=kind,
        headers={"Cache-Control": "private, max-age=3600"},
        filename=row["filename"],
        content_disposition_type="inline",
    )


@router.patch("/v1/audio/{audio_id}", response_model=VoiceOver, responses=errors(400, 404, 422))
def rename_audio(st: State, audio_id: AudioId, body: Rename) -> dict:
    """Rename a voice-over (its id and sound stay)"""
    import os

    row = st.uploads.rename_audio(audio_id, body.filename, _owner())
    meta = st.uploads.root / "audio" / f"{audio_id}.json"
    return _row({**row, "modified": os.path.getmtime(meta)})


@router.delete("/v1/audio/{audio_id}", response_model=AudioRemoved, responses=errors(404, 409, 422))
def remove_audio(st: State, audio_id: AudioId) -> dict:
    """Remove a voice-over (409 while a queued or running job reads it)"""
    active = {j.audio for j in st.queue.list() if j.state in ("draft", "queued", "held", "running")}
    deleted = st.uploads.remove_audio(audio_id, _owner(), active)
    return {"removed": audio_id, "deleted": deleted}

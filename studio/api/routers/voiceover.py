"""What the web page (``/``) needs of a voice-over beyond ``/v1/audio``: its waveform, and text spoken.

    GET  /v1/audio/{id}/waveform?avatar=anna&fps=auto&threshold=0.008&min_silence=8&columns=1200
         -> per-frame RMS at the render's output rate, the silent spans, a min/max envelope, the timecode
    POST /v1/audio/speech  (text, voice)  -> the spoken text stored as an uploaded voice-over (its analysis)

The waveform is on the frame grid a render of that avatar uses (the ``fps`` setting, or for ``auto``
the avatar's own rate: 25 for a photo), so the page's frame numbers, timecode, in/out and silence mask
are the render's. The silence settings and ``fps`` are the render settings' own fields (made from the
one schema, ``studio.api.schema``).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Annotated, Any, TypeAlias

from fastapi import APIRouter, Form, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field, create_model
from starlette.concurrency import run_in_threadpool

from studio.api.errors import ApiError
from studio.api.idempotency import DOC as IDEMPOTENCY_DOC
from studio.api.idempotency import Idempotent
from studio.api.models import Answer, AudioAnalysis, AudioIdOut, errors
from studio.api.route import Route
from studio.api.schema import settings_fields
from studio.api.state import State

router = APIRouter(tags=["audio"], route_class=Route)

MAX_COLUMNS = 8000


class WaveformInputs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    avatar: str | None = Field(None, description="a library avatar: its frame rate is the grid (fps=auto)")
    columns: int = Field(1200, ge=16, le=MAX_COLUMNS, description="points of the min/max envelope")


class Envelope(Answer):
    min: list[float] = Field(description="the lowest sample of each column, -1..1")
    max: list[float] = Field(description="the highest sample of each column, -1..1")


class Timecode(Answer):
    nominal: int = Field(description="frames a timecode second counts (30 at 29.97)")
    drop: int = Field(description="frame numbers skipped each minute but each tenth (2 at 29.97; 0: non-drop)")


class Waveform(Answer):
    """A voice-over on a render's frame grid: what the page draws and scrubs."""

    id: AudioIdOut
    frames: int = Field(description="video frames it lasts at this rate")
    fps: float = Field(description="the frame rate (29.97 is 30000/1001: see rate)")
    rate: str = Field(description="the exact rate, e.g. 25 or 30000/1001")
    timecode: Timecode
    duration_s: float
    threshold: float
    min_silence: int
    rms: list[float] = Field(description="RMS of each video frame (what the threshold compares)")
    silent_spans: list[list[int]] = Field(description="[start, end) frames shown as the avatar itself")
    envelope: Envelope


def _waveform_query() -> type[BaseModel]:
    every = settings_fields("http")
    fields = {**settings_fields("http", ("silence",)), "fps": every["fps"]}
    return create_model(  # type: ignore[call-overload]
        "WaveformQuery", __base__=WaveformInputs, __doc__="Which grid and silence settings.", **fields
    )


class SpeechForm(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = Field(
        min_length=1,
        max_length=20_000,
        pattern=r"[^\s\u0000-\u001f\u007f-\u009f]",  # something besides spaces and control characters
        description="what the presenter says (spoken by Piper's natural voice; espeak-ng where Piper is missing)",
    )
    voice: str = Field(
        "",
        max_length=64,
        description="empty: the default voice (Piper's joe); an imported Piper voice; espeak:VOICE or an espeak-ng voice name such as en-gb",
    )


if TYPE_CHECKING:
    WaveformQuery: TypeAlias = Any
else:
    WaveformQuery = _waveform_query()


@router.get("/v1/audio/{audio_id}/waveform", response_model=Waveform, responses=errors(404, 422))
def get_audio_waveform(st: State, audio_id: str, q: Annotated[WaveformQuery, Query()]) -> dict:
    """An uploaded voice-over's waveform, per-frame RMS and silent spans on a render's frame grid"""
    from studio.core.avatars.library import output_rate_for
    from studio.core.media.analysis import analyze
    from studio.core.media.rates import drop_frames, nominal, rate_number, rate_text

    path = st.uploads.audio_path(audio_id)
    if q.avatar:
        from studio.api.inputs import library_avatar

        library_avatar(q.avatar)
    try:
        rate = output_rate_for(q.fps, q.avatar) if q.avatar or q.fps not in (None, "", "auto") else None
    except (ValueError, TypeError):
        raise ApiError(422, f"fps {q.fps!r} is not a frame rate this server knows") from None
    a = analyze(path, rate=rate) if rate is not None else analyze(path)
    summary = a.summary(q.threshold, q.min_silence)
    return {
        "id": audio_id,
        "frames": a.frames,
        "fps": rate_number(a.rate),
        "rate": rate_text(a.rate),
        "timecode": {"nominal": nominal(a.rate), "drop": drop_frames(a.rate)},
        "duration_s": summary["duration_s"],
        "threshold": q.threshold,
        "min_silence": q.min_silence,
        "rms": [round(float(v), 6) for v in a.rms[: a.frames]],
        "silent_spans": summary["silent_spans"],
        "envelope": envelope(a.env_min, a.env_max, q.columns),
    }


def envelope(lo, hi, columns: int) -> dict:
    """``columns`` min/max pairs over the analysis' envelope (fewer when the clip is shorter)."""
    import numpy as np

    n = len(lo)
    if n == 0:
        return {"min": [], "max": []}
    edges = np.linspace(0, n, min(columns, n) + 1).astype(int)
    mins = np.minimum.reduceat(np.asarray(lo, np.float32), edges[:-1])
    maxs = np.maximum.reduceat(np.asarray(hi, np.float32), edges[:-1])
    return {"min": [round(float(v), 4) for v in mins], "max": [round(float(v), 4) for v in maxs]}


@router.post(
    "/v1/audio/speech",
    status_code=201,
    response_model=AudioAnalysis,
    responses=errors(409, 422),
    openapi_extra={"parameters": [IDEMPOTENCY_DOC]},
)
async def speak_text(st: State, request: Request, response: Response, form: Annotated[SpeechForm, Form()]) -> dict:
    """Speak a text (Piper, or espeak-ng where Piper is missing) and keep it as an uploaded voice-over
    (answers its analysis)"""
    from studio.api.routers.audio import analysis

    async with Idempotent(st, request, form, response) as once:
        if once.replayed is not None:
            return await run_in_threadpool(analysis, st, once.replayed["answer"]["id"], *_silence_defaults())
        stored = await _store_speech(st, form.text, form.voice)
        answer = await run_in_threadpool(analysis, st, stored.id, *_silence_defaults())
        once.done(answer={"id": stored.id})
    return answer


def _silence_defaults() -> tuple[float, int]:
    from studio.core.settings import SCHEMA

    return SCHEMA["threshold"].default, SCHEMA["min_silence"].default


async def _store_speech(st, text: str, voice: str):
    """The spoken WAV (``media.speech.synthesize``), stored through the upload store (the same id for the
    same speech), with its sentence times beside it (``<id>.speech.json``): a render of it makes captions
    from the text it was spoken from, as one of ``text`` does, with no script sent again."""
    from starlette.datastructures import UploadFile

    from studio.core.errors import StudioError
    from studio.core.media.speech import synthesize, write_sentences

    try:  # the script is bounded (and its WAV's size estimated against the upload limit) before synthesis
        speech = await run_in_threadpool(
            functools.partial(synthesize, text, voice, 160, most_bytes=st.uploads.max_bytes)
        )
    except StudioError as exc:
        raise ApiError(422, str(exc)) from None
    wav = speech.path
    words = "_".join(text.split()[:4])[:40] or "speech"
    size = wav.stat().st_size
    if size > st.uploads.max_bytes:  # longer than estimated: said as the speech it is, not as an upload
        raise ApiError(
            422,
            f"the spoken script is {size / 2**20:.0f} MB, more than this server keeps "
            f"({st.uploads.max_bytes / 2**20:g} MB, --max-upload-mb): speak it in parts",
        )
    with open(wav, "rb") as fh:
        stored = await st.uploads.save_audio(UploadFile(fh, filename=f"{words}.wav"))
    # its sentence times beside it: captions of a render of it need no script
    await run_in_threadpool(write_sentences, speech, stored.path.with_suffix(".speech.json"), stored.path)
    return stored

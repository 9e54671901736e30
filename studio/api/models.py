"""The API's answers and inputs as Pydantic models: what ``/openapi.json`` describes and clients get.

Every JSON answer has a model here (a generated client gets typed objects, never ``None``); every
error is ``Error`` (``{"error": "one sentence"}``), documented per route with ``errors(...)``. The
render settings' models are made from the one schema (``studio.api.schema``), never typed out:
``RenderSettingsOut`` in a job's answer, ``RenderForm`` (the inputs + every setting) for
``POST /v1/renders`` and ``POST /generate``, ``FrameQuery`` for ``GET /v1/frame``. A render's result
is made from the core's ``RenderResult`` fields the same way.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias

from fastapi import Path as PathParam
from fastapi import UploadFile
from pydantic import BaseModel, ConfigDict, Field, create_model

from studio.api.schema import INT64_MAX, settings_model
from studio.core.avatars.assets import NAME_PATTERN  # a library avatar's name

JOB_STATES = ("draft", "queued", "held", "running", "done", "failed", "cancelled", "interrupted", "expired", "damaged")
FINAL_STATES = ("done", "failed", "cancelled", "interrupted", "expired")
JobState = Literal[JOB_STATES]  # type: ignore[valid-type]

# what the server's ids and names look like: the document says it, so a client (and a fuzzer) knows
AUDIO_ID_PATTERN = r"^[0-9a-f]{16}$"  # an uploaded voice-over's id
CURSOR_PATTERN = r"^[0-9]{0,19}$"  # a page's cursor (a job id; empty: the first page)
JobId = Annotated[int, PathParam(ge=1, le=INT64_MAX, description="a render job's id")]
AvatarName = Annotated[str, PathParam(pattern=NAME_PATTERN, min_length=1, description="a library avatar's name")]
AudioId = Annotated[
    str, PathParam(pattern=AUDIO_ID_PATTERN, min_length=16, description="a voice-over's id (POST /v1/audio)")
]
# an uploaded voice-over's id in an answer (its analysis, its waveform, the list of voice-overs)
AudioIdOut = Annotated[str, Field(description="16 hex digits of the content's SHA-256: the same file gets the same id")]
AUDIO_TYPES = ("audio/wav", "audio/x-wav", "audio/flac", "audio/ogg", "audio/mpeg", "audio/mp4")
IMAGE_TYPES = ("image/png", "image/jpeg", "image/webp")
VIDEO_TYPES = ("video/mp4", "video/quicktime", "video/x-matroska", "video/webm")


def upload(description: str, media_types: tuple[str, ...], default: Any = ...) -> Any:
    """An upload field: the media types it takes go into the document (multipart ``encoding``)."""
    return Field(default, description=description, json_schema_extra={"x-media-types": list(media_types)})


class Answer(BaseModel):
    """An answer: fields a newer server adds are kept by clients (``extra`` allowed)."""

    model_config = ConfigDict(extra="allow")


# --------------------------------------------------------------------------------------------
# errors


class Error(BaseModel):
    """Every error: one sentence saying what is wrong and what to do."""

    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"error": "no render job 7; see GET /v1/renders"}]}
    )
    error: str = Field(description="one sentence: what is wrong and what to do")


ERROR_TEXT = {
    400: "the request is malformed (or names a host that is not this server's: --allowed-hosts)",
    401: "the server needs its token (`Authorization: Bearer TOKEN`) and none, or another, was sent",
    403: "not allowed here (a server path this server does not open, a read-only token, a client without "
    "the scope, or a browser's request from another site)",
    404: "no such job, avatar, voice-over or endpoint; or a frame, frame range or face the input does not have",
    409: "the resource is in another state (a job not finished yet, a finished job, a name taken, an "
    "Idempotency-Key in use)",
    410: "the file is no longer on the server (removed by retention, or by hand)",
    413: "an upload is larger than the server's --max-upload-mb",
    415: "an upload is not a format the server reads, or the body is not a form",
    422: "a field is missing, unknown or not valid (the sentence names it)",
    429: "the queue is full (--max-queued); retry after the Retry-After seconds",
    499: "the client went away before the answer was ready (the job was cancelled)",
    500: "the render failed, or a bug (the traceback is in the server's log)",
    503: "the server cannot render now (no engine, no device, no writable data folder)",
}


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` entries for a route: each code with the ``Error`` model. 401 (a server with a
    token) and 500 are on every route."""
    out: dict[int | str, dict[str, Any]] = {}
    for code in sorted({401, 500, *codes}):
        out[code] = {"model": Error, "description": ERROR_TEXT[code]}
    return out


VIDEO_OUT = "video/mp4 video/quicktime video/webm"  # a render's file: by its codec (h264/hevc, ProRes/DNxHR, VP9)


def binary_content(media_types: str) -> dict:
    """The real media types first (space-separated), then ``application/octet-stream`` (the same
    bytes): a generator that knows no video or image type (openapi-python-client) reads the answer as
    bytes, with no flags."""
    return {
        t: {"schema": {"type": "string", "format": "binary"}}
        for t in (*media_types.split(), "application/octet-stream")
    }


def binary(media_type: str, description: str, *codes: int, headers: dict | None = None) -> dict:
    """``responses=`` for a binary answer (``video/mp4``, ``image/png``, ``image/jpeg``) and its errors."""
    ok: dict[str, Any] = {"description": description, "content": binary_content(media_type)}
    if headers:
        ok["headers"] = headers
    return {200: ok, **errors(*codes)}


# --------------------------------------------------------------------------------------------
# avatars


class Avatar(Answer):
    name: str
    kind: str | None = Field(None, description="photo | video")
    frames: int | None = None
    width: int | None = None
    height: int | None = None
    fps: float | None = None
    faceless_frames: int | None = None
    duration_s: float | None = None
    source: str | None = Field(None, description="the source file's name")
    params: dict[str, Any] | None = Field(None, description="how it was prepared")
    size_bytes: int | None = None
    thumbnail: str | None = Field(None, description="URL of its PNG thumbnail")
    damaged: bool = Field(False, description="its cache is damaged: `problem` says how, `fix` what to do")
    problem: str | None = None
    fix: str | None = None


class AvatarList(Answer):
    avatars: list[Avatar]


class AvatarRemoved(Answer):
    removed: str


def _avatar_form() -> type[BaseModel]:
    """The form of ``POST /v1/avatars``: name, file, force, and every ``AvatarParams`` field."""
    from studio.core.avatars.assets import AvatarParams

    help_ = {
        "bbox_shift": "pixels: moves the face box's mirror line down (+) or up (-)",
        "extra_margin": "pixels added below the chin",
        "cheek_width": "jaw mask: half-width of the central band (0-512)",
        "feather": "width of the mask's soft edge in 256-crop pixels (0-128)",
        "mask_mode": "jaw (MuseTalk v1.5) or raw (the lower half of the face silhouette)",
        "smooth": "temporal smoothing 0..1 of landmarks and boxes (videos)",
        "trim_start": "seconds into a video where the avatar starts",
        "trim_end": "seconds into a video where the avatar ends (later than trim_start)",
        "face": "several faces: the N-th from the left (1-based)",
    }
    hints = typing.get_type_hints(AvatarParams)
    fields: dict[str, Any] = {
        "name": (
            str,
            Field(
                description="library name: up to 64 letters, digits, '.', '_', '-'",
                examples=["anna"],
                pattern=NAME_PATTERN,
                min_length=1,
            ),
        ),
        "file": (UploadFile, upload("a photo (PNG, JPEG, WebP) or a video", IMAGE_TYPES + VIDEO_TYPES)),
        "force": (bool, Field(False, description="replace an avatar of that name")),
    }
    from studio.core.avatars import faces

    # the ranges AvatarParams.check() holds, said in the document (a value outside them is 422)
    limits: dict[str, dict[str, Any]] = {
        "bbox_shift": {"ge": -1000, "le": 1000},
        "extra_margin": {"ge": 0, "le": 10_000},
        "cheek_width": {"ge": 0, "le": 512},
        "feather": {"ge": 0, "le": 128},
        "smooth": {"ge": 0, "le": 1},
        "trim_start": {"ge": 0, "le": 1e7},
        "trim_end": {"gt": 0, "le": 1e7},
        "face": {"ge": 1, "le": faces.MAX_FACES},
    }
    for f in dataclasses.fields(AvatarParams):
        if f.name == "matte":  # a file on the server: not something a client names
            continue
        kind = hints[f.name]
        if f.name == "mask_mode":
            kind = Literal[tuple(faces.MASK_MODES)]
        extra: dict[str, Any] = dict(limits.get(f.name, {}))
        if float in (kind, *typing.get_args(kind)):
            extra["allow_inf_nan"] = False
        fields[f.name] = (kind, Field(f.default, description=help_.get(f.name, f.name), **extra))
    return create_model("AvatarForm", __config__=ConfigDict(extra="forbid"), __doc__="A new library avatar.", **fields)


if TYPE_CHECKING:  # made at import time: to a type checker, any model
    AvatarForm: TypeAlias = Any
else:
    AvatarForm = _avatar_form()


# --------------------------------------------------------------------------------------------
# voice-overs


class AudioFile(BaseModel):
    """A voice-over to upload, and the silence settings its analysis uses."""

    file: UploadFile = upload("WAV, FLAC, OGG, MP3 or M4A", AUDIO_TYPES)


if TYPE_CHECKING:
    AudioForm: TypeAlias = Any
    SilenceQuery: TypeAlias = Any
else:
    AudioForm = settings_model("AudioForm", "http", ("silence",), base=AudioFile)
    SilenceQuery = settings_model("SilenceQuery", "http", ("silence",), doc="The silence settings of an analysis.")


class AudioAnalysis(Answer):
    """An uploaded voice-over: its id (renders and frames use it) and where it is silent."""

    id: AudioIdOut
    filename: str = Field(description="what the client called it")
    bytes: int
    duration_s: float
    sample_rate: int
    channels: int
    format: str
    subtype: str | None = None
    frames: int = Field(description="video frames it lasts")
    fps: float
    silence_threshold: float
    min_silence_frames: int
    silent_frames: int
    silent_percent: float
    longest_silence_frames: int
    longest_silence_s: float
    silent_spans: list[list[int]] = Field(description="[start, end) video frames of each silence")


# --------------------------------------------------------------------------------------------
# frames


class FrameTime(BaseModel):
    """The frame at ``t`` seconds (a job's frame: its avatar, voice-over and settings)."""

    model_config = ConfigDict(extra="forbid")
    t: float = Field(ge=0, allow_inf_nan=False, description="seconds into the voice-over (past its end: 404)")


class FrameInputs(FrameTime):
    """Which frame: a library avatar and an uploaded voice-over, at ``t`` seconds."""

    avatar: str = Field(description="a library avatar's name", pattern=NAME_PATTERN, min_length=1)
    audio_id: str = Field(
        description="a voice-over uploaded with POST /v1/audio", pattern=AUDIO_ID_PATTERN, min_length=16
    )


if TYPE_CHECKING:
    FrameQuery: TypeAlias = Any
    JobFrameQuery: TypeAlias = Any
else:
    FrameQuery = settings_model(
        "FrameQuery",
        "http",
        ("engine", "silence"),
        base=FrameInputs,
        doc="The frame at t, and the settings that make it (a delivery's too: its canvas, placement, rate).",
        also=("delivery",),
    )
    JobFrameQuery = FrameTime


# --------------------------------------------------------------------------------------------
# renders


ONE_AVATAR = ("avatar", "avatar_file", "avatar_path")  # a render takes exactly one of each
ONE_VOICE = ("audio", "audio_id", "text", "audio_path")


class RenderInputs(BaseModel):
    """The inputs of a render: exactly one avatar, exactly one voice-over; the settings follow."""

    model_config = ConfigDict(
        json_schema_extra={
            "allOf": [{"oneOf": [{"required": [n]} for n in group]} for group in (ONE_AVATAR, ONE_VOICE)]
        }
    )
    avatar: str | None = Field(
        None, description="a library avatar's name", examples=["anna"], pattern=NAME_PATTERN, min_length=1
    )
    avatar_file: UploadFile | None = upload("or an uploaded photo or video", IMAGE_TYPES + VIDEO_TYPES, None)
    audio: UploadFile | None = upload("or the voice-over, uploaded", AUDIO_TYPES, None)
    audio_id: str | None = Field(
        None, description="or a voice-over uploaded with POST /v1/audio", pattern=AUDIO_ID_PATTERN, min_length=16
    )
    text: str | None = Field(
        None,
        description="or a script spoken offline (Piper, espeak-ng without it)",
        pattern=r"[A-Za-z]",
        max_length=20_000,
    )
    voice: str = Field(
        "",
        description="the voice for text: a Piper voice (default joe), or espeak[:VOICE]",
        pattern=r"^[A-Za-z0-9_.:-]{0,64}$",
        max_length=64,
    )
    avatar_path: str | None = Field(
        None, description="or a file on the server (under --allow-paths folders)", min_length=1, max_length=4096
    )
    audio_path: str | None = Field(
        None, description="or a file on the server (under --allow-paths folders)", min_length=1, max_length=4096
    )
    output: str | None = Field(
        None, description="an output path on the server (under --allow-paths folders)", min_length=1, max_length=4096
    )
    frame_start: int | None = Field(None, ge=0, le=INT64_MAX, description="render from this video frame (the in point)")
    frame_end: int | None = Field(
        None, ge=1, le=INT64_MAX, description="up to, not including, this frame (the out point; after frame_start)"
    )
    gpus: str | None = Field(
        None,
        description="spread this one clip over these GPUs: all, or cuda:0,cuda:1",
        pattern=r"^(all|[0-9]{1,3}|[A-Za-z0-9:,]{1,200})$",
        max_length=200,
    )
    placement: Literal["farm", "gpus"] | None = Field(
        None,
        title="Job placement",  # not "Placement": the canvas setting `fit` is titled so (one enum name a client)
        description="farm: split this one long clip in chunks over the farm's actors (a server started with "
        "--farm); gpus: over this server's GPUs (as gpus=all); default: the whole job on one device or actor",
    )
    priority: str | None = Field(
        None,
        description="its lane: breaking, normal (the default), bulk, or a number from 0 (bulk) to 100 (breaking); "
        "higher lanes are served first, a lane below still gets at least 10 % of the frames (docs/server.md)",
        pattern=r"^(breaking|normal|bulk|[0-9]{1,3})$",
        max_length=8,
    )
    deadline_s: float | None = Field(
        None,
        gt=0,
        le=604800,
        description="seconds from now by which it must be done (or the header Cancel-After: SECONDS): refused at "
        "once with 429 and Retry-After when the queue ahead cannot leave room for it, else cancelled if not done by then",
    )
    webhook: str | None = Field(
        None,
        description="a URL told of each final state: POSTed the job's JSON, signed with X-Studio-Signature "
        '(t=TIME,sha256=HMAC of "TIME." + the body); its host and port must be allowed by the server\'s '
        "--webhook-allow (never the server itself)",
        examples=["https://newsroom.example/hooks/studio"],
    )


if TYPE_CHECKING:
    RenderForm: TypeAlias = Any
    RenderSettingsOut: TypeAlias = Any
else:
    RenderForm = settings_model(
        "RenderForm",
        "http",
        base=RenderInputs,
        doc="A render: one avatar, one voice-over, optional in/out frames, and any render setting.",
    )
    RenderSettingsOut = settings_model(
        "RenderSettings", "job", strict=False, doc="Every render setting of a job (the schema's defaults where unset)."
    )


class CheckGate(Answer):
    """The limits a render's check had to meet (its ``check_gate``) and the outcome; a job that
    missed them stays ``done``, with its file and report (docs/check.md)."""

    limits: str = Field(description="as studio check --fail-under takes them, e.g. ok,jitter=5")
    met: bool
    failures: list[str] = Field(default_factory=list, description="one clause per missed limit")


class CheckOut(Answer):
    """The lip-sync check of a finished render (``check=true``; docs/check.md): it runs after the file
    is written, so it is ``pending``/``running`` for a while after the job is ``done``."""

    state: Literal["pending", "running", "done", "failed", "stopped"]
    verdict: Literal["ok", "check", "out of sync"] | None = None
    reason: str | None = Field(None, description="one sentence: why this verdict, or why the check did not run")
    offset_frames: int | None = Field(None, description="the audio shift that best aligns the mouth; + = video late")
    confidence: float | None = Field(None, description="peak minus median correlation over +-15 frames")
    silence_motion: float | None = None
    sharpness: float | None = None
    seam: float | None = Field(None, description="luma levels the blend adds across the mask's border")
    drift: float | None = Field(None, description="in eye distances")
    worst_second: int | None = Field(None, description="where to look first")
    reference: str | None = Field(None, description="what sharpness, seam and drift were measured against")
    jitter: float | None = Field(None, description="lip shake beyond the smooth path, % of the eye distance per frame²")
    gate: CheckGate | None = Field(None, description="the render's check_gate and whether the check met it")


def _result_model() -> type[BaseModel]:
    """A finished job's result: the core's ``RenderResult`` fields (all optional: rows of older
    versions), plus where it ran."""
    from studio.core.render.results import RenderResult

    try:
        hints = typing.get_type_hints(RenderResult)
    except Exception:  # noqa: BLE001 - an annotation this module cannot resolve: untyped then
        hints = {}
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(RenderResult):
        kind = hints.get(f.name, Any)
        fields[f.name] = (kind | None, None)
    fields.setdefault("ran_on", (str | None, Field(None, description="where it rendered (a server, a farm, here)")))
    fields.setdefault(
        "farm",
        (
            dict[str, Any] | None,
            Field(None, description="studio serve --farm: the actor and node, attempts, how the file came back"),
        ),
    )
    fields.setdefault("check", (CheckOut | None, Field(None, description="its lip-sync check, when asked for")))
    return create_model(
        "RenderResult", __base__=Answer, __doc__="What the render did (figures, engine, encoder, where).", **fields
    )


if TYPE_CHECKING:
    RenderResultOut: TypeAlias = Any
else:
    RenderResultOut = _result_model()


class Links(Answer):
    self: str
    events: str = Field(description="Server-Sent Events until a final state")
    video: str = Field(description="the MP4 once done (HTTP Range supported)")
    preview: str = Field(description="the latest preview frame while it renders (JPEG)")
    cancel: str = Field(description="DELETE: cancel a queued or running job")
    retry: str = Field(description="POST: render it again as a new job")
    frame: str = Field(description="the exact frame of this job at t (PNG)")


class ProgressEvent(Answer):
    """A ``progress`` event (and a running job's ``live`` figures)."""

    id: int
    done: int = Field(description="frames written")
    total: int
    fps: float
    eta_s: float
    elapsed_s: float
    preview: str | None = Field(None, description="URL of the latest preview frame, when there is one")
    workers: dict[str, Any] | None = None
    chunks_done: int | None = None
    chunks: int | None = None
    retries: int | None = None


# a done job's video and figures (null before it is done): a Job's and its state events' fields
DoneVideo = Annotated[str | None, Field(description="the MP4's URL once done")]
DoneFrames = Annotated[int | None, Field(description="frames written, once done")]
DoneSeconds = Annotated[float | None, Field(description="render seconds, once done")]
DoneFps = Annotated[float | None, Field(description="frames per second of the render, once done")]


class StateEvent(Answer):
    """A ``state`` event: the job's state now (the video's link and figures once done)."""

    id: int
    state: Literal[JOB_STATES + ("removed",)]  # type: ignore[valid-type]
    reason: str = ""
    video: DoneVideo = None
    frames: DoneFrames = None
    seconds: DoneSeconds = None
    fps: DoneFps = None


class Delivery(Answer):
    """One webhook call."""

    state: str = Field(
        description='the event it told of: the job\'s final state, or "checked" (the lip-sync check ended)'
    )
    attempt: int
    at: float = Field(description="seconds since the epoch")
    ok: bool = Field(description="the listener answered 2xx")
    status: int | None = Field(None, description="the listener's HTTP status (none when it could not be reached)")
    error: str = ""


class WebhookInfo(Answer):
    url: str
    state: Literal["pending", "delivered", "failed"] = Field(
        description="pending: not yet told (or retrying with backoff, or a check still to report); delivered: "
        "every call taken; failed: every try of a call failed"
    )
    deliveries: list[Delivery]


class SideFile(Answer):
    """A file of a job beside its video (captions, OTIO, the check report, the job's JSON, ...)."""

    name: str = Field(description="its file name")
    kind: str = Field(description="captions, otio, check, job, or another kind a render wrote")
    url: str = Field(description="GET it (same authorisation as the video; HTTP Range supported for files)")
    bytes: int | None = Field(None, description="its size (null: made when asked)")
    media_type: str


class Job(Answer):
    """A render job."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "examples": [
                {
                    "id": 7,
                    "state": "queued",
                    "reason": "",
                    "avatar": "anna",
                    "audio": "voice.wav",
                    "output": "anna-voice.mp4",
                    "progress": 0.0,
                    "position": 1,
                    "eta_s": 12.5,
                    "links": {"self": "/v1/renders/7", "events": "/v1/renders/7/events"},
                }
            ]
        },
    )
    id: int
    state: JobState
    reason: str = Field(description="why it failed or was cancelled; empty otherwise")
    avatar: str = Field(description="the library name, or the uploaded file's name")
    audio: str = Field(description="the voice-over's name")
    output: str = Field(description="the output file's name")
    settings: RenderSettingsOut
    frame_range: list[int] | None = Field(None, description="[in, out) video frames, when only a range renders")
    progress: float = Field(description="0..1")
    created: float = Field(description="seconds since the epoch")
    updated: float
    result: RenderResultOut | None = None
    links: Links
    files: list[SideFile] = Field(default_factory=list, description="its side files (captions, OTIO, check, JSON)")
    live: ProgressEvent | None = Field(None, description="the latest progress of a running job")
    video: DoneVideo = None
    frames: DoneFrames = None
    seconds: DoneSeconds = None
    fps: DoneFps = None
    position: int | None = Field(None, description="queued: its place in the queue (1 = next); running: 0")
    eta_s: float | None = Field(
        None, description="queued or running: seconds until it is expected to be done (null until the speed is known)"
    )
    starts_in_s: float | None = Field(None, description="queued: seconds until it is expected to start")
    retry_of: int | None = Field(None, description="the job this one renders again (POST .../retry)")
    webhook: WebhookInfo | None = None
    client: str | None = Field(None, description="the named client (--clients) that submitted it; null: the operator's")
    priority: str | None = Field(None, description="its lane: breaking, normal, bulk, or a number from 0 to 100")
    deadline: float | None = Field(
        None, description="seconds since the epoch by which it must be done; it is cancelled then if it is not"
    )
    promised_s: float | None = Field(
        None, description="with a deadline: the seconds it was expected to take when it was accepted"
    )
    queue_s: float | None = Field(None, description="seconds it waited in the queue before it started")
    first_frame_s: float | None = Field(None, description="seconds from its submission to its first frame")


class JobPage(Answer):
    """A page of jobs, newest first; ``next`` is the URL of the next page (null on the last)."""

    renders: list[Job]
    next: str | None = Field(None, description="the next page's URL (same filters); null on the last page")


class Removed(Answer):
    """A purged job: it and its files are gone."""

    id: int
    state: Literal["removed"]
    reason: str
    files: list[str] = Field(default_factory=list, description="the names of the files removed")

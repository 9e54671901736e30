"""The OpenAPI document of ``studio serve``: FastAPI's, completed so it says what this server accepts.

    doc = openapi(app)          # /openapi.json (made once per app)

FastAPI writes the routes, models and declared answers; this adds what it cannot know:

* forms: an optional field is left out, never ``null`` (a form has no null); uploads are
  ``format: binary`` with the media types each one takes (``encoding``), from the models'
  ``x-media-types``;
* choices this server can run: a setting's choices are narrowed to those ``runnable_here`` accepts on
  this machine (no MuseTalk weights: ``engine`` is ``auto`` or ``classic``, and MuseTalk's own
  options keep their defaults; no NVENC: no ``encoder=nvenc``), generic over every setting, so a
  setting added to ``RenderSettings`` is narrowed too; with settings that need each other (an H.264
  encoder only with ``codec=h264``) as ``anyOf`` rules; the devices it has; its espeak-ng voices;
  ``webhook`` only when the server sends webhooks;
* what every route may answer besides its own: 403 to a read-only token, 405 with ``Allow``,
  409 for an ``Idempotency-Key`` in use, ``Retry-After`` on 409/429/503, ``Location`` on 201/202;
* links from what a POST makes to the operations on it (a fuzzer's and a client's next step);
* the webhook calls (OpenAPI 3.1 ``webhooks``) with their signed headers.
"""

from __future__ import annotations

import copy
import functools
import itertools
import json
import os
import re
import shutil
import subprocess
import threading
from typing import Annotated, Any

from fastapi import APIRouter, Body, Header

from studio.api.models import Job
from studio.api.route import repeats_summary
from studio.api.schema import INT64_MAX, INT64_MIN

NULL = {"type": "null"}
# models a client needs that no route returns as JSON (the event stream's data): listed in the document
STREAM_MODELS = ("StateEvent", "ProgressEvent")
READ_ONLY_OK = ("get", "head")  # what a read-only token may do (not the frame routes: they render)
HEADER_DOCS = {
    "Retry-After": {"description": "seconds to wait before trying again", "schema": {"type": "integer"}},
    "Allow": {"description": "the methods this path takes", "schema": {"type": "string"}},
}
BOUNDS = ("maximum", "minimum", "exclusiveMaximum", "exclusiveMinimum")
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


_lock = threading.Lock()


def openapi(app) -> dict:
    """The document, made once (``warm`` makes it in the background when the server starts)."""
    with _lock:
        if app.openapi_schema is None:
            app.openapi_schema = _make(app)
        return app.openapi_schema


def warm(app) -> None:
    threading.Thread(target=openapi, args=(app,), name="openapi", daemon=True).start()


def _make(app) -> dict:
    from fastapi.openapi.utils import get_openapi

    from studio.api import models

    doc = get_openapi(
        title=app.title,
        version=app.version,
        description=app.description,
        routes=app.routes,
        tags=app.openapi_tags,
        webhooks=_webhook_routes(),
    )
    for _path, _method, op in _operations(doc):
        if repeats_summary(op):  # a one-paragraph docstring is the summary alone (studio.api.route)
            del op["description"]
    _binary_uploads(doc)
    _exact_bounds(doc)
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    for name in STREAM_MODELS:
        model = getattr(models, name)
        schemas.setdefault(name, model.model_json_schema(ref_template="#/components/schemas/{model}"))
    opts = app.state.studio.opts
    _forms(doc)
    _narrow(doc, opts)
    _answers(doc)
    _links(doc)
    for item in doc.get("webhooks", {}).values():  # a listener's answer: taken (2xx) or not, never our Error
        for op in item.values():
            op["responses"].pop("422", None)
    for name in ("HTTPValidationError", "ValidationError"):  # FastAPI's `detail` shape: never sent here
        if f'"#/components/schemas/{name}"' not in json.dumps(doc):
            schemas.pop(name, None)
    return doc


# ------------------------------------------------------------------------------------------ forms


def _binary_uploads(node) -> None:
    """Pydantic writes an ``UploadFile`` field as ``contentMediaType``; clients want ``format: binary``."""
    if isinstance(node, dict):
        if node.get("type") == "string" and node.get("contentMediaType") == "application/octet-stream":
            node.pop("contentMediaType")
            node["format"] = "binary"
        for v in node.values():
            _binary_uploads(v)
    elif isinstance(node, list):
        for v in node:
            _binary_uploads(v)


def _exact_bounds(node) -> None:
    """FastAPI's document model holds ``maximum``/``minimum`` as floats: 2**63 - 1 came out as
    9.223372036854776e18 (= 2**63, one past it). The 64-bit bounds and whole numbers are ints again."""
    if isinstance(node, dict):
        for key, v in node.items():
            if key in BOUNDS and isinstance(v, float) and v.is_integer():
                node[key] = INT64_MAX if v >= 2**63 - 1 else INT64_MIN if v <= -(2**63) else int(v)
            else:
                _exact_bounds(v)
    elif isinstance(node, list):
        for v in node:
            _exact_bounds(v)


def _operations(doc):
    for path, item in doc.get("paths", {}).items():
        for method, op in item.items():
            if method in METHODS:
                yield path, method, op


def _form_schema(doc, op) -> tuple[dict | None, dict | None]:
    """The form body of an operation, multipart or urlencoded: (its media entry, its schema resolved)."""
    content = op.get("requestBody", {}).get("content", {})
    media = content.get("multipart/form-data") or content.get("application/x-www-form-urlencoded")
    if media is None:
        return None, None
    ref = media.get("schema", {}).get("$ref", "")
    schema = doc["components"]["schemas"].get(ref.rsplit("/", 1)[-1]) if ref else media.get("schema")
    return media, schema


def _forms(doc) -> None:
    """An optional form field is left out, not sent as null; uploads say the media types they take."""
    encodings: dict[int, dict] = {}  # a form two routes share is completed once
    for _, _, op in _operations(doc):
        media, schema = _form_schema(doc, op)
        if schema is None:
            continue
        if id(schema) in encodings:
            if encodings[id(schema)] and media is not None:
                media["encoding"] = copy.deepcopy(encodings[id(schema)])
            continue
        encoding = encodings[id(schema)] = {}
        for name, prop in schema.get("properties", {}).items():
            options = prop.get("anyOf")
            if options and NULL in options:
                rest = [o for o in options if o != NULL]
                prop.pop("anyOf")
                if len(rest) == 1:
                    prop.update(rest[0])
                else:
                    prop["anyOf"] = rest
                if prop.get("default", 0) is None:
                    prop.pop("default")
            kinds = prop.pop("x-media-types", None)
            if kinds:
                encoding[name] = {"contentType": ", ".join(kinds)}
        if encoding and media is not None:
            media["encoding"] = encoding


# ------------------------------------------------------------------------------ what runs here


def _narrow(doc, opts) -> None:
    """Choices this server can run, in the forms and queries that take settings."""
    from studio.core.settings import SCHEMA

    render, frame = _allowed_choices(False), _allowed_choices(True)
    for path, _, op in _operations(doc):
        allowed = frame if path.endswith("/frame") else render
        _, schema = _form_schema(doc, op)
        if schema is not None:
            props = schema.get("properties", {})
            for name, values in allowed.items():
                if name in props:
                    _only(props[name], values)
            if "webhook" in props and not (opts.webhook_secret and opts.webhook_allow):
                props.pop("webhook")  # this server sends none: the field is not one it takes
            if "voice" in props and (voices := speech_voices()):
                _only(props["voice"], voices)  # its default "" (Piper's default voice) is joe, listed
            if not path.endswith("/frame") and {"codec", "encoder"} <= set(props):
                rules = schema.setdefault("allOf", [])
                rules.extend(r for r in _dependencies(render) if r not in rules)  # a form two routes share
        for p in op.get("parameters", []):
            if p.get("in") == "query" and p["name"] in allowed and p["name"] in SCHEMA:
                _only(p["schema"], allowed[p["name"]])


def _only(prop: dict, values: list) -> None:
    """Set a field's choices to ``values`` (an ``enum``), wherever its type sits (``anyOf`` too)."""
    for key in ("anyOf", "type", "enum", "pattern", "const"):
        prop.pop(key, None)
    if all(isinstance(v, bool) for v in values):  # generators take a boolean, or one constant
        prop["type"] = "boolean"
        if len(values) == 1:
            prop["const"] = values[0]
    else:
        prop["enum"] = list(values)
    if "default" in prop and prop["default"] not in values:
        prop.pop("default")


@functools.lru_cache(maxsize=2)
def _allowed_choices(frame: bool) -> dict[str, list]:
    """For each setting with choices (and bool ones, and the device): the values ``runnable_here``
    accepts on this machine, each tried alone from the defaults. Only those narrowed are listed."""
    from studio.core.errors import StudioError
    from studio.core.settings import SCHEMA, RenderSettings
    from studio.service.preflight import runnable_here

    base = RenderSettings()
    out: dict[str, list] = {}
    for spec in SCHEMA.values():
        if spec.choices:
            candidates: list = list(spec.choices)
        elif spec.kind is bool:
            candidates = [False, True]
        elif spec.name == "device":  # the devices this machine has (each one runs)
            out[spec.name] = devices_here()
            continue
        else:
            continue
        ok = []
        for value in candidates:
            try:
                runnable_here(base.with_(**{spec.name: None if value == spec.auto_label else value}), frame=frame)
                ok.append(value)
            except StudioError:
                continue
        if ok != candidates:
            out[spec.name] = ok
    return out


def _dependencies(allowed: dict[str, list]) -> list[dict]:
    """Pairs of choices that are fine alone and refused together (an H.264 encoder with codec=vp9),
    tried over every pair of choice settings, as ``anyOf`` rules: "a is not one of these, or b is not
    one of those" (a field left out has its default, which is never refused, so it satisfies its
    branch). Written without ``not``/``if``, which generators and fuzzers handle worst."""
    from studio.core.errors import StudioError
    from studio.core.settings import SCHEMA, RenderSettings
    from studio.service.preflight import runnable_here

    base = RenderSettings()
    names = [n for n, s in SCHEMA.items() if s.choices and n != "engine"]
    rules = []
    for a, b in itertools.combinations(names, 2):  # each pair once: a rule holds both ways
        a_values = allowed.get(a, list(SCHEMA[a].choices or ()))
        b_values = allowed.get(b, list(SCHEMA[b].choices or ()))
        refused = set()
        for va, vb in itertools.product(a_values, b_values):
            try:
                runnable_here(base.with_(**{a: va, b: vb}))
            except StudioError:
                refused.add((va, vb))
        if not refused:
            continue
        a_bad = sorted({va for va, _ in refused}, key=a_values.index)
        b_bad = sorted({vb for _, vb in refused}, key=b_values.index)
        groups = [(a_bad, b_bad)]
        if refused != set(itertools.product(a_bad, b_bad)):  # not one block: a rule per value of a
            groups = [([va], [vb for x, vb in refused if x == va]) for va in a_bad]
        for bad_a, bad_b in groups:
            rules.append(
                {
                    "anyOf": [
                        {"properties": {a: {"enum": [v for v in a_values if v not in bad_a]}}},
                        {"properties": {b: {"enum": [v for v in b_values if v not in bad_b]}}},
                    ]
                }
            )
    return rules


def devices_here() -> list[str]:
    """``auto``, ``cpu`` and each CUDA device this machine has (torch is not imported for this on a
    machine without an NVIDIA driver: the document is made in a moment)."""
    out = ["auto", "cpu"]
    if shutil.which("nvidia-smi") is None and not os.path.exists("/dev/nvidiactl"):
        return out
    try:
        import torch

        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001 - no torch or no driver: the CPU only
        n = 0
    if n:
        out += ["cuda", *(f"cuda:{i}" for i in range(n))]
    return out


def speech_voices() -> list[str]:
    """What ``voice`` (text spoken offline) takes here, as ``synthesize`` reads it: Piper's default
    voice (joe: espeak-ng speaks it where Piper is missing), the imported Piper voices, and
    ``espeak`` / ``espeak:VOICE`` for each espeak-ng voice installed. [] without espeak-ng or Piper."""
    from studio.core.media.speech import DEFAULT_VOICE, piper_ready, voices

    espeak = espeak_voices()
    if not espeak and not piper_ready():
        return []
    piper = [v for v in voices() if v not in (DEFAULT_VOICE, "espeak")]
    return [DEFAULT_VOICE, *piper, *(["espeak", *(f"espeak:{v}" for v in espeak)] if espeak else [])]


@functools.lru_cache(maxsize=1)
def espeak_voices() -> list[str]:
    """The espeak-ng voices installed here (``text`` is spoken with one), or [] without espeak-ng."""
    exe = shutil.which("espeak-ng")
    if exe is None:
        return []
    try:
        r = subprocess.run([exe, "--voices"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return []
    names = [line.split()[1] for line in r.stdout.splitlines()[1:] if len(line.split()) > 1]
    # the language column is a voice name (-v) for the plain codes only: chr-US-Qaaa-x-west is not one
    return sorted({n for n in names if re.fullmatch(r"[a-z]{2,3}(-[a-z0-9]{1,8})*", n)})


# ------------------------------------------------------------------------------------- answers


def _error(doc, description: str, headers: dict | None = None) -> dict:
    out: dict[str, Any] = {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }
    if headers:
        out["headers"] = headers
    return out


def _answers(doc) -> None:
    """What any route may answer besides its own: a read-only token's 403, a 405 with ``Allow``,
    ``Retry-After`` and ``Location`` headers."""
    for path, method, op in _operations(doc):
        responses = op.setdefault("responses", {})
        if method not in READ_ONLY_OK or path.endswith("/frame"):
            responses.setdefault(
                "403", _error(doc, "not allowed with this token (a read-only token only reads), or a server path")
            )
        responses.setdefault(
            "405",
            _error(
                doc,
                "this path does not take that method; `Allow` lists those it takes",
                {"Allow": HEADER_DOCS["Allow"]},
            ),
        )
        idempotent = any(p.get("name") == "Idempotency-Key" for p in op.get("parameters", []))
        if idempotent:
            responses.setdefault(
                "409", _error(doc, "the first request with this Idempotency-Key is still being handled")
            )
        for code in ("409", "429", "503"):
            if code in responses and (code != "409" or idempotent):
                responses[code].setdefault("headers", {})["Retry-After"] = HEADER_DOCS["Retry-After"]
        made = {"202": "/v1/renders/{id}", "201": "/v1/audio/{id}" if path == "/v1/audio" else None}
        for code, where in made.items():
            if code in responses and where:
                responses[code].setdefault("headers", {})["Location"] = {
                    "description": f"the URL of what it made ({where})",
                    "schema": {"type": "string"},
                }
        for code, answer in responses.items():
            if code.startswith("2") and op.get("parameters") and idempotent:
                answer.setdefault("headers", {})["Idempotent-Replayed"] = {
                    "description": "`true` when this is the answer to an earlier request with the same key",
                    "schema": {"type": "string", "enum": ["true"]},
                }
    video = doc["paths"].get("/v1/renders/{job_id}/video", {}).get("get")
    if video is not None:
        video.setdefault("parameters", []).append(
            {
                "name": "Range",
                "in": "header",
                "required": False,
                "description": "one byte range (`bytes=0-1023`, `bytes=1024-`, `bytes=-512`): the answer is 206 with "
                "that part, 416 if it is outside the file; any other Range is ignored (200, the whole file)",
                "schema": {"type": "string"},
            }
        )
        video["responses"].setdefault("206", {})["headers"] = {
            "Content-Range": {"description": "the part sent: `bytes a-b/size`", "schema": {"type": "string"}}
        }
        video["responses"]["416"] = _error(
            doc,
            "the range asked for is outside the file (or ends before it starts)",
            {"Content-Range": {"description": "`bytes */size`", "schema": {"type": "string"}}},
        )


# --------------------------------------------------------------------------------------- links

JOB_OPS = (
    ("get_render", "GetRender"),
    ("delete_render", "CancelRender"),
    ("render_events", "RenderEvents"),
    ("get_render_video", "GetRenderVideo"),
    ("get_render_preview", "GetRenderPreview"),
    ("retry_render", "RetryRender"),
    ("get_render_frame", "GetRenderFrame"),
)


def _links(doc) -> None:
    """From what a POST makes to the operations on it, by the id in its answer."""

    def link(op_id: str, **params: str) -> dict:
        return {"operationId": op_id, "parameters": params}

    by_id = {op.get("operationId"): op for _, _, op in _operations(doc)}

    def add(op_id: str, code: str, links: dict) -> None:
        op = by_id.get(op_id)
        if op is not None and code in op.get("responses", {}):
            op["responses"][code]["links"] = {k: v for k, v in links.items() if v["operationId"] in by_id}

    jobs = {name: link(op, job_id="$response.body#/id") for op, name in JOB_OPS}
    add("create_render", "202", jobs)
    add("retry_render", "202", copy.deepcopy(jobs))
    add("upload_audio", "201", {"GetAudio": link("get_audio", audio_id="$response.body#/id")})
    add(
        "add_avatar",
        "201",
        {
            "GetAvatarThumbnail": link("get_avatar_thumbnail", name="$response.body#/name"),
            "RemoveAvatar": link("remove_avatar", name="$response.body#/name"),
        },
    )


# ------------------------------------------------------------------------------------ webhooks


def _webhook_routes():
    """The webhook calls as OpenAPI 3.1 ``webhooks``: ``render.done`` ... ``render.checked``, each the
    job (``Job``) with its signed headers."""
    router = APIRouter()
    events = {
        "render.done": "the job is done: its video is ready (with check=true, `result.check` is pending)",
        "render.failed": "the job failed: `reason` says why",
        "render.cancelled": "the job was cancelled",
        "render.interrupted": "the server stopped while it rendered",
        "render.expired": "retention removed its video",
        "render.checked": "the lip-sync check of a done job ended: `result.check` has the verdict",
    }
    for event, text in events.items():

        def call(
            job: Annotated[Job, Body(description="the job, exactly as GET /v1/renders/{id} answers it")],
            x_studio_signature: Annotated[
                str,
                Header(
                    description='`t=<unix seconds>,sha256=<hex HMAC-SHA256 of "<t>." + the raw body with the '
                    "server's secret>`: the time is signed with the body (refuse old times: replays)"
                ),
            ],
            x_studio_timestamp: Annotated[int, Header(description="the signed time, unix seconds")],
            x_studio_event: Annotated[str, Header(description="`render.<event>`: the event's name")],
            x_studio_delivery: Annotated[
                str, Header(description="one UUID for this call, the same on every try and on a redelivery")
            ],
            x_studio_attempt: Annotated[int, Header(description="which try this is (1, 2, ...)")],
        ) -> None:
            return None

        router.add_api_route(
            event,
            call,
            methods=["POST"],
            operation_id=f"webhook_{event.replace('.', '_')}",
            summary=text,
            description="Answer 2xx to take it; anything else (or no answer within 10 s) is tried again later.",
            responses={200: {"description": "taken"}},
            status_code=200,
        )
    return router.routes

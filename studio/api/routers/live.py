"""Live sessions: ``/v1/live`` (a presenter drawn on deadlines and streamed over WebRTC, docs/live.md).

``POST /v1/live`` opens one (201, its links), ``GET`` lists or shows them, ``DELETE`` ends one. A viewer
joins with WHEP (``POST {whep}``, an SDP offer: 201, the SDP answer and a ``Location`` to DELETE); the
voice comes over the audio WebSocket (s16le PCM at ``?rate=R``, ``{"type": "clear"}`` barge-in), as text
(``POST {speak}``), or as the viewer's microphone track. ``POST .../push`` sends the session to an RTMP(S)
or SRT ingest. The sessions are the service's (``studio.service.live``); WebRTC is aiortc's
(``studio.api.live_rtc``).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Literal

from fastapi import APIRouter, Request, WebSocket
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool
from starlette.websockets import WebSocketDisconnect

from studio.api.errors import ApiError
from studio.api.models import Answer, errors
from studio.api.route import Route
from studio.api.sse import resource_links
from studio.api.state import State

router = APIRouter(tags=["live"], route_class=Route)

MAX_WS_MESSAGE = 1 << 20  # bytes of one audio message (about 11 s at 48 kHz)
LIVE_SETTINGS = ("engine", "decoder", "precision", "device", "canvas", "fit", "background", "threshold")
SDP_TYPE = "application/sdp"


class LiveForm(BaseModel):
    model_config = ConfigDict(extra="forbid")
    avatar: str = Field(..., min_length=1, max_length=64, description="a library avatar's name")
    engine: str | None = Field(None, max_length=32)
    decoder: str | None = Field(None, max_length=32)
    precision: str | None = Field(None, max_length=16)
    device: str | None = Field(None, max_length=32)
    canvas: str | None = Field(None, max_length=32)
    fit: str | None = Field(None, max_length=16)
    background: str | None = Field(None, max_length=64)
    threshold: float | None = Field(None, ge=0, le=1)
    rate: Literal[25, 30] = Field(25, description="frames per second")
    voice: str = Field("", max_length=64, description="the Piper voice of POST {speak} ('' the default)")


class LiveLinks(Answer):
    self_: str = Field(..., alias="self")
    whep: str
    audio: str
    speak: str
    clear: str
    events: str
    push: str


class LiveSession(Answer):
    id: str
    state: str
    avatar: str
    links: LiveLinks
    key: str | None = Field(None, description="the audio socket's key (`?key=`), for a browser that sends no token")
    figures: dict[str, Any] = Field(default_factory=dict)


class LiveList(Answer):
    sessions: list[LiveSession]
    threads: int = Field(0, description="threads the live sessions hold now (their clocks, speech and pushes)")
    viewers: int = Field(0, description="WebRTC viewers connected now")


class Spoken(Answer):
    queued: bool
    queued_voice_s: float = Field(..., description="seconds of voice queued ahead, this text included")


class Cleared(Answer):
    cleared: bool
    frame: int = Field(..., description="the frame from which the presenter rests")


class LivePush(Answer):
    id: str
    url: str = Field(..., description="where it pushes (credentials left out)")
    state: str
    error: str | None = None
    reconnects: int = 0
    frames: int = 0


class SpeakForm(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = Field(..., min_length=1, max_length=20_000)


class PushForm(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: str = Field(..., min_length=1, max_length=2000, description="rtmp://, rtmps:// or srt://")


def links(sid: str) -> dict:
    return resource_links(f"/v1/live/{sid}", "whep", "audio", "speak", "clear", "events", "push")


def session_json(s, with_key: bool = False) -> dict:
    d = s.describe()
    d["links"] = links(s.id)
    if with_key:
        d["key"] = s.key
    return d


def session_of(st, sid: str):
    from studio.api.clients import current

    s = st.live.get(sid)
    who = current()
    if s is None or not (who.every_job or s.client == who.name):
        raise ApiError(404, f"no live session {sid[:40]!r}; see GET /v1/live")
    return s


@router.post("/v1/live", status_code=201, response_model=LiveSession, responses=errors(400, 404, 422, 429, 503))
async def open_live(st: State, form: LiveForm, response: Response):
    """Open a live session (the presenter rests until a voice comes)"""
    from studio.api.clients import current
    from studio.api.inputs import library_avatar
    from studio.core.settings import from_dict
    from studio.service.live import LiveFull

    library_avatar(form.avatar)
    given = {k: getattr(form, k) for k in LIVE_SETTINGS if getattr(form, k) is not None}
    settings = from_dict({**given, "fps": str(form.rate)})
    if form.voice:
        from studio.core.media.speech import piper_ready

        if not piper_ready():
            raise ApiError(422, f"the voice {form.voice!r} needs Piper, which this server does not have")
    try:
        s = await run_in_threadpool(st.live.open, form.avatar, settings, current().name, form.voice)
    except LiveFull as exc:
        raise ApiError(429, str(exc), {"Retry-After": "10"}) from None
    response.headers["Location"] = links(s.id)["self"]
    return session_json(s, with_key=True)


@router.get("/v1/live", response_model=LiveList, responses=errors())
def list_live(st: State):
    """The open live sessions"""
    from studio.api.clients import current

    who = current()
    import threading

    return {
        "sessions": [session_json(s) for s in st.live.sessions() if who.every_job or s.client == who.name],
        "threads": sum(t.name.startswith("live-") for t in threading.enumerate()),
        "viewers": len(st.viewers),
    }


@router.get("/v1/live/{sid}", response_model=LiveSession, responses=errors(404, 422))
def get_live(st: State, sid: str):
    """A live session now"""
    return session_json(session_of(st, sid))


@router.delete("/v1/live/{sid}", status_code=204, responses=errors(404, 422))
async def end_live(st: State, sid: str):
    """End a live session"""
    session_of(st, sid)
    for v in [v for v in st.viewers.values() if v.session.id == sid]:
        st.viewers.pop(v.id, None)
        await v.close()
    await run_in_threadpool(st.live.close, sid)
    return Response(status_code=204)


@router.post(
    "/v1/live/{sid}/whep",
    status_code=201,
    response_class=Response,  # the SDP answer, nothing in JSON
    responses={
        201: {
            "description": "the SDP answer; `Location` is the viewer's resource (DELETE it to leave)",
            "content": {SDP_TYPE: {"schema": {"type": "string"}}},
        },
        **errors(400, 404, 409, 415, 422, 503),
    },
)
async def whep(st: State, sid: str, request: Request):
    """WHEP: join as a viewer with an SDP offer"""
    s = session_of(st, sid)
    try:
        from studio.api.live_rtc import Viewer, parse_offer_check
    except ImportError:
        raise ApiError(
            503, "this server cannot stream WebRTC: aiortc is not installed (pip install 'studio[serve]')"
        ) from None
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype != SDP_TYPE:
        raise ApiError(415, f"WHEP takes Content-Type: {SDP_TYPE} (an SDP offer), not {ctype[:60] or 'none'}")
    body = (await request.body()).decode("utf-8", "replace")
    why = parse_offer_check(body)
    if why:
        raise ApiError(400, why)
    if s.state in ("ended", "failed"):
        raise ApiError(409, f"live session {sid} has {s.state}; open another")
    try:
        v = await Viewer.answer(s, body, asyncio.get_running_loop())
    except Exception as exc:  # noqa: BLE001 - aiortc's parser: one sentence
        raise ApiError(
            400,
            f"the SDP offer could not be answered: {str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__}",
        ) from None
    st.viewers[v.id] = v
    s.event("viewer", {"viewer": v.id, "codecs": v.codecs})
    return Response(
        v.sdp,
        status_code=201,
        media_type=SDP_TYPE,
        headers={"Location": f"/v1/live/{sid}/whep/{v.id}", "ETag": f'"{v.id}"'},
    )


@router.delete("/v1/live/{sid}/whep/{vid}", status_code=204, responses=errors(404, 422))
async def whep_leave(st: State, sid: str, vid: str):
    """WHEP: leave"""
    session_of(st, sid)
    v = st.viewers.get(vid)
    if v is None or v.session.id != sid:
        raise ApiError(404, f"no viewer {vid[:40]!r} of live session {sid[:40]}")
    st.viewers.pop(vid, None)
    await v.close()
    return Response(status_code=204)


@router.post("/v1/live/{sid}/speak", status_code=202, response_model=Spoken, responses=errors(400, 404, 422))
def speak(st: State, sid: str, form: SpeakForm):
    """Say this text next"""
    s = session_of(st, sid)
    s.speak(form.text)
    return {"queued": True, "queued_voice_s": round(s.voice.queued_s, 3)}


@router.post("/v1/live/{sid}/clear", status_code=202, response_model=Cleared, responses=errors(404, 422))
def clear(st: State, sid: str):
    """Barge-in: drop the queued voice"""
    s = session_of(st, sid)
    return {"cleared": True, "frame": s.clear()}


@router.post("/v1/live/{sid}/push", status_code=201, response_model=LivePush, responses=errors(400, 404, 409, 422))
def push(st: State, sid: str, form: PushForm):
    """Push to RTMP(S)/SRT"""
    from studio.service.live_push import Push

    s = session_of(st, sid)
    if s.state not in ("live", "starting"):
        raise ApiError(409, f"live session {sid} has {s.state}")
    p = Push(s, form.url)
    s.pushes.append(p)
    p.start()
    return p.describe()


@router.delete("/v1/live/{sid}/push/{pid}", status_code=204, responses=errors(404, 422))
def stop_push(st: State, sid: str, pid: str):
    """Stop a push"""
    s = session_of(st, sid)
    p = next((p for p in s.pushes if p.id == pid), None)
    if p is None:
        raise ApiError(404, f"no push {pid[:40]!r} of live session {sid[:40]}")
    s.pushes.remove(p)
    p.stop()
    return Response(status_code=204)


@router.get(
    "/v1/live/{sid}/events",
    response_class=Response,
    responses={
        200: {
            "description": "Server-Sent Events of the session: its state, figures, errors and a push's reconnects",
            "content": {
                "text/event-stream": {
                    "schema": {
                        "type": "object",
                        "required": ["event", "data"],
                        "properties": {
                            "event": {"type": "string"},
                            "data": {"type": "string", "contentMediaType": "application/json"},
                        },
                    }
                }
            },
        },
        **errors(404, 422),
    },
)
async def live_events(st: State, sid: str):
    """Server-Sent Events of a live session"""
    from sse_starlette.sse import EventSourceResponse

    s = session_of(st, sid)
    loop = asyncio.get_running_loop()
    q: asyncio.Queue = asyncio.Queue(256)

    def put(ev) -> None:
        def add() -> None:
            if not q.full():
                q.put_nowait(ev)

        loop.call_soon_threadsafe(add)

    async def stream():
        stop = s.listen(put)
        try:
            while True:
                try:
                    ev = await asyncio.wait_for(q.get(), 1.0)
                except TimeoutError:
                    if st.live.get(sid) is None:
                        return
                    yield {"event": "figures", "data": json.dumps(s.figures.as_dict())}
                    continue
                yield {"event": ev["type"], "data": json.dumps(ev)}
                if ev["type"] == "state" and ev.get("state") in ("ended", "failed"):
                    return
        finally:
            stop()

    return EventSourceResponse(stream(), ping=10)


@router.websocket("/v1/live/{sid}/audio")
async def live_audio(ws: WebSocket, sid: str):
    """The voice: binary messages of s16le mono PCM at ``?rate=R`` (8000-48000), text ``{"type":"clear"}``."""
    from studio.api.live_ws import admit, read_rate

    st = ws.app.state.studio
    s = await admit(ws, st, sid)
    if s is None:
        return
    rate = await read_rate(ws)
    if rate is None:
        return
    import soxr

    resampler = None if rate == 16_000 else soxr.ResampleStream(rate, 16_000, 1, dtype="float32")
    await ws.accept()
    loop = asyncio.get_running_loop()
    ended = asyncio.Event()

    def on_event(ev) -> None:
        if ev["type"] == "state" and ev.get("state") in ("ended", "failed"):
            loop.call_soon_threadsafe(ended.set)

    unsubscribe = s.listen(on_event)
    end_wait = asyncio.ensure_future(ended.wait())
    try:
        while True:
            receiving = asyncio.ensure_future(ws.receive())
            await asyncio.wait({receiving, end_wait}, return_when=asyncio.FIRST_COMPLETED)
            if ended.is_set():  # DELETE /v1/live/{id}: the socket ends with its session
                receiving.cancel()
                await ws.close(1001, "the live session ended")
                return
            msg = receiving.result()
            if msg["type"] == "websocket.disconnect":
                return
            data = msg.get("bytes")
            if data is not None:
                if len(data) > MAX_WS_MESSAGE:
                    await ws.close(1009, f"a message is at most {MAX_WS_MESSAGE} bytes; send the voice in pieces")
                    return
                try:
                    s.push_pcm(data, rate, resampler)
                except Exception as exc:  # noqa: BLE001 - too much queued: one sentence, then close
                    await ws.close(1008, str(exc)[:120])
                    return
                continue
            text = msg.get("text") or ""
            try:
                kind = json.loads(text).get("type")
            except (ValueError, AttributeError):
                kind = None
            if kind == "clear":
                frame = s.clear()
                await ws.send_text(json.dumps({"type": "cleared", "frame": frame}))
            else:
                await ws.send_text(json.dumps({"type": "error", "error": 'text messages are {"type": "clear"}'}))
    except WebSocketDisconnect:
        return
    except RuntimeError:  # the session ended under it
        return
    finally:
        unsubscribe()
        end_wait.cancel()

"""Rendering on a ``studio serve`` elsewhere: the "server" placement, and its exact scrub frames.

    for p in render_on_server(request, cancel_event): ...     # Progress, as a local render yields them
    frames = RemoteFrames("http://gpu-box:8321")               # frames.frame_at(avatar, audio, settings, t)

The inputs are uploaded (a voice-over once per file; an avatar by its server library name when the
server has it, else its image/video file), the job is followed through its event stream, previews
are fetched a few times a second, and the finished MP4 is downloaded atomically to the request's
output (numbered when taken, as local jobs are). Cancel stops the server's job within one batch;
nothing is written here. The token comes from ``STUDIO_SERVER_TOKEN`` (never stored in the queue).
"""

from __future__ import annotations

import contextlib
import io
import logging
import threading
import time
from pathlib import Path

from studio.core.errors import Cancelled, InputError

log = logging.getLogger(__name__)

PREVIEW_EVERY_S = 0.25
_clients: dict[str, object] = {}
_clients_lock = threading.Lock()
_audio_ids: dict[tuple, str] = {}


def client(url: str):
    """One client per server URL (connections and uploads are reused)."""
    from studio.service.client import StudioClient

    with _clients_lock:
        c = _clients.get(url)
        if c is None:
            from studio.core import env

            c = _clients[url] = StudioClient(url, token=env.get("STUDIO_SERVER_TOKEN") or None)
        return c


def audio_id(c, audio: str) -> str:
    p = Path(audio)
    st = p.stat()
    key = (c.url, str(p.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _audio_ids:
        _audio_ids[key] = c.upload_audio(p)["id"]
    return _audio_ids[key]


def server_avatar(c, avatar: str, upload: bool) -> str:
    """A name the server's library has, else the local file (or the local library avatar's source)."""
    text = str(avatar)
    names = {a["name"] for a in c.avatars()}
    if Path(text).is_file():
        if upload:
            return text
        name = _server_name(Path(text))  # scrubbing names avatars: add the file to the server's library once
        if name not in names:
            name = c.add_avatar(name, text)["name"]  # the server's own of the same content, if it has one
        return name
    if text in names:
        return text
    from studio.core.avatars import library as avatar_mod

    try:
        source = Path(avatar_mod.load(text).meta["source"])
    except Exception:  # noqa: BLE001 - not in this library either
        source = None
    if source is None or not source.is_file():
        raise InputError(
            f"the Studio server has no avatar '{text}' and its source is not on this computer; "
            "add it there (POST /v1/avatars) or choose an image/video file"
        )
    if upload:
        return str(source)
    return c.add_avatar(text, source)["name"]  # scrubbing needs a library name on the server


def render_on_server(request, cancel: threading.Event, on_placed=None):
    """Yields ``Progress`` of ``request`` rendered on ``request.placement.server`` (a URL);
    returns the ``RenderResult`` (``StopIteration.value``), the MP4 downloaded to the output."""
    # the server checks the request again; this side refuses nothing it would accept
    import numpy as np
    from PIL import Image

    from studio.core.render.results import RenderProgress as Progress
    from studio.core.render.results import RenderResult

    url = request.placement.server
    c = client(url)
    # the settings the server's form takes (the schema's http face); the check runs here on the
    # downloaded file when the job asks for one, not twice
    from studio.core.settings import specs

    settings = {s.name: getattr(request.settings, s.name) for s in specs("http") if s.name != "check"}
    if request.frames:
        settings.update(frame_start=request.frames[0], frame_end=request.frames[1])
    if request.placement.priority is not None:  # studio render --priority: the server's lane
        settings["priority"] = request.placement.priority
    job = c.submit(
        server_avatar(c, request.avatar, upload=True), audio_id=audio_id(c, request.audio), settings=settings
    )
    job_id = job["id"]
    if on_placed is not None:
        on_placed(f"Studio server {c.url}")
    last_preview, t0 = 0.0, time.perf_counter()
    try:
        for kind, d in c.events(job_id):
            if cancel.is_set():
                c.cancel(job_id)
                raise Cancelled("render cancelled; nothing was written")
            if kind == "progress":
                preview = index = None
                now = time.monotonic()
                if d.get("preview") and now - last_preview >= PREVIEW_EVERY_S:
                    last_preview = now
                    try:
                        got = c.preview(job_id)
                        if got is not None:
                            preview = np.asarray(Image.open(io.BytesIO(got[0])).convert("RGB"))
                            index = got[1]
                    except Exception as exc:  # noqa: BLE001 - a missed preview is not an error
                        log.debug("preview fetch failed: %s", exc)
                yield Progress(
                    done=d["done"],
                    total=d["total"],
                    fps=d["fps"],
                    eta_s=d["eta_s"],
                    elapsed_s=d["elapsed_s"],
                    preview=preview,
                    preview_index=index,
                    workers=d.get("workers") or {},
                    chunks_done=d.get("chunks_done", 0),
                    chunks=d.get("chunks", 0),
                    retries=d.get("retries", 0),
                )
            elif d.get("state") in ("done", "failed", "cancelled", "interrupted", "removed"):
                break
    except BaseException:  # cancelled, Ctrl-C, the window closing, the stream broke: stop it there too
        with contextlib.suppress(Exception):
            c.cancel(job_id)
        raise
    final = c.render(job_id)
    if cancel.is_set() or final["state"] == "cancelled":
        raise Cancelled("render cancelled; nothing was written")
    if final["state"] != "done":
        from studio.core.errors import RenderError

        raise RenderError(f"the Studio server's render {final['state']}: {final.get('reason', '')}")
    out = c.download(job_id, Path(request.output), overwrite=request.overwrite)
    r = dict(final.get("result") or {}, output=str(out), seconds=round(time.perf_counter() - t0, 3))
    result = RenderResult.from_json(r)
    yield Progress.final(result, time.perf_counter() - t0)
    return result


class RemoteFrames:
    """Scrub frames from a server: exactly what its render writes at a timestamp."""

    def __init__(self, url: str, studio_client=None):
        self.url = url
        self.client = studio_client  # a ``StudioClient`` to use (None: the shared one for ``url``)

    def frame_at(self, avatar: str, audio: str, settings, seconds: float):
        import numpy as np
        from PIL import Image

        c = self.client or client(self.url)
        # every setting that changes the frames (the schema's engine and silence groups): the frame
        # shown is the one the server's render writes; the device is the server's own choice
        wanted = {k: v for k, v in settings.frame_settings().items() if v is not None and k != "device"}
        png = c.frame(server_avatar(c, avatar, upload=False), audio_id(c, audio), seconds, **wanted)
        return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))


def _server_name(path: Path) -> str:
    """A library name for a local avatar file on the server: its stem and a key of path, size and time."""
    import re

    from studio.core.store.fsutil import quick_file_key

    stem = re.sub(r"[^A-Za-z0-9_-]+", "_", path.stem)[:40].strip("_") or "avatar"
    return f"{stem}-{quick_file_key(path)[:10]}"

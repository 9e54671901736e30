"""A client of ``studio serve`` (httpx; Qt-free): the command line's ``--server`` and the window use it.

    with StudioClient("http://gpu-box:8321", token="...") as c:
        job = c.submit("anna", audio="voice.flac", settings={"engine": "auto"})   # uploads, queues
        for kind, data in c.events(job["id"]):                                    # SSE, in order
            print(kind, data)
        c.download(job["id"], "out.mp4")                                          # atomic, resumable-free
        png = c.frame("anna", c.upload_audio("voice.flac")["id"], 12.48)          # the exact frame

Every failure is a ``ServerError`` (a ``StudioError``: one sentence, exit code 2): the server's own
``{"error": ...}`` sentence, or why the server could not be reached.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from studio.core.errors import StudioError

FINAL_STATES = ("done", "failed", "cancelled", "interrupted")


class ServerError(StudioError):
    """The server answered an error, or could not be reached."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class StudioClient:
    def __init__(self, url: str, token: str | None = None, timeout: float = 30.0, transport=None):
        import httpx

        if not url.startswith(("http://", "https://")):
            url = f"http://{url}"
        self.url = url.rstrip("/")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(
            base_url=self.url,
            headers=headers,
            transport=transport,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
        )

    def __enter__(self) -> StudioClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # -- server -------------------------------------------------------------------------------

    def health(self) -> dict:
        return self._json("GET", "/v1/health")

    def farm(self) -> dict:
        """``GET /v1/farm``: the nodes and render actors of a ``studio serve --farm``."""
        return self._json("GET", "/v1/farm")

    def engines(self) -> dict:
        return self._json("GET", "/v1/engines")

    # -- avatars and voice-overs --------------------------------------------------------------

    def avatars(self) -> list[dict]:
        return self._json("GET", "/v1/avatars")["avatars"]

    def add_avatar(self, name: str, source: str | os.PathLike, force: bool = False, **params) -> dict:
        """The avatar made from ``source``; where the server already has one of the same content (its 409
        names it in ``X-Studio-Avatar``) that one is answered (its ``name``), not a copy, unless ``force``."""
        with open(source, "rb") as fh:
            r = self._request(
                "POST",
                "/v1/avatars",
                data={"name": name, "force": str(force).lower(), **params},
                files={"file": (Path(source).name, fh)},
                timeout=None,
            )
        same = r.headers.get("x-studio-avatar") if r.status_code == 409 else None
        if same:
            found = [a for a in self.avatars() if a["name"] == same]
            if found:
                return found[0]
        self._check(r)
        return r.json()

    def remove_avatar(self, name: str) -> dict:
        return self._json("DELETE", f"/v1/avatars/{name}")

    def upload_audio(
        self, path: str | os.PathLike, threshold: float | None = None, min_silence: int | None = None
    ) -> dict:
        """Upload a voice-over (stored once per content); answers its id and silence analysis."""
        data = {k: str(v) for k, v in (("threshold", threshold), ("min_silence", min_silence)) if v is not None}
        with open(path, "rb") as fh:
            return self._json("POST", "/v1/audio", data=data, files={"file": (Path(path).name, fh)}, timeout=None)

    # -- renders ------------------------------------------------------------------------------

    def submit(
        self,
        avatar: str,
        audio: str | os.PathLike | None = None,
        audio_id: str | None = None,
        text: str | None = None,
        settings: dict | None = None,
    ) -> dict:
        """Queue a render (202): ``avatar`` is a library name on the server or a local image/video
        (uploaded); the voice-over a local file (uploaded once, by content), an ``audio_id`` or ``text``."""
        data, files = self._inputs(avatar, audio, audio_id, text, settings)
        try:
            return self._json("POST", "/v1/renders", data=data, files=files, timeout=None)
        finally:
            for _, (_, fh) in files.items():
                fh.close()

    def generate(
        self, avatar: str, dest: str | os.PathLike, audio=None, audio_id=None, text=None, settings: dict | None = None
    ) -> dict:
        """``POST /generate``: render and download the MP4 into ``dest`` (atomically) in one request.
        Answers ``{"job": id, "render_seconds": s, "output": dest}``."""
        data, files = self._inputs(avatar, audio, audio_id, text, settings)
        try:
            with self._http.stream("POST", "/generate", data=data, files=files, timeout=None) as r:
                self._check(r)
                self._save(r, dest)
                return {
                    "job": int(r.headers.get("x-studio-job", 0)),
                    "render_seconds": float(r.headers.get("x-studio-render-seconds", 0)),
                    "output": str(dest),
                }
        except _transport_errors() as exc:
            raise self._unreachable(exc) from None
        finally:
            for _, (_, fh) in files.items():
                fh.close()

    def renders(self, state: str | None = None) -> list[dict]:
        return self._json("GET", "/v1/renders", params={"state": state} if state else None)["renders"]

    def render(self, job_id: int) -> dict:
        return self._json("GET", f"/v1/renders/{job_id}")

    def cancel(self, job_id: int) -> dict:
        return self._json("DELETE", f"/v1/renders/{job_id}")

    def retry(self, job_id: int) -> dict:
        return self._json("POST", f"/v1/renders/{job_id}/retry")

    def events(self, job_id: int) -> Iterator[tuple[str, dict]]:
        """``(event, data)`` pairs from the job's SSE stream, until its final state."""
        import json

        from httpx_sse import connect_sse

        try:
            with connect_sse(self._http, "GET", f"/v1/renders/{job_id}/events", timeout=None) as source:
                self._check(source.response)
                for sse in source.iter_sse():
                    if sse.event in ("state", "progress"):
                        yield sse.event, json.loads(sse.data)
        except _transport_errors() as exc:
            raise self._unreachable(exc) from None

    def wait(self, job_id: int, on_event=None) -> dict:
        """Follow the events until the job ends; answers the job."""
        for kind, data in self.events(job_id):
            if on_event is not None:
                on_event(kind, data)
            if kind == "state" and data["state"] in FINAL_STATES:
                break
        return self.render(job_id)

    def download(self, job_id: int, dest: str | os.PathLike, *, overwrite: bool = True) -> Path:
        """The finished video into ``dest``, written beside it and renamed when complete
        (``overwrite=False``: an existing file is kept and a free numbered name taken); the path."""
        try:
            with self._http.stream("GET", f"/v1/renders/{job_id}/video", timeout=None) as r:
                self._check(r)
                return self._save(r, dest, overwrite)
        except _transport_errors() as exc:
            raise self._unreachable(exc) from None

    def preview(self, job_id: int) -> tuple[bytes, int | None] | None:
        """The latest preview frame of a running job (JPEG bytes, its frame index), or None when there is none."""
        r = self._request("GET", f"/v1/renders/{job_id}/preview")
        if r.status_code != 200:
            return None
        index = r.headers.get("x-studio-frame")
        return r.content, int(index) if index is not None and index.lstrip("-").isdigit() else None

    def frame(self, avatar: str, audio_id: str, t: float, **settings) -> bytes:
        """The exact frame at ``t`` seconds, as PNG bytes."""
        return self._bytes("GET", "/v1/frame", params={"avatar": avatar, "audio_id": audio_id, "t": t, **settings})

    def job_frame(self, job_id: int, t: float) -> bytes:
        return self._bytes("GET", "/v1/frame", params={"job": job_id, "t": t})

    # -- plumbing -----------------------------------------------------------------------------

    def _inputs(self, avatar, audio, audio_id, text, settings) -> tuple[dict, dict]:
        from studio.core.settings import SCHEMA

        # None is sent as its face's word (loudness=off), so a value set to none wins over a delivery's too
        data = {
            k: str(v) if v is not None else SCHEMA[k].auto_label
            for k, v in (settings or {}).items()
            if k != "device" and (v is not None or (k in SCHEMA and SCHEMA[k].auto_label))
        }
        files = {}
        if Path(str(avatar)).expanduser().is_file():
            files["avatar_file"] = (Path(avatar).name, open(Path(avatar).expanduser(), "rb"))
        else:
            data["avatar"] = str(avatar)
        if audio is not None:
            data["audio_id"] = self.upload_audio(audio)["id"]
        elif audio_id is not None:
            data["audio_id"] = audio_id
        elif text is not None:
            data["text"] = text
        return data, files

    # -- live sessions (docs/live.md) ----------------------------------------------------------

    def live_open(self, avatar: str, **settings) -> dict:
        """Open a live session (``POST /v1/live``): its id, links and audio key."""
        return self._json("POST", "/v1/live", json={"avatar": avatar, **settings})

    def live(self, sid: str) -> dict:
        return self._json("GET", f"/v1/live/{sid}")

    def live_push(self, sid: str, url: str) -> dict:
        return self._json("POST", f"/v1/live/{sid}/push", json={"url": url})

    def live_end(self, sid: str) -> None:
        r = self._request("DELETE", f"/v1/live/{sid}")
        if r.status_code != 404:
            self._check(r)

    def live_audio_url(self, session: dict, rate: int) -> str:
        """The session's audio WebSocket (``ws://``/``wss://``) at ``rate`` Hz, with its key."""
        base = "ws" + self.url[4:]
        return f"{base}{session['links']['audio']}?rate={int(rate)}&key={session['key']}"

    def _request(self, method: str, path: str, **kw):
        try:
            return self._http.request(method, path, **kw)
        except _transport_errors() as exc:
            raise self._unreachable(exc) from None

    def _json(self, method: str, path: str, **kw) -> dict:
        r = self._request(method, path, **kw)
        self._check(r)
        return r.json()

    def _bytes(self, method: str, path: str, **kw) -> bytes:
        r = self._request(method, path, **kw)
        self._check(r)
        return r.content

    def _check(self, r) -> None:
        if r.status_code < 400:
            return
        if not r.is_closed:
            r.read()
        try:
            message = r.json()["error"]
        except Exception:  # noqa: BLE001 - not our server, or not JSON
            message = f"HTTP {r.status_code} from {self.url}"
        raise ServerError(f"the server says: {message}", r.status_code)

    def _save(self, r, dest, overwrite: bool = True) -> Path:
        from studio.core.store.fsutil import atomic_output

        dest = Path(dest)
        if not dest.parent.is_dir():
            raise ServerError(f"{dest.parent}: the output folder does not exist")
        with atomic_output(dest, overwrite=overwrite) as out, open(out.tmp, "wb") as fh:
            for block in r.iter_bytes(1 << 20):
                fh.write(block)
        return out.final or dest

    def _unreachable(self, exc) -> ServerError:
        return ServerError(
            f"cannot reach the Studio server at {self.url} ({type(exc).__name__}: {exc}); "
            "is `studio serve` running there?"
        )


def _transport_errors():
    import httpx

    return (httpx.TransportError,)

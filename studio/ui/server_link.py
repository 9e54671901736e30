"""The window as a client of ``studio serve`` ("Render on: Studio server"): queue, watch, cancel, download.

    link = ServerLink("http://gpu-box:8321", token)        # a QObject; the HTTP work runs on its own thread
    link.progress.connect(panel.update_progress)           # a studio.service Progress, as local renders send
    link.preview.connect(show)                             # (RGB ndarray, frame index), a few per second
    link.finished.connect(lambda job, path, result: ...)   # the MP4 downloaded into the output folder
    link.submit(request)                                   # a RenderRequest built as for a local job
    link.cancel()                                          # the server stops within one batch, writes nothing
    rgb = link.frame_at(avatar, audio, settings, 12.48)    # the server's exact frame (blocking: call it
                                                           # from a worker thread, as local scrubbing does)

The server renders; this side uploads the inputs (a voice-over once per file, an avatar as a file
unless the server's library has the name), follows the job's events and writes the finished file
beside the requested output, renamed when complete (a taken name is numbered as local jobs are,
unless the request says overwrite). Qt signals carry everything back (emitted from the link's
thread, so receivers in the GUI thread get them queued). All HTTP is ``studio.api.client``.
"""

from __future__ import annotations

import io
import logging
import threading
from pathlib import Path

from PySide6.QtCore import QObject, Signal

log = logging.getLogger(__name__)

PREVIEW_EVERY_S = 0.25  # fetch the server's preview at most this often


class ServerLink(QObject):
    placed = Signal(int, str)  # server job id, where ("Studio server http://...")
    progress = Signal(object)  # studio.service.Progress
    preview = Signal(object, int)  # RGB ndarray, frame index
    finished = Signal(int, str, dict)  # server job id, local output path, the render's result
    failed = Signal(str)  # one sentence
    cancelled = Signal(int)

    def __init__(self, url: str, token: str | None = None, parent=None):
        super().__init__(parent)
        from studio.api.client import StudioClient

        self.url = url
        self.client = StudioClient(url, token=token)
        self._audio_ids: dict[tuple, str] = {}  # (path, size, mtime) -> the server's id
        self._thread: threading.Thread | None = None
        self._cancel = threading.Event()
        self.job_id: int | None = None

    @property
    def where(self) -> str:
        return f"Studio server {self.client.url}"

    @property
    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def submit(self, request) -> None:
        """Queue ``request`` on the server and follow it on the link's thread (one job at a time)."""
        if self.busy:
            self.failed.emit("a render on the Studio server is still running; wait for it or cancel it")
            return
        self._cancel.clear()
        self.job_id = None
        self._thread = threading.Thread(target=self._run, args=(request,), name="studio-server-link", daemon=True)
        self._thread.start()

    def cancel(self) -> None:
        self._cancel.set()
        job = self.job_id
        if job is not None:
            try:
                self.client.cancel(job)
            except Exception as exc:  # noqa: BLE001 - the server went away: the thread reports it
                log.warning("cancel on %s failed: %s", self.url, exc)

    def frame_at(self, avatar: str, audio: str, settings, seconds: float):
        """The exact frame at ``seconds`` from the server ([H,W,3] uint8 RGB); blocking."""
        import numpy as np
        from PIL import Image

        png = self.client.frame(self._server_avatar(avatar, upload=False), self._audio_id(audio), seconds,
                                engine=settings.engine, threshold=settings.threshold, min_silence=settings.min_silence)
        return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))

    def close(self) -> None:
        self.cancel()
        if self._thread is not None:
            self._thread.join(10)
        self.client.close()

    # -- the link's thread --------------------------------------------------------------------

    def _run(self, request) -> None:
        import dataclasses
        import time

        from studio.service.driver import Progress

        try:
            settings = dataclasses.asdict(request.settings)
            if request.frames:
                settings.update(frame_start=request.frames[0], frame_end=request.frames[1])
            avatar = self._server_avatar(request.avatar, upload=True)  # a server library name, or a file to upload
            job = self.client.submit(avatar, audio_id=self._audio_id(request.audio), settings=settings)
            self.job_id = job["id"]
            if self._cancel.is_set():
                self.client.cancel(job["id"])
            self.placed.emit(job["id"], self.where)
            last_preview = 0.0
            for kind, d in self.client.events(job["id"]):
                if kind == "progress":
                    self.progress.emit(Progress(done=d["done"], total=d["total"], fps=d["fps"], eta_s=d["eta_s"],
                                                elapsed_s=d["elapsed_s"], workers=d.get("workers") or {},
                                                chunks_done=d.get("chunks_done", 0), chunks=d.get("chunks", 0),
                                                retries=d.get("retries", 0)))
                    now = time.monotonic()
                    if d.get("preview") and now - last_preview >= PREVIEW_EVERY_S:
                        last_preview = now
                        self._fetch_preview(job["id"])
                elif d["state"] in ("done", "failed", "cancelled", "interrupted", "removed"):
                    break
            final = self.client.render(job["id"])
            if final["state"] == "cancelled":
                self.cancelled.emit(job["id"])
            elif final["state"] != "done":
                self.failed.emit(f"the Studio server's render {final['state']}: {final['reason']}")
            else:
                out = self._local_output(request)
                self.client.download(job["id"], out)
                self.finished.emit(job["id"], str(out), dict(final.get("result") or {}, output=str(out)))
        except Exception as exc:  # noqa: BLE001 - every failure is one sentence for the window
            if self._cancel.is_set():
                self.cancelled.emit(self.job_id or 0)
            else:
                from studio.core.errors import StudioError

                self.failed.emit(str(exc) if isinstance(exc, StudioError) else f"{type(exc).__name__}: {exc}")

    def _fetch_preview(self, job_id: int) -> None:
        import numpy as np
        from PIL import Image

        try:
            got = self.client.preview(job_id)
            if got is not None:
                jpeg, index = got
                self.preview.emit(np.asarray(Image.open(io.BytesIO(jpeg)).convert("RGB")), -1 if index is None else index)
        except Exception as exc:  # noqa: BLE001 - a missed preview is not an error
            log.debug("preview fetch failed: %s", exc)

    def _audio_id(self, audio: str) -> str:
        p = Path(audio)
        st = p.stat()
        key = (str(p.resolve()), st.st_size, st.st_mtime_ns)
        if key not in self._audio_ids:
            self._audio_ids[key] = self.client.upload_audio(p)["id"]
        return self._audio_ids[key]

    def _server_avatar(self, avatar: str, upload: bool) -> str:
        """A name the server's library has, else the local file (or the local library avatar's source)."""
        text = str(avatar)
        names = {a["name"] for a in self.client.avatars()}
        if Path(text).is_file():
            if upload:
                return text
            name = _server_name(Path(text))  # scrubbing names avatars: add the file to the server's library once
            if name not in names:
                self.client.add_avatar(name, text)
            return name
        if text in names:
            return text
        from studio.core import avatar as avatar_mod

        try:
            source = Path(avatar_mod.load(text).meta["source"])
        except Exception:  # noqa: BLE001 - not in this library either
            source = None
        if source is None or not source.is_file():
            from studio.core.errors import InputError

            raise InputError(f"the Studio server has no avatar '{text}' and its source is not on this computer; "
                             "add it there (POST /v1/avatars) or choose an image/video file")
        if upload:
            return str(source)
        self.client.add_avatar(text, source)  # scrubbing needs a library name on the server
        return text

    def _local_output(self, request) -> Path:
        from studio.service.queue import unique_output

        out = Path(request.output)
        out.parent.mkdir(parents=True, exist_ok=True)
        return out if request.overwrite else Path(unique_output(str(out), set()))


def _server_name(path: Path) -> str:
    """A library name for a local avatar file on the server: its stem and a key of path, size and time."""
    import re

    from studio.core.fsutil import quick_file_key

    stem = re.sub(r"[^A-Za-z0-9_-]+", "_", path.stem)[:40].strip("_") or "avatar"
    return f"{stem}-{quick_file_key(path)[:10]}"

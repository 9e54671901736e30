"""The FastAPI app of ``studio serve``: render jobs, scrub frames, avatars and voice-overs over HTTP.

    app = create_app(queue=None, options=ServeOptions())   # queue: a QueueService (default: the
                                                           # one over <data>/jobs.sqlite, the window's)

Jobs posted here go into the service's queue (the same ``jobs.sqlite`` the window shows), render on
the process-wide warm ``EnginePool`` and are followed over Server-Sent Events. Every error answers
``{"error": "one sentence"}`` (``studio.api.errors``); the token and the size cap are checked in
front of every route (``studio.api.guard``); uploads are stored under generated names
(``studio.api.uploads``). The routes are thin: the work is the service's and the core's.
"""

from __future__ import annotations

import contextlib
import io
import logging
import time
from pathlib import Path
from typing import Annotated

from fastapi import Depends, FastAPI, File, Form, Query, Request, UploadFile
from fastapi.responses import FileResponse, Response
from fastapi.security import HTTPBearer
from starlette.concurrency import run_in_threadpool

from studio import __version__
from studio.api import errors
from studio.api.errors import ApiError
from studio.api.inputs import NAME_RE, RenderForm, form_body, library_avatar, library_folder, renders_dir, submit
from studio.api.options import ServeOptions
from studio.api.schema import with_settings
from studio.api.sse import JobEvents, links, state_dict
from studio.api.uploads import UploadStore

log = logging.getLogger(__name__)

ACTIVE_STATES = ("draft", "queued", "held", "running")


def create_app(queue=None, options: ServeOptions | None = None, pool=None) -> FastAPI:
    from studio.api.guard import Guard
    from studio.core.store.paths import sub_dir

    opts = (options or ServeOptions()).check()
    state = _State(opts, queue, pool, UploadStore(sub_dir("uploads"), opts.max_upload_bytes))

    @contextlib.asynccontextmanager
    async def lifespan(app):
        import asyncio

        state.open(asyncio.get_running_loop())
        try:
            yield
        finally:
            await run_in_threadpool(state.close)

    app = FastAPI(
        title="Studio render API",
        version=__version__,
        lifespan=lifespan,
        description="Lip-synced presenter video over HTTP: `POST /generate` answers the MP4; "
        "`/v1/renders` queues jobs and streams their progress. Errors are "
        '`{"error": "one sentence"}`.',
        dependencies=[Depends(HTTPBearer(auto_error=False))] if opts.token else [],
    )
    app.state.studio = state
    errors.install(app)
    app.add_middleware(Guard, token=opts.token, max_body=opts.max_body_bytes, max_upload_mb=opts.max_upload_mb)
    _routes(app, state)
    return app


class _State:
    """What the routes share: options, the queue, the pool, the uploads and the event hub."""

    def __init__(self, opts: ServeOptions, queue, pool, uploads: UploadStore):
        self.opts = opts
        self._queue = queue
        self._pool = pool
        self.uploads = uploads
        self.events: JobEvents | None = None
        self.started = time.time()
        self._unsubscribe = None

    @property
    def queue(self):
        if self._queue is None:
            from studio.service import QueueService

            self._queue = QueueService(pool=self.pool)
        return self._queue

    @property
    def pool(self):
        if self._pool is None:
            from studio.service import default_pool

            self._pool = default_pool()
        return self._pool

    def open(self, loop) -> None:
        self.events = JobEvents(loop)
        q = self.queue
        if self.opts.max_queued is not None:
            q.max_queued = self.opts.max_queued
        self._unsubscribe = q.subscribe(self.events.on_event)
        q.start()

    def close(self) -> None:
        """The server stops: as when the window closes, a running job is stopped (nothing written)."""
        if self._unsubscribe is not None:
            self._unsubscribe()
        if self._queue is not None:
            self._queue.close()

    def job(self, job_id: int):
        """The job, or 404."""
        from studio.core.errors import InputError

        try:
            return self.queue.get(int(job_id))
        except InputError:
            raise ApiError(404, f"no render job {job_id}; see GET /v1/renders") from None

    def job_or_none(self, job_id: int):
        from studio.core.errors import InputError

        try:
            return self.queue.get(int(job_id))
        except InputError:
            return None

    def job_json(self, job) -> dict:
        d = state_dict(job)
        d.update(
            avatar=self.uploads.display_name(job.avatar) if "/" in job.avatar else job.avatar,
            audio=self.uploads.display_name(job.audio),
            output=Path(job.output).name,
            settings=job.settings,
            progress=job.progress,
            created=job.created,
            updated=job.updated,
            result=_public_result(job.result),
            links=links(job.id),
        )
        live = self.events.last_progress(job.id) if self.events is not None else None
        if live is not None and job.state == "running":
            d["live"] = live
        return d


# --------------------------------------------------------------------------------------------
# Routes


def _routes(app: FastAPI, st: _State) -> None:  # noqa: C901 - one flat list of thin routes
    @app.get("/v1/health", tags=["server"], summary="Is the server up; what is queued and running")
    def health():
        jobs = st.queue.list()
        return {
            "ok": True,
            "version": __version__,
            "uptime_s": round(time.time() - st.started, 1),
            "queued": sum(j.state == "queued" for j in jobs),
            "running": st.queue.running_job_id,
            "warm_engines": len(st.pool.warm()),
            "max_queued": st.opts.max_queued,
            "max_upload_mb": st.opts.max_upload_mb,
        }

    @app.get("/v1/engines", tags=["server"], summary="Which engines can run here, which auto picks, which are warm")
    def engines():
        from studio.core.engines import available_engines

        status = available_engines()
        auto = "musetalk" if status.get("musetalk", "").startswith("ready") else "classic"
        return {
            "auto": auto,
            "engines": [{"name": k, "ready": v.startswith("ready"), "detail": v} for k, v in status.items()],
            "warm": st.pool.warm(),
        }

    # -- avatars ------------------------------------------------------------------------------

    @app.get("/v1/avatars", tags=["avatars"], summary="The avatar library, with thumbnail links")
    def avatars():
        from studio.core.avatars.library import list_avatars

        out = []
        for a in list_avatars():
            a = dict(a)
            a.pop("folder", None)
            a["source"] = Path(a["source"]).name if a.get("source") else None
            a["thumbnail"] = f"/v1/avatars/{a['name']}/thumbnail" if a.get("thumbnail") else None
            out.append(a)
        return {"avatars": out}

    @app.get(
        "/v1/avatars/{name}/thumbnail",
        tags=["avatars"],
        summary="The avatar's thumbnail (PNG)",
        response_class=FileResponse,
    )
    def avatar_thumbnail(name: str):
        folder = library_folder(name)
        thumb = folder / "thumbnail.png"
        if not thumb.exists():
            raise ApiError(404, f"avatar '{name}' has no thumbnail")
        return FileResponse(thumb, media_type="image/png")

    @app.post(
        "/v1/avatars",
        tags=["avatars"],
        status_code=201,
        summary="Add an avatar to the library from an uploaded photo or video",
    )
    async def add_avatar(
        name: Annotated[str, Form(description="library name: letters, digits, '.', '_', '-'")],
        file: Annotated[UploadFile, File(description="a photo (PNG, JPEG, WebP) or a video")],
        force: Annotated[bool, Form(description="replace an avatar of that name")] = False,
        bbox_shift: Annotated[int, Form()] = 0,
        cheek_width: Annotated[int, Form()] = 90,
        feather: Annotated[float, Form()] = 24.0,
        smooth: Annotated[float, Form()] = 0.5,
        trim_start: Annotated[float | None, Form()] = None,
        trim_end: Annotated[float | None, Form()] = None,
    ):
        from studio.core.avatars import library as avatar_mod

        if not NAME_RE.match(name):
            raise ApiError(
                422, f"'{name[:64]}' is not a valid avatar name; use up to 64 letters, digits, '.', '_' or '-'"
            )
        if (avatar_mod.library_dir() / name / "meta.json").exists() and not force:
            raise ApiError(409, f"an avatar named '{name}' already exists; pick another name or send force=true")
        params = avatar_mod.AvatarParams(
            bbox_shift=bbox_shift,
            cheek_width=cheek_width,
            feather=feather,
            smooth=smooth,
            trim_start=trim_start,
            trim_end=trim_end,
        ).check()
        stored = await st.uploads.save_avatar(file)
        await run_in_threadpool(avatar_mod.prepare, name, stored.path, params, force=force)
        st.pool.invalidate()
        return next(a for a in avatars()["avatars"] if a["name"] == name)

    @app.delete("/v1/avatars/{name}", tags=["avatars"], summary="Remove an avatar from the library")
    def remove_avatar(name: str):
        from studio.core.avatars import library as avatar_mod

        library_folder(name)
        avatar_mod.remove(name)
        st.pool.invalidate()
        return {"removed": name}

    # -- voice-overs --------------------------------------------------------------------------

    async def add_audio(file: Annotated[UploadFile, File(description="WAV, FLAC, OGG or MP3")], **silence):
        stored = await st.uploads.save_audio(file)
        return await run_in_threadpool(_analysis, st, stored.id, silence["threshold"], silence["min_silence"])

    app.post(
        "/v1/audio",
        tags=["audio"],
        status_code=201,
        summary="Upload a voice-over once; renders and frames use it by id. Answers its silence analysis",
    )(with_settings(add_audio, Form, groups=("silence",)))

    def audio_info(audio_id: str, **silence):
        return _analysis(st, audio_id, silence["threshold"], silence["min_silence"])

    app.get("/v1/audio/{audio_id}", tags=["audio"], summary="An uploaded voice-over's silence analysis")(
        with_settings(audio_info, Query, groups=("silence",))
    )

    # -- the exact frame ----------------------------------------------------------------------

    def frame(
        t: Annotated[float, Query(ge=0, description="seconds")],
        avatar: Annotated[str | None, Query(description="library name")] = None,
        audio_id: Annotated[str | None, Query()] = None,
        job: Annotated[int | None, Query(description="use a job's avatar, voice-over and settings")] = None,
        **frame_settings,
    ):
        from studio.core.settings import from_dict

        if job is not None:
            from studio.service import request_of

            req = request_of(st.job(job))
            av, audio, settings = req.avatar, req.audio, req.settings
        else:
            if not avatar or not audio_id:
                raise ApiError(422, "give avatar and audio_id (or job) with t")
            av, audio = library_avatar(avatar), str(st.uploads.audio_path(audio_id))
            settings = from_dict(frame_settings)
        rgb = st.pool.frame_at(av, audio, settings, t)
        return Response(png_bytes(rgb), media_type="image/png")

    # every setting that changes the frames (engine and silence groups), from the schema
    app.get(
        "/v1/frame",
        tags=["frames"],
        response_class=Response,
        responses={200: {"content": {"image/png": {}}, "description": "the frame, PNG"}},
        summary="The exact frame a render writes at time t (PNG): scrubbing over HTTP",
    )(with_settings(frame, Query, groups=("engine", "silence")))

    # -- renders ------------------------------------------------------------------------------

    @app.post(
        "/generate",
        tags=["renders"],
        response_class=FileResponse,
        responses={200: {"content": {"video/mp4": {}}, "description": "the finished MP4"}},
        summary="Render and answer the finished MP4 (the reference interface)",
    )
    async def generate(request: Request, form: Annotated[RenderForm, Depends()]):
        form_body(request)
        job = await submit(st, form)
        done = await st.events.wait_final(job.id, st.job_or_none, request.is_disconnected)
        if done is None:  # the client went away (or the job was removed): nobody wants the file
            with contextlib.suppress(Exception):
                st.queue.cancel(job.id)
            raise ApiError(499, "the client disconnected; the render was cancelled")
        if done.state != "done":
            raise ApiError(500 if done.state == "failed" else 409, f"render job {done.id} {done.state}: {done.reason}")
        r = done.result or {}
        return FileResponse(
            done.output,
            media_type="video/mp4",
            filename=Path(done.output).name,
            headers={"X-Studio-Job": str(done.id), "X-Studio-Render-Seconds": f"{float(r.get('seconds') or 0):.4f}"},
        )

    @app.post(
        "/v1/renders",
        tags=["renders"],
        status_code=202,
        summary="Queue a render; answers its id and links at once (429 when the queue is full)",
    )
    async def add_render(request: Request, form: Annotated[RenderForm, Depends()]):
        form_body(request)
        job = await submit(st, form)
        return st.job_json(job)

    @app.get("/v1/renders", tags=["renders"], summary="Every job in the queue (the window's too)")
    def list_renders(state: Annotated[str | None, Query(description="only jobs in this state")] = None):
        return {"renders": [st.job_json(j) for j in st.queue.list() if state is None or j.state == state]}

    @app.get("/v1/renders/{job_id}", tags=["renders"], summary="One job")
    def get_render(job_id: int):
        return st.job_json(st.job(job_id))

    @app.get(
        "/v1/renders/{job_id}/events",
        tags=["renders"],
        summary="Server-Sent Events: state, then progress (frames, fps, ETA, preview) until a final state",
    )
    async def render_events(job_id: int):
        from sse_starlette.sse import EventSourceResponse

        st.job(job_id)
        return EventSourceResponse(st.events.stream(job_id, st.job_or_none), ping=10)

    @app.get(
        "/v1/renders/{job_id}/video",
        tags=["renders"],
        response_class=FileResponse,
        responses={200: {"content": {"video/mp4": {}}}, 206: {"description": "a byte range"}},
        summary="The finished MP4 (HTTP Range supported)",
    )
    def render_video(job_id: int):
        job = st.job(job_id)
        if job.state != "done":
            raise ApiError(409, f"render job {job_id} is {job.state}; its video is ready when it is done")
        if not Path(job.output).is_file():
            raise ApiError(410, f"the video of render job {job_id} is no longer on the server")
        return FileResponse(job.output, media_type="video/mp4", filename=Path(job.output).name)

    @app.get(
        "/v1/renders/{job_id}/preview",
        tags=["renders"],
        response_class=Response,
        responses={200: {"content": {"image/jpeg": {}}}},
        summary="The latest preview frame of a running job",
    )
    def render_preview(job_id: int):
        st.job(job_id)
        got = st.events.preview(job_id)
        if got is None:
            raise ApiError(404, f"render job {job_id} has no preview (it is not running, or none has arrived yet)")
        index, rgb = got
        return Response(
            jpeg_bytes(rgb),
            media_type="image/jpeg",
            headers={"X-Studio-Frame": str(index)} if index is not None else None,
        )

    @app.delete(
        "/v1/renders/{job_id}",
        tags=["renders"],
        summary="Cancel a queued or running job (nothing is written); remove a finished one and its file",
    )
    def delete_render(job_id: int):
        job = st.job(job_id)
        if job.state in ACTIVE_STATES:
            st.queue.cancel(job_id)
            return st.job_json(st.job(job_id))
        st.queue.remove(job_id)
        out = Path(job.output)
        if out.parent == renders_dir() and out.is_file():
            out.unlink()
        return {"id": job_id, "state": "removed", "reason": "removed from the queue"}

    @app.post(
        "/v1/renders/{job_id}/retry",
        tags=["renders"],
        status_code=202,
        summary="Queue a failed, cancelled, interrupted or done job again",
    )
    def retry_render(job_id: int):
        job = st.job(job_id)
        if job.state in ACTIVE_STATES:
            raise ApiError(409, f"render job {job_id} is {job.state}; only a finished job can be retried")
        return st.job_json(st.queue.retry(job_id))


# --------------------------------------------------------------------------------------------
# Helpers


def png_bytes(rgb) -> bytes:
    import PIL.Image

    buf = io.BytesIO()
    PIL.Image.fromarray(rgb).save(buf, format="PNG")
    return buf.getvalue()


def jpeg_bytes(rgb) -> bytes:
    import PIL.Image

    buf = io.BytesIO()
    PIL.Image.fromarray(rgb).save(buf, format="JPEG", quality=85)
    return buf.getvalue()


def _analysis(st: _State, audio_id: str, threshold: float, min_silence: int) -> dict:
    from studio.core.media.audio import analyze

    meta = st.uploads.audio_meta(audio_id)
    summary = analyze(st.uploads.audio_path(audio_id)).summary(threshold, min_silence)
    summary.pop("path", None)
    summary.pop("silent_mask", None)  # the spans say the same, shorter
    return {"id": audio_id, "filename": meta["filename"], "bytes": meta["bytes"], **summary}


def _public_result(result: dict | None) -> dict:
    r = dict(result or {})
    if r.get("output"):
        r["output"] = Path(r["output"]).name
    return r

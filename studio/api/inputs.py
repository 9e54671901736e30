"""The inputs of a render over HTTP: the form of ``POST /generate`` and ``POST /v1/renders``, checked,
stored and turned into a ``RenderRequest`` for the queue (``submit``).

Exactly one avatar (a library name, an upload, or with ``--allow-paths DIR`` a server path under
DIR) and one voice-over (an upload, an id from ``POST /v1/audio``, a ``text`` for espeak-ng, or a
server path); settings are the core's own (``settings_from_dict``: one sentence for a bad value);
finished files go to ``<data folder>/renders/`` unless the client names one under an allowed folder.
Server paths are compared by their real paths (links and ``..`` resolved), so a link inside an
allowed folder cannot reach outside it.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from studio.api.errors import ApiError
from studio.api.paths import refuse_paths
from studio.api.schema import sent_settings, settings_of

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class Inputs:
    """A parsed ``RenderForm``, with empty parts (``curl -F 'audio='``) read as absent."""

    def __init__(self, form):
        self.avatar, self.avatar_file, self.avatar_path = form.avatar or None, _file(form.avatar_file), form.avatar_path
        self.audio, self.audio_id, self.audio_path = _file(form.audio), form.audio_id or None, form.audio_path or None
        self.avatar_path = self.avatar_path or None
        self.text, self.voice, self.output = form.text or None, form.voice, form.output or None
        start, end = form.frame_start, form.frame_end
        self.frames = None if start is None and end is None else (start or 0, end)
        self.settings = settings_of(form)
        self.explicit = sent_settings(form)  # the fields the client sent: they win over the delivery's
        self.webhook = form.webhook or None
        self.gpus = getattr(form, "gpus", None) or None
        self.placement = getattr(form, "placement", None) or None
        self.priority = getattr(form, "priority", None) or None
        self.deadline_s = getattr(form, "deadline_s", None)


def cancel_after(headers) -> float | None:
    """``Cancel-After: SECONDS`` (a deadline as a header), or None; 422 for anything else."""
    text = (headers.get("cancel-after") or "").strip() if headers is not None else ""
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 604800:
        raise ApiError(422, f"Cancel-After {text[:40]!r}: give the seconds from now by which it must be done")
    return value


async def submit(st, model, headers=None):
    """Check and store the inputs, check the render can run, then add the job to the queue (429 when
    it is full). Everything the queue would refuse later is refused here, before the 202; a refused
    request leaves nothing behind (uploads it stored are removed again)."""
    from studio.core.render.resolve import resolve
    from studio.service.preflight import runnable_here

    form = Inputs(model)
    header = cancel_after(headers)
    if header is not None:
        form.deadline_s = header if form.deadline_s is None else min(form.deadline_s, header)
    settings = resolve(form.settings, form.explicit).settings  # the delivery applied: its engine, codec, ...
    named = {"avatar_path": form.avatar_path, "audio_path": form.audio_path, "output": form.output}
    refuse_paths([n for n, v in named.items() if v])
    if form.placement == "farm" and st.opts.farm is None:  # the server's state, before any upload is kept
        raise ApiError(409, "placement=farm needs a server started with --farm; leave placement out")
    avatars = [v for v in (form.avatar, form.avatar_file, form.avatar_path) if v]
    if len(avatars) != 1:
        raise ApiError(422, "give exactly one avatar: avatar (a library name) or avatar_file (an upload)")
    audios = [v for v in (form.audio, form.audio_id, form.text, form.audio_path) if v]
    if len(audios) != 1:
        raise ApiError(422, "give exactly one voice-over: audio (an upload), audio_id or text")
    if form.avatar:
        library_avatar(form.avatar)
    if form.audio_id:
        st.uploads.audio_meta(form.audio_id)  # 404 before anything is stored
    if form.webhook:
        from studio.api.webhooks import check_url

        await run_in_threadpool(check_url, st.opts, form.webhook)  # may resolve its host: not on the loop
    await run_in_threadpool(runnable_here, settings)  # the engine, runtime, encoder, device: before any upload
    stored = []
    try:
        job = await _submit(st, form, settings, stored)
    except BaseException:
        for s in stored:  # this request's files go unless another request or a job holds them
            st.uploads.discard(s, in_use=_in_use(st))
        raise
    for s in stored:
        st.uploads.settle(s)
    return job


async def _submit(st, form, settings, stored: list):
    from studio.core.errors import StudioError
    from studio.service.preflight import preflight
    from studio.service.request import RenderRequest

    if form.avatar:
        avatar, avatar_label = form.avatar, form.avatar
    elif form.avatar_file:
        s = await st.uploads.save_avatar(form.avatar_file)
        stored.append(s)
        await run_in_threadpool(st.uploads.check_avatar, s)  # no face: 422 before the 202
        avatar, avatar_label = str(s.path), Path(s.filename).stem
    else:
        avatar, avatar_label = allowed_file(st, form.avatar_path, "avatar_path"), Path(form.avatar_path).stem
    if form.audio:
        s = await st.uploads.save_audio(form.audio, settle=False)
        stored.append(s)
        audio, audio_label = str(s.path), Path(s.filename).stem
    elif form.audio_id:
        audio, audio_label = str(st.uploads.audio_path(form.audio_id)), form.audio_id
    elif form.text:
        from studio.core.media.speech import speak

        audio, audio_label = str(await run_in_threadpool(speak, form.text, form.voice)), "speech"
    else:
        audio = allowed_file(st, form.audio_path, "audio_path")
        audio_label = Path(form.audio_path).stem
        await run_in_threadpool(st.uploads.check_audio_file, Path(audio), form.audio_path)
    if form.output:
        output = allowed_output(st, form.output)
    else:
        from studio.core.media.codecs import spec as codec_spec

        output = renders_dir() / f"{_slug(avatar_label)}-{_slug(audio_label)}{codec_spec(settings.codec).suffix}"
    request = await run_in_threadpool(
        functools.partial(RenderRequest, avatar, audio, str(output), settings, explicit=tuple(sorted(form.explicit)))
    )  # resolved once: the delivery under the fields sent, the rate
    frames = form.frames
    if frames is not None:  # inside the clip, never clamped (the end defaults to the clip's end)
        from studio.core.media.audio import probe
        from studio.service.preflight import check_frames

        total = (await run_in_threadpool(probe, audio)).frames_at(request.output_rate)  # at the output's rate
        frames = (frames[0], total if frames[1] is None else frames[1])
        try:
            check_frames(frames, total)
        except StudioError as exc:  # a field of this form that does not fit the clip: 422, not 404
            raise ApiError(422, str(exc)) from None
        request = request.with_(frames=frames)
    if form.placement == "farm":
        request = request.with_(placement=farm_placement(st, form, frames))
    elif form.gpus or form.placement == "gpus":
        request = request.with_(placement=gpus_placement(form.gpus or "all", frames))
    await run_in_threadpool(preflight, request)
    try:
        from studio.api.clients import current

        add = functools.partial(
            st.queue.add,
            request,
            webhook=form.webhook or "",
            client=current().name,
            priority=form.priority,
            deadline_s=form.deadline_s,
        )
        return await run_in_threadpool(add)
    except StudioError as exc:
        if type(exc).__name__ == "QueueFull":
            raise ApiError(429, str(exc), {"Retry-After": "10"}) from None
        if type(exc).__name__ == "DeadlineRefused":
            st.metrics.refused("deadline", current().name)
            raise ApiError(429, str(exc), {"Retry-After": str(getattr(exc, "retry_after_s", 10))}) from None
        raise


def gpus_placement(text: str, frames):
    """A job's ``gpus`` field: one long clip spread over several devices (``all``, or names); 422
    for a device this server has not, or with an in/out range."""
    from studio.service.queue import gpus_here
    from studio.service.request import Placement

    have = gpus_here()
    names = have if text.strip() == "all" else [d.strip() for d in text.split(",") if d.strip()]
    if not names:
        raise ApiError(422, f"gpus={text!r}: this server has no CUDA GPU; leave gpus out")
    for d in names:
        if d not in have and d != "cpu":
            raise ApiError(422, f"gpus: this server has no {d} (its GPUs: {', '.join(have) or 'none'})")
    if frames is not None:
        raise ApiError(422, "gpus spreads a whole clip; leave out frame_start/frame_end (or gpus)")
    return Placement("gpus", devices=tuple(names))


def farm_placement(st, form, frames):
    """``placement=farm``: one long clip in chunks over the farm's actors; 422 with ``gpus`` or with an
    in/out range (a server without ``--farm`` answers 409 before: ``submit``; the request is well
    formed, this server's state refuses it, as ``GET /v1/farm`` does)."""
    from studio.service.request import Placement

    if form.gpus:
        raise ApiError(422, "give either placement=farm or gpus, not both")
    if frames is not None:
        raise ApiError(422, "placement=farm splits a whole clip; leave out frame_start/frame_end (or placement)")
    return Placement("farm")


def _in_use(st) -> set[str]:
    return {p for j in st.queue.list() for p in (j.avatar, j.audio)}


def allowed_file(st, path: str, field: str) -> str:
    """A file the client named on the server, through the one path check (``paths.client_path``)."""
    from studio.api.paths import client_path

    return str(client_path(path, field))


def allowed_output(st, path: str) -> Path:
    """An output path the client named, through the one path check: in an existing allowed folder."""
    from studio.api.paths import client_path

    return client_path(path, "output", output=True)


def form_body(request: Request) -> None:
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind not in ("", "multipart/form-data", "application/x-www-form-urlencoded"):
        raise ApiError(415, f"send the fields as multipart/form-data (curl -F), not {kind}")


def library_folder(name: str) -> Path:
    from studio.core.avatars.library import library_dir

    folder = library_dir() / name if NAME_RE.match(name or "") else None
    if folder is None or not (folder / "meta.json").exists():
        raise ApiError(404, f"no avatar named '{(name or '')[:64]}' in the library; see GET /v1/avatars")
    return folder


def library_avatar(name: str) -> str:
    library_folder(name)
    return name


def renders_dir() -> Path:
    from studio.core.env import sub_dir

    return sub_dir("renders")


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "_", text)[:40].strip("_") or "render"


def _file(upload):
    """An UploadFile, or None for a missing or empty-named part (curl -F 'audio=' sends one)."""
    if upload is None or isinstance(upload, str) or not getattr(upload, "filename", None):
        return None
    return upload

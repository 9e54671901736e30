"""The inputs of a render over HTTP: the form of ``POST /generate`` and ``POST /v1/renders``, checked,
stored and turned into a ``RenderRequest`` for the queue (``submit``).

Exactly one avatar (a library name, an upload, or with ``--allow-paths`` a server path) and one
voice-over (an upload, an id from ``POST /v1/audio``, a ``text`` for espeak-ng, or a server path);
settings are the service's own (``settings_from_dict``: one sentence for a bad value); finished files
go to ``<data folder>/renders/`` unless ``--allow-paths`` lets the client name one.
"""

from __future__ import annotations

import re
from pathlib import Path

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from studio.api.errors import ApiError
from studio.api.schema import settings_of

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


async def submit(st, model):
    """Check and store the inputs, then add the job to the queue (429 when it is full)."""
    from studio.core.errors import StudioError
    from studio.core.settings import from_dict as settings_from_dict
    from studio.service import RenderRequest

    form = Inputs(model)
    settings = settings_from_dict(form.settings)
    paths = [
        n for n, v in (("avatar_path", form.avatar_path), ("audio_path", form.audio_path), ("output", form.output)) if v
    ]
    if paths and not st.opts.allow_paths:
        raise ApiError(
            403,
            f"this server opens no paths of its own ({', '.join(paths)}); upload the files "
            "instead (or start it with --allow-paths)",
        )
    avatars = [v for v in (form.avatar, form.avatar_file, form.avatar_path) if v]
    if len(avatars) != 1:
        raise ApiError(422, "give exactly one avatar: avatar (a library name) or avatar_file (an upload)")
    audios = [v for v in (form.audio, form.audio_id, form.text, form.audio_path) if v]
    if len(audios) != 1:
        raise ApiError(422, "give exactly one voice-over: audio (an upload), audio_id or text")
    if form.avatar:
        avatar, avatar_label = library_avatar(form.avatar), form.avatar
    elif form.avatar_file:
        stored = await st.uploads.save_avatar(form.avatar_file)
        avatar, avatar_label = str(stored.path), Path(stored.filename).stem
    else:
        avatar, avatar_label = _server_file(form.avatar_path, "avatar_path"), Path(form.avatar_path).stem
    if form.audio:
        stored = await st.uploads.save_audio(form.audio)
        audio, audio_label = str(stored.path), Path(stored.filename).stem
    elif form.audio_id:
        audio, audio_label = str(st.uploads.audio_path(form.audio_id)), form.audio_id
    elif form.text:
        from studio.core.media.speech import speak

        audio, audio_label = str(await run_in_threadpool(speak, form.text, form.voice)), "speech"
    else:
        audio, audio_label = _server_file(form.audio_path, "audio_path"), Path(form.audio_path).stem
    if form.output:
        output = Path(form.output).expanduser()
        if not output.is_absolute() or not output.parent.is_dir():
            raise ApiError(422, f"output {form.output}: give an absolute path in an existing folder on the server")
    else:
        output = renders_dir() / f"{_slug(avatar_label)}-{_slug(audio_label)}.mp4"
    frames = form.frames
    if frames is not None and frames[1] is None:
        from studio.core.media.audio import probe

        frames = (frames[0], probe(audio).frames)
    request = RenderRequest(avatar, audio, str(output), settings, frames=frames)
    try:
        return await run_in_threadpool(st.queue.add, request)
    except StudioError as exc:
        if type(exc).__name__ == "QueueFull":
            raise ApiError(429, str(exc), {"Retry-After": "10"}) from None
        raise


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


def _server_file(path: str, field: str) -> str:
    p = Path(path).expanduser()
    if not p.is_file():
        raise ApiError(422, f"{field} {path}: no such file on the server")
    return str(p.resolve())


def renders_dir() -> Path:
    from studio.core.store.paths import sub_dir

    return sub_dir("renders")


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "_", text)[:40].strip("_") or "render"


def _file(upload):
    """An UploadFile, or None for a missing or empty-named part (curl -F 'audio=' sends one)."""
    if upload is None or isinstance(upload, str) or not getattr(upload, "filename", None):
        return None
    return upload

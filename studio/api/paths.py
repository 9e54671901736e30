"""The one check of every server path a client names: ``avatar_path``, ``audio_path``, ``output``, an
image ``background`` and any later path field or path-valued setting.

    app.add_middleware(PathScope, allow=opts.allow_paths)   # this request's --allow-paths folders
    real = client_path("/srv/in/a.wav", "audio_path")      # the resolved path, or one ApiError
    real = client_path("/srv/out/v.mp4", "output", output=True)

A path is refused, in this order and before anything is looked up on disk, so that no answer tells
whether a path outside the allowed folders exists:

1. the server opens no paths (no ``--allow-paths``): 403;
2. not absolute: 422 (said of the text the client sent);
3. with a ``..`` part, or resolved (``os.path.realpath``: every link followed) outside every allowed
   folder: 403, the same sentence whether or not it exists (a link inside an allowed folder that
   points out is outside);
4. inside: then a missing file (or, for an output, a missing folder) is 422.

The allowed folders are this request's (a context variable set by ``PathScope``), so a route never
passes them around and a new route's path fields get the same check by calling ``client_path``
(path-valued settings are checked by ``schema.settings_of`` itself).
"""

from __future__ import annotations

import contextvars
import os
from pathlib import Path, PurePath

from studio.api.errors import ApiError

_ALLOWED: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("studio_allow_paths", default=())


class PathScope:
    """Pure ASGI: sets the request's allowed folders (``--allow-paths``) for ``client_path``."""

    def __init__(self, app, allow: tuple[str, ...] = ()):
        self.app = app
        self.allow = tuple(os.path.realpath(a) for a in allow)

    async def __call__(self, scope, receive, send):
        token = _ALLOWED.set(self.allow)
        try:
            return await self.app(scope, receive, send)
        finally:
            _ALLOWED.reset(token)


def allowed_folders() -> tuple[str, ...]:
    return _ALLOWED.get()


def refuse_paths(fields: list[str]) -> None:
    """403 when any fields name server paths and this server opens none."""
    if fields and not allowed_folders():
        raise ApiError(
            403,
            f"this server opens no paths of its own ({', '.join(fields)}); upload the files "
            "instead (or start it with --allow-paths DIR)",
        )


def client_path(given: str, field: str, output: bool = False) -> Path:
    """``given`` checked (see the module docstring): the resolved path of an existing file, or for
    ``output`` of a file to write in an existing folder."""
    refuse_paths([field])
    text = str(given)
    shown = text[:200]
    if "\x00" in text or not os.path.isabs(text):
        raise ApiError(422, f"{field} {shown}: give an absolute path on the server")
    folders = allowed_folders()
    real = Path(os.path.realpath(text))
    if ".." in PurePath(text).parts or not any(real == Path(f) or Path(f) in real.parents for f in folders):
        raise ApiError(
            403,
            f"{field} {shown} is outside the folders this server opens ({', '.join(folders)}); "
            "use a path under one of them, without '..'",
        )
    if output:
        if not real.parent.is_dir() or real.is_dir():
            raise ApiError(422, f"{field} {shown}: give a file's path in an existing folder under {folders[0]}")
    elif not real.is_file():
        raise ApiError(422, f"{field} {shown}: no such file under the folders this server opens")
    return real

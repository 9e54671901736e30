"""``/v1/avatars``: the avatar library (list, thumbnail, add from an upload, rename, remove)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, File, Query, Request, Response
from fastapi.responses import FileResponse
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from studio.api.errors import ApiError
from studio.api.idempotency import DOC as IDEMPOTENCY_DOC
from studio.api.idempotency import Idempotent
from studio.api.inputs import NAME_RE, library_folder
from studio.api.models import NAME_PATTERN, Avatar, AvatarForm, AvatarList, AvatarName, AvatarRemoved, binary, errors
from studio.api.route import Route
from studio.api.state import State

router = APIRouter(tags=["avatars"], route_class=Route)


def listed() -> list[dict]:
    from studio.core.avatars.library import list_avatars

    out = []
    for a in list_avatars():
        a = dict(a)
        a.pop("folder", None)
        a["source"] = Path(a["source"]).name if a.get("source") else None
        a["thumbnail"] = f"/v1/avatars/{a['name']}/thumbnail" if a.get("thumbnail") else None
        out.append(a)
    return out


@router.get("/v1/avatars", response_model=AvatarList, responses=errors())
def list_avatars() -> dict:
    """The avatar library, with thumbnail links"""
    return {"avatars": listed()}


@router.get(
    "/v1/avatars/{name}/thumbnail",
    response_class=FileResponse,
    responses=binary("image/png image/jpeg", "the avatar's thumbnail (PNG; JPEG at px)", 404, 422),
)
def get_avatar_thumbnail(
    name: AvatarName,
    px: Annotated[int | None, Query(ge=16, le=192, description="a JPEG this many pixels on its longer side")] = None,
):
    """The avatar's thumbnail (PNG), or a small JPEG of it (px: its longer side, for a list)"""
    thumb = library_folder(name) / "thumbnail.png"
    if not thumb.exists():
        raise ApiError(404, f"avatar '{name}' has no thumbnail")
    cache = {"Cache-Control": "private, max-age=3600"}
    if px is None:
        return FileResponse(thumb, media_type="image/png", headers=cache)
    import io

    from PIL import Image

    with Image.open(thumb) as im:  # a list shows 48 px: a few KB instead of the PNG's tens
        small = im.convert("RGB")
        small.thumbnail((px, px))
        out = io.BytesIO()
        small.save(out, "JPEG", quality=85)
    return Response(out.getvalue(), media_type="image/jpeg", headers=cache)


@router.post(
    "/v1/avatars",
    status_code=201,
    response_model=Avatar,
    responses=errors(404, 409, 410, 413, 415, 422),
    openapi_extra={"parameters": [IDEMPOTENCY_DOC]},
)
async def add_avatar(st: State, request: Request, response: Response, form: Annotated[AvatarForm, File()]) -> dict:
    """Add an avatar to the library from an uploaded photo or video"""
    async with Idempotent(st, request, form, response) as once:
        if once.replayed is not None:
            name = once.replayed["answer"]["name"]
            return next((a for a in listed() if a["name"] == name), None) or _gone(name)
        answer = await _add_avatar(st, form)
        once.done(answer={"name": answer["name"]})
    return answer


def _valid(name: str) -> None:
    if not NAME_RE.match(name):
        raise ApiError(422, f"'{name[:64]}' is not a valid avatar name; use up to 64 letters, digits, '.', '_' or '-'")


def _gone(name: str):
    raise ApiError(410, f"the avatar '{name}', made by the first request with this key, was removed")


async def _add_avatar(st, form) -> dict:
    from studio.core.avatars import library as avatar_mod

    f = form
    name = f.name
    _valid(name)
    if (avatar_mod.library_dir() / name / "meta.json").exists() and not f.force:
        raise ApiError(409, f"an avatar named '{name}' already exists; pick another name or send force=true")
    params = avatar_mod.AvatarParams.taken_from(f).check()
    stored = await st.uploads.save_avatar(f.file)
    same = None if stored.new or f.force else next((a for a in listed() if a.get("source") == stored.path.name), None)
    if same is not None:  # the same bytes made an avatar already: that one is offered, not a copy
        st.uploads.discard(stored)
        raise ApiError(
            409,
            f"this file is already avatar '{same['name']}' (same content); choose it, or send force=true to make a copy",
            {"X-Studio-Avatar": same["name"]},
        )
    try:  # a refused avatar leaves nothing behind, and is named as the client named it
        await run_in_threadpool(avatar_mod.prepare, name, stored.path, params, force=f.force)
    except BaseException as exc:  # noqa: BLE001 - re-raised: a cancelled request must not keep the file either
        st.uploads.discard(stored)
        raise st.uploads.as_client_said(exc, stored) from None
    st.uploads.settle(stored)
    st.pool.invalidate()
    return next(a for a in listed() if a["name"] == name)


@router.delete("/v1/avatars/{name}", response_model=AvatarRemoved, responses=errors(404, 422))
def remove_avatar(st: State, name: AvatarName) -> dict:
    """Remove an avatar from the library"""
    from studio.core.avatars import library as avatar_mod

    library_folder(name)
    avatar_mod.remove(name)
    st.pool.invalidate()
    return {"removed": name}


class AvatarRename(BaseModel):
    name: str = Field(
        pattern=NAME_PATTERN, min_length=1, description="the new name: up to 64 letters, digits, '.', '_' or '-'"
    )


ACTIVE = ("draft", "queued", "held", "running")


@router.patch("/v1/avatars/{name}", response_model=Avatar, responses=errors(404, 409, 422))
def rename_avatar(st: State, name: AvatarName, body: AvatarRename) -> dict:
    """Rename an avatar (its files stay; 409 while a job to run names it, or when the name is taken)"""
    from studio.core.avatars import library as avatar_mod

    library_folder(name)
    new = body.name
    _valid(new)
    if new != name and (avatar_mod.library_dir() / new).exists():
        raise ApiError(409, f"an avatar named '{new}' already exists; pick another name or remove that one first")
    waiting = sorted(j.id for j in st.queue.list() if j.avatar == name and j.state in ACTIVE)
    if waiting:  # a job names its avatar: renamed under it, it would not find it when it starts
        raise ApiError(
            409,
            f"avatar '{name}' is named by render job {waiting[0]}, which has not finished; "
            "rename it once that job is done or cancelled",
        )
    avatar_mod.rename(name, new)
    st.pool.invalidate()
    return next(a for a in listed() if a["name"] == new)

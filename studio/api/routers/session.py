"""``/v1/session``: the media cookie of the web page (``studio.api.media``).

``POST`` (with the bearer token) sets an ``HttpOnly``, ``SameSite=Strict`` cookie that lets the
browser fetch what this token may read (videos, side files, thumbnails, frames) by URL for an hour;
``DELETE`` ends it. The cookie never authorises anything but GET and HEAD.
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from pydantic import Field

from studio.api.media import COOKIE
from studio.api.models import Answer, errors
from studio.api.route import Route
from studio.api.state import State

router = APIRouter(tags=["server"], route_class=Route)


class MediaSession(Answer):
    """The media cookie just set (or cleared)."""

    cookie: str = Field(description="the cookie's name (HttpOnly: the page cannot read it)")
    expires_in_s: int = Field(description="seconds until it ends (0: cleared); renew it before")


@router.post("/v1/session", response_model=MediaSession, responses=errors(403))
def open_session(st: State, request: Request, response: Response) -> dict:
    """Set the media cookie: the browser may then GET videos, side files and frames by URL (HTTP Range)"""
    from studio.api.clients import current

    value, max_age = st.media.issue(current())
    response.set_cookie(
        COOKIE,
        value,
        max_age=max_age,
        path="/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return {"cookie": COOKIE, "expires_in_s": max_age}


@router.delete("/v1/session", response_model=MediaSession, responses=errors(403))
def close_session(response: Response) -> dict:
    """Clear the media cookie"""
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
    return {"cookie": COOKIE, "expires_in_s": 0}

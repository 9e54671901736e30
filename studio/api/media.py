"""Media by URL: a same-site session cookie that lets the browser itself fetch what it may read.

    sessions = MediaSessions()                  # one per server process (a random key: a restart ends them)
    value, max_age = sessions.issue(client)     # POST /v1/session sets it (the request has the bearer token)
    sessions.verify(value, clients)             # the guard: the Client it stands for, or None

A ``<video src>``, ``<img src>`` or download link cannot send an ``Authorization`` header, so a
page with a token would have to fetch every video whole into a Blob before it plays. With this
cookie the browser streams it (HTTP Range) and seeks before the download ends; the token itself
never appears in a URL or a log line. Protection against cross-site request forgery: the cookie is
``SameSite=Strict`` (a request from another site does not carry it) and ``HttpOnly``, and the
guard takes it for GET and HEAD only, which change nothing; every other request needs the token.
The cookie holds who it stands for, when it ends and an HMAC-SHA256 of both under the process's
key, so it is short-lived (an hour; the page renews it) and forged or altered cookies are refused.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time

COOKIE = "studio_media"
TTL_S = 3600


class MediaSessions:
    def __init__(self, key: bytes | None = None, ttl_s: int = TTL_S):
        self.key = key or secrets.token_bytes(32)
        self.ttl_s = int(ttl_s)

    def issue(self, client, now: float | None = None) -> tuple[str, int]:
        """The cookie's value for ``client`` and its max-age in seconds."""
        until = int((now if now is not None else time.time()) + self.ttl_s)
        body = f"{_kind(client)}.{until}"
        return f"{body}.{self._sign(body)}", self.ttl_s

    def verify(self, value: str, clients: tuple = (), now: float | None = None):
        """The ``Client`` a cookie stands for, or None (absent, altered, expired, unknown client)."""
        from studio.api.clients import ADMIN, READER

        body, _, sig = (value or "").rpartition(".")
        if not body or not hmac.compare_digest(sig, self._sign(body)):
            return None
        who, _, until = body.rpartition(".")
        if not until.isdigit() or int(until) < (now if now is not None else time.time()):
            return None
        if who == "a":
            return ADMIN
        if who == "r":
            return READER
        name = _unb64(who[2:]) if who.startswith("c:") else None
        return next((c for c in clients if c.name == name), None)

    def _sign(self, body: str) -> str:
        mac = hmac.new(self.key, body.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).decode().rstrip("=")


def _kind(client) -> str:
    from studio.api.clients import ADMIN, READER

    if client is ADMIN:
        return "a"
    if client is READER:
        return "r"
    return "c:" + base64.urlsafe_b64encode(client.name.encode()).decode().rstrip("=")


def _unb64(text: str) -> str | None:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()
    except (ValueError, UnicodeDecodeError):
        return None


def cookie_of(headers: dict) -> str | None:
    """The media cookie in a request's raw headers (``{b"cookie": b"..."}``), or None."""
    from http.cookies import CookieError, SimpleCookie

    raw = headers.get(b"cookie")
    if not raw:
        return None
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(raw.decode("latin-1"))
    except CookieError:
        return None
    morsel = jar.get(COOKIE)
    return morsel.value if morsel is not None else None

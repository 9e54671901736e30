"""The ASGI guard in front of every route: the bearer token (and its client's scopes), then the size cap.

Written as a small pure-ASGI middleware (not a FastAPI dependency) so that both checks run before
any body is read or spooled to disk: a stranger's request is refused with 401 before its upload is
received, and an oversize body with 413 as soon as its Content-Length (or, when chunked, its byte
count) passes the cap. Tokens are compared in constant time. A read-only token (``--read-token``,
for dashboards) may only read: GET and HEAD of anything but ``/v1/frame`` (which renders); any
other request with it is 403. Named clients (``--clients``, ``studio.api.clients``) each have their
own token and scopes; the request runs as its client, so the routes show it only its own jobs.
"""

from __future__ import annotations

import json

OPEN_PATHS = ("/docs", "/docs/oauth2-redirect", "/openapi.json", "/redoc")  # the API's description only


READ_METHODS = ("GET", "HEAD")
RENDERING_READS = ("/v1/frame",)  # GETs that make the engine work: not for a read-only token
PROBE_PATHS = ("/v1/health", "/v1/ready")  # liveness and readiness probes (``open_probes``)
SESSION_PATH = "/v1/session"  # the media cookie: it lets the browser read by URL what the token may read
EVERY_JOB_PATHS = (
    "/metrics",
    "/v1/farm",
    "/v1/scheduler",
)  # they show every client's jobs: a client that sees them all


class Guard:
    def __init__(
        self,
        app,
        token: str | None,
        max_body: int,
        max_upload_mb: float,
        read_token: str | None = None,
        clients: tuple = (),
        open_probes: bool = False,
        media=None,
    ):
        self.app = app
        self.media = media  # the media cookie's sessions (``studio.api.media``): GET and HEAD only
        self.open_probes = open_probes  # /v1/health and /v1/ready answer without the token (saying no job data)
        self.token = token or None
        self.read_token = read_token or None
        self.clients = tuple(clients)  # named clients (``studio.api.clients``, --clients)
        self.max_body = max_body
        self.max_upload_mb = max_upload_mb

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        from studio.api.clients import ADMIN, READER, acting_as

        headers = dict(scope.get("headers") or ())
        path = scope.get("path")
        who = ADMIN  # a server without tokens: loopback only, every request is its operator's
        if (self.token is not None or self.clients) and path not in OPEN_PATHS:
            found = self._who(headers)
            if found is None and self.media is not None and scope.get("method") in READ_METHODS:
                from studio.api.media import cookie_of

                found = self.media.verify(cookie_of(headers) or "", self.clients)
            if found is None and self.open_probes and path in PROBE_PATHS and scope.get("method") in READ_METHODS:
                scope["studio_anonymous"] = True  # the route leaves job data out
                return await self.app(scope, receive, send)
            if found is None:
                return await send_json(
                    send,
                    401,
                    "this server needs its token: send 'Authorization: Bearer TOKEN'",
                    [(b"www-authenticate", b"Bearer")],
                )
            who = found
            method = scope.get("method")
            reads = (method in READ_METHODS and not renders(path)) or path == SESSION_PATH
            if who is READER and not reads:
                return await send_json(
                    send,
                    403,
                    f"this token may only read (GET job lists, events, videos, /metrics); {method} "
                    f"{path} needs the server's full token",
                )
            need = scope_needed(method, path, reads)
            if not who.may(need) or (path in EVERY_JOB_PATHS and not who.every_job):
                # it has the scope: then this path shows every client's jobs, which it may not see
                needs = "a client that sees every client's jobs (the admin scope)" if who.may(need) else need
                return await send_json(
                    send,
                    403,
                    f"client {who.name} may not {method} {path[:100]} (it has the scopes "
                    f"{', '.join(sorted(who.scopes))}; that needs {needs}); ask this server's operator",
                )
        length = headers.get(b"content-length", b"")
        if length.isdigit() and int(length) > self.max_body:
            return await send_json(send, 413, self._too_large())
        received = 0

        async def counted():
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body:
                    from fastapi import HTTPException

                    raise HTTPException(413, self._too_large())
            return message

        with acting_as(who):  # the routes see only this client's jobs (``clients.sees``)
            await self.app(scope, counted, send)  # the route's handler turns the HTTPException into JSON

    def _who(self, headers: dict):
        """The ``Client`` the bearer token belongs to, or None (no or a wrong token)."""
        from studio.api.clients import identify

        scheme, _, cred = headers.get(b"authorization", b"").partition(b" ")
        if scheme.lower() != b"bearer":
            return None
        return identify(cred.strip(), self.token, self.read_token, self.clients)

    def _too_large(self) -> str:
        return f"the upload is too large: this server takes files of up to {self.max_upload_mb:g} MB (--max-upload-mb)"


def renders(path) -> bool:
    """A GET that makes the engine work: ``/v1/frame`` and a job's ``/v1/renders/{id}/frame``."""
    return path in RENDERING_READS or (str(path).startswith("/v1/renders/") and str(path).endswith("/frame"))


def scope_needed(method: str | None, path: str, reads: bool) -> str:
    """``read``, ``submit`` or ``admin``: what a request needs of a named client's scopes."""
    if method in ("DELETE", "PATCH") and path.startswith("/v1/avatars/"):
        return "admin"  # the avatar library is every client's: removing or renaming one is the operator's
    if path in EVERY_JOB_PATHS:
        return "read"  # and a client that sees every job (checked by the caller)
    return "read" if reads else "submit"


async def send_json(send, status: int, message: str, extra=()) -> None:
    body = json.dumps({"error": message}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *extra],
        }
    )
    await send({"type": "http.response.body", "body": body})

"""The ASGI guard in front of every route: the bearer token, then the request-size cap.

Written as a small pure-ASGI middleware (not a FastAPI dependency) so that both checks run before
any body is read or spooled to disk: a stranger's request is refused with 401 before its upload is
received, and an oversize body with 413 as soon as its Content-Length (or, when chunked, its byte
count) passes the cap. Tokens are compared in constant time. A read-only token (``--read-token``,
for dashboards) may only read: GET and HEAD of anything but ``/v1/frame`` (which renders); any
other request with it is 403.
"""

from __future__ import annotations

import hmac
import json

OPEN_PATHS = ("/docs", "/docs/oauth2-redirect", "/openapi.json", "/redoc")  # the API's description only


READ_METHODS = ("GET", "HEAD")
RENDERING_READS = ("/v1/frame",)  # GETs that make the engine work: not for a read-only token


class Guard:
    def __init__(self, app, token: str | None, max_body: int, max_upload_mb: float, read_token: str | None = None):
        self.app = app
        self.token = token.encode() if token else None
        self.read_token = read_token.encode() if read_token else None
        self.max_body = max_body
        self.max_upload_mb = max_upload_mb

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or ())
        path = scope.get("path")
        if self.token is not None and path not in OPEN_PATHS:
            who = self._who(headers)
            if who is None:
                return await _send_json(
                    send,
                    401,
                    "this server needs its token: send 'Authorization: Bearer TOKEN'",
                    [(b"www-authenticate", b"Bearer")],
                )
            if who == "read" and (scope.get("method") not in READ_METHODS or _renders(path)):
                return await _send_json(
                    send,
                    403,
                    f"this token may only read (GET job lists, events, videos, /metrics); {scope.get('method')} "
                    f"{path} needs the server's full token",
                )
        length = headers.get(b"content-length", b"")
        if length.isdigit() and int(length) > self.max_body:
            return await _send_json(send, 413, self._too_large())
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

        await self.app(scope, counted, send)  # the route's handler turns the HTTPException into JSON

    def _who(self, headers: dict) -> str | None:
        """``"full"``, ``"read"`` (the read-only token) or None (no or a wrong token)."""
        scheme, _, cred = headers.get(b"authorization", b"").partition(b" ")
        if scheme.lower() != b"bearer":
            return None
        cred = cred.strip()
        full = hmac.compare_digest(cred, self.token or b"")
        read = self.read_token is not None and hmac.compare_digest(cred, self.read_token)
        return "full" if full else "read" if read else None

    def _too_large(self) -> str:
        return f"the upload is too large: this server takes files of up to {self.max_upload_mb:g} MB (--max-upload-mb)"


def _renders(path) -> bool:
    """A GET that makes the engine work: ``/v1/frame`` and a job's ``/v1/renders/{id}/frame``."""
    return path in RENDERING_READS or (str(path).startswith("/v1/renders/") and str(path).endswith("/frame"))


async def _send_json(send, status: int, message: str, extra=()) -> None:
    body = json.dumps({"error": message}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *extra],
        }
    )
    await send({"type": "http.response.body", "body": body})

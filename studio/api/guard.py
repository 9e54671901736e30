"""The ASGI guard in front of every route: the bearer token, then the request-size cap.

Written as a small pure-ASGI middleware (not a FastAPI dependency) so that both checks run before
any body is read or spooled to disk: a stranger's request is refused with 401 before its upload is
received, and an oversize body with 413 as soon as its Content-Length (or, when chunked, its byte
count) passes the cap. Tokens are compared in constant time.
"""

from __future__ import annotations

import hmac
import json

OPEN_PATHS = ("/docs", "/docs/oauth2-redirect", "/openapi.json", "/redoc")  # the API's description only


class Guard:
    def __init__(self, app, token: str | None, max_body: int, max_upload_mb: float):
        self.app = app
        self.token = token.encode() if token else None
        self.max_body = max_body
        self.max_upload_mb = max_upload_mb

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or ())
        if self.token is not None and scope.get("path") not in OPEN_PATHS and not self._authorized(headers):
            return await _send_json(
                send,
                401,
                "this server needs its token: send 'Authorization: Bearer TOKEN'",
                [(b"www-authenticate", b"Bearer")],
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

    def _authorized(self, headers: dict) -> bool:
        scheme, _, cred = headers.get(b"authorization", b"").partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(cred.strip(), self.token)

    def _too_large(self) -> str:
        return f"the upload is too large: this server takes files of up to {self.max_upload_mb:g} MB (--max-upload-mb)"


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

"""Conditional GETs for the JSON a page asks again and again: an ETag, and 304 when it is unchanged.

    app.add_middleware(Conditional)   # inside the gzip middleware: the tag is of the identity body

``/openapi.json`` (about 130 KB, read by the page on each load), the job list, the avatar library
and the voice-over list answer with a weak ``ETag`` (a hash of the body) and ``Cache-Control:
no-cache``; a request whose ``If-None-Match`` names it gets ``304 Not Modified`` with no body. The
answer is still made (the list is read), only the bytes on the wire are saved. Weak, because the
gzip middleware outside may change the bytes but never the meaning.
"""

from __future__ import annotations

import hashlib

PATHS = ("/openapi.json", "/v1/renders", "/v1/avatars", "/v1/audio")


class Conditional:
    def __init__(self, app, paths: tuple[str, ...] = PATHS):
        self.app = app
        self.paths = paths

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("method") not in ("GET", "HEAD") or scope.get("path") not in self.paths:
            return await self.app(scope, receive, send)
        start: dict = {}
        chunks: list[bytes] = []

        async def held(message):
            if message["type"] == "http.response.start":
                start.update(message)
                return
            if message["type"] != "http.response.body" or start.get("status") != 200:
                if start and not start.get("sent"):
                    await send({k: v for k, v in start.items() if k != "sent"})
                    start["sent"] = True
                return await send(message)
            chunks.append(message.get("body", b""))
            if message.get("more_body"):
                return None
            body = b"".join(chunks)
            tag = f'W/"{hashlib.sha256(body).hexdigest()[:20]}"'.encode()
            headers = [(k, v) for k, v in start.get("headers", []) if k.lower() not in (b"etag", b"cache-control")]
            headers += [(b"etag", tag), (b"cache-control", b"private, no-cache")]
            asked = dict(scope.get("headers") or ()).get(b"if-none-match", b"")
            if tag in [t.strip() for t in asked.split(b",")]:
                kept = [(k, v) for k, v in headers if k.lower() not in (b"content-length", b"content-type")]
                await send({"type": "http.response.start", "status": 304, "headers": kept})
                return await send({"type": "http.response.body", "body": b""})
            await send({**{k: v for k, v in start.items() if k != "sent"}, "headers": headers})
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, held)

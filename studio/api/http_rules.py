"""Two HTTP rules every route follows, as pure ASGI middleware (a later route inherits them):

    app.add_middleware(HeadAsGet)      # HEAD is GET without the body, on every GET route
    app.add_middleware(DocsSandbox)    # /docs and /redoc run in a sandbox: they cannot read the page's token

* **HEAD**: FastAPI makes a route for each method it is given, so HEAD was 405 everywhere while the
  ``Allow`` header (from the API's document) listed it. A HEAD request runs as GET; its answer's
  status and headers are sent, the body is not, and a streamed answer (events, a video) is ended
  after its head (the route sees the client leave).
* **/docs and /redoc** load Swagger UI and ReDoc from a CDN. Served on the server's own origin, those
  scripts could read what the web page keeps there (its stored token). They are answered with
  ``Content-Security-Policy: sandbox allow-scripts allow-popups`` (an opaque origin: no storage, no
  cookies of this server), no framing and no referrer; ``/openapi.json``, public anyway, allows any
  origin to read it so that the sandboxed page can load it.
"""

from __future__ import annotations

DOCS_PATHS = ("/docs", "/redoc", "/docs/oauth2-redirect")
DOCS_HEADERS = [
    (b"content-security-policy", b"sandbox allow-scripts allow-popups; frame-ancestors 'none'; base-uri 'none'"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-content-type-options", b"nosniff"),
]


class HeadAsGet:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("method") != "HEAD":
            return await self.app(scope, receive, send)
        ended = False

        async def head_only(message):
            nonlocal ended
            if ended:
                return
            if message["type"] == "http.response.start":
                await send(message)
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                ended = True

        async def receiving():
            if ended:
                return {"type": "http.disconnect"}
            return await receive()

        await self.app({**scope, "method": "GET"}, receiving, head_only)


class DocsSandbox:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        path = scope.get("path") if scope["type"] == "http" else None
        if path not in (*DOCS_PATHS, "/openapi.json"):
            return await self.app(scope, receive, send)
        extra = DOCS_HEADERS if path in DOCS_PATHS else [(b"access-control-allow-origin", b"*")]

        async def sending(message):
            if message["type"] == "http.response.start":
                names = {k for k, _ in extra}
                kept = [(k, v) for k, v in message.get("headers", []) if k.lower() not in names]
                message = {**message, "headers": [*kept, *extra]}
            await send(message)

        await self.app(scope, receive, sending)

"""The web page ``studio serve`` answers at ``/`` (the built files of ``web/``, in ``studio/api/static``).

    app.add_middleware(WebPage)     # inside the access log, outside the token guard

The page and its assets carry no data and no secret, so they are served without the token (the page
asks for it and sends it with each API call, as any client does). Every answer from here has a
Content-Security-Policy that allows only this origin (nothing is loaded from another host; the
video, frames and previews are loaded by URL with the media cookie, ``studio.api.media``; no
``blob:`` URLs), no inline script, no framing. The hashed assets are cached for good;
``index.html`` is revalidated.
Starlette's ``StaticFiles`` does the serving (ETag, HEAD, conditional requests).
"""

from __future__ import annotations

from pathlib import Path

STATIC = Path(__file__).resolve().parent / "static"
PAGE_PATHS = ("/", "/index.html", "/favicon.svg")
ASSETS = "/assets/"
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "media-src 'self'; connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
]


def is_page(path: str) -> bool:
    return path in PAGE_PATHS or (path.startswith(ASSETS) and ".." not in path)


class WebPage:
    """Answers GET/HEAD of the page's paths from ``STATIC``; everything else goes on to the API."""

    def __init__(self, app, directory: Path = STATIC):
        from starlette.staticfiles import StaticFiles

        self.app = app
        self.root = directory.resolve()
        self.files = StaticFiles(directory=directory, html=True, check_dir=False) if directory.is_dir() else None

    async def __call__(self, scope, receive, send):
        if (
            self.files is None
            or scope["type"] != "http"
            or scope.get("method") not in ("GET", "HEAD")
            or not is_page(scope.get("path", ""))
        ):
            return await self.app(scope, receive, send)
        if not self._exists(scope["path"]):
            return await _not_found(send, f"the page has no file {scope['path'][:80]!r}; open / instead")
        immutable = scope["path"].startswith(ASSETS)

        async def with_headers(message):
            if message["type"] == "http.response.start":
                extra = [
                    *HEADERS,
                    (b"cache-control", b"public, max-age=31536000, immutable" if immutable else b"no-cache"),
                ]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.files(scope, receive, with_headers)

    def _exists(self, path: str) -> bool:
        rel = path.lstrip("/") or "index.html"
        full = (self.root / rel).resolve()
        return full.is_relative_to(self.root) and full.is_file()


async def _not_found(send, sentence: str) -> None:
    import json

    body = json.dumps({"error": sentence}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *HEADERS]
    await send({"type": "http.response.start", "status": 404, "headers": headers})
    await send({"type": "http.response.body", "body": body})

"""Request ids and the access log: one line per request, the same id in the answer and the log.

    app.add_middleware(RequestLog, metrics=metrics)

``X-Request-ID`` is taken from the request when it is a sane id (1-128 of ``A-Z a-z 0-9 . _ : -``),
else made (32 hex digits); it is sent back on every answer (errors included) and is in the request's
``request.state.request_id`` for the error log. The line goes to the ``studio.api.access`` logger
(``studio serve`` prints it on stderr and the log file keeps it): client, method, path (no query:
nothing a client put there is logged; percent-encoded and cut at 300 characters, so a client cannot
write a line of its own), status, milliseconds, bytes and the id. A pure ASGI
middleware, so a streamed answer (events, a video) is timed to its last byte.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from urllib.parse import quote

from studio.core.logs import escape

log = logging.getLogger("studio.api.access")

RID_RE = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
HEADER = b"x-request-id"
MAX_LOGGED_PATH = 300  # characters of a request's path in its access line


def logged_path(path: str) -> str:
    """A request's path as the access log writes it: percent-encoded again (a ``%0A`` a client sent
    stays ``%0A``, a quote cannot end the quoted field) and cut to ``MAX_LOGGED_PATH`` characters."""
    return escape(quote(path, safe="/:@!$&'()*+,;=-._~"), cap=MAX_LOGGED_PATH)


class RequestLog:
    def __init__(self, app, metrics=None):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        given = dict(scope.get("headers") or ()).get(HEADER, b"").decode("latin-1")
        rid = given if RID_RE.match(given) else uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = rid
        status, size = [500], [0]

        async def sending(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != HEADER]
                message = {**message, "headers": [*headers, (HEADER, rid.encode())]}
            elif message["type"] == "http.response.body":
                size[0] += len(message.get("body", b""))
            await send(message)

        t0 = time.perf_counter()
        try:
            await self.app(scope, receive, sending)
        finally:
            seconds = time.perf_counter() - t0
            client = scope.get("client") or ("-", 0)
            method, path = scope.get("method", "-"), logged_path(scope.get("path", "-"))
            log.info(
                '%s "%s %s" %d %.1f ms %d B request_id=%s',
                client[0],
                method,
                path,
                status[0],
                seconds * 1000,
                size[0],
                rid,
            )
            if self.metrics is not None:
                route = getattr(scope.get("route"), "path", None) or "unmatched"
                self.metrics.request(method, route, status[0], seconds)

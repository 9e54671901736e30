"""The FastAPI app of ``studio serve``: render jobs, scrub frames, avatars and voice-overs over HTTP.

    app = create_app(queue=None, options=ServeOptions())   # queue: a QueueService (default: the
                                                           # one over <data>/jobs.sqlite, the window's)

Jobs posted here go into the service's queue (the same ``jobs.sqlite`` the window shows), render on
the process-wide warm ``EnginePool`` and are followed over Server-Sent Events. The routes are one
router per resource (``studio.api.routers``); every JSON answer has a Pydantic model and every error
answers ``{"error": "one sentence"}`` (``studio.api.models``, ``studio.api.errors``); the token and
the size cap are checked in front of every route (``studio.api.guard``); uploads are stored under
generated names (``studio.api.uploads``). The work is the service's and the core's.
"""

from __future__ import annotations

import contextlib

from fastapi import Depends, FastAPI
from fastapi.security import HTTPBearer
from starlette.concurrency import run_in_threadpool

from studio import __version__
from studio.api import errors
from studio.api.options import ServeOptions
from studio.api.state import ApiState
from studio.api.uploads import UploadStore

DESCRIPTION = """Lip-synced presenter video over HTTP.

* `POST /generate` renders and answers the MP4 in one request.
* `POST /v1/renders` queues a job and answers it at once (202); follow it with
  `GET /v1/renders/{id}/events` (Server-Sent Events), then download `GET /v1/renders/{id}/video`.

Every error is `{"error": "one sentence"}` with its status code. The integrator's guide is
`docs/api.md`.
"""


def create_app(queue=None, options: ServeOptions | None = None, pool=None) -> FastAPI:
    from studio.api.access import RequestLog
    from studio.api.guard import Guard
    from studio.api.routers import include_all
    from studio.api.sites import SiteGuard, allowed_hosts
    from studio.core.env import sub_dir

    opts = (options or ServeOptions()).check()
    state = ApiState(opts, queue, pool, UploadStore(sub_dir("uploads"), opts.max_upload_bytes))

    @contextlib.asynccontextmanager
    async def lifespan(app):
        import asyncio

        state.open(asyncio.get_running_loop())
        from studio.api.document import warm

        warm(app)  # /openapi.json is made while the server waits for its first client
        try:
            yield
        finally:
            await run_in_threadpool(state.close)

    app = FastAPI(
        title="Studio render API",
        version=__version__,
        lifespan=lifespan,
        description=DESCRIPTION,
        dependencies=[Depends(HTTPBearer(auto_error=False))] if opts.token or opts.clients else [],
    )
    app.state.studio = state
    errors.install(app)
    # outermost last: CORS (answers preflights, no token needed), the access log and request id (every
    # answer, refusals included), the sites (Host names, cross-site requests), then the guard (token,
    # size) in front of the routes
    app.add_middleware(
        Guard,
        token=opts.token,
        max_body=opts.max_body_bytes,
        max_upload_mb=opts.max_upload_mb,
        read_token=opts.read_token,
        clients=opts.clients,
        open_probes=bool(opts.open_probes),
        media=state.media,
    )
    from studio.api.paths import PathScope

    app.add_middleware(PathScope, allow=opts.allow_paths)  # the one check of client-named server paths
    from studio.api.http_rules import DocsSandbox, HeadAsGet

    app.add_middleware(HeadAsGet)  # HEAD: every GET route's answer without its body
    from starlette.middleware.gzip import GZipMiddleware

    from studio.api.conditional import Conditional
    from studio.api.web import WebPage

    app.add_middleware(Conditional)  # ETag and 304 for the lists and /openapi.json the page asks again
    app.add_middleware(WebPage)  # the page at / (web/, built): no token, its own CSP (docs/web.md)
    app.add_middleware(GZipMiddleware, minimum_size=1024)  # not video, images, event streams or ranges
    app.add_middleware(SiteGuard, hosts=allowed_hosts(opts), origins=opts.cors_origins)  # rebinding, cross-site
    app.add_middleware(DocsSandbox)  # /docs and /redoc (CDN scripts) in a sandbox: no access to the page's token
    app.add_middleware(RequestLog, metrics=state.metrics)
    if opts.cors_origins:
        from starlette.middleware.cors import CORSMiddleware

        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(opts.cors_origins),
            allow_methods=["GET", "POST", "DELETE", "OPTIONS"],
            allow_headers=["Authorization", "Content-Type", "Idempotency-Key", "X-Request-ID", "Range"],
            expose_headers=["X-Request-ID", "X-Studio-Job", "Idempotent-Replayed", "Content-Range", "Retry-After"],
            max_age=600,
        )
    include_all(app)
    from studio.api.document import openapi

    app.openapi = lambda: openapi(app)  # type: ignore[method-assign]
    return app

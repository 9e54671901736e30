"""Run the app with uvicorn (what ``studio serve`` calls)."""

from __future__ import annotations

import logging

from studio.api.options import ServeOptions

log = logging.getLogger(__name__)


def serve(options: ServeOptions) -> None:
    """Serve until SIGINT/SIGTERM; the queue runner stops with the server (a running job is
    cancelled, leaving no file; queued jobs stay queued in jobs.sqlite for the next start)."""
    import uvicorn

    from studio.api.app import create_app

    options = options.check()
    app = create_app(options=options)
    config = uvicorn.Config(app, host=options.host, port=options.port, log_level="warning",
                            access_log=False, timeout_graceful_shutdown=5, lifespan="on")
    server = uvicorn.Server(config)
    log.info("studio serve on http://%s:%d (token %s)", options.host, options.port,
             "required" if options.token else "off")
    server.run()

"""Run the app with uvicorn (what ``studio serve`` calls)."""

from __future__ import annotations

import logging
import socket

from studio.api.options import ServeOptions

log = logging.getLogger(__name__)


def serve(options: ServeOptions, on_listening=None) -> None:
    """Serve until SIGINT/SIGTERM; the queue runner stops with the server (a running job is
    cancelled, leaving no file; queued jobs stay queued in jobs.sqlite for the next start).

    The socket is bound here, before the app starts, so that a port in use is one sentence (exit 2)
    and ``on_listening(url)`` is called only once clients can connect."""
    import uvicorn

    from studio.api.app import create_app
    from studio.core.logs import SafeFormatter

    options = options.check()
    from studio.service.datafolder import check_data_folder

    check_data_folder()  # read-only, or a damaged or foreign jobs.sqlite: one sentence before uvicorn
    access = logging.getLogger("studio.api.access")  # one line per request on stderr (and in the log file)
    if not any(getattr(h, "studio_access", False) for h in access.handlers):
        h = logging.StreamHandler()
        h.setFormatter(SafeFormatter("studio: access: %(message)s"))
        h.setLevel(logging.INFO)
        h.studio_access = True  # type: ignore[attr-defined]
        access.addHandler(h)
        access.setLevel(logging.INFO)
    from studio.api.connections import Limits, guarded_protocol, quiet_server_logs, raise_file_limit

    quiet_server_logs()  # asyncio's and uvicorn's own errors: one line per kind of event, rate-limited
    raise_file_limit()
    sock = bind(options.host, options.port)
    app = create_app(options=options)
    limits = Limits(options.header_timeout_s, options.body_timeout_s, options.max_client_connections)
    config = uvicorn.Config(
        app,
        http=guarded_protocol(limits),  # TCP_NODELAY, header and body timeouts, connections per address
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=5,
        lifespan="on",
    )
    server = uvicorn.Server(config)
    host = f"[{options.host}]" if ":" in options.host else options.host
    log.info("studio serve on http://%s:%d (token %s)", host, options.port, "required" if options.token else "off")
    if on_listening is not None:
        on_listening(f"http://{host}:{sock.getsockname()[1]}")
    server.run(sockets=[sock])


def bind(host: str, port: int) -> socket.socket:
    from studio.core.errors import InputError

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        sock = socket.create_server((host.strip("[]"), port), family=family)
    except OSError as exc:
        hint = (
            "another program (another `studio serve`?) listens there: choose another --port"
            if exc.errno == 98
            else "check --host (an address of this machine) and --port"
        )
        import os

        why = os.strerror(exc.errno) if exc.errno else str(exc)
        raise InputError(f"cannot listen on {host}:{port} ({why}); {hint}") from None
    return sock

"""Who may open a live session's audio WebSocket, and at what rate.

The HTTP guards (``studio.api.guard``, ``studio.api.sites``) see HTTP requests only; a WebSocket's
handshake is checked here the same way: the ``Host`` must be one of the server's names, a browser's
``Origin`` the server's own or a ``--cors-origin``, and the caller must hold the server's token (or a
client's with the ``submit`` scope, the session's own client) in ``Authorization: Bearer``, or the
session's ``key`` (``?key=``; a browser cannot set headers on a WebSocket, and POST /v1/live gave the
key only to whoever opened the session). A refusal is an HTTP answer with one sentence (401, 403, 404, 422).
"""

from __future__ import annotations

import hmac

from studio.service.live import PCM_RATES


async def admit(ws, st, sid: str):
    """The session the socket may feed, or None (the socket is closed with the reason)."""
    from studio.api.clients import ADMIN, identify
    from studio.api.sites import allowed_hosts, host_allowed, host_of

    opts = st.opts
    host = ws.headers.get("host", "")
    if not host_allowed(host_of(host), allowed_hosts(opts)):
        return await _refuse(ws, "this server does not answer to that host name (--allowed-hosts)", 400)
    origin = ws.headers.get("origin")
    if origin is not None:
        text = origin.strip().rstrip("/").lower()
        own = text != "null" and text.partition("://")[2] == host.strip().lower()
        listed = text in {o.rstrip("/").lower() for o in opts.cors_origins} or "*" in opts.cors_origins
        if not (own or listed):
            return await _refuse(ws, "a web page from another site may not feed this server's live sessions", 403)
    s = st.live.get(sid)
    if s is None:
        return await _refuse(ws, f"no live session {sid[:40]!r}", 404)
    key = ws.query_params.get("key", "")
    if key and hmac.compare_digest(key.encode(), s.key.encode()):
        return s
    who = ADMIN
    if opts.token or opts.clients:
        scheme, _, cred = ws.headers.get("authorization", "").partition(" ")
        found = identify(cred.strip().encode(), opts.token, None, opts.clients) if scheme.lower() == "bearer" else None
        if found is None:
            return await _refuse(
                ws, "this socket needs the server's token (Authorization: Bearer) or the session's ?key=", 401
            )
        who = found
    if not (who.every_job or (who.may("submit") and s.client == who.name)):
        return await _refuse(ws, f"no live session {sid[:40]!r}", 404)
    return s


async def read_rate(ws) -> int | None:
    """``?rate=R`` (Hz, default 16000) when it is within ``PCM_RATES``, else None (the socket closed)."""
    text = ws.query_params.get("rate", "16000")
    lo, hi = PCM_RATES
    if not text.isdigit() or not lo <= int(text) <= hi:
        await _refuse(ws, f"rate must be a whole number of Hz from {lo} to {hi} (s16le mono PCM)", 422)
        return None
    return int(text)


async def _refuse(ws, sentence: str, status: int) -> None:
    """Refuse the handshake: an HTTP answer ``{"error": sentence}`` with ``status`` where the server
    can send one (the WebSocket denial extension), else a close with policy violation (1008)."""
    from starlette.responses import JSONResponse

    if "websocket.http.response" in ws.scope.get("extensions", {}):
        await ws.send_denial_response(JSONResponse({"error": sentence}, status_code=status))
    else:
        await ws.close(code=1008, reason=sentence[:120])
    return None

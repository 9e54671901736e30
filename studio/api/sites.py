"""Which sites may talk to ``studio serve``: the ``Host`` a request names, and where a browser sent it from.

    app.add_middleware(SiteGuard, hosts=allowed_hosts(opts), origins=opts.cors_origins)

Two browser attacks on a server that listens on this machine, each refused before any route runs:

* **DNS rebinding**: a page on ``evil.example`` whose name is made to point at 127.0.0.1 is, for the
  browser, the same origin as the server, so it may read every answer. Its requests name
  ``Host: evil.example``: a request is served only when its host is one of the server's own names
  (``allowed_hosts``: ``localhost``, the ``--host`` it listens on, this machine's host name when
  it listens on every address, and ``--allowed-hosts``: a fully qualified or proxy name goes there); an IP address is always accepted (a page
  cannot rebind an address). Anything else is 400 with one sentence.
* **Cross-site requests**: any page may send a form POST (``multipart/form-data`` needs no CORS
  preflight), and it would render. A request that changes something (any method but GET, HEAD and
  OPTIONS, and the GETs that render: ``/v1/frame`` and a job's ``/v1/renders/{id}/frame``) is refused
  (403) when the browser says it comes from another site: an ``Origin`` that is neither the server's own (scheme aside: a TLS proxy in
  front changes it) nor one listed with ``--cors-origin`` (``null`` included: a sandboxed page or a
  file), or, without an ``Origin``, ``Sec-Fetch-Site: cross-site`` or ``same-site``.
  Same-origin requests (the web front end served at ``/``) pass, and so do clients that are no
  browser: they send neither header.

A pure ASGI middleware like ``studio.api.guard`` (the token), for the same reason: it answers
before any body is read.
"""

from __future__ import annotations

import ipaddress
import socket

from studio.api.guard import renders, send_json
from studio.api.options import is_ip

SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
WILDCARDS = ("0.0.0.0", "::", "")  # listening on every address of the machine
MAX_SHOWN = 100  # characters of a client's host or origin repeated in an answer


def allowed_hosts(opts) -> tuple[str, ...]:
    """The host names this server answers to (lower case; ``*`` any; ``.example.com`` that domain
    and its subdomains). IP addresses are always accepted and are not listed."""
    names = {"localhost", ".localhost"}
    listen = opts.host.strip("[]").lower()
    if not is_ip(listen) and listen not in WILDCARDS:
        names.add(listen)
    if listen in WILDCARDS or not is_loopback_ip(listen):  # reachable from the network: its own names too
        name = socket.gethostname().lower().rstrip(".")  # no DNS lookup here (getfqdn may wait seconds)
        if name:
            names.update({name, name.split(".")[0]})
    names.update(h.lower().rstrip(".") for h in opts.allowed_hosts)
    return tuple(sorted(names))


def host_of(netloc: str) -> str:
    """``Host``/origin netloc -> the host name or address, lower case, without port or brackets."""
    netloc = netloc.strip().lower()
    if netloc.startswith("["):
        return netloc[1 : netloc.find("]")] if "]" in netloc else netloc[1:]
    if netloc.count(":") == 1:
        netloc = netloc.split(":", 1)[0]
    return netloc.rstrip(".")


def host_allowed(host: str, allowed: tuple[str, ...]) -> bool:
    if not host or is_ip(host) or "*" in allowed:
        return True
    return any(host == a or (a.startswith(".") and (host == a[1:] or host.endswith(a))) for a in allowed)


class SiteGuard:
    def __init__(self, app, hosts: tuple[str, ...], origins: tuple[str, ...] = ()):
        self.app = app
        self.hosts = hosts
        self.origins = tuple(o.rstrip("/").lower() for o in origins)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or ())
        netloc = headers.get(b"host", b"").decode("latin-1")
        if not host_allowed(host_of(netloc), self.hosts):
            shown = ", ".join(h for h in self.hosts if not h.startswith(".")) or "its own names"
            return await send_json(
                send,
                400,
                f"this server answers to {shown} and IP addresses, not to the host {_shown(host_of(netloc))!r} "
                "named by the request; its operator can add that name with --allowed-hosts",
            )
        if scope.get("method") not in SAFE_METHODS or renders(scope.get("path")):
            why = self._cross_site(headers, netloc)
            if why:
                return await send_json(send, 403, why)
        return await self.app(scope, receive, send)

    def _cross_site(self, headers: dict, netloc: str) -> str | None:
        """Why a browser's request from another site is refused (None: it is not one)."""
        origin = headers.get(b"origin")
        if origin is not None:
            text = origin.decode("latin-1").strip().rstrip("/").lower()
            if text != "null" and text.partition("://")[2] == netloc.strip().lower():
                return None  # the server's own page (scheme aside: a TLS proxy may sit in front)
            if text in self.origins or "*" in self.origins:
                return None
            return (
                f"a web page from {_shown(text)!r} may not change anything on this server (a cross-site "
                "request); its operator can allow that origin with --cors-origin"
            )
        site = headers.get(b"sec-fetch-site", b"").decode("latin-1").strip().lower()
        if site in ("cross-site", "same-site"):
            return (
                f"a web page from another site ({site}) may not change anything on this server; its operator "
                "can allow that page's origin with --cors-origin"
            )
        return None


def is_loopback_ip(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _shown(text: str) -> str:
    return text[:MAX_SHOWN] + ("..." if len(text) > MAX_SHOWN else "")

"""How ``studio serve`` protects itself from slow and greedy clients, below the app (uvicorn's HTTP/1.1
protocol, h11), so every route (and every later one) has it:

    config = uvicorn.Config(app, http=guarded_protocol(Limits()), ...)
    quiet_server_logs()        # asyncio's and uvicorn's own errors: one line per kind of event, rate-limited

* **TCP_NODELAY** on every connection: uvicorn writes a response's head and body separately, and with
  Nagle's algorithm the body of every request after the first on a kept-alive connection waited for the
  client's delayed ACK (~40 ms). (asyncio sets it only on sockets made with ``IPPROTO_TCP``; the socket
  ``studio serve`` binds itself is not.)
* **Header timeout**: a connection must send a whole request head within ``header_s`` of connecting
  (or of its previous answer); else it gets 408 and is closed. Without it, sockets that send a partial
  request line were never closed, and 20,000 of them used up the server's file descriptors.
* **Body timeout**: while a request's body is being received, ``body_idle_s`` without a byte closes the
  connection (the route sees a disconnect; an upload being stored is removed).
* **Connections per client address**: at most ``per_address``; more are answered 503 and closed at once.
* **Logs**: errors that asyncio and uvicorn log themselves (``accept`` out of descriptors, invalid
  requests) are one line each, without traceback, at most once per ``LOG_EVERY_S`` per kind of event
  with the count of those left out.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass

log = logging.getLogger("studio.api.connections")
LOG_EVERY_S = 10.0


@dataclass(frozen=True)
class Limits:
    header_s: float = 10.0  # a whole request head, from connecting or from the previous answer
    body_idle_s: float = 30.0  # the longest wait for the next byte of a body being received
    per_address: int = 64  # open connections from one client address


def guarded_protocol(limits: Limits):
    """uvicorn's h11 protocol class with ``limits`` (see the module docstring)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    counts: Counter[str] = Counter()  # open connections by client address (the event loop's thread only)

    class GuardedH11(H11Protocol):
        _studio_counted = ""
        _studio_timer: asyncio.TimerHandle | None = None
        _studio_upgraded = False  # a WebSocket owns the connection: no HTTP timer on it any more

        def connection_made(self, transport) -> None:
            set_nodelay(transport)
            super().connection_made(transport)
            address = (self.client or ("?", 0))[0]
            if counts[address] >= limits.per_address:
                limited(f"refused a connection from {address}: it has {limits.per_address} open already")
                self._answer(503, "too many connections from this address; close some and try again")
                return
            counts[address] += 1
            self._studio_counted = address
            self._wait_head()

        def connection_lost(self, exc) -> None:
            self._stop_timer()
            self._uncount()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self._studio_upgraded:  # the head that upgraded it was the last HTTP it sent
                return
            cycle = self.cycle
            if cycle is not None and not cycle.response_complete:
                if cycle.more_body:  # a body on its way: the next byte within body_idle_s
                    self._arm(limits.body_idle_s, self._body_stalled)
                else:
                    self._stop_timer()
            elif self._studio_timer is None and not self.transport.is_closing():
                self._wait_head()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._wait_head()  # the next request's head, from now

        def handle_websocket_upgrade(self, event) -> None:
            self._studio_upgraded = True
            self._stop_timer()  # the WebSocket protocol owns the connection from here (a live session's
            self._uncount()  # audio socket stays open for hours: a timer armed after it would write a 408 into it)
            super().handle_websocket_upgrade(event)

        # -- timers ---------------------------------------------------------------------------

        def _wait_head(self) -> None:
            self._arm(limits.header_s, self._head_late)

        def _arm(self, seconds: float, then) -> None:
            self._stop_timer()
            self._studio_timer = self.loop.call_later(seconds, then)

        def _stop_timer(self) -> None:
            if self._studio_timer is not None:
                self._studio_timer.cancel()
                self._studio_timer = None

        def _head_late(self) -> None:
            self._studio_timer = None
            cycle = self.cycle
            if cycle is not None and not cycle.response_complete:
                return  # a request is running (its head came): not late
            limited(f"closed a connection from {self._studio_counted}: no whole request within {limits.header_s:g} s")
            self._answer(408, f"the request's head did not arrive within {limits.header_s:g} s")

        def _body_stalled(self) -> None:
            self._studio_timer = None
            if self.flow.read_paused:  # the route has not taken what came yet: the server waits, not the client
                self._arm(limits.body_idle_s, self._body_stalled)
                return
            limited(
                f"closed a connection from {self._studio_counted}: its request body stalled for {limits.body_idle_s:g} s"
            )
            self.transport.close()

        def _answer(self, status: int, sentence: str) -> None:
            raw_answer(self.transport, status, sentence)

        def _uncount(self) -> None:
            if self._studio_counted:
                counts[self._studio_counted] -= 1
                if counts[self._studio_counted] <= 0:
                    del counts[self._studio_counted]
                self._studio_counted = ""

    GuardedH11.open_by_address = counts  # type: ignore[attr-defined]  # tests and /metrics may read it
    return GuardedH11


def set_nodelay(transport) -> None:
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass


def raw_answer(transport, status: int, sentence: str) -> None:
    """A JSON answer written straight to the connection, then closed (no request cycle: its head never
    came, or was never read)."""
    import json

    body = json.dumps({"error": sentence}).encode()
    reason = {408: "Request Timeout", 503: "Service Unavailable"}[status]
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    ).encode()
    if not transport.is_closing():
        transport.write(head + body)
        transport.close()


class OncePer(logging.Filter):
    """One line per kind of event (logger and message template) at most every ``seconds``, no traceback
    (its exception's type and first line instead), and how many were left out since the last line."""

    def __init__(self, seconds: float = LOG_EVERY_S):
        super().__init__()
        self.seconds = seconds
        self._last: dict[tuple[str, str], float] = {}
        self._left: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, str(record.msg)[:200])
        now = time.monotonic()
        with self._lock:
            if now - self._last.get(key, -1e9) < self.seconds:
                self._left[key] += 1
                return False
            self._last[key] = now
            left = self._left.pop(key, 0)
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            record.msg = (
                f"{record.getMessage()} ({type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''})"
            )
            record.args = None
        record.exc_info = None
        record.exc_text = None
        record.stack_info = None
        if left:
            record.msg = f"{record.getMessage()} ({left} more like it in the last {self.seconds:g} s)"
            record.args = None
        return True


def limited(message: str) -> None:
    """A connection-level event, through the rate-limited logger."""
    log.warning(message)


def quiet_server_logs(seconds: float = LOG_EVERY_S) -> None:
    """asyncio's, uvicorn's and this module's own error lines: rate-limited, one line each."""
    for name in ("asyncio", "uvicorn.error", "uvicorn", log.name):
        logger = logging.getLogger(name)
        if not any(isinstance(f, OncePer) for f in logger.filters):
            logger.addFilter(OncePer(seconds))


def raise_file_limit() -> None:
    """The soft limit on open files up to the hard one (the per-address limit keeps one client from
    using them up; many clients need many)."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else 65536, hard))
    except (ImportError, ValueError, OSError):
        pass

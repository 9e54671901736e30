"""Webhooks: a job's ``webhook`` URL is POSTed the job's JSON on each final state, signed.

    check_url(opts, "https://hooks.example/studio")     # 422 unless --webhook-allow lets it be called
    sender = WebhookSender(state); sender.start()       # threads; poke() when a job ends
    describe(state, job)                                # {"url", "state", "deliveries": [...]}
    headers = signed_headers(secret, body, t)           # X-Studio-Timestamp, X-Studio-Signature
    verify(secret, body, headers["X-Studio-Signature"]) # a receiver's check (replays refused)

A call carries the job exactly as ``GET /v1/renders/{id}`` answers it (``models.Job``), as the raw
body the signature covers, with

* ``X-Studio-Signature: t=<unix seconds>,sha256=<hex HMAC-SHA256 of "<t>." + body with the secret>``
  and ``X-Studio-Timestamp: <t>``: the time is signed with the body (as Stripe does), so a receiver
  that refuses a ``t`` more than a few minutes old is safe from a replayed call (``verify``);
* ``X-Studio-Event: render.<state>``;
* ``X-Studio-Delivery: <uuid>``: one id for the call, the same on every try and on a redelivery
  (a receiver keeps the ids it handled and ignores a repeat), and ``X-Studio-Attempt: <n>``.

A done job that asked for the lip-sync check (``check``) is told twice: ``render.done`` when its file
is written (``result.check.state`` "pending" or "running" then), and ``render.checked`` when the
check ended; ``render.checked`` is never sent before ``render.done`` was taken (or gave up).
A 2xx answer is a delivery; anything else (a status, a refused connection, a timeout) is retried
with backoff (1, 2, 4, 8 s ...) up to ``MAX_ATTEMPTS`` tries. Every try is recorded in the job store
(``deliveries``) and listed in the job's answer, so a restarted server goes on where it stopped and
a job finished by another process (the window, ``studio queue run``) is told of too. A client may
ask for a job's calls again (``redeliver``: ``POST /v1/renders/{id}/webhook/redeliver``): another
round of up to ``MAX_ATTEMPTS`` tries, under the same delivery ids.

Calls go out concurrently, one at a time per URL and at most ``PER_DESTINATION`` at once per
destination (scheme, host, port): a path that never answers holds only its own calls (``TIMEOUT_S``
a try), never another path's or another destination's.

Only destinations the operator listed (``--webhook-allow host``: its default port only; ``host:port``;
``host:*``: any port) are ever called, never this server's own listening address (checked when the
job is submitted and again, after the name is resolved, before every call: a job cannot make the
server call itself, e.g. its own ``/retry``); redirects are not followed.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import socket
import threading
import time
import uuid
from urllib.parse import urlsplit

from studio.api.errors import ApiError

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 5  # tries of one call in one round (a redelivery starts another round)
BACKOFF_S = 1.0  # the first retry waits this long; each next one twice as long
TIMEOUT_S = 10.0
POLL_S = 2.0  # also picks up jobs finished by other processes
MAX_URL = 2000
WORKERS = 8  # calls in flight at the same time
PER_DESTINATION = 4  # calls in flight to one host:port (one per URL): a hanging path holds up only itself
TOLERANCE_S = 300  # what ``verify`` accepts (and docs/api.md advises) between a call's time and now
CHECKED = "checked"  # the second event of a done job that asked for the check
CHECK_ENDED = ("done", "failed", "stopped")  # result.check.state once the check is over
DEFAULT_PORTS = {"http": 80, "https": 443}
REDELIVERY = 0  # the ``attempt`` of the marker row a redelivery adds: the tries after it are a new round
MAX_REDELIVERIES = 20  # rounds a client may ask for, per call (the job store keeps every try)
DELIVERY_NS = uuid.UUID("6f1e3c52-5b8e-4f0c-9a57-2d1b7c6a9e10")  # delivery ids: uuid5(ns, job and event)


def sign(secret: str, body: bytes, t: int) -> str:
    """The ``X-Studio-Signature`` value: the time and the HMAC-SHA256 of ``"<t>." + body``."""
    mac = hmac.new(secret.encode(), str(t).encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"t={t},sha256={mac}"


def verify(secret: str, body: bytes, signature: str, tolerance_s: float = TOLERANCE_S, now: float | None = None):
    """A receiver's check of a call: True when ``signature`` (the ``X-Studio-Signature`` header) was
    made with ``secret`` over ``body`` less than ``tolerance_s`` seconds ago (False otherwise)."""
    fields = dict(p.split("=", 1) for p in signature.split(",") if "=" in p)
    try:
        t = int(fields.get("t", ""))
    except ValueError:
        return False
    now = time.time() if now is None else now
    if abs(now - t) > tolerance_s:
        return False
    return hmac.compare_digest(sign(secret, body, t), f"t={t},sha256={fields.get('sha256', '')}")


def delivery_id(job, event: str) -> str:
    """One id per job and event, the same on every try, after a restart and on a redelivery."""
    return str(uuid.uuid5(DELIVERY_NS, f"{job.id}:{job.created!r}:{event}"))


def signed_headers(secret: str, body: bytes, t: int) -> dict[str, str]:
    return {"X-Studio-Timestamp": str(t), "X-Studio-Signature": sign(secret, body, t)}


# -- where calls may go ------------------------------------------------------------------------


def destination(url: str) -> tuple[str, str, int]:
    """``(scheme, host, port)`` of a checked URL (the port filled in from the scheme)."""
    parts = urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port or DEFAULT_PORTS.get(parts.scheme, 80)


def allowed(opts, scheme: str, host: str, port: int) -> bool:
    """Whether ``--webhook-allow`` lets ``host:port`` be called: ``host`` alone on its scheme's default
    port, ``host:port`` on that port, ``host:*`` on any."""
    from studio.api.options import webhook_rule

    for entry in opts.webhook_allow:
        rule_host, rule_port = webhook_rule(entry)
        if rule_host != host:
            continue
        if rule_port == "*" or rule_port == port or (rule_port is None and port == DEFAULT_PORTS.get(scheme)):
            return True
    return False


def own_address(opts, host: str, port: int, resolve: bool = True) -> bool:
    """Whether ``host:port`` is (or may be) this server: its port, and a loopback, unspecified or own
    address (a name is resolved; a name that does not resolve counts as this server: it cannot be
    told apart)."""
    if port != opts.port:
        return False
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        ips = [ipaddress.ip_address(host)]
    except ValueError:
        if not resolve:
            return False
        try:
            ips = [ipaddress.ip_address(str(a[4][0]).split("%")[0]) for a in socket.getaddrinfo(host, port)]
        except (OSError, ValueError):
            return True
    listen = opts.host.strip("[]")
    for ip in ips:
        mapped = getattr(ip, "ipv4_mapped", None)
        ip = mapped or ip
        if ip.is_loopback or ip.is_unspecified or str(ip) == listen or _local(ip):
            return True
    return False


def _local(ip) -> bool:
    """An address of this machine (binding to it works only here)."""
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.bind((str(ip), 0))
        return True
    except OSError:
        return False


def check_url(opts, url: str) -> str:
    """The webhook URL, or 422: http(s), a destination ``--webhook-allow`` lets be called, never this
    server, and a server that signs. Resolves the host when its port is this server's (call it from
    a worker thread)."""
    if not opts.webhook_secret or not opts.webhook_allow:
        raise ApiError(
            422,
            "this server sends no webhooks; follow the job's events instead (or start the server with "
            "--webhook-secret and --webhook-allow HOST:PORT)",
        )
    if len(url) > MAX_URL:
        raise ApiError(422, f"webhook: the URL is {len(url)} characters long; give one of at most {MAX_URL}")
    try:
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError:
        raise ApiError(422, f"webhook {url[:200]!r} is not a URL; give one such as https://host/path") from None
    if parts.scheme not in ("http", "https") or not host:
        raise ApiError(422, f"webhook {url[:200]!r}: give an http:// or https:// URL with a host")
    if any(ord(ch) < 0x21 or ord(ch) == 0x7F for ch in url):  # CR/LF, tabs, spaces: no HTTP client sends them
        raise ApiError(422, "webhook: the URL has spaces or control characters (CR, LF) in it; percent-encode them")
    if parts.username or parts.password:
        raise ApiError(422, "webhook: give the URL without a user name or password in it")
    scheme, host, port = destination(url)
    if not allowed(opts, scheme, host, port):
        raise ApiError(
            422,
            f"webhook host {host} port {port} is not one this server may call (--webhook-allow "
            f"{','.join(opts.webhook_allow)}); ask its operator to allow it",
        )
    if own_address(opts, host, port):
        raise ApiError(422, f"webhook {host}:{port} is this server's own address; a job's webhook may not call it")
    return url


# -- what a job's answer lists ------------------------------------------------------------------


def events_of(job) -> list[str]:
    """The calls a job has to make: its final state, then ``checked`` for a done job that asked for it."""
    events = [job.state] if job.state in _final() else []
    if job.state == "done" and _check_asked(job):
        events.append(CHECKED)
    return events


def this_round(calls: list[dict], event: str) -> list[dict]:
    """The tries of ``event`` since its last redelivery marker (all of them when none was asked)."""
    out: list[dict] = []
    for d in calls:
        if d["state"] != event:
            continue
        if d["attempt"] == REDELIVERY:
            out = []
        else:
            out.append(d)
    return out


def settled(calls: list[dict], event: str) -> bool:
    """Taken (a 2xx), or given up (every try of this round failed)."""
    tries = this_round(calls, event)
    return any(d["ok"] for d in tries) or len(tries) >= MAX_ATTEMPTS


def describe(st, job) -> dict:
    """A job's webhook as its answer lists it: the URL, pending/delivered/failed, every try.

    "delivered" once every call the job has to make was taken (its final state, and ``checked`` for a
    done job that asked for the check); "failed" once one of them used up its tries."""
    calls = st.queue.deliveries(job.id)
    events = events_of(job)
    rounds = {e: this_round(calls, e) for e in events}
    state = "pending"
    if any(len(r) >= MAX_ATTEMPTS and not any(d["ok"] for d in r) for r in rounds.values()):
        state = "failed"
    elif events and all(any(d["ok"] for d in r) for r in rounds.values()):
        state = "delivered"
    listed = [_public(d) for d in calls if d["attempt"] != REDELIVERY]
    return {"url": job.webhook, "state": state, "deliveries": listed}


def redeliver(st, job, event: str | None, who: str = "") -> list[str]:
    """Another round of tries for ``event`` (default: every call the job makes); the events asked.
    ``ApiError`` 409 when the job has no webhook, has not ended, or a call is still being tried."""
    if not job.webhook:
        raise ApiError(409, f"render job {job.id} has no webhook; give one when it is submitted")
    events = events_of(job)
    if not events:
        raise ApiError(409, f"render job {job.id} is {job.state}; its webhook is called when it ends")
    if job.state == "done" and _check_asked(job) and not _check_ended(job):
        events.remove(CHECKED)  # the verdict is told when the check ends, as always
    if event is not None:
        if event not in events:
            raise ApiError(
                409, f"render job {job.id} makes no {event!r} call now; it makes {', '.join(events) or 'none'}"
            )
        events = [event]
    calls = st.queue.deliveries(job.id)
    busy = [e for e in events if not settled(calls, e)]
    if busy:
        raise ApiError(409, f"render job {job.id}'s {busy[0]!r} call is still being tried; see its deliveries")
    for e in events:
        if sum(d["state"] == e and d["attempt"] == REDELIVERY for d in calls) >= MAX_REDELIVERIES:
            raise ApiError(409, f"render job {job.id}'s {e!r} call was redelivered {MAX_REDELIVERIES} times already")
    for e in events:
        st.queue.add_delivery(job.id, e, job.webhook, REDELIVERY, False, None, f"redelivery asked {who}".strip())
    if st.webhooks is not None:
        st.webhooks.poke()
    return events


def _check_asked(job) -> bool:
    return bool((job.settings or {}).get("check")) or "check" in (job.result or {})


def _check_ended(job) -> bool:
    check = (job.result or {}).get("check")
    return isinstance(check, dict) and check.get("state") in CHECK_ENDED


def backoff(attempts_made: int) -> float:
    return BACKOFF_S * 2 ** max(0, attempts_made - 1)


# -- the sender -------------------------------------------------------------------------------


class WebhookSender:
    """Finds the calls that are due (a dispatcher thread) and makes each on a thread of its own, one
    at a time per URL, at most ``PER_DESTINATION`` per host:port and ``WORKERS`` at once. The threads are daemons: a listener
    that does not answer never holds up the server's exit (its try ends by ``TIMEOUT_S``)."""

    def __init__(self, st):
        self.st = st
        self.secret = st.opts.webhook_secret
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._busy: set[tuple[str, tuple[str, str, int]]] = set()  # (URL, destination) with a call in flight
        self._busy_lock = threading.Lock()
        self._http = None

    def start(self) -> None:
        import httpx

        self._http = httpx.Client(timeout=TIMEOUT_S, follow_redirects=False)
        self._thread = threading.Thread(target=self._loop, name="studio-webhooks", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(TIMEOUT_S + 2)
        with self._busy_lock:
            idle = not self._busy
        if self._http is not None and idle:
            self._http.close()  # else a call in flight ends by its timeout, with the process

    def poke(self) -> None:
        self._wake.set()

    def on_event(self, ev) -> None:
        """A queue event: a job reached a final state, or its check ended -> send soon."""
        if ev.job is None or not ev.job.webhook:
            return
        if (ev.kind == "state" and ev.job.state in _final()) or (ev.kind == "checked" and _check_ended(ev.job)):
            self.poke()

    def _loop(self) -> None:
        while not self._stop.is_set():
            wait = POLL_S
            try:
                wait = min(wait, self._round())
            except Exception:
                log.exception("webhook round failed")
            self._wake.wait(max(0.05, wait))
            self._wake.clear()

    def _round(self) -> float:
        """Hand the due calls to the pool (one per free destination); the seconds until the next is due."""
        next_due = POLL_S
        now = time.time()
        jobs = {j.id: j for j in self.st.queue.webhook_jobs(MAX_ATTEMPTS)}
        jobs.update({j.id: j for j in self.st.queue.webhook_checks(MAX_ATTEMPTS)})
        for job in sorted(jobs.values(), key=lambda j: j.id):
            if self._stop.is_set():
                break
            calls = self.st.queue.deliveries(job.id)
            event = next((e for e in events_of(job) if not settled(calls, e)), None)  # in order
            if event is None or (event == CHECKED and not _check_ended(job)):
                continue
            tries = this_round(calls, event)
            due = tries[-1]["at"] + backoff(len(tries)) if tries else now
            if due > now:
                next_due = min(next_due, due - now)
                continue
            dest = (job.webhook, destination(job.webhook))
            with self._busy_lock:
                if dest in self._busy or len(self._busy) >= WORKERS:
                    continue  # this URL has a call in flight (or every worker is busy): after that
                if sum(d[1] == dest[1] for d in self._busy) >= PER_DESTINATION:
                    continue  # its host:port has as many calls in flight as it gets at once
                self._busy.add(dest)
            attempt = sum(d["state"] == event and d["attempt"] != REDELIVERY for d in calls) + 1
            threading.Thread(
                target=self._send_one, args=(dest, job, event, attempt), name="studio-webhook", daemon=True
            ).start()
        return next_due

    def _send_one(self, dest, job, event: str, attempt: int) -> None:
        try:
            self._send(job, event, attempt)
        except Exception:
            log.exception("webhook call for job %d failed", job.id)
        finally:
            with self._busy_lock:
                self._busy.discard(dest)
            self.poke()

    def _send(self, job, event: str, attempt: int) -> None:
        from studio.api.models import Job

        url = job.webhook
        try:
            check_url(self.st.opts, url)  # a restart may have changed the allow list; a name may resolve anew
        except ApiError as exc:
            self.st.queue.add_delivery(job.id, event, url, attempt, False, None, exc.message)
            return
        body = Job.model_validate(self.st.job_json(job)).model_dump_json().encode()
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "studio-webhooks",
            **signed_headers(self.secret, body, int(time.time())),
            "X-Studio-Event": f"render.{event}",
            "X-Studio-Delivery": delivery_id(job, event),
            "X-Studio-Attempt": str(attempt),
        }
        status, error = None, ""
        try:
            assert self._http is not None
            r = self._http.post(url, content=body, headers=headers)
            status = r.status_code
            if not 200 <= status < 300:
                error = f"the listener answered HTTP {status}"
        except Exception as exc:  # noqa: BLE001 - httpx.TransportError and friends: retried
            error = f"{type(exc).__name__}: {exc}"[:300]
        ok = not error
        self.st.queue.add_delivery(job.id, event, url, attempt, ok, status, error)
        self.st.metrics.delivery(ok)
        (log.info if ok else log.warning)(
            "webhook for job %d (%s) try %d: %s", job.id, event, attempt, "delivered" if ok else error
        )


def _final() -> tuple[str, ...]:
    from studio.api.models import FINAL_STATES

    return FINAL_STATES


def _public(d: dict) -> dict:
    return {k: d[k] for k in ("state", "attempt", "at", "ok", "status", "error")}

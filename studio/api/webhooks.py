"""Webhooks: a job's ``webhook`` URL is POSTed the job's JSON on each final state, signed.

    check_url(opts, "https://hooks.example/studio")     # 422 unless its host is in --webhook-allow
    sender = WebhookSender(state); sender.start()       # a thread; poke() when a job ends
    describe(state, job)                                # {"url", "state", "deliveries": [...]}
    sign(secret, body) == "sha256=" + hmac_sha256_hex   # X-Studio-Signature

A call carries the job exactly as ``GET /v1/renders/{id}`` answers it (``models.Job``), as the raw
body the signature covers, with ``X-Studio-Signature: sha256=<hex HMAC-SHA256 of the body with the
secret>``, ``X-Studio-Event: render.<state>`` and ``X-Studio-Delivery: <job>.<state>.<attempt>``.
A done job that asked for the lip-sync check (``check``) is told twice: ``render.done`` when its file
is written (``result.check.state`` "pending" or "running" then), and ``render.checked`` when the
check ended (its verdict, or why it did not run, in ``result.check``), so a listener can publish at
once or wait for the verdict.
A 2xx answer is a delivery; anything else (a status, a refused connection, a timeout) is retried
with backoff (1, 2, 4, 8 s ...) up to ``MAX_ATTEMPTS`` tries. Every try is recorded in the job store
(``deliveries``) and listed in the job's answer, so a restarted server goes on where it stopped and
a job finished by another process (the window, ``studio queue run``) is told of too.

Only hosts the operator listed (``--webhook-allow``) are ever called, so a client cannot turn the
server against its own network; redirects are not followed.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import threading
import time
from urllib.parse import urlsplit

from studio.api.errors import ApiError

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 5
BACKOFF_S = 1.0  # the first retry waits this long; each next one twice as long
TIMEOUT_S = 10.0
POLL_S = 2.0  # also picks up jobs finished by other processes
MAX_URL = 2000
CHECKED = "checked"  # the second event of a done job that asked for the check
CHECK_ENDED = ("done", "failed", "stopped")  # result.check.state once the check is over


def sign(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def check_url(opts, url: str) -> str:
    """The webhook URL, or 422: http(s), a host in ``--webhook-allow``, and a server that signs."""
    if not opts.webhook_secret or not opts.webhook_allow:
        raise ApiError(
            422,
            "this server sends no webhooks; follow the job's events instead (or start the server with "
            "--webhook-secret and --webhook-allow HOST)",
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
    if parts.username or parts.password:
        raise ApiError(422, "webhook: give the URL without a user name or password in it")
    if host not in opts.webhook_allow:
        raise ApiError(
            422,
            f"webhook host {host} is not one this server may call (--webhook-allow "
            f"{','.join(opts.webhook_allow)}); ask its operator to allow it",
        )
    return url


def describe(st, job) -> dict:
    """A job's webhook as its answer lists it: the URL, pending/delivered/failed, every try.

    "delivered" once every call the job has to make was taken (its final state, and ``checked`` for a
    done job that asked for the check); "failed" once one of them used up its tries."""
    calls = st.queue.deliveries(job.id)
    events = [job.state] if job.state in _final() else []
    if job.state == "done" and _check_asked(job):
        events.append(CHECKED)
    state = "pending"
    if any(sum(d["state"] == e and not d["ok"] for d in calls) >= MAX_ATTEMPTS for e in events):
        state = "failed"
    elif events and all(any(d["ok"] for d in calls if d["state"] == e) for e in events):
        state = "delivered"
    return {"url": job.webhook, "state": state, "deliveries": [_public(d) for d in calls]}


def _check_asked(job) -> bool:
    return bool((job.settings or {}).get("check")) or "check" in (job.result or {})


def _check_ended(job) -> bool:
    check = (job.result or {}).get("check")
    return isinstance(check, dict) and check.get("state") in CHECK_ENDED


def backoff(attempts_made: int) -> float:
    return BACKOFF_S * 2 ** max(0, attempts_made - 1)


class WebhookSender:
    """Delivers the pending calls on a thread; ``describe(job)`` is what a job's answer lists."""

    def __init__(self, st):
        self.st = st
        self.secret = st.opts.webhook_secret
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="studio-webhooks", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(TIMEOUT_S + 2)

    def poke(self) -> None:
        self._wake.set()

    def on_event(self, ev) -> None:
        """A queue event: a job reached a final state, or its check ended -> send soon."""
        if ev.job is None or not ev.job.webhook:
            return
        if (ev.kind == "state" and ev.job.state in _final()) or (ev.kind == "checked" and _check_ended(ev.job)):
            self.poke()

    # -- the thread ---------------------------------------------------------------------------

    def _loop(self) -> None:
        import httpx

        with httpx.Client(timeout=TIMEOUT_S, follow_redirects=False) as http:
            while not self._stop.is_set():
                wait = POLL_S
                try:
                    wait = min(wait, self._round(http))
                except Exception:
                    log.exception("webhook round failed")
                self._wake.wait(max(0.05, wait))
                self._wake.clear()

    def _round(self, http) -> float:
        """Send what is due; the seconds until the next try is due."""
        next_due = POLL_S
        now = time.time()
        due_calls = [(job, job.state) for job in self.st.queue.webhook_jobs(MAX_ATTEMPTS)]
        due_calls += [(job, CHECKED) for job in self.st.queue.webhook_checks(MAX_ATTEMPTS)]
        for job, event in due_calls:  # delivered and given-up ones are not read
            if self._stop.is_set():
                break
            calls = [d for d in self.st.queue.deliveries(job.id) if d["state"] == event]
            if any(d["ok"] for d in calls) or len(calls) >= MAX_ATTEMPTS:
                continue
            due = calls[-1]["at"] + backoff(len(calls)) if calls else now
            if due > now:
                next_due = min(next_due, due - now)
                continue
            self._send(http, job, event, len(calls) + 1)
            if len(calls) + 1 < MAX_ATTEMPTS:
                next_due = min(next_due, backoff(len(calls) + 1))
        return next_due

    def _send(self, http, job, event: str, attempt: int) -> None:
        from studio.api.models import Job

        url = job.webhook
        try:
            check_url(self.st.opts, url)  # the server may have been restarted with another allow list
        except ApiError as exc:
            self.st.queue.add_delivery(job.id, event, url, attempt, False, None, exc.message)
            return
        body = Job.model_validate(self.st.job_json(job)).model_dump_json().encode()
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "studio-webhooks",
            "X-Studio-Signature": sign(self.secret, body),
            "X-Studio-Event": f"render.{event}",
            "X-Studio-Delivery": f"{job.id}.{event}.{attempt}",
        }
        status, error = None, ""
        try:
            r = http.post(url, content=body, headers=headers)
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

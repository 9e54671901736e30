"""Issue 33 (items 5 and 18) against a real ``studio serve`` on 127.0.0.1 with real webhook receivers:
destinations are host:port and never the server itself, retries are bounded and counted against the
queue, calls go out concurrently per destination and in order per job, signed with a timestamp under
one delivery id, and a client can ask for a redelivery."""

from __future__ import annotations

import hashlib
import hmac
import http.server
import json
import os
import subprocess
import sys
import threading
import time

import pytest
from conftest import speech_pause_speech
from served import Server, free_port

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
from test_api import DEMO_AVATAR, one_sentence, wait_state  # noqa: E402

SECRET = "webhook-secret-0123456789abcdef"


class Receiver:
    """A webhook receiver on 127.0.0.1. ``answer(call)`` -> the status (default 204); it may block."""

    def __init__(self, answer=None):
        self.calls: list[dict] = []
        self.answer = answer or (lambda call: 204)
        self.release = threading.Event()
        me = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                call = {"at": time.time(), "headers": dict(self.headers), "body": body}
                code = me.answer(call)
                call["status"] = code
                me.calls.append(call)
                try:
                    self.send_response(code)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                except OSError:
                    pass  # the sender gave up waiting

            def log_message(self, *args):
                pass

        self.port = free_port()
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def valid(call: dict) -> bool:
    """Signed with SECRET over "<t>." + body, made when it was sent: near the receiver's ``at``, not this check."""
    t = call["headers"]["X-Studio-Timestamp"]
    mac = hmac.new(SECRET.encode(), f"{t}.".encode() + call["body"], hashlib.sha256).hexdigest()
    return call["headers"]["X-Studio-Signature"] == f"t={t},sha256={mac}" and abs(call["at"] - int(t)) < 120


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(
        tmp_path_factory.mktemp("hooks_home"),
        "--webhook-secret",
        SECRET,
        "--webhook-allow",
        "127.0.0.1:*,127.1:*,localhost",
        "--max-retries",
        "2",
        "--max-queued",
        "1",
    )
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server.url, timeout=120) as c:
        with open(DEMO_AVATAR, "rb") as fh:
            assert c.post("/v1/avatars", data={"name": "astro"}, files={"file": ("a.png", fh)}).status_code == 201
        yield c


@pytest.fixture(scope="module")
def audio(client, tmp_path_factory):
    d = tmp_path_factory.mktemp("hooks_clips")
    out = {}
    for name, secs in (("short", (0.6, 0.4, 0.6)), ("long", (3.0, 0.4, 3.0))):
        with open(speech_pause_speech(d / f"{name}.wav", *secs), "rb") as fh:
            out[name] = client.post("/v1/audio", files={"file": (f"{name}.wav", fh)}).json()["id"]
    return out


def render(client, audio_id: str, **data) -> dict:
    r = client.post("/v1/renders", data={"avatar": "astro", "audio_id": audio_id, "engine": "classic", **data})
    assert r.status_code == 202, r.text
    return r.json()


def wait_calls(hook: Receiver, n: int, timeout: float = 60) -> list[dict]:
    deadline = time.monotonic() + timeout
    while len(hook.calls) < n and time.monotonic() < deadline:
        time.sleep(0.05)
    return hook.calls


def wait_webhook(client, job_id: int, deliveries: int, timeout: float = 60) -> dict:
    """The job's webhook once the server has recorded ``deliveries`` tries and is no longer sending
    (the receiver answers before the server writes down what it answered)."""
    deadline = time.monotonic() + timeout
    while True:
        hook = client.get(f"/v1/renders/{job_id}").json()["webhook"]
        if len(hook["deliveries"]) >= deliveries and hook["state"] != "pending":
            return hook
        assert time.monotonic() < deadline, hook
        time.sleep(0.05)


# -- item 5: the server never calls itself; retries are bounded and counted --------------------------


def test_a_webhook_may_not_call_the_server_itself(server, client, audio):
    port = server.port
    for url in (
        f"http://127.0.0.1:{port}/v1/renders/1/retry",  # the self-loop
        f"http://127.1:{port}/v1/renders/1/retry",  # a name that resolves to it
    ):
        r = client.post("/v1/renders", data={"avatar": "astro", "audio_id": audio["short"], "webhook": url})
        assert "is this server's own address" in one_sentence(r, 422), url
    # a host alone is its default port only; another port needs host:port or host:*
    r = client.post(
        "/v1/renders", data={"avatar": "astro", "audio_id": audio["short"], "webhook": f"http://localhost:{port}/x"}
    )
    assert f"webhook host localhost port {port} is not one this server may call" in one_sentence(r, 422)
    assert client.get("/v1/renders").json()["renders"] == []


def test_allowing_the_servers_own_address_is_refused_at_start(tmp_path):
    port = free_port()
    r = subprocess.run(
        [sys.executable, "-m", "studio", "serve", "--port", str(port), "--webhook-secret", SECRET]
        + ["--webhook-allow", f"127.0.0.1:{port}"],
        env={**os.environ, "STUDIO_HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and f"--webhook-allow 127.0.0.1:{port} is this server's own address" in r.stderr
    r = subprocess.run(
        [sys.executable, "-m", "studio", "serve", "--webhook-secret", SECRET, "--webhook-allow", "https://h/x"],
        env={**os.environ, "STUDIO_HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "--webhook-allow https://h/x: give host, host:port or host:*" in r.stderr


def test_retries_are_bounded_per_job_and_counted_against_the_queue(client, audio):
    first = wait_state(client, render(client, audio["short"])["id"])
    again = client.post(f"/v1/renders/{first['id']}/retry")
    assert again.status_code == 202, again.text
    second = wait_state(client, again.json()["id"])
    third = client.post(f"/v1/renders/{second['id']}/retry")  # a retry of the retry: the same original
    assert third.status_code == 202, third.text
    wait_state(client, third.json()["id"])
    msg = one_sentence(client.post(f"/v1/renders/{first['id']}/retry"), 409)
    assert msg.startswith(f"render job {first['id']} was rendered again 2 times already") and "--max-retries" in msg
    assert "rendered again 2 times" in one_sentence(client.post(f"/v1/renders/{third.json()['id']}/retry"), 409)
    # a retry is one more queued job: with one waiting (--max-queued 1) it is 429
    fresh = wait_state(client, render(client, audio["short"])["id"])
    running = render(client, audio["long"])
    wait_state(client, running["id"], ("running",))
    queued = render(client, audio["short"])
    r = client.post(f"/v1/renders/{fresh['id']}/retry")
    assert "the queue is full" in one_sentence(r, 429)
    for job in (queued, running):
        client.delete(f"/v1/renders/{job['id']}")
    wait_state(client, running["id"], ("cancelled",))


# -- item 18: concurrency, order, signature, one id, redelivery ----------------------------------------


def test_a_listener_that_never_answers_does_not_delay_another(client, audio):
    def never(call):
        stuck.release.wait(30)  # until the test ends: longer than the sender waits
        return 204

    stuck = Receiver(never)
    fine = Receiver()
    try:
        a = render(client, audio["short"], webhook=stuck.url())
        wait_state(client, a["id"], ("done",))
        wait_calls(stuck, 0)
        b = wait_state(client, render(client, audio["short"], webhook=fine.url())["id"], ("done",))
        calls = wait_calls(fine, 1, timeout=20)
        assert len(calls) == 1 and valid(calls[0])
        delay = calls[0]["at"] - b["updated"]
        assert delay < 3.0, f"the call waited {delay:.1f} s behind a listener that never answers"
        assert client.get(f"/v1/renders/{a['id']}").json()["webhook"]["state"] == "pending"  # still trying
    finally:
        stuck.close()
        fine.close()


def test_checked_never_arrives_before_done_and_one_id_is_kept(client, audio):
    checked_ended = threading.Event()
    arrived: list[dict] = []  # in the order they came (hook.calls: in the order they were answered)

    def answer(call):
        arrived.append(call)
        if call["headers"]["X-Studio-Event"] == "render.done" and len(arrived) == 1:  # the first call
            # held until the verdict is ready, then refused; a check slower than the sender's try
            # (TIMEOUT_S) makes it a timeout, retried as attempt 2 while this one is still held
            checked_ended.wait(60)
            return 500
        return 204

    hook = Receiver(answer)
    try:
        job = render(client, audio["short"], webhook=hook.url(), check="true", device="cpu")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            got = client.get(f"/v1/renders/{job['id']}").json()
            if ((got.get("result") or {}).get("check") or {}).get("state") in ("done", "failed", "stopped"):
                break
            time.sleep(0.1)
        checked_ended.set()
        calls = sorted(wait_calls(hook, 3, timeout=60), key=lambda c: c["at"])
        seen = [(c["headers"]["X-Studio-Event"], c["status"]) for c in calls]
        assert seen == [("render.done", 500), ("render.done", 204), ("render.checked", 204)], seen
        assert [c["headers"]["X-Studio-Attempt"] for c in calls] == ["1", "2", "1"]
        ids = [c["headers"]["X-Studio-Delivery"] for c in calls]
        assert ids[0] == ids[1] != ids[2]  # one id per call across its tries
        assert all(valid(c) for c in calls)
        stamps = [int(c["headers"]["X-Studio-Timestamp"]) for c in calls]
        assert stamps == sorted(stamps)
    finally:
        checked_ended.set()
        hook.close()


def test_a_client_asks_for_a_redelivery(server, client, audio):
    hook = Receiver()
    try:
        job = render(client, audio["short"], webhook=hook.url())
        first = wait_calls(hook, 1)[0]
        assert wait_webhook(client, job["id"], 1)["state"] == "delivered"
        r = client.post(f"/v1/renders/{job['id']}/webhook/redeliver")
        assert r.status_code == 202, r.text
        again = wait_calls(hook, 2)[1]
        assert again["headers"]["X-Studio-Delivery"] == first["headers"]["X-Studio-Delivery"]
        assert again["headers"]["X-Studio-Attempt"] == "2" and valid(again)
        assert json.loads(again["body"])["id"] == job["id"]
        listed = wait_webhook(client, job["id"], 2)
        assert listed["state"] == "delivered"
        assert [(d["state"], d["attempt"], d["ok"]) for d in listed["deliveries"]] == [
            ("done", 1, True),
            ("done", 2, True),
        ]
        assert len(hook.calls) == 2
        r = client.post(f"/v1/renders/{job['id']}/webhook/redeliver", params={"event": "checked"})
        assert "makes no 'checked' call" in one_sentence(r, 409)
        plain = wait_state(client, render(client, audio["short"])["id"])
        assert "has no webhook" in one_sentence(client.post(f"/v1/renders/{plain['id']}/webhook/redeliver"), 409)
        assert client.post("/v1/renders/999999/webhook/redeliver").status_code == 404
        # a receiver that is down: the redelivery is retried with backoff like the first call
        hook.answer = lambda call: 503
        assert client.post(f"/v1/renders/{job['id']}/webhook/redeliver").status_code == 202
        wait_calls(hook, 3)
        r = client.post(f"/v1/renders/{job['id']}/webhook/redeliver")
        assert "is still being tried" in one_sentence(r, 409)
    finally:
        hook.close()

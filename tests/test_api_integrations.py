"""Issue 27 against a real ``studio serve`` process on 127.0.0.1 with real clients: idempotent submits,
pages and queue positions, signed webhooks to a real listener (retried with backoff), retention."""

from __future__ import annotations

import hashlib
import hmac
import http.server
import json
import threading
import time

import pytest
from conftest import speech_pause_speech
from served import Server, free_port

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
from test_api import DEMO_AVATAR, one_sentence, wait_state  # noqa: E402
from test_api_webhooks import wait_webhook  # noqa: E402

TOKEN = "integrations-token-0123"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
READ = {"Authorization": "Bearer dashboard-read-only"}
SECRET = "webhook-secret-0123456789abcdef"
ORIGIN = "https://dash.example"


class Listener:
    """A webhook receiver on 127.0.0.1: answers the first ``fail`` calls with 500, then 204."""

    def __init__(self, fail: int = 0):
        self.calls: list[dict] = []
        self.fail = fail
        listener = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                listener.calls.append({"at": time.time(), "headers": dict(self.headers), "body": body})
                code = 500 if len(listener.calls) <= listener.fail else 204
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.port = free_port()
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("integrations_home")
    s = Server(
        home,
        "--token",
        TOKEN,
        "--read-token",
        READ["Authorization"].split()[1],
        "--webhook-secret",
        SECRET,
        "--webhook-allow",
        "127.0.0.1:*",  # any port of this machine but the server's own
        "--cors-origin",
        ORIGIN,
        token=TOKEN,
    )
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server.url, headers=AUTH, timeout=120) as c:
        yield c


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    d = tmp_path_factory.mktemp("clips")
    return {
        "short": speech_pause_speech(d / "short.wav", 0.6, 0.4, 0.6),  # 40 frames
        "other": speech_pause_speech(d / "other.wav", 0.4, 0.2, 0.4),
        "long": speech_pause_speech(d / "long.wav", 6.0, 0.4, 6.0),
        "dir": d,
    }


@pytest.fixture(scope="module")
def astro(client):
    with open(DEMO_AVATAR, "rb") as fh:
        r = client.post("/v1/avatars", data={"name": "astro"}, files={"file": ("presenter.png", fh)})
    assert r.status_code == 201, r.text
    return r.json()


@pytest.fixture(scope="module")
def audio_ids(client, clips):
    out = {}
    for name in ("short", "other", "long"):
        with open(clips[name], "rb") as fh:
            out[name] = client.post("/v1/audio", files={"file": (f"{name}.wav", fh)}).json()["id"]
    return out


def signed(call: dict) -> bool:
    """The call's X-Studio-Signature is ``t=<its X-Studio-Timestamp>,sha256=HMAC("<t>." + body)``, made when it
    was sent: within a minute of the listener receiving it (``at``; not of this check, which can come minutes
    later on a loaded machine, after a second call was waited for)."""
    t = call["headers"]["X-Studio-Timestamp"]
    mac = hmac.new(SECRET.encode(), t.encode() + b"." + call["body"], hashlib.sha256).hexdigest()
    return call["headers"]["X-Studio-Signature"] == f"t={t},sha256={mac}" and abs(call["at"] - int(t)) < 60


def render(client, audio_id: str, **data) -> dict:
    r = client.post("/v1/renders", data={"avatar": "astro", "audio_id": audio_id, "engine": "classic", **data})
    assert r.status_code == 202, r.text
    return r.json()


# --------------------------------------------------------------------------------------------


def test_the_same_idempotency_key_and_body_answer_the_first_job(client, astro, audio_ids, clips):
    key = {"Idempotency-Key": "7f1c6a1e-render-1"}
    with open(clips["short"], "rb") as fh:
        first = client.post(
            "/v1/renders", headers=key, data={"avatar": "astro", "engine": "classic"}, files={"audio": ("v.wav", fh)}
        )
    assert first.status_code == 202 and "idempotent-replayed" not in first.headers
    with open(clips["short"], "rb") as fh:  # a retry: the same form, uploaded again (a new multipart boundary)
        again = client.post(
            "/v1/renders", headers=key, data={"avatar": "astro", "engine": "classic"}, files={"audio": ("v.wav", fh)}
        )
    assert again.status_code == 202 and again.headers["idempotent-replayed"] == "true"
    assert again.json()["id"] == first.json()["id"]
    with open(clips["other"], "rb") as fh:  # the same key, another body: refused, nothing made
        other = client.post(
            "/v1/renders", headers=key, data={"avatar": "astro", "engine": "classic"}, files={"audio": ("v.wav", fh)}
        )
    assert "was used for another request" in one_sentence(other, 422)
    crf = client.post("/v1/renders", headers=key, data={"avatar": "astro", "audio_id": audio_ids["short"], "crf": 30})
    assert "was used for another request" in one_sentence(crf, 422)
    ids = [j["id"] for j in client.get("/v1/renders", params={"limit": 500}).json()["renders"]]
    assert ids.count(first.json()["id"]) == 1
    done = wait_state(client, first.json()["id"])
    assert done["state"] == "done"

    retried = [client.post(f"/v1/renders/{done['id']}/retry", headers={"Idempotency-Key": "retry-1"}) for _ in "ab"]
    assert [r.status_code for r in retried] == [202, 202] and retried[0].json()["id"] == retried[1].json()["id"]
    assert retried[0].json()["retry_of"] == done["id"]
    unkeyed = [render(client, audio_ids["short"]) for _ in "ab"]  # no key: two jobs, as asked
    assert unkeyed[0]["id"] != unkeyed[1]["id"]
    assert "printable ASCII" in one_sentence(
        client.post("/v1/renders", headers={"Idempotency-Key": ""}, data={"avatar": "astro"}), 422
    )
    for j in [retried[0].json(), *unkeyed]:
        wait_state(client, j["id"])

    with open(clips["other"], "rb") as fh:  # uploads and avatars take keys too
        a1 = client.post("/v1/audio", headers={"Idempotency-Key": "audio-1"}, files={"file": ("o.wav", fh)})
    with open(clips["other"], "rb") as fh:
        a2 = client.post("/v1/audio", headers={"Idempotency-Key": "audio-1"}, files={"file": ("o.wav", fh)})
    assert a1.status_code == a2.status_code == 201 and a1.json() == a2.json()
    assert a2.headers["idempotent-replayed"] == "true"
    with open(clips["short"], "rb") as fh:
        a3 = client.post("/v1/audio", headers={"Idempotency-Key": "audio-1"}, files={"file": ("o.wav", fh)})
    assert "was used for another request" in one_sentence(a3, 422)


def test_pages_are_stable_with_a_next_link(server, client, astro, audio_ids):
    from studio.core.settings import RenderSettings
    from studio.core.store.jobs import JobStore
    from studio.service.queue import QueueService
    from studio.service.request import RenderRequest

    qs = QueueService(store=JobStore(server.home / "jobs.sqlite"))  # another process adds drafts (the window)
    req = RenderRequest("astro", str(server.home / "uploads" / "audio" / "x.wav"), str(server.home / "d.mp4"))
    drafts = [qs.add(req.with_(settings=RenderSettings(engine="classic")), state="draft") for _ in range(7)]
    seen, url = [], "/v1/renders?state=draft&limit=3"
    while url:
        page = client.get(url).json()
        assert len(page["renders"]) <= 3
        seen += [j["id"] for j in page["renders"]]
        if len(seen) == 3:  # a job added between two pages does not shift the next one
            qs.add(req.with_(settings=RenderSettings(engine="classic")), state="draft")
        url = page["next"]
    assert seen == sorted((d.id for d in drafts), reverse=True)
    assert all(j["state"] == "draft" for j in client.get("/v1/renders", params={"state": "draft"}).json()["renders"])
    everything = client.get("/v1/renders", params={"limit": 500}).json()
    assert everything["next"] is None and {d.id for d in drafts} <= {j["id"] for j in everything["renders"]}
    assert "cursor" in one_sentence(client.get("/v1/renders", params={"cursor": "abc"}), 422)
    assert "'state'" in one_sentence(client.get("/v1/renders", params={"state": "sleeping"}), 422)
    assert "'limit'" in one_sentence(client.get("/v1/renders", params={"limit": 0}), 422)
    for d in qs.list():
        if d.state == "draft":
            qs.remove(d.id)


def test_queued_jobs_show_their_position_and_eta(server, client, astro, audio_ids):
    wait_state(client, render(client, audio_ids["short"])["id"])  # the queue learns its speed
    with server.hold:  # the long job stays running (held after its first batch) while the test looks
        running = render(client, audio_ids["long"])
        server.hold.wait_held()
        queued = [render(client, audio_ids["short"]) for _ in range(2)]
        try:
            page = {j["id"]: j for j in client.get("/v1/renders").json()["renders"]}  # one moment's estimates
            first, second, r = page[queued[0]["id"]], page[queued[1]["id"]], page[running["id"]]
            assert (r["position"], first["position"], second["position"]) == (0, 1, 2)
            assert r["eta_s"] is not None and first["starts_in_s"] == r["eta_s"]  # it starts when the running one ends
            assert 0 < first["starts_in_s"] < first["eta_s"] == second["starts_in_s"] < second["eta_s"]
            took = first["eta_s"] - first["starts_in_s"]  # both 40 frames: the same expected time
            assert abs((second["eta_s"] - second["starts_in_s"]) - took) <= 0.2
            one = client.get(f"/v1/renders/{queued[1]['id']}").json()
            assert one["position"] == 2 and one["eta_s"] > 0
        finally:
            for j in [*queued, running]:
                client.delete(f"/v1/renders/{j['id']}")
    wait_state(client, running["id"], states=("cancelled", "done"))


def test_webhooks_are_signed_retried_with_backoff_and_listed(client, astro, audio_ids):
    hook = Listener(fail=2)  # two 500s, then accepted
    try:
        job = render(client, audio_ids["short"], webhook=hook.url())
        assert job["webhook"] == {"url": hook.url(), "state": "pending", "deliveries": []}
        deadline = time.monotonic() + 60
        while len(hook.calls) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(hook.calls) == 3
        for n, call in enumerate(hook.calls, start=1):
            assert signed(call), call["headers"]
            assert call["headers"]["X-Studio-Event"] == "render.done"
            assert call["headers"]["X-Studio-Attempt"] == str(n)
            assert call["headers"]["X-Studio-Delivery"] == hook.calls[0]["headers"]["X-Studio-Delivery"]  # one id
            body = json.loads(call["body"])
            assert body["id"] == job["id"] and body["state"] == "done" and body["result"]["frames"] == 40
        gaps = [b["at"] - a["at"] for a, b in zip(hook.calls, hook.calls[1:])]
        assert gaps[0] >= 0.9 and gaps[1] >= 1.9, gaps  # backoff 1 s, then 2 s (lower bounds: load only adds)
        listed = wait_webhook(client, job["id"], 3)
        assert listed["state"] == "delivered"
        assert [(d["attempt"], d["ok"], d["status"]) for d in listed["deliveries"]] == [
            (1, False, 500),
            (2, False, 500),
            (3, True, 204),
        ]
        assert len(hook.calls) == 3  # nothing more once delivered
    finally:
        hook.close()


def test_a_checked_job_tells_its_webhook_again_with_the_verdict(client, astro, audio_ids):
    hook = Listener()
    try:
        job = render(client, audio_ids["short"], webhook=hook.url(), check="true", device="cpu")
        deadline = time.monotonic() + 240
        while len(hook.calls) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        events = [c["headers"]["X-Studio-Event"] for c in hook.calls]
        assert events == ["render.done", "render.checked"], events
        ids = [c["headers"]["X-Studio-Delivery"] for c in hook.calls]
        assert len(set(ids)) == 2 and all(len(i) == 36 for i in ids)  # a uuid per call
        done, checked = (json.loads(c["body"]) for c in hook.calls)
        assert done["state"] == checked["state"] == "done"
        assert done["result"]["check"]["state"] in ("pending", "running")  # the file is there, the verdict not yet
        assert checked["result"]["check"]["state"] == "done"
        assert checked["result"]["check"]["verdict"] in ("ok", "check", "out of sync")
        for call in hook.calls:
            assert signed(call)
        listed = wait_webhook(client, job["id"], 2)
        assert listed["state"] == "delivered"
        assert [(d["state"], d["ok"]) for d in listed["deliveries"]] == [("done", True), ("checked", True)]
        assert len(hook.calls) == 2  # each told once
    finally:
        hook.close()


def test_webhooks_only_call_the_hosts_the_operator_allows(client, astro, audio_ids):
    before = len(client.get("/v1/renders", params={"limit": 500}).json()["renders"])
    for url, why in (
        ("http://localhost:9/hook", "webhook host localhost port 9 is not one this server may call"),
        ("http://169.254.169.254/latest/meta-data", "webhook host 169.254.169.254 port 80 is not one"),
        ("ftp://127.0.0.1/x", "give an http:// or https:// URL"),
        ("http://user:pw@127.0.0.1/x", "without a user name or password"),
        ("not a url", "give an http:// or https:// URL"),
    ):
        r = client.post("/v1/renders", data={"avatar": "astro", "audio_id": audio_ids["short"], "webhook": url})
        assert why in one_sentence(r, 422), url
    assert len(client.get("/v1/renders", params={"limit": 500}).json()["renders"]) == before


def test_a_server_without_webhooks_refuses_one(tmp_path, clips):
    s = Server(tmp_path / "home")
    try:
        with open(clips["short"], "rb") as fh, open(DEMO_AVATAR, "rb") as face:
            r = httpx.post(
                f"{s.url}/v1/renders",
                data={"webhook": "http://127.0.0.1:1/x"},
                files={"avatar_file": ("a.png", face), "audio": ("v.wav", fh)},
            )
        assert "this server sends no webhooks" in one_sentence(r, 422)
        assert not [p for p in (s.home / "uploads").rglob("*") if p.is_file()]  # refused before any upload
    finally:
        s.stop()


def test_metrics_in_prometheus_text_format(server, client, astro, audio_ids):
    from prometheus_client.parser import text_string_to_metric_families

    r = httpx.get(f"{server.url}/metrics", headers=READ)  # a dashboard's read-only token may scrape
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain; version=")
    samples = {}
    for family in text_string_to_metric_families(r.text):
        assert family.name.startswith("studio"), family.name
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    jobs = client.get("/v1/renders", params={"limit": 500}).json()["renders"]
    done = [j for j in jobs if j["state"] == "done"]
    assert samples[("studio_jobs", (("state", "done"),))] == len(done) > 0
    assert samples[("studio_queue_depth", ())] == sum(j["state"] == "queued" for j in jobs)
    assert samples[("studio_render_seconds_count", ())] == len(done)  # every one rendered by this server
    assert samples[("studio_frames_rendered_total", ())] == sum(j["result"]["frames"] for j in done)
    assert samples[("studio_render_fps_count", ())] == len(done)
    assert samples[("studio_uploads_total", (("kind", "audio"),))] >= 3
    assert samples[("studio_storage_bytes", (("folder", "renders"),))] > 0
    assert samples[("studio_webhook_deliveries_total", (("ok", "true"),))] >= 1
    routes = {dict(k[1]).get("route") for k in samples if k[0] == "studio_http_requests_total"}
    assert "/v1/renders/{job_id}" in routes and not any(r and r[-1].isdigit() for r in routes)
    assert ("studio_info", (("version", client.get("/v1/health").json()["version"]),)) in samples


def test_ready_says_why_not(server, client):
    r = client.get("/v1/ready")
    assert r.status_code == 200 and r.json()["ready"] is True
    assert {c["name"] for c in r.json()["checks"]} == {"engine", "device", "data folder", "queue"}
    renders = server.home / "renders"
    renders.rename(server.home / "renders.away")
    renders.write_text("not a folder")  # a hostile data folder: renders/ is a file
    try:
        msg = one_sentence(client.get("/v1/ready"), 503)
        assert msg.startswith("not ready (data folder: its renders/ is not a folder")
        assert client.get("/v1/health").status_code == 200  # alive, not ready
    finally:
        renders.unlink()
        (server.home / "renders.away").rename(renders)
    assert client.get("/v1/ready").status_code == 200


def test_request_ids_are_echoed_and_logged(server, client):
    r = client.get("/v1/health", headers={"X-Request-ID": "newsroom-4711"})
    assert r.headers["x-request-id"] == "newsroom-4711"
    made = client.get("/v1/health").headers["x-request-id"]
    assert len(made) == 32 and int(made, 16) >= 0
    for bad in ("two words", "x" * 200, "semi;colon"):
        assert client.get("/v1/health", headers={"X-Request-ID": bad}).headers["x-request-id"] != bad
    refused = httpx.get(f"{server.url}/v1/renders", headers={"X-Request-ID": "no-token-1"})
    assert refused.status_code == 401 and refused.headers["x-request-id"] == "no-token-1"
    deadline = time.monotonic() + 60  # a guard against a hang: the line is written after the answer
    while time.monotonic() < deadline:
        log = (server.home / "server.log").read_text()
        if "request_id=no-token-1" in log:
            break
        time.sleep(0.1)
    lines = [ln for ln in log.splitlines() if "request_id=newsroom-4711" in ln]
    assert len(lines) == 1 and '"GET /v1/health" 200' in lines[0] and "127.0.0.1" in lines[0]
    assert any('"GET /v1/renders" 401' in ln for ln in log.splitlines() if "request_id=no-token-1" in ln)
    assert TOKEN not in log


def test_a_read_only_token_only_reads(server, client, astro, audio_ids):
    job = client.get("/v1/renders", params={"limit": 1}).json()["renders"][0]
    assert httpx.get(f"{server.url}/v1/renders/{job['id']}", headers=READ).status_code == 200
    assert httpx.get(f"{server.url}{job['links']['events']}", headers=READ).status_code == 200
    for method, path in (
        ("POST", "/v1/renders"),
        ("DELETE", f"/v1/renders/{job['id']}"),
        ("POST", f"/v1/renders/{job['id']}/retry"),
        ("GET", f"/v1/frame?job={job['id']}&t=0"),  # renders a frame: not a read
        ("DELETE", "/v1/avatars/astro"),
    ):
        r = httpx.request(method, f"{server.url}{path}", headers=READ)
        assert "this token may only read" in one_sentence(r, 403), path
    assert client.get("/v1/avatars").json()["avatars"][0]["name"] == "astro"


def test_cors_only_for_the_origins_listed(server):
    pre = {"Origin": ORIGIN, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization"}
    r = httpx.options(f"{server.url}/v1/renders", headers=pre)  # a preflight needs no token
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == ORIGIN
    r = httpx.get(f"{server.url}/v1/health", headers={**AUTH, "Origin": ORIGIN})
    assert (
        r.headers["access-control-allow-origin"] == ORIGIN
        and "x-request-id" in r.headers["access-control-expose-headers"].lower()
    )
    other = httpx.get(f"{server.url}/v1/health", headers={**AUTH, "Origin": "https://evil.example"})
    assert "access-control-allow-origin" not in other.headers


def test_retention_expires_old_renders_and_removes_old_uploads(tmp_path, clips):
    s = Server(tmp_path / "home", "--keep-renders", "3s")
    try:
        with httpx.Client(base_url=s.url, timeout=120) as c:
            with open(DEMO_AVATAR, "rb") as fh:
                assert c.post("/v1/avatars", data={"name": "astro"}, files={"file": ("a.png", fh)}).status_code == 201
            ids = {}

            def upload(name: str) -> None:
                with open(clips[name], "rb") as fh:
                    ids[name] = c.post("/v1/audio", files={"file": (f"{name}.wav", fh)}).json()["id"]

            upload("other")
            first = wait_state(c, render(c, ids["other"])["id"])  # its voice-over goes with it
            upload("short")  # after: an upload left unused past --keep-renders (3 s) while `first` ran would go
            old = wait_state(c, render(c, ids["short"])["id"])
            video = s.home / "renders" / old["output"]
            assert old["state"] == "done" and video.is_file()
            time.sleep(3.5)  # `old` and the unused upload `other` are now past --keep-renders
            fresh = wait_state(c, render(c, ids["short"])["id"])  # a job ending: retention looks again
            deadline = time.monotonic() + 30
            while c.get(f"/v1/renders/{old['id']}").json()["state"] != "expired" and time.monotonic() < deadline:
                time.sleep(0.2)
            gone = c.get(f"/v1/renders/{old['id']}").json()
            assert gone["state"] == "expired" and gone["result"]["frames"] == 40  # the job and its figures stay
            assert not video.exists()
            assert "no longer on the server" in one_sentence(c.get(old["links"]["video"]), 410)
            assert c.get(fresh["links"]["video"]).status_code == 200  # the new one stays
            assert "no uploaded voice-over" in one_sentence(c.get(f"/v1/audio/{ids['other']}"), 404)
            assert c.get(f"/v1/audio/{ids['short']}").status_code == 200  # used by the fresh job just now
            assert c.get("/v1/avatars").json()["avatars"][0]["name"] == "astro"  # an avatar's source is kept
            while c.get(f"/v1/renders/{first['id']}").json()["state"] != "expired" and time.monotonic() < deadline:
                time.sleep(0.2)
            msg = one_sentence(c.post(f"/v1/renders/{first['id']}/retry"), 410)  # issue 33 item 20: was 422
            assert "no longer on the server" in msg and "uploads" not in msg  # naming an internal file
            again = c.post(f"/v1/renders/{old['id']}/retry")  # an expired job renders again as a new job
            assert again.status_code == 202 and again.json()["retry_of"] == old["id"]
            wait_state(c, again.json()["id"])
    finally:
        s.stop()

"""Issue 33 (items 4, 6, 7) against a real ``studio serve`` on 127.0.0.1 with a real HTTP client:
cross-site requests and foreign host names are refused, what a request brings cannot forge a log
line and the log rotates, and named clients see and change only their own jobs."""

from __future__ import annotations

import hashlib
import time

import pytest
from served import Server

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
from test_api import DEMO_AVATAR, one_sentence  # noqa: E402


def wait_for(predicate, timeout: float = 60.0):  # a guard against a hang (a loaded machine is slow)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(0.1)
    return predicate()


# -- item 6: log injection and rotation ---------------------------------------------------------


def test_a_request_cannot_forge_a_log_line_and_the_log_rotates(tmp_path, monkeypatch):
    monkeypatch.setenv("STUDIO_LOG_MAX_MB", "0.01")  # 10485 bytes a file (a MB is 2**20 bytes)
    monkeypatch.setenv("STUDIO_LOG_BACKUPS", "2")
    s = Server(tmp_path / "home")
    try:
        forged = '127.0.0.1 "POST /v1/renders" 202 1.0 ms 10 B request_id=forged'
        r = httpx.get(f"{s.url}/x%0A{forged.replace(' ', '%20')}%1B[2J%E2%80%AE")
        assert r.status_code == 404
        rid = r.headers["x-request-id"]
        logs = s.home / "logs"

        def logged():
            text = (logs / "studio.log").read_text(errors="replace") if (logs / "studio.log").exists() else ""
            return text if rid in text else ""

        text = wait_for(logged)
        for where in (text, s.log_tail(100_000)):
            lines = [ln for ln in where.splitlines() if rid in ln]
            assert len(lines) == 1, lines
            assert "/x%0A127.0.0.1%20%22POST" in lines[0] and "%1B" in lines[0] and "%E2%80%AE" in lines[0]
            assert not any(
                ln.lstrip().startswith(('127.0.0.1 "POST', "127.0.0.1 %22POST")) for ln in where.splitlines()
            )
            assert "\x1b" not in where and "\u202e" not in where
        # long paths: each line is capped, the file rotates at 0.01 MB and keeps 2 backups
        long = "a" * 6000
        with httpx.Client(base_url=s.url) as c:
            for _ in range(70):
                assert c.get(f"/{long}").status_code == 404
        assert wait_for(lambda: (logs / "studio.log.2").exists())
        files = sorted(p.name for p in logs.iterdir())
        assert files == ["studio.log", "studio.log.1", "studio.log.2"], files
        for p in logs.iterdir():
            assert p.stat().st_size <= int(0.01 * 2**20), (p.name, p.stat().st_size)  # as the handler counts
            for ln in p.read_text().splitlines():
                assert len(ln) < 600, ln[:100]
        last = (logs / "studio.log.1").read_text()
        assert "/" + "a" * 299 + "...[5701 more]" in last  # the first 300 characters of the path, and how many more
    finally:
        s.stop()


# -- item 4: foreign host names (DNS rebinding) and cross-site requests ----------------------------

DASH = "https://dash.example"


@pytest.fixture(scope="module")
def open_server(tmp_path_factory):
    """The default server: loopback, no token; one dashboard origin and one proxy name allowed."""
    s = Server(tmp_path_factory.mktemp("sites_home"), "--cors-origin", DASH, "--allowed-hosts", "studio.example")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def wav(tmp_path_factory):
    from conftest import speech_pause_speech

    return speech_pause_speech(tmp_path_factory.mktemp("sites_clips") / "v.wav", 0.3, 0.2, 0.3)


def upload(url: str, wav, **headers) -> httpx.Response:
    with open(wav, "rb") as fh:
        return httpx.post(f"{url}/v1/audio", files={"file": ("v.wav", fh)}, headers=headers)


def test_a_page_of_another_site_cannot_render_or_read(open_server, wav):
    url, port = open_server.url, open_server.port
    with open(wav, "rb") as fh, open(DEMO_AVATAR, "rb") as face:
        r = httpx.post(  # the form POST: foreign Host (DNS rebinding), foreign Origin
            f"{url}/v1/renders",
            data={"engine": "classic"},
            files={"avatar_file": ("a.png", face), "audio": ("v.wav", fh)},
            headers={"Host": f"evil.example:{port}", "Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"},
        )
    assert "not to the host 'evil.example'" in one_sentence(r, 400)
    msg = one_sentence(httpx.get(f"{url}/v1/renders", headers={"Host": f"evil.example:{port}"}), 400)
    assert msg.startswith("this server answers to localhost") and "--allowed-hosts" in msg
    assert httpx.get(f"{url}/v1/renders", headers={"Host": "evil.example"}).status_code == 400
    # the right Host, but sent by another site's page: refused, with or without an Origin
    for headers in (
        {"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"},
        {"Origin": "null"},  # a sandboxed page or a local file
        {"Origin": f"http://127.0.0.1:{port + 1}"},  # another port is another origin
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
    ):
        assert "may not change anything on this server" in one_sentence(upload(url, wav, **headers), 403), headers
    r = httpx.get(f"{url}/v1/renders/1/frame", params={"t": 0}, headers={"Origin": "https://evil.example"})
    assert "may not change anything" in one_sentence(r, 403)  # a GET that renders
    listed = httpx.get(f"{url}/v1/renders").json()["renders"]
    assert listed == [] and not [p for p in (open_server.home / "uploads").rglob("*") if p.is_file()]


def test_same_origin_pages_listed_origins_and_other_clients_pass(open_server, wav):
    url, port = open_server.url, open_server.port
    for headers in (
        {},  # a client that is no browser
        {"Origin": url, "Sec-Fetch-Site": "same-origin"},  # the web front end served at /
        {"Host": f"localhost:{port}", "Origin": f"http://localhost:{port}", "Sec-Fetch-Site": "same-origin"},
        {"Origin": DASH, "Sec-Fetch-Site": "cross-site"},  # allowed by --cors-origin
        {"Sec-Fetch-Site": "none"},  # typed into the address bar
    ):
        r = upload(url, wav, **headers)
        assert r.status_code == 201, (headers, r.text)
    assert httpx.get(f"{url}/v1/health", headers={"Host": "studio.example"}).status_code == 200  # --allowed-hosts
    assert httpx.get(f"{url}/v1/health", headers={"Host": f"[::1]:{port}"}).status_code == 200  # an address
    r = httpx.get(f"{url}/v1/health", headers={"Origin": "https://evil.example"})
    assert r.status_code == 200 and "access-control-allow-origin" not in r.headers  # a read: CORS keeps it


def test_allowed_hosts_refuses_a_url(tmp_path):
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-m", "studio", "serve", "--allowed-hosts", "https://studio.example/"],
        env={**__import__("os").environ, "STUDIO_HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "--allowed-hosts https://studio.example/: give host names" in r.stderr


# -- item 7: named clients, their scopes, and jobs owned by their client ---------------------------

ADMIN_T = "operator-token-0123456789"
READ_T = "dashboard-token-0123456789"
TOKENS = {
    "newsroom": "newsroom-token-0123456789",
    "agency": "agency-token-0123456789ab",
    "viewer": "viewer-token-0123456789ab",
    "ops": "ops-token-0123456789abcdef",
}


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture(scope="module")
def tenants(tmp_path_factory):
    """A server with --token, --read-token and four named clients, on a schema-3 jobs.sqlite (no
    client column) that already holds one of the operator's jobs."""
    import sqlite3

    from studio.core.store.jobs import JobStore

    home = tmp_path_factory.mktemp("tenants_home")
    old = JobStore(home / "jobs.sqlite")
    old.cancel(old.add("astro", str(home / "old.wav"), {}, str(home / "old.mp4"), state="draft").id)
    with sqlite3.connect(home / "jobs.sqlite") as db:  # as Studio before named clients wrote it
        db.execute("ALTER TABLE jobs DROP COLUMN client")
        db.execute("UPDATE meta SET value='3' WHERE key='schema'")
    conf = home.parent / "clients.toml"
    sha = hashlib.sha256(TOKENS["newsroom"].encode()).hexdigest()
    conf.write_text(
        f'[clients.newsroom]\ntoken_sha256 = "{sha}"\nscopes = ["submit", "read"]\n\n'
        f'[clients.agency]\ntoken = "{TOKENS["agency"]}"\nscopes = ["submit", "read"]\n\n'
        f'[clients.viewer]\ntoken = "{TOKENS["viewer"]}"\nscopes = ["read"]\n\n'
        f'[clients.ops]\ntoken = "{TOKENS["ops"]}"\nscopes = ["admin"]\n'
    )
    s = Server(home, "--token", ADMIN_T, "--read-token", READ_T, "--clients", str(conf), token=ADMIN_T)
    yield s
    s.stop()


def as_(server, who: str) -> httpx.Client:
    token = {"admin": ADMIN_T, "read": READ_T}.get(who) or TOKENS[who]
    return httpx.Client(base_url=server.url, headers=bearer(token), timeout=120)


def submit(c: httpx.Client, wav, **headers) -> dict:
    with open(wav, "rb") as fh:
        r = c.post(
            "/v1/renders",
            data={"avatar": "astro", "engine": "classic"},
            files={"audio": ("v.wav", fh)},
            headers=headers,
        )
    assert r.status_code == 202, r.text
    return r.json()


def test_named_clients_see_and_change_only_their_own_jobs(tenants, wav):
    from test_api import wait_state

    news, agency, viewer, ops = (as_(tenants, n) for n in ("newsroom", "agency", "viewer", "ops"))
    admin, read = as_(tenants, "admin"), as_(tenants, "read")
    try:
        with open(DEMO_AVATAR, "rb") as fh:
            assert news.post("/v1/avatars", data={"name": "astro"}, files={"file": ("a.png", fh)}).status_code == 201
        n = wait_state(news, submit(news, wav)["id"])
        a = wait_state(agency, submit(agency, wav)["id"])
        assert n["state"] == a["state"] == "done"
        assert (n["client"], a["client"]) == ("newsroom", "agency")
        ids = lambda c: sorted(j["id"] for j in c.get("/v1/renders").json()["renders"])  # noqa: E731
        assert ids(news) == [n["id"]] and ids(agency) == [a["id"]] and ids(viewer) == []
        old = [i for i in ids(admin) if i not in (n["id"], a["id"])]
        assert len(old) == 1  # the old file's job: migrated, the operator's
        assert ids(admin) == ids(ops) == ids(read) == sorted([*old, n["id"], a["id"]])
        # another client's job is not there for it, whatever it tries
        for method, path in (
            ("GET", f"/v1/renders/{n['id']}"),
            ("GET", f"/v1/renders/{n['id']}/video"),
            ("GET", f"/v1/renders/{n['id']}/events"),
            ("GET", f"/v1/renders/{n['id']}/frame?t=0"),  # a job's frame (was /v1/frame?job=, issue 40)
            ("POST", f"/v1/renders/{n['id']}/retry"),
            ("POST", f"/v1/renders/{n['id']}/webhook/redeliver"),
            ("DELETE", f"/v1/renders/{n['id']}?purge=true"),
            ("GET", f"/v1/renders/{old[0]}"),
        ):
            job_id = old[0] if path.endswith(str(old[0])) else n["id"]
            assert f"no render job {job_id}" in one_sentence(agency.request(method, path), 404), path
        assert news.get(f"/v1/renders/{n['id']}/video").status_code == 200
        # scopes: a read-only client reads, admin-only operations need admin
        assert "client viewer may not POST /v1/renders" in one_sentence(viewer.post("/v1/renders"), 403)
        assert "needs admin" in one_sentence(news.delete("/v1/avatars/astro"), 403)
        assert "needs admin" in one_sentence(news.patch("/v1/avatars/astro", json={"name": "mine"}), 403)
        assert one_sentence(news.get("/metrics"), 403).startswith("client newsroom may not GET /metrics")
        assert ops.get("/metrics").status_code == 200 and read.get("/metrics").status_code == 200
        assert "may only read" in one_sentence(read.delete(f"/v1/renders/{n['id']}?purge=true"), 403)
        assert httpx.get(f"{tenants.url}/v1/renders", headers=bearer("not-a-token-0123456789")).status_code == 401
        # the operator's retry of a client's job stays that client's; the client may purge its own
        again = admin.post(f"/v1/renders/{n['id']}/retry").json()
        assert again["id"] in ids(news) and again["id"] not in ids(agency)
        wait_state(news, again["id"])
        assert news.delete(f"/v1/renders/{again['id']}", params={"purge": "true"}).json()["state"] == "removed"
        # an Idempotency-Key is a client's own: the same key and body from another client is a new job
        key = {"Idempotency-Key": "same-key-from-two-clients"}
        first, second = submit(news, wav, **key), submit(agency, wav, **key)
        assert first["id"] != second["id"] and second["id"] in ids(agency)
        assert submit(news, wav, **key)["id"] == first["id"]
        for c, j in ((news, first), (agency, second)):
            wait_state(c, j["id"])
    finally:
        for c in (news, agency, viewer, ops, admin, read):
            c.close()


@pytest.mark.parametrize(
    "text, why",
    [
        ("[clients.a]\nscopes = ['read']\n", "needs exactly one of token_sha256 (preferred) or token"),
        ("[clients.a]\ntoken = 'short'\nscopes = ['read']\n", "token must be at least 16 characters"),
        ("[clients.a]\ntoken_sha256 = 'abc'\nscopes = ['read']\n", "token_sha256 must be 64 hex digits"),
        ("[clients.a]\ntoken = '0123456789abcdefg'\nscopes = ['write']\n", "scopes must be a list of read, submit"),
        ("[clients.'a b']\ntoken = '0123456789abcdefg'\nscopes = ['read']\n", "client name 'a b'"),
        ("clients = 3\n", "names no clients"),
        ("[clients.a\n", "is not TOML"),
        (
            "[clients.a]\ntoken = '0123456789abcdefg'\nscopes = ['read']\n"
            "[clients.b]\ntoken = '0123456789abcdefg'\nscopes = ['read']\n",
            "clients a and b have the same token",
        ),
    ],
)
def test_a_bad_clients_file_is_one_sentence(tmp_path, text, why):
    from studio.api.clients import load_clients
    from studio.core.errors import InputError

    conf = tmp_path / "clients.toml"
    conf.write_text(text)
    with pytest.raises(InputError) as err:
        load_clients(conf)
    assert why in str(err.value) and "\n" not in str(err.value)


def test_serve_refuses_a_bad_clients_file_with_exit_2(tmp_path):
    import os
    import subprocess
    import sys

    conf = tmp_path / "clients.toml"
    conf.write_text(f"[clients.a]\ntoken = '{ADMIN_T}'\nscopes = ['read']\n")
    r = subprocess.run(
        [sys.executable, "-m", "studio", "serve", "--token", ADMIN_T, "--clients", str(conf)],
        env={**os.environ, "STUDIO_HOME": str(tmp_path / "home")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "--clients: client a has this server's --token or --read-token; give it its own" in r.stderr

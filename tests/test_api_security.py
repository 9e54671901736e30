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


def wait_for(predicate, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(0.1)
    return predicate()


# -- item 6: log injection and rotation ---------------------------------------------------------


def test_a_request_cannot_forge_a_log_line_and_the_log_rotates(tmp_path, monkeypatch):
    monkeypatch.setenv("STUDIO_LOG_MAX_MB", "0.02")  # 20 KB a file
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
            assert not any(ln.lstrip().startswith(("127.0.0.1 \"POST", "127.0.0.1 %22POST")) for ln in where.splitlines())
            assert "\x1b" not in where and "\u202e" not in where
        # long paths: each line is capped, the file rotates at 20 KB and keeps 2 backups
        long = "a" * 6000
        with httpx.Client(base_url=s.url) as c:
            for _ in range(120):
                assert c.get(f"/{long}").status_code == 404
        assert wait_for(lambda: (logs / "studio.log.2").exists())
        files = sorted(p.name for p in logs.iterdir())
        assert files == ["studio.log", "studio.log.1", "studio.log.2"], files
        for p in logs.iterdir():
            assert p.stat().st_size <= 20 * 1024 * 1.05, (p.name, p.stat().st_size)
            for ln in p.read_text().splitlines():
                assert len(ln) < 600, ln[:100]
        last = (logs / "studio.log.1").read_text()
        assert "a" * 300 in last and "...[5701 more]" in last
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
    r = httpx.get(f"{url}/v1/frame", params={"job": 1, "t": 0}, headers={"Origin": "https://evil.example"})
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

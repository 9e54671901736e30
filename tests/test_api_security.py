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

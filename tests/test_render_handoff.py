"""``studio render`` hands its job to the warm ``studio serve`` of its data folder (issue 48, item 6):
a real server on 127.0.0.1, real ``studio render`` processes, a real MP4 read back.

By default the command finds the server through ``serve.json`` and says so in one line; the job
is in the server's queue with the ``--priority`` it was given; ``--local`` renders in the command's
own process and says why; a stale ``serve.json`` (its process gone, or not a ``studio serve``) is
ignored; a bad lane is one sentence before any work."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from conftest import DEMO_AVATAR, ROOT, speech_pause_speech
from served import Server

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")

TOKEN = "handoff-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _render(home, voice, out, *extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, STUDIO_HOME=str(home), PYTHONPATH=str(ROOT), STUDIO_SERVER_TOKEN=TOKEN)
    env.pop("STUDIO_LOCAL_SERVER", None)
    cmd = [sys.executable, "-m", "studio", "render", "--avatar", str(DEMO_AVATAR), "--audio", str(voice)]
    return subprocess.run(
        [*cmd, "-o", str(out), "--engine", "classic", *extra], env=env, cwd=ROOT, capture_output=True, text=True
    )


def _frames(path) -> int:
    import av

    with av.open(str(path)) as c:
        return sum(1 for _ in c.decode(video=0))


def test_render_hands_off_to_the_warm_server_with_its_priority_and_local_stays_here(tmp_path):
    home = tmp_path / "home"
    voice = speech_pause_speech(tmp_path / "v.wav", 0.4, 0.2, 0.4)  # 1.0 s: 25 frames at 25 fps
    with Server(home, "--token", TOKEN, token=TOKEN) as srv:
        deadline = time.monotonic() + 120
        while httpx.get(srv.url + "/v1/ready").status_code != 200:
            assert time.monotonic() < deadline, "the server never became ready"
            time.sleep(0.1)
        p = _render(home, voice, tmp_path / "handed.mp4", "--priority", "breaking", "--json")
        assert p.returncode == 0, p.stderr
        said = [ln for ln in p.stderr.splitlines() if ln.startswith("render: ")]
        assert said[0] == (
            f"render: handed to the studio serve running on this data folder ({srv.url}, "
            "engine warm); --local renders in this process"
        )
        assert json.loads(p.stdout.strip().splitlines()[-1])["ran_on"] == f"Studio server {srv.url}"
        assert _frames(tmp_path / "handed.mp4") == 25
        jobs = httpx.get(srv.url + "/v1/renders", headers=AUTH).json()["renders"]
        assert [(j["state"], j["priority"]) for j in jobs] == [("done", "breaking")]
        p = _render(home, voice, tmp_path / "bulk.mp4", "--priority", "bulk")
        assert p.returncode == 0, p.stderr
        jobs = httpx.get(srv.url + "/v1/renders", headers=AUTH).json()["renders"]
        assert sorted(j["priority"] for j in jobs) == ["breaking", "bulk"]

        # --local: this process renders it, says why, and the server's queue does not change
        p = _render(home, voice, tmp_path / "local.mp4", "--local", "--priority", "breaking", "--json")
        assert p.returncode == 0, p.stderr
        assert "render: in this process (--local); --priority orders jobs on a server only" in p.stderr
        assert "handed" not in p.stderr
        answer = json.loads(p.stdout.strip().splitlines()[-1])
        assert answer["ran_on"] == "this computer" and answer["frames"] == 25
        stages = answer["timeline"]  # seconds from the process's start to each stage, in order
        assert list(stages)[:2] == ["command", "placed"] and stages["rendered"] >= stages["request"] > 0
        assert _frames(tmp_path / "local.mp4") == 25
        assert len(httpx.get(srv.url + "/v1/renders", headers=AUTH).json()["renders"]) == 2

        # a bad lane or --local with --server: one sentence, exit 2, nothing queued or written
        for extra, words in (
            (("--priority", "urgent"), "priority 'urgent': give breaking, normal, bulk or a number from 0 to 100"),
            (("--priority", "101"), "give a whole number from 0 (bulk) to 100 (breaking)"),
            (("--local", "--server", srv.url), "--local renders in this process and --server on that server"),
        ):
            p = _render(home, voice, tmp_path / "bad.mp4", *extra)
            assert p.returncode == 2 and words in p.stderr, (extra, p.stderr)
            assert "Traceback" not in p.stderr and not (tmp_path / "bad.mp4").exists()
        assert len(httpx.get(srv.url + "/v1/renders", headers=AUTH).json()["renders"]) == 2

    # the server stopped: a stale serve.json (its pid gone, or a pid that is no studio serve) is ignored
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    for pid, why in (
        (dead.pid, "serve.json names no running studio serve"),
        (os.getpid(), "serve.json names no loopback studio serve"),
    ):
        (home / "serve.json").write_text(json.dumps({"url": "http://127.0.0.1:9", "pid": pid, "token": False}))
        p = _render(home, voice, tmp_path / "stale.mp4", "--overwrite")
        assert p.returncode == 0, p.stderr
        assert f"render: in this process ({why}" in p.stderr, p.stderr
        assert _frames(tmp_path / "stale.mp4") == 25

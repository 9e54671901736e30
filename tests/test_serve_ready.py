"""Ready means ready (issue 38): a real ``studio serve`` on 127.0.0.1 and a real HTTP client.

A fresh data folder is ready without a render; /v1/ready is 503 (with what it does, Retry-After)
while the engines warm up and 200 after; a request that comes meanwhile waits for the warm engine
and is not warmed twice; the probes answer without the token and then say nothing about jobs."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import DEMO_AVATAR, ROOT, speech_pause_speech
from served import Server, free_port

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")

TOKEN = "ready-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}

# studio serve with its warm-up held at a gate file (the test opens it), counting warm-ups
GATED = """
import pathlib, sys, time
from studio.service.pool import EnginePool
gate = pathlib.Path(sys.argv[1])
warm_up = EnginePool.warm_up
def gated(self, *a, **k):
    with open(gate.with_suffix(".calls"), "a") as f:
        f.write("warm\\n")
    while not gate.exists():
        time.sleep(0.05)
    return warm_up(self, *a, **k)
EnginePool.warm_up = gated
from studio.cli import main
sys.exit(main(["serve", *sys.argv[2:]]))
"""


def _wait(url: str, proc, path="/v1/health", timeout=90, headers=None) -> httpx.Response:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "studio serve exited"
        try:
            return httpx.get(url + path, headers=headers or {}, timeout=5)
        except httpx.TransportError:
            time.sleep(0.1)
    raise AssertionError(f"no answer from {url}{path}")


def test_ready_waits_for_the_warm_up_and_a_request_meanwhile_waits_and_is_not_warmed_twice(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    gate = tmp_path / "gate"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ, STUDIO_HOME=str(home), PYTHONPATH=str(ROOT))
    log = open(tmp_path / "server.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-c", GATED, str(gate), "--port", str(port), "--token", TOKEN],
        env=env,
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        assert _wait(url, proc, headers=AUTH).status_code == 200  # alive at once
        r = httpx.get(url + "/v1/ready")  # no token: a loopback server's probes are open
        assert r.status_code == 503 and r.headers["Retry-After"] == "2"
        assert "warming up: loading the auto engine" in r.json()["error"], r.text
        voice = speech_pause_speech(tmp_path / "v.wav", 0.5, 0.3, 0.5)
        answer: dict = {}

        def generate():
            with open(DEMO_AVATAR, "rb") as a, open(voice, "rb") as v:
                answer["r"] = httpx.post(
                    url + "/generate",
                    headers=AUTH,
                    data={"engine": "classic"},
                    files={"avatar_file": ("p.png", a), "audio": ("v.wav", v)},
                    timeout=300,
                )

        t = threading.Thread(target=generate)
        t.start()
        deadline = time.monotonic() + 120
        while not (jobs := httpx.get(url + "/v1/renders", headers=AUTH).json()["renders"]):
            assert time.monotonic() < deadline, "the request never reached the queue"
            time.sleep(0.2)
        time.sleep(2)
        assert "r" not in answer  # it waits for the warm-up ...
        jobs = httpx.get(url + "/v1/renders", headers=AUTH).json()["renders"]
        assert [j["state"] for j in jobs] == ["queued"]  # ... in the queue, not on an engine of its own
        r = httpx.get(url + "/v1/ready")
        assert r.status_code == 503, r.text
        gate.touch()
        deadline = time.monotonic() + 60
        while (r := httpx.get(url + "/v1/ready")).status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert r.status_code == 200 and r.json()["ready"] is True
        engine = next(c for c in r.json()["checks"] if c["name"] == "engine")
        assert "warm: classic on cpu" in engine["detail"]
        t.join(300)
        assert answer["r"].status_code == 200 and answer["r"].content[4:8] == b"ftyp"
        assert gate.with_suffix(".calls").read_text().split() == ["warm"]  # warmed once
        metrics = httpx.get(url + "/metrics", headers=AUTH).text
        assert "studio_engine_loads_total 1.0" in metrics  # the job ran on the warm engine
        assert "studio_warm_engines 1.0" in metrics and "studio_engine_evictions_total 0.0" in metrics
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()


def test_a_fresh_data_folder_is_ready_without_a_render_and_probes_reveal_no_jobs(tmp_path):
    home = tmp_path / "fresh"
    with Server(home, "--token", TOKEN, token=TOKEN) as srv:
        deadline = time.monotonic() + 60
        while (r := httpx.get(srv.url + "/v1/ready")).status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert r.status_code == 200, r.text
        assert (home / "renders").is_dir() and (home / "uploads").is_dir()
        probe = httpx.get(srv.url + "/v1/health").json()  # without the token
        assert probe["ok"] is True and probe.get("queued") is None and probe.get("running") is None
        assert probe.get("warm_engines") is None and probe.get("max_queued") is None
        full = httpx.get(srv.url + "/v1/health", headers=AUTH).json()
        assert full["queued"] == 0 and full["warm_engines"] == 1
        assert httpx.get(srv.url + "/v1/renders").status_code == 401  # only the probes are open
        assert httpx.post(srv.url + "/v1/ready").status_code in (401, 405)
        # studio render on this data folder hands its job to the warm server, saying so
        voice = speech_pause_speech(tmp_path / "v.wav", 0.4, 0.2, 0.4)
        env = dict(os.environ, STUDIO_HOME=str(home), PYTHONPATH=str(ROOT), STUDIO_SERVER_TOKEN=TOKEN)
        cmd = [sys.executable, "-m", "studio", "render", "--avatar", str(DEMO_AVATAR), "--audio", str(voice)]
        p = subprocess.run(
            [*cmd, "-o", str(tmp_path / "cli.mp4"), "--engine", "classic"],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        assert p.returncode == 0, p.stderr
        assert "render: handed to the studio serve running on this data folder" in p.stderr
        assert (tmp_path / "cli.mp4").stat().st_size > 0
        jobs = httpx.get(srv.url + "/v1/renders", headers=AUTH).json()["renders"]
        assert [j["state"] for j in jobs] == ["done"]
        env["STUDIO_LOCAL_SERVER"] = "0"  # renders in the command's own process
        p = subprocess.run(
            [*cmd, "-o", str(tmp_path / "own.mp4"), "--engine", "classic"],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        assert p.returncode == 0 and "handed" not in p.stderr and (tmp_path / "own.mp4").stat().st_size > 0
        assert len(httpx.get(srv.url + "/v1/renders", headers=AUTH).json()["renders"]) == 1
        # one long clip over several devices (placement gpus; the CPU named twice stands for two GPUs)
        with open(DEMO_AVATAR, "rb") as a, open(voice, "rb") as v:
            files = {"avatar_file": ("p.png", a), "audio": ("v.wav", v)}
            r = httpx.post(
                srv.url + "/generate",
                headers=AUTH,
                data={"engine": "classic", "gpus": "cpu,cpu"},
                files=files,
                timeout=300,
            )
        assert r.status_code == 200 and r.content[4:8] == b"ftyp", r.text
        job = httpx.get(srv.url + f"/v1/renders/{r.headers['X-Studio-Job']}", headers=AUTH).json()
        assert job["result"]["ran_on"] == "2 GPUs here"
        with open(DEMO_AVATAR, "rb") as a, open(voice, "rb") as v:
            files = {"avatar_file": ("p.png", a), "audio": ("v.wav", v)}
            r = httpx.post(srv.url + "/v1/renders", headers=AUTH, data={"gpus": "cuda:7"}, files=files)
        assert r.status_code == 422 and "this server has no cuda:7" in r.json()["error"]
    assert not (home / "serve.json").exists()  # the stopped server's note is gone
    with Server(tmp_path / "closed", "--token", TOKEN, "--no-open-probes", token=TOKEN) as srv:
        assert httpx.get(srv.url + "/v1/health").status_code == 401
        assert httpx.get(srv.url + "/v1/ready").status_code == 401


def test_bad_serve_options_are_one_sentence(tmp_path):
    env = dict(os.environ, STUDIO_HOME=str(tmp_path), PYTHONPATH=str(ROOT))
    for args, words in (
        (["--warm", "decoder"], "give NAME=VALUE pairs"),
        (["--warm", "decoder=vhs"], "--warm 'decoder=vhs'"),
        (["--gpus", "cuda:7"], "no device cuda:7"),
        (["--jobs-per-device", "0"], "at least 1"),
    ):
        p = subprocess.run(
            [sys.executable, "-m", "studio", "serve", *args], env=env, cwd=ROOT, capture_output=True, text=True
        )
        assert p.returncode == 2 and words in p.stderr, (args, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1
    assert not (Path(tmp_path) / "renders").exists()

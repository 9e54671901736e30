"""Operating ``studio serve --farm`` (issue 37, item 4): ``GET /v1/farm``, the farm gauges of ``/metrics``
and ``studio farm status`` against a real server on a real local Ray cluster (a head and two worker
nodes of one CPU each: two render actors), and the route's answers on a server without a farm."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from conftest import prepare_demo_avatar, speechlike
from served import ROOT, Server
from test_api_security import wait_for

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("ray", reason="the farm needs Ray: pip install 'studio[farm]' (ray is not installed)")

TOKEN = "farm-ops-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
NO_FARM = "this server does not render on a farm: start it with `studio serve --farm [HOST:PORT]`"


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "studio", "farm", "status", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        cwd=ROOT,
    )


def until(predicate, timeout: float, what: str):
    got = wait_for(predicate, timeout)
    assert got, f"{what}: not within {timeout:.0f} s"
    return got


@pytest.fixture(scope="module")
def farm(request, tmp_path_factory):
    """A head (no CPUs) and two worker nodes of one CPU, their own data folder; ``studio serve --farm``
    on it with a token, once both render actors are idle."""
    from ray_cluster import ray_cluster

    node_home = tmp_path_factory.mktemp("node_home")
    cluster = ray_cluster(request, [{"num_cpus": 1, "env": {"STUDIO_HOME": str(node_home)}}] * 2)
    home = tmp_path_factory.mktemp("head_home")
    prepare_demo_avatar(home, "astro")
    server = Server(home, "--token", TOKEN, "--farm", cluster.address, token=TOKEN, timeout=180)
    request.addfinalizer(server.stop)  # before the cluster's teardown (finalizers run last in, first out)

    def idle():
        r = httpx.get(f"{server.url}/v1/farm", headers=AUTH, timeout=30).json()
        return r if sum(a["state"] == "idle" for a in r["actors"]) == 2 else None

    until(idle, 180, f"two idle render actors ({server.log_tail()})")
    return cluster, server


def test_the_farm_status_endpoint_follows_a_job(farm, tmp_path):
    import soundfile as sf

    cluster, server = farm
    first = httpx.get(f"{server.url}/v1/farm", headers=AUTH, timeout=30).json()
    assert first["address"] == cluster.address and first["nodes_alive"] == 3 and first["jobs_in_flight"] == 0
    assert sorted(n["cpus"] for n in first["nodes"]) == [0.0, 1.0, 1.0] and all(n["alive"] for n in first["nodes"])
    workers = {n["id"] for n in first["nodes"] if n["cpus"] == 1.0}
    assert {a["node"] for a in first["actors"]} == workers  # one actor a CPU, on each worker node
    for a in first["actors"]:
        assert (a["device"], a["state"], a["capacity"], a["jobs_in_flight"], a["queued_frames"]) == (
            "cpu",
            "idle",
            1,
            [],
            0,
        )
    voice = tmp_path / "voice.wav"
    sf.write(voice, speechlike(4.0, 16_000, 5), 16_000, subtype="PCM_16")  # 100 frames
    with open(voice, "rb") as fh:
        r = httpx.post(
            f"{server.url}/v1/renders",
            headers=AUTH,
            data={"avatar": "astro", "engine": "classic", "preset": "ultrafast"},
            files={"audio": ("voice.wav", fh, "audio/wav")},
            timeout=60,
        )
    assert r.status_code == 202, r.text
    job = r.json()["id"]

    def busy():
        s = httpx.get(f"{server.url}/v1/farm", headers=AUTH, timeout=30).json()
        return s if any(job in a["jobs_in_flight"] for a in s["actors"]) else None

    during = until(busy, 120, "the job in flight on an actor")
    actor = next(a for a in during["actors"] if job in a["jobs_in_flight"])
    assert actor["state"] == "busy" and during["jobs_in_flight"] == 1 and actor["queued_frames"] <= 100

    def done():
        j = httpx.get(f"{server.url}/v1/renders/{job}", headers=AUTH, timeout=30).json()
        return j if j["state"] in ("done", "failed") else None

    assert until(done, 300, "the job's end")["state"] == "done"

    def counted():  # the head reads its actors' counts every quarter second
        s = httpx.get(f"{server.url}/v1/farm", headers=AUTH, timeout=30).json()
        return s if sum(a["frames_done"] for a in s["actors"]) >= 100 else None

    after = until(counted, 30, "the job's frames counted")
    by_name = {a["name"]: a for a in after["actors"]}
    assert by_name[actor["name"]]["frames_done"] == 100 and after["jobs_in_flight"] == 0
    assert sum(a["frames_done"] for a in after["actors"]) == 100
    # the metrics: every name, a series per actor with its labels, the values the endpoint shows
    text = httpx.get(f"{server.url}/metrics", headers=AUTH, timeout=30).text
    assert re.search(r"^studio_farm_nodes_alive 3\.0$", text, re.M), text[-2000:]
    for name in ("frames_per_second", "jobs_in_flight", "queued_frames", "frames_total"):
        rows = re.findall(
            rf'^studio_farm_actor_{name}\{{actor="([^"]+)",device="cpu",node="([^"]+)"\}} (\S+)$', text, re.M
        )
        assert {(a, n) for a, n, _ in rows} == {(a["name"], a["node"]) for a in after["actors"]}, (name, rows)
    done_rows = re.findall(r'^studio_farm_actor_frames_total\{actor="([^"]+)",[^}]*\} (\S+)$', text, re.M)
    assert {a: float(v) for a, v in done_rows} == {a["name"]: float(a["frames_done"]) for a in after["actors"]}


def test_cli_farm_status_from_the_server_and_from_ray(farm):
    cluster, server = farm
    r = cli("--server", server.url, "--json", env={"STUDIO_SERVER_TOKEN": TOKEN})
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["address"] == cluster.address and len(info["actors"]) == 2 and info["nodes_alive"] == 3
    r = cli("--server", server.url, env={"STUDIO_SERVER_TOKEN": TOKEN})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"farm {cluster.address} (via {server.url}): 3 node(s), 2 CPUs, 0 GPUs;")
    assert "render actors: 2" in lines and sum(": cpu, idle, warm: " in x for x in lines) == 2, r.stdout
    r = cli("--address", cluster.address)  # Ray's own view: the nodes, and the actors asked directly
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "farm: 3 node(s), 2 CPUs (0 free), 0 GPUs (0 free)", r.stdout
    assert "render actors: 2" in lines and sum("jobs in flight: 0; 0 frames/s" in x for x in lines) == 2, r.stdout
    r = cli("--server", server.url)  # no token
    assert r.returncode == 2 and "its token" in r.stderr.strip().splitlines()[-1]


def test_a_server_without_a_farm_says_so_in_one_sentence(tmp_path):
    with Server(tmp_path / "home", "--token", TOKEN, token=TOKEN) as s:
        r = httpx.get(f"{s.url}/v1/farm", timeout=30)
        assert r.status_code == 401 and r.json() == {
            "error": "this server needs its token: send 'Authorization: Bearer TOKEN'"
        }
        r = httpx.get(f"{s.url}/v1/farm", headers=AUTH, timeout=30)
        assert r.status_code == 409 and r.json() == {"error": NO_FARM}
        assert "studio_farm_" not in httpx.get(f"{s.url}/metrics", headers=AUTH, timeout=30).text
        # a render asking for the farm: well formed, refused by this server's state (409, not 422)
        r = httpx.post(
            f"{s.url}/v1/renders",
            headers=AUTH,
            data={"avatar": "anyone", "audio_id": "0" * 16, "placement": "farm"},
            timeout=30,
        )
        assert r.status_code == 409 and r.json() == {
            "error": "placement=farm needs a server started with --farm; leave placement out"
        }
        r = cli("--server", s.url, env={"STUDIO_SERVER_TOKEN": TOKEN})
        assert r.returncode == 2 and r.stderr.strip().splitlines()[-1] == f"studio: error: the server says: {NO_FARM}"


def test_farm_status_lists_the_replicas_of_every_face():
    """`studio farm status --address` lists the replicas of `studio serve --farm` heads and the warm,
    detached ones `studio render --farm` and the window leave on a `studio farm up` cluster (one
    dispatcher names them both), and nothing else of the namespace."""
    from studio.core.scale.farm import DETACHED_PREFIX
    from studio.service.farm_admin import SERVE_ACTOR

    detached = SERVE_ACTOR.match(f"{DETACHED_PREFIX}-0a1b2c3d-gpu1")
    assert detached is not None and (detached["node"], detached["kind"]) == ("0a1b2c3d", "gpu")
    served = SERVE_ACTOR.match("studio-serve-1a2b3c4d-0a1b2c3d-cpu0-9f9f")  # a successor of a dead one
    assert served is not None and (served["node"], served["kind"]) == ("0a1b2c3d", "cpu")
    assert SERVE_ACTOR.match("studio-other-0a1b2c3d-gpu1") is None and SERVE_ACTOR.match("studio-farm-x-gpu1") is None

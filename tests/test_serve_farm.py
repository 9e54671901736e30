"""``studio serve --farm`` on a real local Ray cluster of three nodes (issue 37), talked to over HTTP.

The test starts the cluster itself (``tests/ray_cluster.py``: a head without CPUs, so no actor
runs there, and two worker nodes of one CPU each, with a data folder of their own: the finished
files travel back to the head), under a temporary folder and a token of its own, and kills only
the processes it started. A real ``studio serve --farm ADDR --jobs-per-device 2`` process on 127.0.0.1
renders classic-engine jobs of 2-4 s on the nodes' actors. Covered: dispatch by frames queued and
never over an actor's capacity, the files streamed back and checked (SHA-256, frames), progress over
SSE from a remote worker, a worker node removed mid-job (rendered once more elsewhere, one file,
nothing partial on the head or the workers), a node joining (it gets work without a restart), and
the head stopped with jobs in flight (running ones come back interrupted, queued ones stay queued
and render after the restart), and an actor given its next job once the previous one's frames have
left its engine (while that one's file is still finishing).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import pytest
from conftest import ROOT, prepare_demo_avatar, speech_pause_speech
from ray_cluster import LocalRayCluster
from served import Hold

from studio.service.serve_process import ServeProcess

pytest.importorskip("ray", reason="the farm needs Ray: pip install 'studio[farm]' (ray is not installed)")
httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")

FORM = {"avatar": "astro", "engine": "classic", "batch": "8", "preset": "ultrafast"}


RAY_ENV = ("RAY_TMPDIR", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN")  # the test cluster's, set while it runs
FAST_HEALTH = {"health_check_period_ms": 500, "health_check_failure_threshold": 3, "health_check_initial_delay_ms": 0}


class Farm(LocalRayCluster):
    """The test's cluster: a head without CPUs and two worker nodes sharing a data folder of their own."""

    def __init__(self, root: Path):
        super().__init__(head_system_config=FAST_HEALTH)  # a node killed is seen within seconds
        self.root = root
        self.workers_home = root / "workers"
        self.workers_home.mkdir()
        self.hold_path = root / "test-hold"  # the actors' renders hold while a test holds it (served.Hold)
        self.start([])
        self.nodes = [self.add_tagged("node_a"), self.add_tagged("node_b")]

    def add_tagged(self, tag: str) -> str:
        env = {"STUDIO_HOME": str(self.workers_home), "PYTHONPATH": str(ROOT), "STUDIO_TEST_HOLD": str(self.hold_path)}
        return self.add_node(1, {tag: 1}, env).node_id

    def remove(self, node_id: str) -> None:
        """Kill the node's processes at once (no drain): a host lost."""
        self.kill_node(next(n for n in self.workers if n.node_id == node_id))

    def node_of(self, actor: str) -> str:
        """The node an actor runs on (its name holds the node id's first 8 digits)."""
        prefix = actor.split("-")[3]
        return next(n for n in self.nodes if n.startswith(prefix))

    def serve_env(self, home: Path) -> dict:
        return dict(os.environ, STUDIO_HOME=str(home), PYTHONPATH=str(ROOT), STUDIO_FARM_DISCOVER_S="1")


@pytest.fixture(scope="module")
def farm():
    root = Path(tempfile.mkdtemp(prefix="sfarm", dir="/tmp"))
    f = None
    try:
        f = Farm(root)
        yield f
    finally:
        if f is not None:
            f.shutdown()  # every process it started, by pid
            left = f.leftovers()
        shutil.rmtree(root, ignore_errors=True)
    assert not left, f"Ray processes left after the teardown: {left}"


@pytest.fixture(scope="module")
def home(farm):
    home = farm.root / "head"
    home.mkdir()
    prepare_demo_avatar(home, "astro")
    return home


@pytest.fixture(scope="module")
def voices(farm):
    folder = farm.root / "voices"
    folder.mkdir()
    return {
        "long": speech_pause_speech(folder / "long.wav", 1.8, 0.4, 1.8),  # 4 s: 100 frames
        "short": speech_pause_speech(folder / "short.wav", 0.8, 0.4, 0.8),  # 2 s: 50 frames
        "mid": speech_pause_speech(folder / "mid.wav", 1.3, 0.4, 1.3),  # 3 s: 75 frames
        "slow": speech_pause_speech(folder / "slow.wav", 4.8, 0.4, 4.8),  # 10 s: 250 frames, time to pull a node
    }


def start_server(home: Path, farm: Farm, jobs_per_device: int = 2) -> ServeProcess:
    args = ("--farm", farm.address, "--jobs-per-device", str(jobs_per_device))
    srv = ServeProcess(home, farm.serve_env(home), args, timeout=180, cwd=ROOT)
    deadline = time.monotonic() + 180
    said = ""
    while time.monotonic() < deadline:
        r = httpx.get(srv.url + "/v1/ready", timeout=10)
        if r.status_code == 200:
            return srv
        said = r.text
        time.sleep(0.5)
    srv.stop()
    raise AssertionError(f"studio serve --farm was not ready within 180 s ({said}): {srv.log_tail()}")


@pytest.fixture(scope="module")
def server(farm, home):
    srv = start_server(home, farm)
    try:
        yield srv
    finally:
        srv.stop()


def post(srv, voice: Path, **fields) -> int:
    with open(voice, "rb") as v:
        r = httpx.post(
            srv.url + "/v1/renders", data={**FORM, **fields}, files={"audio": (voice.name, v, "audio/wav")}, timeout=60
        )
    assert r.status_code == 202, r.text
    return r.json()["id"]


def job(srv, job_id: int) -> dict:
    return httpx.get(f"{srv.url}/v1/renders/{job_id}", timeout=30).json()


def wait_final(srv, ids, timeout: float = 150) -> dict[int, dict]:
    deadline = time.monotonic() + timeout
    out: dict[int, dict] = {}
    while time.monotonic() < deadline:
        out = {i: job(srv, i) for i in ids}
        if all(j["state"] in ("done", "failed", "cancelled", "interrupted") for j in out.values()):
            return out
        time.sleep(0.5)
    raise AssertionError(f"jobs not finished in {timeout:.0f} s: {[(i, j['state']) for i, j in out.items()]}")


def events(srv, job_id: int, until=None) -> list[tuple[str, dict]]:
    """The job's SSE events until its final state (or until ``until(kind, data)`` says stop)."""
    seen: list[tuple[str, dict]] = []
    kind = ""
    with httpx.stream("GET", f"{srv.url}/v1/renders/{job_id}/events", timeout=180) as s:
        for line in s.iter_lines():
            if line.startswith("event:"):
                kind = line.split(":", 1)[1].strip()
            elif line.startswith("data:"):
                data = json.loads(line.split(":", 1)[1])
                seen.append((kind, data))
                if until is not None and until(kind, data):
                    break
                if kind == "state" and data["state"] in ("done", "failed", "cancelled", "interrupted"):
                    break
    return seen


def frames_of(path: Path) -> int:
    import av

    with av.open(str(path)) as c:
        return sum(1 for _ in c.decode(video=0))


def no_temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("*") if p.name.startswith("."))


def clean_worker_renders(farm: Farm, timeout: float = 20) -> list[str]:
    """The workers' renders/ folder once the head has taken every file (discard is asynchronous)."""
    folder = farm.workers_home / "renders"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = sorted(p.name for p in folder.glob("*")) if folder.is_dir() else []
        if not left:
            return []
        time.sleep(0.25)
    return left


def test_jobs_spread_by_frames_queued_come_back_checksummed_with_sse_progress(server, home, voices, farm):
    ids = [post(server, voices["long"])] + [post(server, voices["short"]) for _ in range(4)]
    seen = events(server, ids[0])
    progress = [d for k, d in seen if k == "progress" and 0 < d["done"] < d["total"]]
    assert progress and all(d["total"] == 100 for d in progress), seen  # frames done on a remote worker
    assert all(set(d["workers"]) and next(iter(d["workers"])).startswith("studio-serve-") for d in progress)
    jobs = wait_final(server, ids)
    assert [j["state"] for j in jobs.values()] == ["done"] * 5, [j["reason"] for j in jobs.values()]
    farm_of = {i: j["result"]["farm"] for i, j in jobs.items()}
    # the long job took one actor; the next went to the other (fewer frames queued), and so did the
    # third: 50 frames queued there against the long job's ~100
    a, b, c = (farm_of[i]["actor"] for i in ids[:3])
    assert a != b and c == b, farm_of
    assert all(f["in_flight_at_start"] <= 2 for f in farm_of.values()), farm_of  # never over capacity
    assert len({f["actor"] for f in farm_of.values()}) == 2
    for i, j in jobs.items():
        f = farm_of[i]
        assert f["returned"] == "streamed" and f["attempts"] == 1 and f["lost"] == []
        out = home / "renders" / j["output"]
        data = out.read_bytes()
        assert len(data) == f["bytes"] and hashlib.sha256(data).hexdigest() == f["sha256"]
        assert frames_of(out) == j["result"]["frames"] == (100 if i == ids[0] else 50)
        assert j["result"]["ran_on"].startswith("farm: studio-serve-")
    assert len({j["output"] for j in jobs.values()}) == 5
    assert no_temporaries(home / "renders") == []
    assert clean_worker_renders(farm) == []  # the workers' copies are gone once the head has them


def test_a_worker_node_removed_mid_job_is_rendered_once_more_elsewhere_leaving_one_file(server, home, voices, farm):
    before = set((home / "renders").glob("*"))
    job_id = post(server, voices["slow"], batch="4")
    seen = events(server, job_id, until=lambda k, d: k == "progress" and d["done"] > 0 and d.get("workers"))
    actor = next(iter(seen[-1][1]["workers"]))
    node = farm.node_of(actor)
    farm.remove(node)  # its raylet and worker processes: killed
    farm.nodes.remove(node)
    j = wait_final(server, [job_id])[job_id]
    assert j["state"] == "done", j["reason"]
    f = j["result"]["farm"]
    assert f["attempts"] == 2 and f["lost"] == [actor] and f["actor"] != actor, f
    new = set((home / "renders").glob("*")) - before
    assert [p.name for p in new] == [j["output"]] and frames_of(home / "renders" / j["output"]) == 250
    assert hashlib.sha256((home / "renders" / j["output"]).read_bytes()).hexdigest() == f["sha256"]
    assert no_temporaries(home / "renders") == []
    # the dead worker's temporary was swept by the next job on that data folder, the retry's own taken
    assert clean_worker_renders(farm) == []


def test_a_node_joining_gets_work_without_a_restart(server, home, voices, farm):
    node = farm.add_tagged("node_c")
    farm.nodes.append(node)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # its actor starts within a discovery round and a process start
        ids = [post(server, voices["short"]), post(server, voices["short"])]
        jobs = wait_final(server, ids)
        assert all(j["state"] == "done" for j in jobs.values()), [j["reason"] for j in jobs.values()]
        if any(j["result"]["farm"]["node"] == node for j in jobs.values()):
            return
        time.sleep(1)
    raise AssertionError("the node that joined never got a job")


def test_the_head_stopped_with_jobs_in_flight_interrupts_the_running_and_keeps_the_queued(server, home, voices, farm):
    before = set((home / "renders").glob("*"))
    ids = [post(server, voices["mid"]) for _ in range(6)]  # 2 actors x 2 slots: 4 run, 2 wait
    events(server, ids[0], until=lambda k, d: k == "progress" and d["done"] > 0)
    states = {i: job(server, i)["state"] for i in ids}
    running = [i for i, s in states.items() if s == "running"]
    queued = [i for i, s in states.items() if s == "queued"]
    assert running and queued and len(running) <= 4, states
    server.stop()  # SIGTERM: the running jobs stop within a batch, nothing is written
    again = start_server(home, farm)
    try:
        after = {i: job(again, i)["state"] for i in running}
        assert set(after.values()) == {"interrupted"}, after
        jobs = wait_final(again, queued)
        assert all(j["state"] == "done" for j in jobs.values()), [j["reason"] for j in jobs.values()]
    finally:
        again.stop()
    new = sorted(p.name for p in set((home / "renders").glob("*")) - before)
    assert new == sorted(j["output"] for j in jobs.values())  # the queued jobs' files, nothing of the others
    assert clean_worker_renders(farm) == []


def test_placement_farm_splits_one_clip_over_the_actors(farm, home, voices):
    """``placement=farm``: one clip in chunks over the actors, joined on the head."""
    srv = start_server(home, farm)
    try:
        job_id = post(srv, voices["long"], placement="farm")
        j = wait_final(srv, [job_id])[job_id]
        assert j["state"] == "done", j["reason"]
        assert j["result"]["farm"]["chunks"] is True and "segments" in j["result"]["encoder"]
        assert frames_of(home / "renders" / j["output"]) == 100
    finally:
        srv.stop()


def in_flight_becomes(srv, want: set[int], timeout: float = 180) -> set[int]:
    """The jobs holding a replica slot (``GET /v1/farm``) once they are ``want``: a lasting state while
    the test holds every render, so polling cannot miss it."""
    deadline = time.monotonic() + timeout
    now: set[int] = set()
    while time.monotonic() < deadline:
        actors = httpx.get(srv.url + "/v1/farm", timeout=30).json()["actors"]
        now = {j for a in actors if a["state"] != "dead" for j in a["jobs_in_flight"]}
        if now == want:
            return now
        time.sleep(0.05)
    raise AssertionError(f"the farm holds {sorted(now)}, not {sorted(want)}")


def test_the_farm_claims_jobs_in_the_schedulers_order(farm, home, voices):
    """Issue 48 on ``serve --farm``: the queue claims in its scheduler's order (lanes, then fair shares)
    when a replica slot frees. Both slots are held by normal jobs (``--jobs-per-device 1``, two
    replicas); two bulk jobs and then a breaking one wait; each cancel frees one slot: the breaking job
    takes the first, the first bulk job the second."""
    srv = start_server(home, farm, jobs_per_device=1)
    try:
        with Hold(farm.hold_path):  # every render stops after its first batch: the slots stay taken
            normal = [post(srv, voices["mid"]) for _ in range(2)]
            in_flight_becomes(srv, set(normal))
            bulk = [post(srv, voices["short"], priority="bulk") for _ in range(2)]
            breaking = post(srv, voices["short"], priority="breaking")
            assert {i: job(srv, i)["state"] for i in [*bulk, breaking]} == dict.fromkeys([*bulk, breaking], "queued")
            assert httpx.delete(f"{srv.url}/v1/renders/{normal[0]}", timeout=30).status_code == 200
            in_flight_becomes(srv, {normal[1], breaking})  # the breaking job, though queued last
            assert [job(srv, i)["state"] for i in bulk] == ["queued", "queued"]
            assert httpx.delete(f"{srv.url}/v1/renders/{normal[1]}", timeout=30).status_code == 200
            in_flight_becomes(srv, {breaking, bulk[0]})  # then the bulk jobs, in queue order
        jobs = wait_final(srv, [*bulk, breaking])
    finally:
        srv.stop()
    assert [jobs[i]["state"] for i in [*bulk, breaking]] == ["done"] * 3, [j["reason"] for j in jobs.values()]
    assert jobs[breaking]["priority"] == "breaking" and jobs[bulk[0]]["priority"] == "bulk"


def test_an_actor_takes_its_next_job_while_the_last_ones_file_finishes(farm, home, voices):
    """``--jobs-per-device 1``: once a job's frames have left its actor's engine (its file still being
    encoded, muxed and streamed back), the actor takes the next job, so for a while it holds two
    (``GET /v1/farm``): the later one started before the earlier one's file was written. Never more
    than one on the engine and one finishing."""
    srv = start_server(home, farm, jobs_per_device=1)
    seen: list[dict[str, list[int]]] = []
    stop = threading.Event()
    overlap: tuple[str, list[int]] | None = None

    def watch() -> None:
        while not stop.is_set():
            with_jobs = httpx.get(srv.url + "/v1/farm", timeout=30).json()["actors"]
            seen.append({a["name"]: list(a["jobs_in_flight"]) for a in with_jobs})
            time.sleep(0.02)

    t = threading.Thread(target=watch, daemon=True)
    try:
        t.start()
        # every job stops after its last frame, before its file is written: the actor must take the next
        # job meanwhile (held, the overlap lasts until the test lets go: no window to catch by polling)
        with Hold(farm.hold_path, "finish"):
            ids = [post(srv, voices["mid"], preset="medium") for _ in range(6)]  # 2 actors x 1 slot: 4 wait
            overlap = held_twice(srv)
        jobs = wait_final(srv, ids)
    finally:
        stop.set()
        t.join(30)
        srv.stop()
    assert all(j["state"] == "done" for j in jobs.values()), [j["reason"] for j in jobs.values()]
    assert all(frames_of(home / "renders" / j["output"]) == 75 for j in jobs.values())
    assert max(len(held) for snap in seen for held in snap.values()) <= 2  # one on the engine, one finishing
    actor, held = overlap
    first, second = sorted(held)  # the earlier job finishing, the later one on the engine, on one actor
    assert jobs[first]["result"]["farm"]["actor"] == jobs[second]["result"]["farm"]["actor"] == actor


def held_twice(srv, timeout: float = 180) -> tuple[str, list[int]]:
    """An actor holding two jobs (one finishing its file, the next on the engine), from ``GET /v1/farm``
    while the test holds jobs at their finish (a state that lasts: polling cannot miss it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for a in httpx.get(srv.url + "/v1/farm", timeout=30).json()["actors"]:
            if len(a["jobs_in_flight"]) == 2 and a["state"] != "dead":
                return a["name"], list(a["jobs_in_flight"])
        time.sleep(0.05)
    raise AssertionError("no actor ever took a job before its previous job's file was written")


def test_an_actor_lost_while_one_job_finishes_and_the_next_renders_leaves_each_file_once(farm, home, voices):
    """``--jobs-per-device 1``: the node of an actor seen holding two jobs (one finishing its file, the
    next on the engine) is killed. Whatever each job had reached, every job ends done exactly once:
    one complete file each, nothing partial on the head, and a job the lost actor still held rendered
    once more elsewhere. A node joins first, so the cluster keeps two for the test after this one."""
    spare = farm.add_tagged("node_d")
    farm.nodes.append(spare)
    srv = start_server(home, farm, jobs_per_device=1)
    try:
        before = set((home / "renders").glob("*"))
        with Hold(farm.hold_path, "finish"):  # jobs stop before their file: the overlap lasts until the kill
            ids = [post(srv, voices["mid"], preset="medium") for _ in range(6)]
            victim, _ = held_twice(srv)
            node = farm.node_of(victim)
            farm.remove(node)  # its raylet and worker processes: killed, mid-overlap
            farm.nodes.remove(node)
        jobs = wait_final(srv, ids, timeout=240)
    finally:
        srv.stop()
    assert all(j["state"] == "done" for j in jobs.values()), [j["reason"] for j in jobs.values()]
    new = sorted(p.name for p in set((home / "renders").glob("*")) - before)
    assert new == sorted(j["output"] for j in jobs.values())  # one file a job, no other
    assert all(frames_of(home / "renders" / j["output"]) == 75 for j in jobs.values())
    assert no_temporaries(home / "renders") == []
    for j in jobs.values():
        f = j["result"]["farm"]
        assert f["actor"] != victim or f["attempts"] == 1, f  # nothing finished on the lost actor after it died
        if victim in f.get("lost", []):
            assert f["attempts"] == 2 and f["actor"] != victim, f


def test_a_job_whose_actors_are_lost_twice_fails_with_one_sentence(farm, home, voices):
    """Last: it removes the cluster's remaining worker nodes."""
    srv = start_server(home, farm)
    try:
        before = set((home / "renders").glob("*"))
        job_id = post(srv, voices["slow"], batch="4")
        lost: list[str] = []

        def working_elsewhere(kind, data) -> bool:
            return kind == "progress" and data["done"] > 0 and bool(set(data.get("workers", {})) - set(lost))

        for _ in range(2):
            seen = events(srv, job_id, until=working_elsewhere)
            actor = next(iter(seen[-1][1]["workers"]))
            lost.append(actor)
            node = farm.node_of(actor)
            farm.remove(node)
            farm.nodes.remove(node)
        j = wait_final(srv, [job_id])[job_id]
        assert j["state"] == "failed" and j["reason"].startswith("The job failed twice as its farm workers were lost")
        assert j["reason"].count(". ") == 0 and j["reason"].endswith(".")
        assert set((home / "renders").glob("*")) == before  # nothing written, nothing partial
    finally:
        srv.stop()


def test_serve_farm_without_an_address_starts_a_local_cluster_and_renders_in_place(tmp_path, voices):
    """``--farm`` alone: no farm runs here (a Ray folder of the test's own), so the server starts a local
    cluster; its actors share the head's data folder and write the file in place. Its Ray processes
    end with the server, and not before (they die with the thread that started them: the farm's own)."""
    import subprocess

    home = tmp_path / "home"
    home.mkdir()
    prepare_demo_avatar(home, "astro")
    ray_dir = Path(tempfile.mkdtemp(prefix="sfl", dir="/tmp"))
    env = {k: v for k, v in os.environ.items() if k not in RAY_ENV}  # not the test cluster's token
    env.update(STUDIO_HOME=str(home), PYTHONPATH=str(ROOT), RAY_TMPDIR=str(ray_dir))
    srv = ServeProcess(home, env, ("--farm",), timeout=180, cwd=ROOT)
    try:
        deadline = time.monotonic() + 180
        while httpx.get(srv.url + "/v1/ready", timeout=60).status_code != 200:
            assert time.monotonic() < deadline, srv.log_tail()
            time.sleep(0.5)
        job_id = post(srv, voices["short"])
        j = wait_final(srv, [job_id])[job_id]
        assert j["state"] == "done", j["reason"]
        assert j["result"]["farm"]["returned"] == "in place" and frames_of(home / "renders" / j["output"]) == 50
    finally:
        srv.stop()
        time.sleep(2)
        left = subprocess.run(["pgrep", "-f", str(ray_dir)], capture_output=True, text=True).stdout.split()
        shutil.rmtree(ray_dir, ignore_errors=True)
    assert left == []  # no Ray process of that local cluster outlived the server

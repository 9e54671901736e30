"""A server that keeps promises (issue 48): lanes, weighted fair shares, deadlines, measured.

A real ``studio serve`` process (the classic engine on the CPU) and real HTTP clients, one per named
client of a ``--clients`` file with weights 1/1/2/4. Nothing here depends on timing: every job is
queued while the runner is held at a gate file (``STUDIO_QUEUE_GATE``), then let go at once, and the
shares are measured from the server's own record of every engine call (``GET /v1/scheduler``), in
windows of engine calls, not of seconds."""

from __future__ import annotations

import collections
import os
import re
import time

import pytest
import soundfile as sf
from conftest import DEMO_AVATAR, speechlike
from served import Server

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")

ADMIN_T = "admin-token-0123456789"
WEIGHTS = {"a": 1, "b": 1, "c": 2, "d": 4}
TOKENS = {name: f"client-{name}-token-0123456789" for name in WEIGHTS}
WINDOW = 80  # engine calls per window (8 frames each on a CPU: 640 frames, the weight-1 clients' 80)


def wav(path, seconds: float, seed: int) -> str:
    sf.write(path, speechlike(seconds, 16_000, seed=seed), 16_000, subtype="PCM_16")
    return str(path)


@pytest.fixture(scope="module")
def voices(tmp_path_factory):
    d = tmp_path_factory.mktemp("voices")
    return {s: wav(d / f"v{s}.wav", s, seed=s) for s in (2, 10, 20, 60)}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("promises_home")
    conf = home.parent / "promises_clients.toml"
    conf.write_text(
        "".join(
            f'[clients.{n}]\ntoken = "{TOKENS[n]}"\nscopes = ["submit", "read"]\nweight = {w}\n\n'
            for n, w in WEIGHTS.items()
        )
    )
    gate = home.parent / "promises_gate"
    old = os.environ.get("STUDIO_QUEUE_GATE")
    os.environ["STUDIO_QUEUE_GATE"] = str(gate)
    try:
        s = Server(home, "--token", ADMIN_T, "--clients", str(conf), "--jobs-per-device", "4", token=ADMIN_T)
    finally:
        if old is None:
            os.environ.pop("STUDIO_QUEUE_GATE", None)
        else:
            os.environ["STUDIO_QUEUE_GATE"] = old
    s.gate = gate
    with httpx.Client(base_url=s.url, headers=bearer(ADMIN_T), timeout=120) as admin:
        with open(DEMO_AVATAR, "rb") as fh:
            r = admin.post("/v1/avatars", data={"name": "astro"}, files={"file": ("a.png", fh)})
        assert r.status_code == 201, r.text
        s.admin = admin
        yield s
    s.stop()


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def as_(server, who: str):
    return httpx.Client(base_url=server.url, headers=bearer(TOKENS[who]), timeout=120)


def post(c, voice: str, expect: int = 202, headers: dict | None = None, **fields):
    with open(voice, "rb") as fh:
        r = c.post(
            "/v1/renders",
            data={"avatar": "astro", "engine": "classic", **{k: str(v) for k, v in fields.items()}},
            files={"audio": ("v.wav", fh)},
            headers=headers or {},
        )
    assert r.status_code == expect, r.text
    return r


def wait(c, job_id: int, states=("done", "failed", "cancelled", "interrupted"), timeout: float = 900) -> dict:
    """Until the job is in one of ``states`` (the server's answer; the timeout only stops a hung test)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        j = c.get(f"/v1/renders/{job_id}").json()
        if j["state"] in states:
            return j
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} never reached {states}")


def wait_contention(server, since: float, n: int, timeout: float = 900) -> list:
    """The first ``n`` engine calls (the server's record) from the one where every client had been
    served once (all four in contention), waiting until there are that many."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        calls = server.admin.get("/v1/scheduler", params={"since": since}).json()["calls"]
        firsts = [next((k for k, c in enumerate(calls) if c[1] == name), None) for name in WEIGHTS]
        if None not in firsts:
            k0 = max(k for k in firsts if k is not None)
            if len(calls) - k0 >= n:
                return calls[k0 : k0 + n]
        time.sleep(0.5)
    raise AssertionError(f"fewer than {n} engine calls were served with every client in")


def open_gate(server) -> None:
    server.gate.write_text("go")


def close_gate(server) -> None:
    server.gate.unlink(missing_ok=True)


def test_weighted_clients_get_their_shares_in_every_window_of_contention(server, voices):
    """4 clients, weights 1/1/2/4, each posting mixed 2-60 s jobs: while all four have work, every
    window of WINDOW engine calls gives each within 2x of its weighted share of the frames."""
    close_gate(server)
    plans = {"a": (2, 20, 10), "b": (20, 2, 10), "c": (2, 20, 20), "d": (60, 2)}
    mine: dict[str, list[int]] = {}
    clients = {n: as_(server, n) for n in WEIGHTS}
    try:
        for n, lengths in plans.items():
            mine[n] = [post(clients[n], voices[s]).json()["id"] for s in lengths]
        since = server.admin.get("/v1/scheduler").json()["now"]
        open_gate(server)
        calls = wait_contention(server, since, 3 * WINDOW)
        for n in WEIGHTS:  # the rest is not needed: cancelled (queued ones and running ones)
            for i in mine[n]:
                clients[n].delete(f"/v1/renders/{i}")
        for n in WEIGHTS:
            for i in mine[n]:
                wait(clients[n], i)
    finally:
        for c in clients.values():
            c.close()
    total = sum(WEIGHTS.values())
    worst = 0.0
    for k in range(len(calls) - WINDOW + 1):
        frames: collections.Counter = collections.Counter()
        for c in calls[k : k + WINDOW]:
            frames[c[1]] += c[3]
        served = sum(frames.values())
        for n, w in WEIGHTS.items():
            want, got = served * w / total, frames[n]
            assert got > 0, f"client {n} got nothing in calls {k}..{k + WINDOW}"
            worst = max(worst, got / want, want / got)
    print(f"weights 1/1/2/4, {len(calls)} engine calls of contention: the worst window {worst:.2f}x off")
    assert worst <= 2.0, f"a client's share was {worst:.2f}x off its weighted share"
    snap = server.admin.get("/v1/scheduler").json()
    assert {n: snap["clients"][n]["weight"] for n in WEIGHTS} == WEIGHTS


def test_a_breaking_job_behind_twelve_long_ones_goes_first_and_bulk_still_progresses(server, voices):
    """12 long jobs (4 rendering, the server's --jobs-per-device, and 8 queued) and a bulk one; a
    breaking 2 s job starts at once beside them, its batches go first but for the minimum share of
    the lanes below (10 % each), none of the 8 queued starts before it is done, and the bulk job,
    which got its lane's own slot beside the normal ones, progresses and finishes."""
    close_gate(server)
    a, d = as_(server, "a"), as_(server, "d")
    try:
        longs = [post(c, voices[60]).json()["id"] for c in (a, d) * 6]
        bulk = post(a, voices[20], priority="bulk").json()
        assert bulk["priority"] == "bulk"
        since = server.admin.get("/v1/scheduler").json()["now"]
        open_gate(server)
        wait_first_frame(a, bulk["id"])
        breaking = post(d, voices[2], priority="breaking").json()
        assert breaking["priority"] == "breaking"
        done = wait(d, breaking["id"])
        assert done["state"] == "done", done
        assert done["first_frame_s"] is not None and done["queue_s"] is not None
        states = collections.Counter(server.admin.get(f"/v1/renders/{i}").json()["state"] for i in longs)
        assert states == {"running": 4, "queued": 8}, states  # not one of the queued ones started first
        # the server's record of each engine call: [t, client, lane, frames, job, calls it waited, top lane queued]
        calls = server.admin.get("/v1/scheduler", params={"since": since}).json()["calls"]
        mine = [c for c in calls if c[4] == breaking["id"]]
        frames_b = sum(c[3] for c in mine)
        assert frames_b > 0 and all(c[5] <= 2 for c in mine), (
            mine
        )  # each batch: at most one owed batch a lane below first
        # a lower lane's batch taken while a breaking one waited: only its minimum share (10 %, a batch at a time)
        for lane in (50, 0):
            owed = sum(c[3] for c in calls if c[2] == lane and c[6] == 100)
            assert owed <= 0.1 / 0.9 * frames_b + 8, (lane, owed, frames_b)
        served_bulk = sum(c[3] for c in calls if c[4] == bulk["id"])
        served_all = sum(c[3] for c in calls)
        assert served_bulk > 0
        for i in longs:
            server.admin.delete(f"/v1/renders/{i}")
        b = wait(a, bulk["id"])
        assert b["state"] == "done", b  # nothing starves
        lanes = server.admin.get("/v1/scheduler").json()["lanes"]
        assert lanes["breaking"]["frames"] >= frames_b and lanes["bulk"]["frames"] >= served_bulk
        assert served_all > served_bulk
    finally:
        a.close()
        d.close()


def wait_first_frame(c, job_id: int, timeout: float = 600) -> dict:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        j = c.get(f"/v1/renders/{job_id}").json()
        if j.get("first_frame_s") is not None:
            return j
        assert j["state"] in ("queued", "running"), j
        time.sleep(0.1)
    raise AssertionError("no first frame")


def test_an_impossible_deadline_is_refused_and_an_accepted_one_is_kept(server, voices):
    open_gate(server)
    c = as_(server, "b")
    try:
        warm = wait(c, post(c, voices[2]).json()["id"])  # the speed is known from finished jobs
        assert warm["state"] == "done"
        r = post(c, voices[60], expect=429, deadline_s=0.5)
        body = r.json()
        assert list(body) == ["error"] and "\n" not in body["error"] and "deadline" in body["error"]
        assert int(r.headers["Retry-After"]) >= 1
        r = post(c, voices[60], expect=429, headers={"Cancel-After": "0.5"})
        assert "deadline" in r.json()["error"]
        bad = post(c, voices[2], expect=422, headers={"Cancel-After": "soon"})
        assert "Cancel-After" in bad.json()["error"]
        ok = post(c, voices[2], deadline_s=600).json()
        assert ok["deadline"] > time.time() and ok["promised_s"] is not None and ok["promised_s"] < 600
        done = wait(c, ok["id"])
        assert done["state"] == "done" and done["result"]["deadline_met"] is True
        assert done["updated"] <= ok["deadline"]
        # accepted, then held (the runner at its gate): cancelled at its deadline, never done late
        close_gate(server)
        r = post(c, voices[2], expect=429, deadline_s=1)
        need = int(re.search(r"at least (\d+) s", r.json()["error"]).group(1))
        late = post(c, voices[2], deadline_s=need).json()
        missed = wait(c, late["id"])
        assert missed["state"] == "cancelled" and "deadline" in missed["reason"], missed
    finally:
        open_gate(server)
        c.close()


def test_the_metrics_series_exist_and_count_right(server):
    text = server.admin.get("/metrics").text
    jobs = server.admin.get("/v1/renders", params={"limit": 500}).json()["renders"]
    snap = server.admin.get("/v1/scheduler").json()
    for n in WEIGHTS:
        done = [j for j in jobs if j["client"] == n and j["state"] == "done"]
        assert sample(text, "studio_job_queue_seconds_count", client=n) == len(done)
        assert sample(text, "studio_job_first_frame_seconds_count", client=n) == len(done)
        assert sample(text, "studio_client_frames_served_total", client=n) == snap["clients"][n]["frames"]
        assert sample(text, "studio_client_weight", client=n) == WEIGHTS[n]
    assert sample(text, "studio_jobs_refused_total", reason="deadline", client="b") == 3
    assert sample(text, "studio_deadline_misses_total", client="b") == 1  # the held one, cancelled at its deadline
    assert sample(text, "studio_lane_frames_served_total", lane="bulk") == snap["lanes"]["bulk"]["frames"]


def sample(text: str, name: str, **labels) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        m = re.match(r"^([a-z_]+)\{([^}]*)\} (\S+)$", line)
        if m and m.group(1) == name and ",".join(sorted(m.group(2).split(","))) == want:
            return float(m.group(3))
    raise AssertionError(f"no {name}{{{want}}} in /metrics")


def test_priority_is_checked_on_the_form(server, voices):
    with as_(server, "a") as c:
        r = post(c, voices[2], expect=422, priority="urgent")
        assert "priority" in r.text
        r = post(c, voices[2], expect=422, deadline_s=-1)
        assert "deadline_s" in r.text


def test_the_queue_command_takes_a_lane_and_shows_it(tmp_path, monkeypatch, capsys, voices):
    """``studio queue add --priority`` on the shared queue; ``studio queue show`` tells the lane and,
    once run, the queue time and time to first frame; a bad lane is one sentence and exit 2."""
    import json

    from studio.cli import main

    monkeypatch.setenv("STUDIO_HOME", str(tmp_path / "home"))
    out = tmp_path / "out.mp4"
    base = ["queue", "add", "--avatar", str(DEMO_AVATAR), "--audio", voices[2], "-o", str(out), "--engine", "classic"]
    assert main([*base, "--priority", "urgent"]) == 2
    assert "priority 'urgent'" in capsys.readouterr().err
    assert main([*base, "--priority", "breaking"]) == 0
    job_id = int(capsys.readouterr().out.split()[-1])
    assert main(["queue", "show", str(job_id)]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["priority"] == "breaking" and shown["queue_s"] is None
    assert main(["queue", "run"]) == 0
    capsys.readouterr()
    assert main(["queue", "show", str(job_id)]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["state"] == "done" and shown["queue_s"] >= 0 and shown["first_frame_s"] >= shown["queue_s"]


def test_an_evicted_engine_is_held_by_nothing_the_queue_keeps(tmp_path, monkeypatch, voices):
    """Memory returned (issue 48): once the pool evicts the engine a finished job ran on, nothing of
    the queue's (the runner, its scheduler, a batcher view) keeps it, so its memory can go."""
    import gc
    import weakref

    from studio.core.settings import RenderSettings
    from studio.service.pool import EnginePool
    from studio.service.queue import QueueService
    from studio.service.request import RenderRequest
    from studio.service.scheduler import Scheduler

    monkeypatch.setenv("STUDIO_HOME", str(tmp_path / "home"))
    pool = EnginePool(max_engines=1)
    pool.batching = True
    qs = QueueService(tmp_path / "jobs.sqlite", pool=pool, scheduler=Scheduler())
    settings = RenderSettings(engine="classic", device="cpu")
    qs.add(RenderRequest(str(DEMO_AVATAR), voices[2], str(tmp_path / "o.mp4"), settings), priority="bulk")
    (done,) = qs.run_until_empty()
    assert done.state == "done" and done.result["queue_s"] >= 0
    (engine,) = pool.engines()
    ref = weakref.ref(engine)
    del engine
    pool.get(settings, slot=1)  # another engine: the bound (1) evicts the job's
    gc.collect()
    assert pool.evictions == 1 and ref() is None
    qs.close()

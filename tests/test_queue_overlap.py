"""The GPU kept full (issue 48 item 5), shown on the CPU with a real ``studio serve`` and the classic
engine: a job's file is finished on a finishing worker while the next job renders, the next queued
jobs are prepared while the current batches run (at most ``STUDIO_PREFETCH_JOBS``), and a burst's
first batches do not wait for the other jobs' preparation. Nothing here depends on how long a render
takes: the renders, their finishing and the preparation ahead are held on files the test releases
(``$STUDIO_TEST_HOLD``: ``served.Hold``, the ``.finish`` and ``.prefetch`` points), and the test waits
on the server's own answers."""

from __future__ import annotations

import time

import av
import pytest
from conftest import DEMO_AVATAR
from served import Hold, Server
from test_promises import wav

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")

TOKEN = "overlap-token-0123456789"
FINAL = ("done", "failed", "cancelled", "interrupted")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("overlap_home")
    s = Server(home, "--token", TOKEN, token=TOKEN)  # one job a device: the default
    with httpx.Client(base_url=s.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120) as c:
        with open(DEMO_AVATAR, "rb") as fh:
            r = c.post("/v1/avatars", data={"name": "astro"}, files={"file": ("a.png", fh)})
        assert r.status_code == 201, r.text
        end = time.monotonic() + 300  # its warm-up render (which the holds would hold too) is over
        while c.get("/v1/ready").status_code != 200:
            assert time.monotonic() < end, "the server never became ready"
            time.sleep(0.1)
        s.client = c
        s.voices = {n: wav(home.parent / f"overlap_{n}.wav", n, seed=n) for n in (2, 3, 4)}
        yield s
    s.stop()


def post(server, seconds: int) -> int:
    with open(server.voices[seconds], "rb") as fh:
        r = server.client.post(
            "/v1/renders", data={"avatar": "astro", "engine": "classic"}, files={"audio": ("v.wav", fh)}
        )
    assert r.status_code == 202, r.text
    return r.json()["id"]


def job(server, job_id: int) -> dict:
    return server.client.get(f"/v1/renders/{job_id}").json()


def until(server, job_id: int, test, what: str, timeout: float = 300) -> dict:
    """The job's JSON once ``test(json)`` holds (the timeout only stops a hung test)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        j = job(server, job_id)
        if test(j):
            return j
        time.sleep(0.05)
    raise AssertionError(f"job {job_id}: {what} never happened; last {j}")


def frames_in(server, j: dict) -> int:
    r = server.client.get(f"/v1/renders/{j['id']}/video")
    assert r.status_code == 200
    path = server.home / f"got-{j['id']}.mp4"
    path.write_bytes(r.content)
    with av.open(str(path)) as c:
        return sum(1 for _ in c.decode(video=0))


def test_the_next_job_renders_while_the_last_ones_file_is_finished(server):
    """A's frames have left the engine; its file is held on a finishing worker (the ``.finish`` point,
    before the encoders' drain and the mux close): B is claimed and renders every frame meanwhile. One
    job finishes at a time here (one slot): B, done with the engine, keeps its slot until A's file is
    done, so C waits queued (bounded memory). Released, every file is whole."""
    with server.hold_finish as held:
        a = post(server, 2)
        held.wait_held()  # A's last frame is out; its file is not written
        b, c = post(server, 3), post(server, 2)
        got = until(server, b, lambda j: (j.get("live") or {}).get("done") == 75, "B rendering all 75 frames")
        assert got["state"] == "running" and got["first_frame_s"] is not None
        assert job(server, c)["state"] == "queued"  # no third job while two hold a file each
        ja = job(server, a)
        assert ja["state"] == "running" and ja["result"] is None  # A's file is still held, unwritten
        placed = [p.name for p in (server.home / "renders").glob("*.mp4") if not p.name.startswith(".")]
        assert placed == []  # nothing in place under its name: the files are temporary (``.part``) until done
    ja, jb, jc = (until(server, i, lambda j: j["state"] in FINAL, f"job {i} done") for i in (a, b, c))
    assert ja["state"] == jb["state"] == jc["state"] == "done", (ja, jb, jc)
    assert [j["result"]["frames"] for j in (ja, jb, jc)] == [50, 75, 50]
    assert [frames_in(server, j) for j in (ja, jb, jc)] == [50, 75, 50]
    assert not list((server.home / "renders").glob(".*.part*"))  # no temporary file left behind


def test_the_next_jobs_are_prepared_while_one_renders_and_its_batches_never_wait_for_them(server):
    """A renders (held before its second batch); B is prepared ahead meanwhile (its preparation held at
    the ``.prefetch`` point). A's batches go on and A is done while B's preparation is still held: a
    first batch never waits for another job's preparation. Released, B starts with its renderer ready
    (``prepared_ahead`` in its result); A, claimed with nothing queued before it, was not."""
    prefetch = Hold(server.home / "test-hold", "prefetch")
    with server.hold as render_held, prefetch:
        a = post(server, 4)
        render_held.wait_held()  # A is rendering
        b = post(server, 2)
        prefetch.wait_held()  # B's renderer is being made ready, ahead of its claim
        render_held.release()
        ja = until(server, a, lambda j: j["state"] in FINAL, "A done while B's preparation is held")
        assert ja["state"] == "done" and ja["result"]["frames"] == 100
        assert job(server, b).get("live") is None  # B has rendered nothing: its preparation is still held
    jb = until(server, b, lambda j: j["state"] in FINAL, "B done")
    assert jb["state"] == "done" and jb["result"]["frames"] == 50
    assert jb["result"]["prepared_ahead"] is True and jb["result"]["prepare_wait_s"] >= 0
    assert ja["result"]["prepared_ahead"] is False


def test_at_most_the_limit_is_prepared_ahead_and_a_cancelled_one_is_dropped(tmp_path, monkeypatch):
    """In process, a real queue with the scheduler and a real pool: while A renders (held), of B, C, D
    queued only the next two (``STUDIO_PREFETCH_JOBS``=2) are prepared; C cancelled is dropped and D
    takes its place; every job renders, and no hold on the engine is left (the pool can evict it)."""
    from studio.core.settings import RenderSettings
    from studio.service.pool import EnginePool
    from studio.service.queue import QueueService
    from studio.service.request import RenderRequest
    from studio.service.scheduler import Scheduler

    monkeypatch.setenv("STUDIO_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("STUDIO_PREFETCH_JOBS", "2")
    hold = Hold(tmp_path / "hold")
    monkeypatch.setenv("STUDIO_TEST_HOLD", str(hold.path))
    voice = wav(tmp_path / "v.wav", 1, seed=3)
    pool = EnginePool(max_engines=1)
    pool.batching = True
    qs = QueueService(tmp_path / "jobs.sqlite", pool=pool, scheduler=Scheduler())
    settings = RenderSettings(engine="classic", device="cpu")

    def add(name):
        return qs.add(RenderRequest(str(DEMO_AVATAR), voice, str(tmp_path / f"{name}.mp4"), settings)).id

    ahead = qs.runner.prefetch
    assert ahead is not None and ahead.limit == 2
    try:
        with hold:
            a = add("a")
            qs.start()
            hold.wait_held()
            b, c, d = add("b"), add("c"), add("d")
            wait_for(lambda: ahead.prepared == 2, "two jobs prepared ahead")
            assert ahead.ahead() == [b, c]  # D waits: at most two ahead
            qs.cancel(c)
            wait_for(lambda: ahead.prepared == 3 and ahead.dropped == 1, "C dropped, D prepared")
            assert ahead.ahead() == [b, d]
            assert qs.get(a).state == "running"
        wait_for(lambda: all(qs.get(i).state == "done" for i in (a, b, d)), "A, B and D done")
        assert [qs.get(i).result["prepared_ahead"] for i in (a, b, d)] == [False, True, True]
        assert qs.get(c).state == "cancelled" and ahead.taken == 2
        pool.get(settings, slot=1)  # another engine: the bound (1) evicts the jobs' (no hold left on it)
        assert pool.evictions == 1
    finally:
        qs.close()


def wait_for(test, what: str, timeout: float = 300) -> None:
    end = time.monotonic() + timeout
    while not test():
        if time.monotonic() > end:
            raise AssertionError(f"{what} never happened")
        time.sleep(0.02)

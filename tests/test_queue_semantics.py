"""The queue's behaviour every face shares (the window, `studio queue`, `studio serve`): DELETE that
never destroys a finished video, retry as a new job, positions, and retention by age and by size
(only files Studio keeps in its data folder; a file a user named is never removed)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def home(tmp_path, monkeypatch):
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("STUDIO_HOME", str(h))
    monkeypatch.delenv("STUDIO_KEEP_RENDERS", raising=False)
    monkeypatch.delenv("STUDIO_MAX_STORAGE_GB", raising=False)
    return h


def finished(qs, output: Path, size: int, age_s: float = 0.0, audio: str = "voice.wav"):
    """A job that rendered ``output`` (``size`` bytes) ``age_s`` seconds ago, in a real jobs.sqlite."""
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_bytes(b"\0" * size)
    job = qs.store.add("astro", audio, {}, str(output), state="draft")
    qs.store.enqueue(job.id)
    claimed = qs.store.claim_next()
    assert claimed.id == job.id
    done = qs.store.finish(job.id, output=str(output), result={"frames": 25, "seconds": 1.0})
    when = time.time() - age_s
    with sqlite3.connect(qs.store.path) as db:  # the job finished that long ago (another process's write)
        db.execute("UPDATE jobs SET updated=? WHERE id=?", (when, job.id))
    os.utime(output, (when, when))
    return done


def test_delete_cancels_active_jobs_and_keeps_finished_ones_unless_purged(home, tmp_path):
    from studio.core.store.jobs import JobStore
    from studio.service.queue import JobActive, JobFinished, QueueService

    qs = QueueService(store=JobStore(tmp_path / "q.sqlite"))
    video = home / "renders" / "a.mp4"
    done = finished(qs, video, 1000)
    waiting = qs.store.add("astro", "v.wav", {}, str(home / "renders" / "b.mp4"))
    job, files = qs.delete(waiting.id)
    assert job.state == "cancelled" and files == []
    with pytest.raises(JobFinished, match="purge"):
        qs.delete(done.id)
    assert video.is_file() and qs.get(done.id).state == "done"
    with pytest.raises(JobActive):
        qs.retry(qs.store.add("astro", "v.wav", {}, str(tmp_path / "c.mp4")).id)
    job, files = qs.delete(done.id, purge=True)
    assert job is None and files == [str(video)] and not video.exists()
    assert done.id not in {j.id for j in qs.list()}


def test_retention_by_size_takes_the_oldest_first_and_never_a_users_file(home, tmp_path):
    from studio.core.store.jobs import JobStore
    from studio.service.queue import QueueService
    from studio.service.retention import Retention

    qs = QueueService(store=JobStore(tmp_path / "q.sqlite"), retention=Retention(max_bytes=2500))
    oldest = finished(qs, home / "renders" / "oldest.mp4", 1000, age_s=300)
    middle = finished(qs, home / "renders" / "middle.mp4", 1000, age_s=200)
    newest = finished(qs, home / "renders" / "newest.mp4", 1000, age_s=100)
    mine = finished(qs, tmp_path / "my-film.mp4", 5000, age_s=10_000)  # named by the user: never Studio's
    upload = home / "uploads" / "audio" / "0123456789abcdef.wav"
    upload.parent.mkdir(parents=True)
    upload.write_bytes(b"\0" * 100)
    os.utime(upload, (time.time() - 50, time.time() - 50))
    swept = qs.apply_retention()
    assert [j.id for j in swept.jobs] == [oldest.id] and swept.freed == 1000
    assert {j.id: j.state for j in qs.list()} == {
        oldest.id: "expired",
        middle.id: "done",
        newest.id: "done",
        mine.id: "done",
    }
    assert qs.get(oldest.id).result["frames"] == 25 and "expired" in qs.get(oldest.id).reason
    assert not Path(oldest.output).exists() and Path(middle.output).exists()
    assert (tmp_path / "my-film.mp4").stat().st_size == 5000 and upload.exists()


def test_retention_by_age_keeps_what_a_waiting_job_uses(home, tmp_path):
    from studio.core.store.jobs import JobStore
    from studio.service.queue import QueueService
    from studio.service.retention import Retention, parse_duration

    assert parse_duration("1d12h") == 129600 and parse_duration("90") == 90
    with pytest.raises(Exception, match="such as 7d"):
        parse_duration("soon")
    qs = QueueService(store=JobStore(tmp_path / "q.sqlite"), retention=Retention(keep_s=60))
    old = finished(qs, home / "renders" / "old.mp4", 10, age_s=120)
    recent = finished(qs, home / "renders" / "recent.mp4", 10, age_s=5)
    stale, needed = (home / "uploads" / "audio" / f"{n * 16}.wav" for n in "ab")
    stale.parent.mkdir(parents=True)
    for f in (stale, needed):
        f.write_bytes(b"x")
        os.utime(f, (time.time() - 600, time.time() - 600))
    stale.with_suffix(".json").write_text("{}")
    qs.store.add("astro", str(needed), {}, str(tmp_path / "later.mp4"))  # queued: its voice-over must stay
    qs.apply_retention()
    assert qs.get(old.id).state == "expired" and qs.get(recent.id).state == "done"
    assert not stale.exists() and not stale.with_suffix(".json").exists() and needed.exists()


def test_studio_queue_prune_and_retry_use_the_same_rules(home, tmp_path):
    from studio.core.store.jobs import JobStore
    from studio.service.queue import QueueService

    qs = QueueService(store=JobStore(home / "jobs.sqlite"))
    old = finished(qs, home / "renders" / "old.mp4", 10, age_s=7200)
    env = dict(os.environ, STUDIO_HOME=str(home), STUDIO_KEEP_RENDERS="1h", PYTHONPATH=str(ROOT))
    r = subprocess.run(
        [sys.executable, "-m", "studio", "queue", "prune"], env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    assert "1 job(s) expired, 1 file(s) removed" in r.stdout
    assert qs.get(old.id).state == "expired"
    r = subprocess.run(
        [sys.executable, "-m", "studio", "queue", "retry", str(old.id)], env=env, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    again = max(qs.list(), key=lambda j: j.id)
    assert again.retry_of == old.id and again.state == "queued" and qs.get(old.id).state == "expired"


def test_idempotency_keys_in_the_store(tmp_path):
    from studio.core.store.jobs import JobStore
    from studio.service.queue import QueueService

    qs = QueueService(store=JobStore(tmp_path / "q.sqlite"))
    assert qs.claim_key("POST /v1/renders", "k1", "fp-a") is None  # new: reserved
    busy = qs.claim_key("POST /v1/renders", "k1", "fp-a")
    assert busy["busy"] and busy["job_id"] is None
    assert qs.claim_key("POST /v1/audio", "k1", "fp-a") is None  # keys are per endpoint
    qs.finish_key("POST /v1/renders", "k1", job_id=7)
    got = qs.claim_key("POST /v1/renders", "k1", "fp-b")
    assert got == {"fingerprint": "fp-a", "job_id": 7, "answer": None, "busy": False, "created": got["created"]}
    assert qs.claim_key("POST /v1/renders", "k1", "fp-b", ttl_s=0) is None  # older than the TTL: forgotten
    qs.release_key("POST /v1/renders", "k1")
    assert qs.claim_key("POST /v1/renders", "k1", "fp-c") is None  # a failed request freed it
    # a reservation whose process died mid-request is free again after a while
    with sqlite3.connect(qs.store.path) as db:
        db.execute("UPDATE idempotency SET created=created-3600 WHERE key='k1' AND scope='POST /v1/renders'")
    assert qs.store.claim_key("POST /v1/renders", "k1", "fp-d") is None
    reopened = JobStore(tmp_path / "q.sqlite")  # kept across restarts
    assert reopened.claim_key("POST /v1/renders", "k1", "fp-d")["busy"] is True


def test_webhook_jobs_are_those_still_to_be_told(tmp_path):
    from studio.core.store.jobs import JobStore

    store = JobStore(tmp_path / "q.sqlite")
    ids = []
    for _ in range(3):
        j = store.add("astro", "v.wav", {}, "o.mp4", webhook="http://127.0.0.1/h")
        store.cancel(j.id)
        ids.append(j.id)
    store.add("astro", "v.wav", {}, "o.mp4", webhook="http://127.0.0.1/h")  # queued: nothing to tell yet
    store.add_delivery(ids[0], "cancelled", "http://127.0.0.1/h", 1, True, 204, "")  # told
    for n in (1, 2):
        store.add_delivery(ids[1], "cancelled", "http://127.0.0.1/h", n, False, 500, "HTTP 500")  # retrying
    assert [j.id for j in store.webhook_jobs()] == ids[1:]
    assert [j.id for j in store.webhook_jobs(max_attempts=2)] == [ids[2]]  # given up after 2 tries


def test_webhook_checks_are_done_jobs_whose_check_ended_and_was_not_told(tmp_path):
    from studio.core.store.jobs import JobStore

    store = JobStore(tmp_path / "q.sqlite")
    url = "http://127.0.0.1/h"
    ids = []
    for check in ({"state": "running"}, {"state": "done", "verdict": "ok"}, {"state": "failed"}, None, "damaged"):
        j = store.add("astro", "v.wav", {"check": True}, "o.mp4", webhook=url)
        store.claim_next()
        store.finish(j.id, result={"frames": 25, **({"check": check} if isinstance(check, dict) else {})})
        ids.append(j.id)
    with sqlite3.connect(store.path) as db:  # a result damaged on disk is skipped, not an error
        db.execute("UPDATE jobs SET result='{not json' WHERE id=?", (ids[4],))
    assert [j.id for j in store.webhook_checks()] == [ids[1], ids[2]]
    store.add_delivery(ids[1], "checked", url, 1, True, 204, "")
    store.add_delivery(ids[2], "checked", url, 1, False, 500, "HTTP 500")
    assert [j.id for j in store.webhook_checks()] == [ids[2]]
    assert store.webhook_checks(max_attempts=1) == []
    assert ids[1] in {j.id for j in store.webhook_jobs()}  # its render.done call is still its own


def test_a_queued_jobs_estimate_counts_the_frames_at_its_own_rate(home, tmp_path):
    """A 2 s voice-over is 50 frames at 25 fps and 120 at 60: the estimate follows the job's rate."""
    import soundfile as sf
    from conftest import tone

    from studio.core.store.jobs import JobStore
    from studio.service.queue import QueueService

    voice = tmp_path / "voice.wav"
    sf.write(voice, tone(2.0, 48_000), 48_000)
    qs = QueueService(store=JobStore(tmp_path / "q.sqlite"))
    finished(qs, tmp_path / "old.mp4", 10)  # 25 frames in 1.0 s: 0.04 s a frame
    at25 = qs.store.add("astro", str(voice), {"fps": "25"}, str(tmp_path / "a.mp4"))
    at60 = qs.store.add("astro", str(voice), {"fps": "60"}, str(tmp_path / "b.mp4"))
    ntsc = qs.store.add("astro", str(voice), {"fps": "29.97"}, str(tmp_path / "c.mp4"))
    est = qs.estimates()
    took = {j.id: est[j.id].eta_s - est[j.id].starts_in_s for j in (at25, at60, ntsc)}
    assert took[at25.id] == pytest.approx(50 * 0.04)
    assert took[at60.id] == pytest.approx(120 * 0.04)
    assert took[ntsc.id] == pytest.approx(60 * 0.04)  # ceil(2 x 30000/1001) = 60
    assert [est[j.id].position for j in (at25, at60, ntsc)] == [1, 2, 3]


def test_a_bad_retention_variable_never_stops_a_queue_from_opening(home, tmp_path, monkeypatch):
    from studio.core.errors import InputError
    from studio.core.store.jobs import JobStore
    from studio.service.queue import QueueService
    from studio.service.retention import Retention

    monkeypatch.setenv("STUDIO_KEEP_RENDERS", "forever")
    assert not QueueService(store=JobStore(tmp_path / "q.sqlite")).retention.active  # the window still opens
    with pytest.raises(InputError, match="STUDIO_KEEP_RENDERS 'forever': give a duration"):
        Retention.from_env()  # `studio queue prune`, `studio serve`: one sentence, exit 2

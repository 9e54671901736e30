"""The render queue in SQLite: states, order, retry, and what a restart finds."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys

import pytest

from studio.core.errors import InputError
from studio.core.store import jobs
from studio.core.store.jobs import JobStore


def test_default_store_lives_in_the_data_folder(studio_home):
    store = JobStore()
    assert store.path == studio_home / "jobs.sqlite"
    assert store.path.exists()


def test_jobs_run_oldest_first_and_keep_their_settings(tmp_path):
    store = JobStore(tmp_path / "q.sqlite")
    a = store.add("astronaut", "/x/a.flac", {"engine": "classic", "crf": 18}, "/out/a.mp4")
    b = store.add("astronaut", "/x/b.flac", {"engine": "auto"}, "/out/b.mp4")
    draft = store.add("astronaut", "/x/c.flac", {}, "/out/c.mp4", state=jobs.DRAFT)
    first = store.claim_next()
    assert first.id == a.id and first.state == jobs.RUNNING
    assert first.settings == {"crf": 18, "engine": "classic"}
    store.set_progress(first.id, 0.5)
    assert store.get(a.id).progress == 0.5
    store.finish(first.id, result={"fps": 31.5})
    second = store.claim_next()
    assert second.id == b.id
    store.fail(second.id, "the encoder failed")
    assert store.claim_next() is None  # the draft is not run
    store.enqueue(draft.id)
    assert store.claim_next().id == draft.id
    states = {j.id: (j.state, j.reason) for j in store.list()}
    assert states[a.id] == (jobs.DONE, "")
    assert store.get(a.id).result == {"fps": 31.5}
    assert states[b.id] == (jobs.FAILED, "the encoder failed")
    assert states[draft.id] == (jobs.RUNNING, "")


def test_retry_puts_a_failed_or_cancelled_job_back_in_the_queue(tmp_path):
    store = JobStore(tmp_path / "q.sqlite")
    job = store.add("a", "b.wav", {}, "o.mp4")
    store.claim_next()
    store.cancel(job.id)
    assert store.get(job.id).state == jobs.CANCELLED
    # a finish arriving after the cancel does not resurrect the job
    store.finish(job.id)
    assert store.get(job.id).state == jobs.CANCELLED
    again = store.retry(job.id)
    assert again.state == jobs.QUEUED and again.progress == 0
    with pytest.raises(InputError, match="cannot become"):
        store.retry(job.id)


def test_a_running_job_comes_back_interrupted_after_its_process_died(tmp_path):
    path = tmp_path / "q.sqlite"
    store = JobStore(path)
    done = store.add("a", "1.wav", {}, "1.mp4")
    store.claim_next()
    store.finish(done.id)
    running = store.add("a", "2.wav", {"crf": 23}, "2.mp4")
    waiting = store.add("a", "3.wav", {}, "3.mp4")
    # another process claims the job, then is killed mid-render
    code = (
        "import os, signal, sys; from studio.core.store.jobs import JobStore; "
        "JobStore(sys.argv[1]).claim_next(); os.kill(os.getpid(), signal.SIGKILL)"
    )
    r = subprocess.run([sys.executable, "-c", code, str(path)])
    assert r.returncode == -signal.SIGKILL
    assert store.get(running.id).state == jobs.RUNNING

    reopened = JobStore(path)
    assert reopened.interrupted == [running.id]
    job = reopened.get(running.id)
    assert job.state == jobs.INTERRUPTED_STATE and job.reason.startswith("interrupted")
    assert job.settings == {"crf": 23}
    assert reopened.get(done.id).state == jobs.DONE
    assert reopened.get(waiting.id).state == jobs.QUEUED
    assert reopened.retry(running.id).state == jobs.QUEUED


def test_a_job_running_in_a_live_process_is_not_interrupted_by_another_view(tmp_path):
    path = tmp_path / "q.sqlite"
    store = JobStore(path)
    job = store.add("a", "1.wav", {}, "1.mp4")
    store.claim_next()  # this process runs it
    assert JobStore(path).interrupted == []  # `studio queue list` opening the same store
    assert store.get(job.id).state == jobs.RUNNING


def test_damaged_rows_are_listed_as_damaged_and_removable(tmp_path):
    path = tmp_path / "q.sqlite"
    store = JobStore(path)
    good = store.add("a", "1.wav", {}, "1.mp4")
    bad_json = store.add("a", "2.wav", {}, "2.mp4")
    bad_num = store.add("a", "3.wav", {}, "3.mp4")
    bad_state = store.add("a", "4.wav", {}, "4.mp4")
    with sqlite3.connect(path) as db:
        db.execute("UPDATE jobs SET settings='{not json' WHERE id=?", (bad_json.id,))
        db.execute("UPDATE jobs SET progress='lots' WHERE id=?", (bad_num.id,))
        db.execute("UPDATE jobs SET state='exploded' WHERE id=?", (bad_state.id,))
    listed = {j.id: j for j in JobStore(path).list()}
    assert listed[good.id].state == jobs.QUEUED
    for k in (bad_json.id, bad_num.id, bad_state.id):
        assert listed[k].state == jobs.DAMAGED and "damaged" in listed[k].reason
    assert store.claim_next().id == good.id  # the others do not block the queue
    assert store.claim_next() is None
    store.remove(bad_json.id)
    assert bad_json.id not in {j.id for j in store.list()}


def test_a_foreign_or_odd_schema_is_one_sentence(tmp_path):
    path = tmp_path / "q.sqlite"
    JobStore(path)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value='abc' WHERE key='schema'")
    with pytest.raises(InputError, match="unknown schema version 'abc'"):
        JobStore(path)
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE jobs(id INTEGER PRIMARY KEY, name TEXT)")
    with pytest.raises(InputError, match="not a Studio job queue"):
        JobStore(other)


def test_another_programs_database_is_refused_and_left_exactly_as_it_was(tmp_path):
    import hashlib
    import os
    import subprocess
    import sys

    from conftest import ROOT

    home = tmp_path / "home"
    home.mkdir()
    theirs = home / "jobs.sqlite"  # another program's file where the queue would be
    with sqlite3.connect(theirs) as db:
        db.execute("CREATE TABLE contacts(id INTEGER PRIMARY KEY, name TEXT)")
        db.execute("INSERT INTO contacts(name) VALUES ('Ada')")
    before = hashlib.sha256(theirs.read_bytes()).hexdigest()
    r = subprocess.run(
        [sys.executable, "-m", "studio", "queue", "list"],
        capture_output=True,
        text=True,
        env={**os.environ, "STUDIO_HOME": str(home)},
        cwd=ROOT,
        timeout=120,
    )
    assert r.returncode == 2, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert "is not a Studio job queue (it holds tables Studio never makes: contacts)" in line, line
    assert hashlib.sha256(theirs.read_bytes()).hexdigest() == before  # no jobs or meta table added
    # a jobs table that is not Studio's: refused too, and it gets no meta table either
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE jobs(id INTEGER PRIMARY KEY, name TEXT)")
    with pytest.raises(InputError, match="its jobs table has no avatar, audio"):
        JobStore(other)
    with sqlite3.connect(other) as db:
        assert [t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")] == ["jobs"]
    # an empty file (0 bytes, or a database without tables) becomes a queue
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    assert JobStore(empty).list() == []


def test_hold_resume_and_reorder(tmp_path):
    store = JobStore(tmp_path / "q.sqlite")
    a, b, c = (store.add("a", f"{k}.wav", {}, f"{k}.mp4") for k in range(3))
    store.hold(a.id)
    assert store.get(a.id).state == jobs.HELD
    store.move(c.id, 0)
    assert [j.id for j in store.list()] == [c.id, a.id, b.id]
    assert store.claim_next().id == c.id  # held a is skipped
    assert store.claim_next().id == b.id
    assert store.claim_next() is None
    store.resume(a.id)
    assert store.claim_next().id == a.id


def test_bad_requests_raise_one_readable_error(tmp_path):
    store = JobStore(tmp_path / "q.sqlite")
    with pytest.raises(InputError, match="avatar and a script"):
        store.add("", "a.wav", {}, "o.mp4")
    with pytest.raises(InputError, match="does not exist"):
        store.get(99)
    job = store.add("a", "b.wav", {}, "o.mp4")
    store.claim_next()
    with pytest.raises(InputError, match="running"):
        store.remove(job.id)
    store.cancel(job.id)
    store.remove(job.id)
    assert store.list() == []


def test_a_damaged_queue_file_is_reported_not_crashed(tmp_path):
    path = tmp_path / "q.sqlite"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(InputError, match="damaged"):
        JobStore(path)


def test_a_newer_schema_is_refused(tmp_path):
    path = tmp_path / "q.sqlite"
    JobStore(path)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value='99' WHERE key='schema'")
    with pytest.raises(InputError, match="newer Studio"):
        JobStore(path)

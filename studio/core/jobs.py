"""The render queue: jobs (avatar x script x settings) persisted in SQLite in the data folder.

    store = JobStore()                                  # <data>/jobs.sqlite
    job = store.add("astronaut", "voice.flac", {"engine": "auto"}, "out.mp4")
    job = store.claim_next()                            # oldest queued job, now "running"
    store.finish(job.id, output="out.mp4")              # or store.fail(job.id, "reason")

States: draft -> queued -> running -> done | failed | cancelled; ``retry`` puts a failed or
cancelled job back in the queue. A job still "running" when the store is opened again (the app
exited or crashed mid-render) comes back as failed with the reason ``INTERRUPTED``.

Qt-free; every method opens its own short transaction, so a store can be used from any thread.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from studio.core.errors import InputError

log = logging.getLogger(__name__)

DRAFT, QUEUED, RUNNING, DONE, FAILED, CANCELLED = "draft", "queued", "running", "done", "failed", "cancelled"
STATES = (DRAFT, QUEUED, RUNNING, DONE, FAILED, CANCELLED)
FINAL = (DONE, FAILED, CANCELLED)
INTERRUPTED = "interrupted: Studio closed while this job was running; press Retry to run it again"
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Job:
    id: int
    avatar: str
    audio: str
    settings: dict = field(hash=False)
    output: str
    state: str
    reason: str
    created: float
    updated: float
    progress: float  # 0..1, last reported
    result: dict = field(hash=False)  # RenderResult.to_json() once done

    @property
    def label(self) -> str:
        return f"{Path(self.avatar).stem} x {Path(self.audio).stem}"

    @property
    def can_retry(self) -> bool:
        return self.state in (FAILED, CANCELLED, DONE)


class JobStore:
    """The queue in one SQLite file (``<data>/jobs.sqlite`` by default)."""

    def __init__(self, path: str | Path | None = None):
        if path is None:
            from studio.core.paths import data_dir

            path = data_dir() / "jobs.sqlite"
        self.path = Path(path)
        self._lock = threading.Lock()
        self._init()
        self.interrupted = self._recover()

    # ---- adding and reading -------------------------------------------------------------

    def add(self, avatar: str, audio: str, settings: dict, output: str, state: str = QUEUED) -> Job:
        if state not in (DRAFT, QUEUED):
            raise InputError(f"a new job starts as draft or queued, not {state!r}")
        if not avatar or not audio:
            raise InputError("a job needs an avatar and a script; choose both before queueing")
        now = time.time()
        with self._tx() as db:
            cur = db.execute(
                "INSERT INTO jobs(avatar, audio, settings, output, state, reason, created, updated, progress, result)"
                " VALUES (?,?,?,?,?,?,?,?,0,'{}')",
                (str(avatar), str(audio), json.dumps(settings, sort_keys=True), str(output), state, "", now, now),
            )
            job_id = cur.lastrowid
        log.info("job %d added (%s)", job_id, state)
        return self.get(job_id)

    def get(self, job_id: int) -> Job:
        with self._tx() as db:
            row = db.execute("SELECT * FROM jobs WHERE id=?", (job_id,)).fetchone()
        if row is None:
            raise InputError(f"job {job_id} does not exist; refresh the queue")
        return _job(row)

    def list(self, states: tuple[str, ...] | None = None) -> list[Job]:
        with self._tx() as db:
            if states:
                marks = ",".join("?" * len(states))
                rows = db.execute(f"SELECT * FROM jobs WHERE state IN ({marks}) ORDER BY id", states).fetchall()
            else:
                rows = db.execute("SELECT * FROM jobs ORDER BY id").fetchall()
        return [_job(r) for r in rows]

    # ---- state changes ------------------------------------------------------------------

    def claim_next(self) -> Job | None:
        """Mark the oldest queued job as running and return it (None when the queue is empty)."""
        with self._tx() as db:
            row = db.execute("SELECT id FROM jobs WHERE state=? ORDER BY id LIMIT 1", (QUEUED,)).fetchone()
            if row is None:
                return None
            db.execute(
                "UPDATE jobs SET state=?, reason='', progress=0, updated=? WHERE id=?", (RUNNING, time.time(), row[0])
            )
        return self.get(row[0])

    def enqueue(self, job_id: int) -> Job:
        return self._move(job_id, QUEUED, "", allowed=(DRAFT,))

    def retry(self, job_id: int) -> Job:
        return self._move(job_id, QUEUED, "", allowed=FINAL)

    def cancel(self, job_id: int, reason: str = "cancelled by the user") -> Job:
        return self._move(job_id, CANCELLED, reason, allowed=(DRAFT, QUEUED, RUNNING))

    def finish(self, job_id: int, output: str | None = None, result: dict | None = None) -> Job:
        with self._tx() as db:
            db.execute(
                "UPDATE jobs SET state=?, reason='', progress=1, output=COALESCE(?, output), result=?, updated=?"
                " WHERE id=? AND state=?",
                (DONE, output, json.dumps(result or {}), time.time(), job_id, RUNNING),
            )
        return self.get(job_id)

    def fail(self, job_id: int, reason: str) -> Job:
        return self._move(job_id, FAILED, reason or "failed", allowed=(RUNNING, QUEUED))

    def set_progress(self, job_id: int, fraction: float) -> None:
        with self._tx() as db:
            db.execute(
                "UPDATE jobs SET progress=?, updated=? WHERE id=? AND state=?",
                (min(1.0, max(0.0, float(fraction))), time.time(), job_id, RUNNING),
            )

    def remove(self, job_id: int) -> None:
        job = self.get(job_id)
        if job.state == RUNNING:
            raise InputError(f"job {job_id} is running; cancel it before removing it")
        with self._tx() as db:
            db.execute("DELETE FROM jobs WHERE id=?", (job_id,))

    # ---- internals ----------------------------------------------------------------------

    def _move(self, job_id: int, state: str, reason: str, allowed: tuple[str, ...]) -> Job:
        job = self.get(job_id)
        if job.state not in allowed:
            raise InputError(f"job {job_id} is {job.state}; it cannot become {state}")
        with self._tx() as db:
            db.execute(
                "UPDATE jobs SET state=?, reason=?, updated=? WHERE id=? AND state=?",
                (state, reason, time.time(), job_id, job.state),
            )
            if state == QUEUED:
                db.execute("UPDATE jobs SET progress=0, result='{}' WHERE id=?", (job_id,))
        return self.get(job_id)

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=10)
        db.row_factory = sqlite3.Row
        return db

    def _tx(self):
        return _Tx(self)

    def _init(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self._tx() as db:
                db.execute(
                    "CREATE TABLE IF NOT EXISTS jobs(id INTEGER PRIMARY KEY AUTOINCREMENT, avatar TEXT NOT NULL,"
                    " audio TEXT NOT NULL, settings TEXT NOT NULL, output TEXT NOT NULL, state TEXT NOT NULL,"
                    " reason TEXT NOT NULL, created REAL NOT NULL, updated REAL NOT NULL,"
                    " progress REAL NOT NULL, result TEXT NOT NULL)"
                )
                db.execute("CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT)")
                row = db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
                if row is None:
                    db.execute("INSERT INTO meta VALUES('schema', ?)", (str(SCHEMA_VERSION),))
                elif int(row[0]) > SCHEMA_VERSION:
                    raise InputError(
                        f"{self.path} was written by a newer Studio (schema {row[0]}); update Studio or move the file"
                    )
        except sqlite3.DatabaseError as exc:
            raise InputError(f"{self.path}: the job queue file is damaged ({exc}); move it away to start afresh") from None

    def _recover(self) -> list[int]:
        with self._tx() as db:
            ids = [r[0] for r in db.execute("SELECT id FROM jobs WHERE state=?", (RUNNING,))]
            if ids:
                db.execute(
                    "UPDATE jobs SET state=?, reason=?, updated=? WHERE state=?", (FAILED, INTERRUPTED, time.time(), RUNNING)
                )
        if ids:
            log.warning("%d job(s) were running when Studio last closed: marked failed (interrupted)", len(ids))
        return ids


class _Tx:
    """One connection per transaction: commit on success, roll back on error, always close."""

    def __init__(self, store: JobStore):
        self.store = store

    def __enter__(self) -> sqlite3.Connection:
        self.store._lock.acquire()
        self.db = self.store._connect()
        return self.db

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None:
                self.db.commit()
            else:
                self.db.rollback()
        finally:
            self.db.close()
            self.store._lock.release()


def _job(row: sqlite3.Row) -> Job:
    return Job(
        id=row["id"],
        avatar=row["avatar"],
        audio=row["audio"],
        settings=json.loads(row["settings"]),
        output=row["output"],
        state=row["state"],
        reason=row["reason"],
        created=row["created"],
        updated=row["updated"],
        progress=row["progress"],
        result=json.loads(row["result"] or "{}"),
    )

"""The render queue: jobs (avatar x script x settings) persisted in SQLite in the data folder.

    store = JobStore()                                  # <data>/jobs.sqlite
    job = store.add("astronaut", "voice.flac", {"engine": "auto"}, "out.mp4")
    job = store.claim_next()                            # oldest queued job, now "running"
    store.finish(job.id, output="out.mp4")              # or store.fail(job.id, "reason")

States: draft -> queued (<-> held) -> running -> done | failed | cancelled | interrupted, and a done
job whose file retention removed -> expired; ``retry`` puts a finished job back in the queue (the
service's retry makes a new job instead, ``retry_of`` naming the original). Queued jobs run in ``position`` order (``move`` reorders).
A running job records its owner process; when the store is opened and that process is gone (the
app, the server or ``studio queue run`` was killed mid-render) the job comes back ``interrupted``.
Several processes may share one store (the window, ``studio queue``, ``studio serve``): claiming
a job is one transaction, so a job runs once.

A damaged row (bad JSON, a text in a numeric column) is listed as ``damaged`` with the reason and
can be removed; every other job still works. A damaged or foreign file is one ``InputError``.

Beside the jobs (schema 4; ``client``: the ``studio serve`` client that submitted a job, "" for the
operator's): the ``idempotency`` and ``deliveries`` tables (``serve_records.py``). The file itself
(rows, schema, migrations, integrity checks, transactions, owners) is ``job_db.py``.

Qt-free; every method opens its own short transaction, so a store can be used from any thread.
"""

from __future__ import annotations

import builtins  # JobStore.list shadows list in its annotations
import json
import logging
import time

from studio.core.errors import InputError
from studio.core.store.job_db import (
    CANCELLED,
    DAMAGED,
    DONE,
    DRAFT,
    EXPIRED,
    FAILED,
    FINAL,
    HELD,
    INTERRUPTED,
    INTERRUPTED_STATE,
    QUEUED,
    RUNNING,
    STATES,
    Job,
    JobFile,
    job_of_row,
    process_owner,
)
from studio.core.store.serve_records import ServeRecords

__all__ = [  # the states and ``Job`` live in job_db.py; callers take them from here
    "CANCELLED",
    "DAMAGED",
    "DONE",
    "DRAFT",
    "EXPIRED",
    "FAILED",
    "FINAL",
    "HELD",
    "INTERRUPTED",
    "INTERRUPTED_STATE",
    "QUEUED",
    "RUNNING",
    "STATES",
    "Job",
    "JobStore",
    "QueueLimit",
]

log = logging.getLogger(__name__)


class QueueLimit(InputError):
    """``add`` with ``max_queued``: that many jobs are queued already."""


class JobStore(JobFile, ServeRecords):
    """The queue in one SQLite file (``<data>/jobs.sqlite`` by default; ``JobFile`` opens it)."""

    # ---- adding and reading -------------------------------------------------------------

    def add(
        self,
        avatar: str,
        audio: str,
        settings: dict,
        output: str,
        state: str = QUEUED,
        max_queued: int | None = None,
        retry_of: int | None = None,
        webhook: str = "",
        client: str = "",
    ) -> Job:
        """A new job at the end of the queue. ``max_queued``: refuse it (``QueueLimit``) when that many
        jobs are queued already, counted in the same transaction as the insert, so concurrent adds
        (threads or processes) never pass the limit together."""
        if state not in (DRAFT, QUEUED):
            raise InputError(f"a new job starts as draft or queued, not {state!r}")
        if not avatar or not audio:
            raise InputError("a job needs an avatar and a script; choose both before queueing")
        import os

        # absolute: a job means the same files whichever folder the process that runs it is in
        audio, output = os.path.abspath(str(audio)), os.path.abspath(str(output))
        now = time.time()
        with self.transaction() as db:
            db.execute("BEGIN IMMEDIATE")  # the count and the insert are one step for every process
            if max_queued is not None and state == QUEUED:
                waiting = db.execute("SELECT COUNT(*) FROM jobs WHERE state=?", (QUEUED,)).fetchone()[0]
                if waiting >= max_queued:
                    raise QueueLimit(f"the queue is full ({max_queued} jobs waiting); try again when one has started")
            top = db.execute("SELECT MAX(position) FROM jobs").fetchone()[0]
            cur = db.execute(
                "INSERT INTO jobs(avatar, audio, settings, output, state, reason, created, updated, progress, result,"
                " position, owner, retry_of, webhook, client) VALUES (?,?,?,?,?,?,?,?,0,'{}',?,'',?,?,?)",
                (
                    str(avatar),
                    str(audio),
                    json.dumps(settings, sort_keys=True),
                    str(output),
                    state,
                    "",
                    now,
                    now,
                    (top or 0) + 1,
                    retry_of,
                    str(webhook or ""),
                    str(client or ""),
                ),
            )
            job_id = cur.lastrowid
        if job_id is None:  # sqlite3 sets it after every INSERT
            raise RuntimeError("the queue's INSERT gave no row id")
        log.info("job %d added (%s)", job_id, state)
        return self.get(job_id)

    def get(self, job_id: int) -> Job:
        with self.transaction() as db:
            row = db.execute("SELECT * FROM jobs WHERE id=?", (job_id,)).fetchone()
        if row is None:
            raise InputError(f"job {job_id} does not exist; refresh the queue")
        return job_of_row(row)

    def list(self, states: tuple[str, ...] | None = None) -> list[Job]:
        """Jobs in queue order (``position``); damaged rows are listed as ``damaged``."""
        with self.transaction() as db:
            rows = db.execute("SELECT * FROM jobs ORDER BY position, id").fetchall()
        jobs = [job_of_row(r) for r in rows]
        return [j for j in jobs if j.state in states] if states else jobs

    def page(
        self,
        states: tuple[str, ...] | None = None,
        before: int | None = None,
        limit: int = 50,
        client: str | None = None,
    ) -> builtins.list[Job]:
        """Up to ``limit`` jobs, newest first (by id), with ids below ``before``: a stable cursor
        while jobs are added, reordered or removed; ``client``: only that client's jobs."""
        where: builtins.list[str] = []
        args: builtins.list[str | int] = []
        if client is not None:
            where.append("client = ?")
            args.append(client)
        if states:
            where.append(f"state IN ({','.join('?' * len(states))})")
            args.extend(states)
        if before is not None:
            where.append("id < ?")
            args.append(int(before))
        sql = "SELECT * FROM jobs" + (f" WHERE {' AND '.join(where)}" if where else "") + " ORDER BY id DESC LIMIT ?"
        with self.transaction() as db:
            rows = db.execute(sql, (*args, int(limit))).fetchall()
        return [job_of_row(r) for r in rows]

    def version(self) -> tuple:
        """Changes whenever any process changed the queue (cheap: for views that poll)."""
        with self.transaction() as db:
            return tuple(db.execute("SELECT COUNT(*), MAX(updated), TOTAL(position) FROM jobs").fetchone())

    # ---- state changes ------------------------------------------------------------------

    def claim_next(self, order=None) -> Job | None:
        """Mark the first queued job (queue order; ``order``: a function that puts the queued jobs, in
        queue order, in the order to claim them) as running, owned by this process, and return it
        (None when nothing is queued)."""
        with self.transaction() as db:
            db.execute("BEGIN IMMEDIATE")  # two processes never claim the same job
            rows = db.execute("SELECT * FROM jobs WHERE state=? ORDER BY position, id", (QUEUED,)).fetchall()
            jobs = [j for j in (job_of_row(r) for r in rows) if j.state != DAMAGED]  # a damaged row waits for removal
            if order is not None and jobs:
                jobs = list(order(jobs))
            if not jobs:
                return None
            job_id = jobs[0].id
            db.execute(
                "UPDATE jobs SET state=?, reason='', progress=0, updated=?, owner=? WHERE id=?",
                (RUNNING, time.time(), process_owner(), job_id),
            )
        return self.get(job_id)

    def enqueue(self, job_id: int) -> Job:
        return self._move(job_id, QUEUED, "", allowed=(DRAFT,))

    def retry(self, job_id: int, output: str | None = None) -> Job:
        """Back in the queue (at its end); ``output``: a new file name for it."""
        job = self._move(job_id, QUEUED, "", allowed=FINAL)
        with self.transaction() as db:
            top = db.execute("SELECT MAX(position) FROM jobs").fetchone()[0]
            db.execute(
                "UPDATE jobs SET position=?, output=COALESCE(?, output) WHERE id=?", ((top or 0) + 1, output, job_id)
            )
        return self.get(job.id)

    def hold(self, job_id: int) -> Job:
        """A queued job waits (keeps its place) until ``resume``."""
        return self._move(job_id, HELD, "held", allowed=(QUEUED,))

    def resume(self, job_id: int) -> Job:
        return self._move(job_id, QUEUED, "", allowed=(HELD,))

    def move(self, job_id: int, index: int) -> Job:
        """Put a job at ``index`` (0-based) of the queue order; the others keep their order."""
        jobs = [j for j in self.list() if j.id != job_id]
        me = self.get(job_id)
        index = max(0, min(int(index), len(jobs)))
        order = jobs[:index] + [me] + jobs[index:]
        with self.transaction() as db:
            for k, j in enumerate(order):
                db.execute("UPDATE jobs SET position=? WHERE id=?", (float(k + 1), j.id))
            db.execute("UPDATE jobs SET updated=? WHERE id=?", (time.time(), job_id))
        return self.get(job_id)

    def cancel(self, job_id: int, reason: str = "cancelled by the user") -> Job:
        return self._move(job_id, CANCELLED, reason, allowed=(DRAFT, QUEUED, HELD, RUNNING))

    def finish(self, job_id: int, output: str | None = None, result: dict | None = None) -> Job:
        with self.transaction() as db:
            db.execute(
                "UPDATE jobs SET state=?, reason='', progress=1, output=COALESCE(?, output), result=?, updated=?"
                " WHERE id=? AND state=?",
                (DONE, output, json.dumps(result or {}), time.time(), job_id, RUNNING),
            )
        return self.get(job_id)

    def update_result(self, job_id: int, **fields) -> Job:
        """Merge ``fields`` into a job's stored result (a check's verdict arriving after the render)."""
        with self.transaction() as db:
            row = db.execute("SELECT result FROM jobs WHERE id=?", (job_id,)).fetchone()
            if row is None:
                raise InputError(f"no job {job_id} in the queue")
            try:
                result = json.loads(row[0] or "{}")
            except ValueError:
                result = {}
            if not isinstance(result, dict):
                result = {}
            result.update(fields)
            db.execute("UPDATE jobs SET result=?, updated=? WHERE id=?", (json.dumps(result), time.time(), job_id))
        return self.get(job_id)

    def expire(self, job_id: int, reason: str) -> Job:
        """A done job whose file was removed (retention): it stays, with its figures, as ``expired``."""
        return self._move(job_id, EXPIRED, reason, allowed=(DONE,))

    def interrupt(self, job_id: int) -> Job:
        """A running job that was stopped with its process (the app closed mid-render)."""
        return self._move(job_id, INTERRUPTED_STATE, INTERRUPTED, allowed=(RUNNING,))

    def fail(self, job_id: int, reason: str) -> Job:
        return self._move(job_id, FAILED, reason or "failed", allowed=(RUNNING, QUEUED))

    def set_progress(self, job_id: int, fraction: float) -> None:
        with self.transaction() as db:
            db.execute(
                "UPDATE jobs SET progress=?, updated=? WHERE id=? AND state=?",
                (min(1.0, max(0.0, float(fraction))), time.time(), job_id, RUNNING),
            )

    def remove(self, job_id: int) -> None:
        with self.transaction() as db:
            exists = db.execute("SELECT 1 FROM jobs WHERE id=?", (job_id,)).fetchone()
        if exists is None:
            raise InputError(f"job {job_id} does not exist; refresh the queue")
        job = self.get(job_id)
        if job.state == RUNNING:
            raise InputError(f"job {job_id} is running; cancel it before removing it")
        with self.transaction() as db:
            db.execute("DELETE FROM jobs WHERE id=?", (job_id,))
            db.execute("DELETE FROM deliveries WHERE job_id=?", (job_id,))

    def retries(self, job_id: int) -> int:
        """How many jobs were made by rendering this job's original again, directly or by retrying one
        of its retries (``retry_of`` chains): what ``studio serve --max-retries`` bounds."""
        with self.transaction() as db:
            root, seen = int(job_id), set()
            while root not in seen:
                seen.add(root)
                row = db.execute("SELECT retry_of FROM jobs WHERE id=?", (root,)).fetchone()
                if row is None or row[0] is None:
                    break
                root = int(row[0])
            return int(
                db.execute(
                    "WITH RECURSIVE fam(id) AS (SELECT ? UNION SELECT jobs.id FROM jobs JOIN fam ON jobs.retry_of=fam.id)"
                    " SELECT COUNT(*) - 1 FROM fam",
                    (root,),
                ).fetchone()[0]
            )

    # ---- internals ----------------------------------------------------------------------

    def _move(self, job_id: int, state: str, reason: str, allowed: tuple[str, ...]) -> Job:
        job = self.get(job_id)
        if job.state not in allowed:
            raise InputError(f"job {job_id} is {job.state}; it cannot become {state}")
        with self.transaction() as db:
            cur = db.execute(
                "UPDATE jobs SET state=?, reason=?, updated=? WHERE id=? AND state=?",
                (state, reason, time.time(), job_id, job.state),
            )
            if cur.rowcount == 0:
                raise InputError(f"job {job_id} changed meanwhile; refresh the queue")
            if state == QUEUED and job.state != HELD:
                db.execute("UPDATE jobs SET progress=0, result='{}' WHERE id=?", (job_id,))
        return self.get(job_id)

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
operator's): ``idempotency`` (a client's ``Idempotency-Key`` -> the job or answer
it made, kept a day) and ``deliveries`` (each webhook call made for a job's final state; a row with
attempt 0 marks a redelivery the client asked for: the tries after it are a new round).

Qt-free; every method opens its own short transaction, so a store can be used from any thread.
"""

from __future__ import annotations

import builtins  # JobStore.list shadows list in its annotations
import json
import logging
import os
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from studio.core.errors import InputError

log = logging.getLogger(__name__)

DRAFT, QUEUED, HELD, RUNNING = "draft", "queued", "held", "running"
DONE, FAILED, CANCELLED, INTERRUPTED_STATE, DAMAGED = "done", "failed", "cancelled", "interrupted", "damaged"
EXPIRED = "expired"  # done, and its file was removed by retention (the job and its figures stay)
STATES = (DRAFT, QUEUED, HELD, RUNNING, DONE, FAILED, CANCELLED, INTERRUPTED_STATE, EXPIRED)
FINAL = (DONE, FAILED, CANCELLED, INTERRUPTED_STATE, EXPIRED)
INTERRUPTED = "interrupted: Studio stopped while this job was running; press Retry to run it again"
SCHEMA_VERSION = 4  # 2: position, owner; 3: retry_of, webhook, idempotency, deliveries; 4: client
OUR_TABLES = frozenset({"jobs", "meta", "idempotency", "deliveries"})  # everything a Studio queue holds
COLUMNS = ("id", "avatar", "audio", "settings", "output", "state", "reason", "created", "updated", "progress", "result")


class QueueLimit(InputError):
    """``add`` with ``max_queued``: that many jobs are queued already."""


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
    position: float = 0.0  # queue order (lower runs first)
    retry_of: int | None = None  # the job this one renders again
    webhook: str = ""  # a URL told of each final state (studio serve)
    client: str = ""  # the studio serve client that submitted it ("": the operator, the window, studio queue)

    @property
    def label(self) -> str:
        return f"{Path(self.avatar).stem} x {Path(self.audio).stem}"

    @property
    def can_retry(self) -> bool:
        return self.state in FINAL

    @property
    def damaged(self) -> bool:
        return self.state == DAMAGED


class JobStore:
    """The queue in one SQLite file (``<data>/jobs.sqlite`` by default)."""

    def __init__(self, path: str | Path | None = None):
        if path is None:
            from studio.core.env import data_dir

            path = data_dir() / "jobs.sqlite"
        self.path = Path(path)
        self._lock = threading.Lock()
        self._init()
        self.interrupted = self._recover()

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
        with self._tx() as db:
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
        log.info("job %d added (%s)", job_id, state)
        return self.get(job_id)

    def get(self, job_id: int) -> Job:
        with self._tx() as db:
            row = db.execute("SELECT * FROM jobs WHERE id=?", (job_id,)).fetchone()
        if row is None:
            raise InputError(f"job {job_id} does not exist; refresh the queue")
        return _job(row)

    def list(self, states: tuple[str, ...] | None = None) -> list[Job]:
        """Jobs in queue order (``position``); damaged rows are listed as ``damaged``."""
        with self._tx() as db:
            rows = db.execute("SELECT * FROM jobs ORDER BY position, id").fetchall()
        jobs = [_job(r) for r in rows]
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
        where, args = [], []
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
        with self._tx() as db:
            rows = db.execute(sql, (*args, int(limit))).fetchall()
        return [_job(r) for r in rows]

    def version(self) -> tuple:
        """Changes whenever any process changed the queue (cheap: for views that poll)."""
        with self._tx() as db:
            return tuple(db.execute("SELECT COUNT(*), MAX(updated), TOTAL(position) FROM jobs").fetchone())

    # ---- state changes ------------------------------------------------------------------

    def claim_next(self) -> Job | None:
        """Mark the first queued job (queue order) as running, owned by this process, and return it
        (None when nothing is queued)."""
        with self._tx() as db:
            db.execute("BEGIN IMMEDIATE")  # two processes never claim the same job
            rows = db.execute("SELECT * FROM jobs WHERE state=? ORDER BY position, id", (QUEUED,)).fetchall()
            row = next((r for r in rows if _job(r).state != DAMAGED), None)  # a damaged row waits for removal
            if row is None:
                return None
            db.execute(
                "UPDATE jobs SET state=?, reason='', progress=0, updated=?, owner=? WHERE id=?",
                (RUNNING, time.time(), process_owner(), row["id"]),
            )
        return self.get(row["id"])

    def enqueue(self, job_id: int) -> Job:
        return self._move(job_id, QUEUED, "", allowed=(DRAFT,))

    def retry(self, job_id: int, output: str | None = None) -> Job:
        """Back in the queue (at its end); ``output``: a new file name for it."""
        job = self._move(job_id, QUEUED, "", allowed=FINAL)
        with self._tx() as db:
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
        with self._tx() as db:
            for k, j in enumerate(order):
                db.execute("UPDATE jobs SET position=? WHERE id=?", (float(k + 1), j.id))
            db.execute("UPDATE jobs SET updated=? WHERE id=?", (time.time(), job_id))
        return self.get(job_id)

    def cancel(self, job_id: int, reason: str = "cancelled by the user") -> Job:
        return self._move(job_id, CANCELLED, reason, allowed=(DRAFT, QUEUED, HELD, RUNNING))

    def finish(self, job_id: int, output: str | None = None, result: dict | None = None) -> Job:
        with self._tx() as db:
            db.execute(
                "UPDATE jobs SET state=?, reason='', progress=1, output=COALESCE(?, output), result=?, updated=?"
                " WHERE id=? AND state=?",
                (DONE, output, json.dumps(result or {}), time.time(), job_id, RUNNING),
            )
        return self.get(job_id)

    def update_result(self, job_id: int, **fields) -> Job:
        """Merge ``fields`` into a job's stored result (a check's verdict arriving after the render)."""
        with self._tx() as db:
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
        with self._tx() as db:
            db.execute(
                "UPDATE jobs SET progress=?, updated=? WHERE id=? AND state=?",
                (min(1.0, max(0.0, float(fraction))), time.time(), job_id, RUNNING),
            )

    def remove(self, job_id: int) -> None:
        with self._tx() as db:
            exists = db.execute("SELECT 1 FROM jobs WHERE id=?", (job_id,)).fetchone()
        if exists is None:
            raise InputError(f"job {job_id} does not exist; refresh the queue")
        job = self.get(job_id)
        if job.state == RUNNING:
            raise InputError(f"job {job_id} is running; cancel it before removing it")
        with self._tx() as db:
            db.execute("DELETE FROM jobs WHERE id=?", (job_id,))
            db.execute("DELETE FROM deliveries WHERE job_id=?", (job_id,))

    def retries(self, job_id: int) -> int:
        """How many jobs were made by rendering this job's original again, directly or by retrying one
        of its retries (``retry_of`` chains): what ``studio serve --max-retries`` bounds."""
        with self._tx() as db:
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

    # ---- idempotency keys ---------------------------------------------------------------

    def claim_key(self, scope: str, key: str, fingerprint: str, stale_s: float = 600.0) -> dict | None:
        """Reserve ``key`` (per ``scope``, e.g. ``POST /v1/renders``) for a request whose body has
        ``fingerprint``; None when it is new (the caller does the work, then ``finish_key`` or
        ``release_key``), else the stored record: ``{"fingerprint", "job_id", "answer", "busy"}``.
        A reservation never finished within ``stale_s`` (its process died mid-request) is free again."""
        now = time.time()
        with self._tx() as db:
            db.execute("BEGIN IMMEDIATE")
            db.execute(
                "DELETE FROM idempotency WHERE scope=? AND key=? AND done=0 AND created < ?",
                (scope, key, now - stale_s),
            )
            row = db.execute("SELECT * FROM idempotency WHERE scope=? AND key=?", (scope, key)).fetchone()
            if row is None:
                db.execute(
                    "INSERT INTO idempotency(scope, key, fingerprint, job_id, answer, created, done)"
                    " VALUES (?,?,?,NULL,'',?,0)",
                    (scope, key, fingerprint, now),
                )
                return None
        return {
            "fingerprint": row["fingerprint"],
            "job_id": row["job_id"],
            "answer": json.loads(row["answer"]) if row["answer"] else None,
            "busy": not row["done"],
            "created": row["created"],
        }

    def finish_key(self, scope: str, key: str, job_id: int | None = None, answer: dict | None = None) -> None:
        with self._tx() as db:
            db.execute(
                "UPDATE idempotency SET job_id=?, answer=?, done=1 WHERE scope=? AND key=?",
                (job_id, json.dumps(answer) if answer is not None else "", scope, key),
            )

    def release_key(self, scope: str, key: str) -> None:
        """The request failed: the key is free again (a retry does the work)."""
        with self._tx() as db:
            db.execute("DELETE FROM idempotency WHERE scope=? AND key=?", (scope, key))

    def purge_keys(self, older_than: float) -> int:
        """Forget keys made before ``older_than`` (seconds since the epoch)."""
        with self._tx() as db:
            return db.execute("DELETE FROM idempotency WHERE created < ?", (older_than,)).rowcount

    # ---- webhook deliveries -------------------------------------------------------------

    def add_delivery(
        self, job_id: int, state: str, url: str, attempt: int, ok: bool, status: int | None, error: str
    ) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO deliveries(job_id, state, url, attempt, at, ok, status, error) VALUES (?,?,?,?,?,?,?,?)",
                (job_id, state, url, attempt, time.time(), int(ok), status, error[:300]),
            )

    def deliveries(self, job_id: int) -> builtins.list[dict]:
        """Every webhook call made for a job, oldest first."""
        with self._tx() as db:
            rows = db.execute("SELECT * FROM deliveries WHERE job_id=? ORDER BY id", (job_id,)).fetchall()
        return [
            {
                "state": r["state"],
                "url": r["url"],
                "attempt": r["attempt"],
                "at": r["at"],
                "ok": bool(r["ok"]),
                "status": r["status"],
                "error": r["error"],
            }
            for r in rows
        ]

    def webhook_jobs(self, max_attempts: int | None = None) -> builtins.list[Job]:
        """Jobs with a webhook in a final state that are still to be told of it: no successful call
        for that state yet (and, with ``max_attempts``, fewer tries than that)."""
        now = _round_of("jobs.state")
        tries = (
            ""
            if max_attempts is None
            else f" AND (SELECT COUNT(*) FROM deliveries d WHERE d.job_id=jobs.id AND d.state=jobs.state{now}) < ?"
        )
        with self._tx() as db:
            rows = db.execute(
                f"SELECT * FROM jobs WHERE webhook != '' AND state IN ({','.join('?' * len(FINAL))})"
                " AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.job_id=jobs.id AND d.state=jobs.state"
                f" AND d.ok=1{now}){tries} ORDER BY id",
                (*FINAL, *(() if max_attempts is None else (max_attempts,))),
            ).fetchall()
        return [_job(r) for r in rows]

    def webhook_checks(self, max_attempts: int | None = None) -> builtins.list[Job]:
        """Done jobs with a webhook whose lip-sync check has ended (``result.check.state`` done, failed
        or stopped) and whose ``checked`` call is still to be made (as ``webhook_jobs``)."""
        now = _round_of("'checked'")
        tries = (
            ""
            if max_attempts is None
            else f" AND (SELECT COUNT(*) FROM deliveries d WHERE d.job_id=jobs.id AND d.state='checked'{now}) < ?"
        )
        with self._tx() as db:
            rows = db.execute(
                "SELECT * FROM jobs WHERE webhook != '' AND state=?"  # a damaged result is skipped, not an error
                " AND CASE WHEN json_valid(result) THEN json_extract(result, '$.check.state') END"
                " IN ('done', 'failed', 'stopped')"
                " AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.job_id=jobs.id AND d.state='checked'"
                f" AND d.ok=1{now}){tries} ORDER BY id",
                (DONE, *(() if max_attempts is None else (max_attempts,))),
            ).fetchall()
        return [_job(r) for r in rows]

    # ---- internals ----------------------------------------------------------------------

    def _move(self, job_id: int, state: str, reason: str, allowed: tuple[str, ...]) -> Job:
        job = self.get(job_id)
        if job.state not in allowed:
            raise InputError(f"job {job_id} is {job.state}; it cannot become {state}")
        with self._tx() as db:
            cur = db.execute(
                "UPDATE jobs SET state=?, reason=?, updated=? WHERE id=? AND state=?",
                (state, reason, time.time(), job_id, job.state),
            )
            if cur.rowcount == 0:
                raise InputError(f"job {job_id} changed meanwhile; refresh the queue")
            if state == QUEUED and job.state != HELD:
                db.execute("UPDATE jobs SET progress=0, result='{}' WHERE id=?", (job_id,))
        return self.get(job_id)

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=10)
        db.row_factory = sqlite3.Row
        return db

    def _tx(self):
        return _Tx(self)

    def _init(self) -> None:
        away = "move it away to start an empty queue"
        from studio.core.env import READ_ONLY_ERRNOS, is_read_only, read_only_error

        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            if exc.errno in READ_ONLY_ERRNOS:
                raise read_only_error(self.path.parent, exc) from None
            raise
        try:
            self._check_ours(away)  # read only: a file that is not a Studio queue is left exactly as it was
        except sqlite3.DatabaseError as exc:
            raise InputError(
                f"{self.path}: the job queue file is damaged ({exc}); it was left as it is: restore it from a "
                f"backup, or {away}"
            ) from None
        if is_read_only(self.path.parent):
            raise read_only_error(self.path)  # SQLite writes a journal beside the file: "damaged" would mislead
        try:
            with self._tx() as db:
                db.execute(
                    "CREATE TABLE IF NOT EXISTS jobs(id INTEGER PRIMARY KEY AUTOINCREMENT, avatar TEXT NOT NULL,"
                    " audio TEXT NOT NULL, settings TEXT NOT NULL, output TEXT NOT NULL, state TEXT NOT NULL,"
                    " reason TEXT NOT NULL, created REAL NOT NULL, updated REAL NOT NULL,"
                    " progress REAL NOT NULL, result TEXT NOT NULL, position REAL NOT NULL DEFAULT 0,"
                    " owner TEXT NOT NULL DEFAULT '')"
                )
                db.execute("CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT)")
                cols = {r[1] for r in db.execute("PRAGMA table_info(jobs)")}
                missing = [c for c in COLUMNS if c not in cols]
                if missing:
                    raise InputError(
                        f"{self.path} is not a Studio job queue (its jobs table has no "
                        f"{', '.join(missing)} column); {away}"
                    )
                row = db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
                try:
                    schema = None if row is None else int(row[0])
                except (TypeError, ValueError):
                    raise InputError(f"{self.path} has an unknown schema version {row[0]!r}; {away}") from None
                if schema is None:
                    db.execute("INSERT INTO meta VALUES('schema', ?)", (str(SCHEMA_VERSION),))
                elif schema > SCHEMA_VERSION:
                    raise InputError(
                        f"{self.path} was written by a newer Studio (schema {schema}); update Studio or move the file"
                    )
                if "position" not in cols:  # schema 1 -> 2: queue order and running jobs' owners
                    db.execute("ALTER TABLE jobs ADD COLUMN position REAL NOT NULL DEFAULT 0")
                    db.execute("UPDATE jobs SET position=id")
                if "owner" not in cols:
                    db.execute("ALTER TABLE jobs ADD COLUMN owner TEXT NOT NULL DEFAULT ''")
                if "retry_of" not in cols:  # schema 2 -> 3
                    db.execute("ALTER TABLE jobs ADD COLUMN retry_of INTEGER")
                if "webhook" not in cols:
                    db.execute("ALTER TABLE jobs ADD COLUMN webhook TEXT NOT NULL DEFAULT ''")
                if "client" not in cols:  # schema 3 -> 4: an older file's jobs are the operator's
                    db.execute("ALTER TABLE jobs ADD COLUMN client TEXT NOT NULL DEFAULT ''")
                db.execute(
                    "CREATE TABLE IF NOT EXISTS idempotency(scope TEXT NOT NULL, key TEXT NOT NULL,"
                    " fingerprint TEXT NOT NULL, job_id INTEGER, answer TEXT NOT NULL, created REAL NOT NULL,"
                    " done INTEGER NOT NULL, PRIMARY KEY(scope, key))"
                )
                db.execute(
                    "CREATE TABLE IF NOT EXISTS deliveries(id INTEGER PRIMARY KEY AUTOINCREMENT, job_id INTEGER"
                    " NOT NULL, state TEXT NOT NULL, url TEXT NOT NULL, attempt INTEGER NOT NULL, at REAL NOT NULL,"
                    " ok INTEGER NOT NULL, status INTEGER, error TEXT NOT NULL)"
                )
                db.execute("CREATE INDEX IF NOT EXISTS deliveries_job ON deliveries(job_id)")
                db.execute("UPDATE meta SET value=? WHERE key='schema'", (str(SCHEMA_VERSION),))
        except sqlite3.DatabaseError as exc:
            if "readonly" in str(exc) or "read-only" in str(exc):
                raise read_only_error(self.path) from None
            raise InputError(f"{self.path}: the job queue file is damaged ({exc}); {away}") from None

    def _check_ours(self, away: str) -> None:
        """Refuse, before anything is written, a file that is not a Studio job queue: another
        program's database (tables Studio never makes, no ``jobs`` table, or one without Studio's
        columns). A new or empty file is fine (it becomes one)."""
        if not self.path.exists() or self.path.stat().st_size == 0:
            return
        from urllib.parse import quote

        uri = f"file:{quote(str(self.path))}?mode=ro"
        db = sqlite3.connect(uri, uri=True, timeout=10)
        try:
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if not tables:
                return
            foreign = sorted(t for t in tables - OUR_TABLES if not t.startswith("sqlite_"))
            if "jobs" not in tables or foreign:
                shown = ", ".join(foreign[:3]) + (" ..." if len(foreign) > 3 else "")
                raise InputError(
                    f"{self.path} is not a Studio job queue (it holds "
                    f"{'tables Studio never makes: ' + shown if foreign else 'no jobs table'}); {away}"
                )
            cols = {r[1] for r in db.execute("PRAGMA table_info(jobs)")}
            missing = [c for c in COLUMNS if c not in cols]
            if missing:
                raise InputError(
                    f"{self.path} is not a Studio job queue (its jobs table has no {', '.join(missing)} column); {away}"
                )
            self._check_integrity(db)
        finally:
            db.close()

    def _check_integrity(self, db: sqlite3.Connection) -> None:
        """Refuse a cut or overwritten file (``PRAGMA quick_check``: every page and index, read only)
        before any job is read from it: a damaged queue opened silently lost jobs and listed others
        as damaged. The file is left byte for byte as it was, for a backup or a repair tool."""
        rows = _size_problem(self.path)
        if not rows:
            try:
                rows = [str(r[0]) for r in db.execute("PRAGMA quick_check(3)")]
            except sqlite3.DatabaseError as exc:
                rows = [str(exc)]
        if rows != ["ok"]:
            raise InputError(
                f"{self.path}: the job queue file is damaged ({'; '.join(rows)[:160]}); it was left as it is: "
                "restore it from a backup, or move it away to start an empty queue"
            )

    def _recover(self) -> builtins.list[int]:
        """Jobs left running by a process that is gone become ``interrupted``."""
        with self._tx() as db:
            rows = db.execute("SELECT id, owner FROM jobs WHERE state=?", (RUNNING,)).fetchall()
            ids = [r[0] for r in rows if not owner_alive(str(r[1] or ""))]
            for job_id in ids:
                db.execute(
                    "UPDATE jobs SET state=?, reason=?, updated=? WHERE id=? AND state=?",
                    (INTERRUPTED_STATE, INTERRUPTED, time.time(), job_id, RUNNING),
                )
        if ids:
            log.warning("%d job(s) were running when Studio last stopped: marked interrupted", len(ids))
        return ids


def _size_problem(path: Path) -> list[str]:
    """Why the file's size disagrees with its header (a cut file: SQLite reads the missing pages as
    zeros, so a cut that ends in empty space passes ``quick_check``), else ``[]``. The header's page
    count is used only where the header says it is current (bytes 92-95 equal the change counter)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(100)
            size = os.fstat(fh.fileno()).st_size
    except OSError:
        return []
    if len(head) < 100 or not head.startswith(b"SQLite format 3\0"):
        return []  # SQLite's own check says what it is
    page = int.from_bytes(head[16:18], "big")
    page = 65536 if page == 1 else page
    pages = int.from_bytes(head[28:32], "big")
    if size % page:
        return [f"{size} bytes is not a whole number of {page}-byte pages: the file was cut"]
    if head[92:96] == head[24:28] and pages and size < pages * page:
        return [f"{size} of its {pages * page} bytes are there: the file was cut"]
    return []


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
    """A row as a ``Job``; a row that cannot be read is a ``damaged`` job saying why."""
    try:
        settings = json.loads(row["settings"])
        result = json.loads(row["result"] or "{}")
        if not isinstance(settings, dict) or not isinstance(result, dict):
            raise ValueError("settings or result is not a JSON object")
        state = row["state"]
        if state not in STATES:
            raise ValueError(f"unknown state {state!r}")
        return Job(
            id=int(row["id"]),
            avatar=str(row["avatar"]),
            audio=str(row["audio"]),
            settings=settings,
            output=str(row["output"]),
            state=state,
            reason=str(row["reason"]),
            created=float(row["created"]),
            updated=float(row["updated"]),
            progress=float(row["progress"]),
            result=result,
            position=float(row["position"]),
            retry_of=_opt_int(row, "retry_of"),
            webhook=str(_col(row, "webhook") or ""),
            client=str(_col(row, "client") or ""),
        )
    except (ValueError, TypeError, KeyError, IndexError) as exc:
        key = (str(row["id"]), str(row["created"]), str(exc))
        if key not in _WARNED:  # once per row and process: every listing reads every row again
            _WARNED.add(key)
            log.warning("job row %s is damaged: %s", row["id"], exc)
        return Job(
            id=int(row["id"]),
            avatar=str(row["avatar"] or ""),
            audio=str(row["audio"] or ""),
            settings={},
            output=str(row["output"] or ""),
            state=DAMAGED,
            reason=f"this job's entry is damaged ({str(exc)[:80]}); remove it and queue it again",
            created=_num(row["created"]),
            updated=_num(row["updated"]),
            progress=0.0,
            result={},
            position=_num(row["position"]),
            client=str(_col(row, "client") or ""),
        )


def _round_of(state_sql: str) -> str:
    """SQL: a delivery ``d`` is a try of the current round of its call (after the last redelivery
    marker, a row with attempt 0, of the same job and event)."""
    return (
        " AND d.attempt > 0 AND d.id > COALESCE((SELECT MAX(m.id) FROM deliveries m WHERE m.job_id=jobs.id"
        f" AND m.state={state_sql} AND m.attempt=0), 0)"
    )


def _col(row: sqlite3.Row, name: str):
    return row[name] if name in row.keys() else None


def _opt_int(row: sqlite3.Row, name: str) -> int | None:
    v = _col(row, name)
    return None if v is None else int(v)


_WARNED: set[tuple[str, str]] = set()


def _num(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def process_owner(pid: int | None = None) -> str:
    """``host:pid:start`` of a process (its start time tells a reused pid apart)."""
    import os
    import socket

    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()}:{pid}:{_start_time(pid)}"


def owner_alive(owner: str) -> bool:
    """Whether the process named by ``process_owner`` still runs (another host's: assumed alive)."""
    import socket

    try:
        host, pid, start = owner.rsplit(":", 2)
        pid_i = int(pid)
    except ValueError:
        return False  # no owner recorded (an older Studio): nobody runs it
    if host != socket.gethostname():
        return True
    return _start_time(pid_i) == start and start != ""


def _start_time(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read().decode("ascii", "replace")
        return stat.rsplit(")", 1)[1].split()[19]  # field 22: start time in clock ticks
    except (OSError, IndexError):
        import os

        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return ""
        except PermissionError:
            return "?"
        return "?"

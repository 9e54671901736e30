"""The job queue's SQLite file: its rows (``Job``, the states), the schema and its migrations, the
checks that refuse a damaged or foreign file before anything is written, one short transaction per
call, and which process owns a running job (recovered as ``interrupted`` when that process is gone).

``JobFile`` is the base of ``JobStore`` (``jobs.py``: the queue's operations); the tables
``studio serve`` keeps beside the jobs are ``serve_records.py``'s. Qt-free.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from studio.core.errors import InputError

log = logging.getLogger("studio.core.store.jobs")

DRAFT, QUEUED, HELD, RUNNING = "draft", "queued", "held", "running"
DONE, FAILED, CANCELLED, INTERRUPTED_STATE, DAMAGED = "done", "failed", "cancelled", "interrupted", "damaged"
EXPIRED = "expired"  # done, and its file was removed by retention (the job and its figures stay)
STATES = (DRAFT, QUEUED, HELD, RUNNING, DONE, FAILED, CANCELLED, INTERRUPTED_STATE, EXPIRED)
FINAL = (DONE, FAILED, CANCELLED, INTERRUPTED_STATE, EXPIRED)
INTERRUPTED = "interrupted: Studio stopped while this job was running; press Retry to run it again"
SCHEMA_VERSION = 4  # 2: position, owner; 3: retry_of, webhook, idempotency, deliveries; 4: client
OUR_TABLES = frozenset({"jobs", "meta", "idempotency", "deliveries"})  # everything a Studio queue holds
COLUMNS = ("id", "avatar", "audio", "settings", "output", "state", "reason", "created", "updated", "progress", "result")


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


class JobFile:
    """The queue's SQLite file (``<data>/jobs.sqlite`` by default): opened, checked, migrated and
    recovered here; every call opens its own short transaction (``transaction``)."""

    def __init__(self, path: str | Path | None = None):
        if path is None:
            from studio.core.env import data_dir

            path = data_dir() / "jobs.sqlite"
        self.path = Path(path)
        self._lock = threading.Lock()
        self._init()
        self.interrupted = self._recover()

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=10)
        db.row_factory = sqlite3.Row
        return db

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One connection per transaction: committed on success, rolled back on error, always closed."""
        with self._lock:
            db = self._connect()
            try:
                yield db
                db.commit()
            except BaseException:
                db.rollback()
                raise
            finally:
                db.close()

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
            with self.transaction() as db:
                db.execute(
                    "CREATE TABLE IF NOT EXISTS jobs(id INTEGER PRIMARY KEY AUTOINCREMENT, avatar TEXT NOT NULL,"
                    " audio TEXT NOT NULL, settings TEXT NOT NULL, output TEXT NOT NULL, state TEXT NOT NULL,"
                    " reason TEXT NOT NULL, created REAL NOT NULL, updated REAL NOT NULL,"
                    " progress REAL NOT NULL, result TEXT NOT NULL, position REAL NOT NULL DEFAULT 0,"
                    " owner TEXT NOT NULL DEFAULT '')"
                )
                db.execute("CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT)")
                cols = self._check_columns(db, away)
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
            self._check_columns(db, away)
            self._check_integrity(db)
        finally:
            db.close()

    def _check_columns(self, db: sqlite3.Connection, away: str) -> set[str]:
        """The jobs table's columns; one sentence when one of Studio's is missing (another program's table)."""
        cols = {r[1] for r in db.execute("PRAGMA table_info(jobs)")}
        missing = [c for c in COLUMNS if c not in cols]
        if missing:
            raise InputError(
                f"{self.path} is not a Studio job queue (its jobs table has no {', '.join(missing)} column); {away}"
            )
        return cols

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

    def _recover(self) -> list[int]:
        """Jobs left running by a process that is gone become ``interrupted``."""
        with self.transaction() as db:
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


def job_of_row(row: sqlite3.Row) -> Job:
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


def _col(row: sqlite3.Row, name: str):
    return row[name] if name in row.keys() else None


def _opt_int(row: sqlite3.Row, name: str) -> int | None:
    v = _col(row, name)
    return None if v is None else int(v)


_WARNED: set[tuple[str, str, str]] = set()


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

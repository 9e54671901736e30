"""What ``studio serve`` keeps beside the jobs in the queue's file: ``Idempotency-Key`` reservations
(a client's key -> the job or answer it made, kept a day) and webhook deliveries (each call made for a
job's final state or its check; a row with attempt 0 marks a redelivery the client asked for: the tries
after it are a new round). ``ServeRecords`` is a base of ``JobStore`` (its ``transaction`` is the store's)."""

from __future__ import annotations

import json
import time
from typing import Any

from studio.core.store.job_db import DONE, FINAL, Job, job_of_row


class ServeRecords:
    """The idempotency and deliveries tables of ``JobStore``."""

    transaction: Any  # the store's: one short transaction

    # ---- idempotency keys ---------------------------------------------------------------

    def claim_key(self, scope: str, key: str, fingerprint: str, stale_s: float = 600.0) -> dict | None:
        """Reserve ``key`` (per ``scope``, e.g. ``POST /v1/renders``) for a request whose body has
        ``fingerprint``; None when it is new (the caller does the work, then ``finish_key`` or
        ``release_key``), else the stored record: ``{"fingerprint", "job_id", "answer", "busy"}``.
        A reservation never finished within ``stale_s`` (its process died mid-request) is free again."""
        now = time.time()
        with self.transaction() as db:
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
        with self.transaction() as db:
            db.execute(
                "UPDATE idempotency SET job_id=?, answer=?, done=1 WHERE scope=? AND key=?",
                (job_id, json.dumps(answer) if answer is not None else "", scope, key),
            )

    def release_key(self, scope: str, key: str) -> None:
        """The request failed: the key is free again (a retry does the work)."""
        with self.transaction() as db:
            db.execute("DELETE FROM idempotency WHERE scope=? AND key=?", (scope, key))

    def purge_keys(self, older_than: float) -> int:
        """Forget keys made before ``older_than`` (seconds since the epoch)."""
        with self.transaction() as db:
            return db.execute("DELETE FROM idempotency WHERE created < ?", (older_than,)).rowcount

    # ---- webhook deliveries -------------------------------------------------------------

    def add_delivery(
        self, job_id: int, state: str, url: str, attempt: int, ok: bool, status: int | None, error: str
    ) -> None:
        with self.transaction() as db:
            db.execute(
                "INSERT INTO deliveries(job_id, state, url, attempt, at, ok, status, error) VALUES (?,?,?,?,?,?,?,?)",
                (job_id, state, url, attempt, time.time(), int(ok), status, error[:300]),
            )

    def deliveries(self, job_id: int) -> list[dict]:
        """Every webhook call made for a job, oldest first."""
        with self.transaction() as db:
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

    def webhook_jobs(self, max_attempts: int | None = None) -> list[Job]:
        """Jobs with a webhook in a final state that are still to be told of it: no successful call
        for that state yet (and, with ``max_attempts``, fewer tries than that)."""
        return self._untold("jobs.state", f"state IN ({','.join('?' * len(FINAL))})", FINAL, max_attempts)

    def webhook_checks(self, max_attempts: int | None = None) -> list[Job]:
        """Done jobs with a webhook whose lip-sync check has ended (``result.check.state`` done, failed
        or stopped) and whose ``checked`` call is still to be made (as ``webhook_jobs``)."""
        ended = (  # a damaged result is skipped, not an error
            "state=? AND CASE WHEN json_valid(result) THEN json_extract(result, '$.check.state') END"
            " IN ('done', 'failed', 'stopped')"
        )
        return self._untold("'checked'", ended, (DONE,), max_attempts)

    def _untold(self, event_sql: str, where: str, args: tuple, max_attempts: int | None) -> list[Job]:
        """Jobs with a webhook that match ``where`` (with ``args``) and have no successful call for the
        event ``event_sql`` (SQL: ``jobs.state`` or ``'checked'``) in its current round, nor, with
        ``max_attempts``, that many tries."""
        now = _round_of(event_sql)
        calls = f"FROM deliveries d WHERE d.job_id=jobs.id AND d.state={event_sql}"
        tries = "" if max_attempts is None else f" AND (SELECT COUNT(*) {calls}{now}) < ?"
        with self.transaction() as db:
            rows = db.execute(
                f"SELECT * FROM jobs WHERE webhook != '' AND {where}"
                f" AND NOT EXISTS (SELECT 1 {calls} AND d.ok=1{now}){tries} ORDER BY id",
                (*args, *(() if max_attempts is None else (max_attempts,))),
            ).fetchall()
        return [job_of_row(r) for r in rows]


def _round_of(state_sql: str) -> str:
    """SQL: a delivery ``d`` is a try of the current round of its call (after the last redelivery
    marker, a row with attempt 0, of the same job and event)."""
    return (
        " AND d.attempt > 0 AND d.id > COALESCE((SELECT MAX(m.id) FROM deliveries m WHERE m.job_id=jobs.id"
        f" AND m.state={state_sql} AND m.attempt=0), 0)"
    )

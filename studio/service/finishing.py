"""Files finished off the render thread: ``Finisher``.

Once a local job's last frame has left the engine, what is left of it (its encoders' drain and the
muxer's close, its side files and caption files, its check report, the move into place, its row and
its final ``state`` event, which the webhooks follow) runs on a finishing worker, so the thread that
fed the engine takes the next job at once. At most ``limit`` jobs finish at once (bounded memory: a
job handed over while ``limit`` are finishing waits, keeping its slot, until one ends); each writes
the file it would write alone, and a cancel reaches it as before (``renders``: nothing is written).

    finisher = Finisher(limit=1)
    finisher.take(job_id, render, finish)      # ``finish()`` runs on a worker (waits for a free one)
    finisher.renders()                         # [(job id, render)] finishing now: cancel reaches them
    finisher.wait()                            # every finishing job done
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger("studio.service.queue")


class Finisher:
    """The queue's finishing workers (a thread per job finishing, at most ``limit`` at once)."""

    def __init__(self, limit: int = 1) -> None:
        self.limit = max(1, int(limit))
        self._cond = threading.Condition()
        self._jobs: dict[int, tuple[Any, threading.Thread]] = {}  # job id -> (its Render, its worker)
        self.finished = 0  # jobs finished here (what the tests and the bench count)

    def take(self, job_id: int, render: Any, finish: Callable[[], None]) -> None:
        """Run ``finish`` (the rest of ``job_id``'s render) on a finishing worker; waits while
        ``limit`` jobs are finishing."""
        with self._cond:
            while len(self._jobs) >= self.limit:
                self._cond.wait()
            t = threading.Thread(target=self._run, args=(job_id, finish), name=f"studio-finish-{job_id}", daemon=True)
            self._jobs[job_id] = (render, t)
        t.start()

    def _run(self, job_id: int, finish: Callable[[], None]) -> None:
        try:
            finish()
        except Exception:
            log.exception("finishing job %d failed", job_id)
        finally:
            with self._cond:
                self._jobs.pop(job_id, None)
                self.finished += 1
                self._cond.notify_all()

    def renders(self) -> list[tuple[int, Any]]:
        with self._cond:
            return [(i, r) for i, (r, _) in self._jobs.items()]

    def job_ids(self) -> list[int]:
        with self._cond:
            return list(self._jobs)

    def wait(self, timeout: float | None = None) -> None:
        """Wait until no job is finishing (a worker does not wait for itself)."""
        with self._cond:
            threads = [t for _, t in self._jobs.values()]
        for t in threads:
            if t is not threading.current_thread():
                t.join(timeout)

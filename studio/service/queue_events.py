"""What the queue tells: ``QueueEvent`` and the ``Emitter`` that hands each one to the subscribers.

    emitter = Emitter()
    unsubscribe = emitter.subscribe(lambda ev: print(ev.kind, ev.job_id))
    emitter.emit("state", 7, job)

Callbacks are called on the thread that emits (the queue's runner, a job's thread, a finishing
worker); one that raises is logged and the others still hear the event. ``QueueService`` owns one
and hands it to its ``Runner`` (and the runner to its ``Slots``): the only way they talk to views.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("studio.service.queue")


@dataclass(frozen=True)
class QueueEvent:
    kind: str  # added | state | placed | progress | removed | moved | checked
    job_id: int
    job: Any = None  # the job's row (``jobs.Job``) where the event has one
    progress: Any = None  # the ``Progress`` of a ``progress`` event
    where: str = ""


class Emitter:
    """The queue's subscribers; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subs: list[Callable[[QueueEvent], None]] = []

    def subscribe(self, callback: Callable[[QueueEvent], None]) -> Callable[[], None]:
        with self._lock:
            self._subs.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._subs:
                    self._subs.remove(callback)

        return unsubscribe

    def emit(self, kind: str, job_id: int, job: Any = None, progress: Any = None, where: str = "") -> None:
        with self._lock:
            subs = list(self._subs)
        ev = QueueEvent(kind, job_id, job, progress, where)
        for cb in subs:
            try:
                cb(ev)
            except Exception:
                log.exception("queue subscriber failed on %s", kind)

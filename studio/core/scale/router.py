"""The farm's router: which replica renders a job, picked by frames queued (not round-robin).

    r = Router(controller)
    r.free_slots()                             # jobs the farm can start now
    a = r.reserve(job_id, frames)              # the replica with the fewest frames queued and a free slot
    a = r.wait_reserve(job_id, frames, (), cancel)          # the same, waiting for a slot
    actors = r.reserve_many(job_id, frames, cancel, most=4) # a chunked render: a slot on several replicas
    r.track(actor, key, job_id); r.untrack(actor, key)      # a task of the job sent to that replica
    r.release(job_id)                          # done, failed or moved: its slots are free

Jobs are served in the order they asked: a job that found no free slot waits in line (``waiting``),
and a slot that frees goes to the first in line, never to a later claim (``free_slots`` counts the
line). A queue that claims in its scheduler's order (lanes, fair shares) thus gets its order kept.

A reservation is a slot on a replica: never more than its ``capacity`` (``--jobs-per-device``) jobs
on its engine, and at most one more whose frames have left the engine while its file finishes (the
replica reports it ``finishing``). A chunked render is one job holding a slot on every replica it
reserved (at least one, waited for); its chunks go to those replicas only.
"""

from __future__ import annotations

import threading

from studio.core.errors import Cancelled
from studio.core.scale.controller import Actor, Controller

WAIT_S = 0.25  # a waiting reservation looks again at least this often


class Router:
    def __init__(self, controller: Controller):
        self.c = controller
        self.closed = threading.Event()
        self.waiting: list[int] = []  # jobs that asked for a slot and found none, in order

    def free_slots(self) -> int:
        """Jobs the farm can start now (its usable replicas' free slots)."""
        with self.c.lock:
            return max(0, sum(a.free for a in self.c.by_name.values()) - len(self.waiting))

    def actor_of(self, job_id: int) -> Actor | None:
        with self.c.lock:
            return next((a for a in self.c.by_name.values() if job_id in a.jobs), None)

    def reserve(self, job_id: int, frames: int = 0, exclude: tuple[str, ...] = ()) -> Actor | None:
        """A slot for ``job_id`` on the replica with the fewest frames queued (then fewest jobs, then
        name) among those with a free slot; the one it holds already; None when none has one."""
        with self.c.lock:
            held = self.actor_of(job_id)
            if held is not None:
                return held
            ahead = self.waiting[: self.waiting.index(job_id)] if job_id in self.waiting else self.waiting
            free = [a for a in self.c.by_name.values() if a.free > 0 and a.name not in exclude]
            if ahead or not free:
                if job_id not in self.waiting:
                    self.waiting.append(job_id)  # in line: the next slot that frees is the first waiter's
                return None
            if job_id in self.waiting:
                self.waiting.remove(job_id)
            best = min(free, key=lambda a: (a.queued_frames(), len(a.jobs), a.name))
            best.jobs[job_id] = frames
            best.settle()
            return best

    def wait_reserve(self, job_id: int, frames: int, exclude: tuple[str, ...], cancel: threading.Event) -> Actor:
        """``reserve``, waiting for a slot (another replica first: ``exclude`` only while one exists)."""
        while True:
            with self.c.changed:
                a = self.reserve(job_id, frames, exclude)
                if (
                    a is None
                    and exclude
                    and not any(x.usable and x.name not in exclude for x in self.c.by_name.values())
                ):
                    a = self.reserve(job_id, frames)
                if a is not None:
                    a.jobs[job_id] = frames
                    return a
                if cancel.is_set() or self.closed.is_set():
                    if job_id in self.waiting:
                        self.waiting.remove(job_id)
                    raise Cancelled("render cancelled; nothing was written")
                self.c.changed.wait(WAIT_S)

    def reserve_many(self, job_id: int, frames: int, cancel: threading.Event, most: int | None = None) -> list[Actor]:
        """A chunked render's slots: one on every replica with one free (at most ``most``), at least one
        (waited for)."""
        first = self.actor_of(job_id) or self.wait_reserve(job_id, frames, (), cancel)
        with self.c.changed:
            more = [a for a in self.c.by_name.values() if a.free > 0 and a is not first and not self.waiting]
            more.sort(key=lambda a: (a.queued_frames(), len(a.jobs), a.name))
            if most is not None:
                more = more[: max(0, most - 1)]
            for a in more:
                a.jobs[job_id] = frames // (len(more) + 1)
                a.settle()
        return [first, *more]

    def reserve_more(self, job_id: int, frames: int) -> list[Actor]:
        """Slots for a chunked job on replicas it does not hold yet (one that replaced a dead one)."""
        with self.c.changed:
            new = [a for a in self.c.by_name.values() if a.free > 0 and job_id not in a.jobs and not self.waiting]
            for a in new:
                a.jobs[job_id] = frames
                a.settle()
        return new

    def holders(self, job_id: int) -> list[Actor]:
        """The usable replicas holding a slot for ``job_id``."""
        with self.c.lock:
            return [a for a in self.c.by_name.values() if job_id in a.jobs and a.usable]

    def track(self, actor: Actor, key: str, job_id: int, frames: int | None = None) -> int:
        """A task ``key`` of ``job_id`` runs on ``actor`` (its progress is then the job's); answers the
        jobs that replica holds now."""
        with self.c.lock:
            actor.keys[key] = job_id
            if frames is not None:
                actor.jobs[job_id] = frames
                actor.settle()
            return len(actor.jobs)

    def untrack(self, actor: Actor, key: str) -> None:
        with self.c.lock:
            actor.keys.pop(key, None)

    def release(self, job_id: int, actor: Actor | None = None) -> None:
        """The job left its replica (``actor``; default every one: done, failed, moved): its slot is free."""
        with self.c.changed:
            if actor is None and job_id in self.waiting:
                self.waiting.remove(job_id)
            for a in [actor] if actor is not None else list(self.c.by_name.values()):
                a.finishing.discard(job_id)
                if a.jobs.pop(job_id, None) is not None or job_id in a.keys.values():
                    a.keys = {k: j for k, j in a.keys.items() if j != job_id}
                    a.settle()
            self.c.changed.notify_all()

"""Who the device serves next: priority lanes, weighted fair shares between clients, a minimum share
for the lanes below (``Scheduler``), and what a job promises (``Ticket``).

    sched = Scheduler({"newsroom": 4, "archive": 1})       # clients' weights (clients.toml ``weight``)
    t = Ticket(client="newsroom", level=parse_priority("breaking"), job_id=7)
    sched.arrive("newsroom")                               # a client with nothing queued submits
    sched.join(t); ...; sched.leave(t)                     # a job in flight (the runner, a live session)
    order = sched.pick([(t, 64), (u, 64)], budget=64)     # the asks one engine call takes, in order
    sched.served([(t, 64)])                                # what it took (counters, the call log)
    sched.rank(queued_jobs)                                # the order the queue claims jobs in

Lanes, highest first (a number: higher is sooner; names are numbers):

    live      1000   live sessions (``studio.service.batching`` views with ``Ticket(level=LIVE)``):
                     always first, and not counted against the lanes below (a live session is bounded
                     by its real-time frame rate)
    breaking   100   a newsroom's breaking clip
    normal      50   the default
    bulk         0   archives, re-renders

A request may give any number from 0 to 100 (``priority=70``); 1000 is the live lane's only.

The rules, per engine call (the batcher asks ``pick`` for the asks queued at that moment):

1. **Lanes.** The highest lane with an ask is served; lower lanes wait, except:
2. **Minimum share.** While a lane below waits (a job of it in flight), it is owed ``MIN_SHARE`` of
   the frames served above it (10 %): a call that leaves it out adds ``F x m/(1-m)`` to what it is
   owed (``F`` the call's frames); once that covers its next batch, the next call serves it first.
   So a bulk job under a stream of breaking work still gets at least 10 % of the frames, never
   nothing. The live lane is exempt (it owes and is owed nothing).
3. **Weighted fair shares within a lane** (virtual-time counters, as VTC does for LLM serving):
   each client has a counter that grows by ``frames / weight`` for every frame served to it; the
   client with the lowest counter goes first, and a call takes every client within one batch of
   the lowest (``frames / weight`` of the first), so a weight-4 client gets 4 frames for each one
   of a weight-1 client, to within one batch. A client that had nothing queued or in flight starts
   at the lowest counter of those with work in flight when it submits (no credit banked while idle);
   one whose jobs waited in the queue, or whose next job was still opening, keeps what it is owed
   and catches up.

Within a lane, between clients with the same counter, the ask that came first goes first. The
queue's claim order follows the same rules (``rank``): highest lane, then the client with the fewest
jobs in flight, then the lowest counter, then the queue's own order (``position``).

Written here because no scheduling library knows the engine's batches; the rules are VTC's
(Sheng et al., "Fairness in Serving Large Language Models", OSDI 2024) with strict lanes on top.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from studio.core.errors import InputError

LIVE = 1000
PRIORITIES = {"breaking": 100, "normal": 50, "bulk": 0}
DEFAULT_LEVEL = PRIORITIES["normal"]
MIN_SHARE = 0.10  # of the frames served above it, a waiting lane below gets at least this
CALL_LOG = 20_000  # engine calls remembered (GET /v1/scheduler, the tests' windows)


def parse_priority(value: object) -> int:
    """``breaking`` / ``normal`` / ``bulk`` or a number 0-100 (higher is sooner); ``InputError`` else."""
    if value is None or value == "":
        return DEFAULT_LEVEL
    if isinstance(value, bool):
        raise InputError("priority: give breaking, normal, bulk or a number from 0 to 100")
    if isinstance(value, int | float):
        level = value
    else:
        text = str(value).strip().lower()
        if text in PRIORITIES:
            return PRIORITIES[text]
        try:
            level = float(text)
        except ValueError:
            raise InputError(
                f"priority {str(value)[:40]!r}: give breaking, normal, bulk or a number from 0 to 100"
            ) from None
    if level != int(level) or not 0 <= level <= 100:
        raise InputError(f"priority {value}: give a whole number from 0 (bulk) to 100 (breaking)")
    return int(level)


def job_level(settings: dict | None) -> int:
    """The lane a job row's settings name (rows of earlier versions, or a bad value: normal)."""
    v = (settings or {}).get("priority")
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 100 else DEFAULT_LEVEL


def ticket_of(job) -> Ticket:
    """The ``Ticket`` of a queue's job (its client, its lane, its id)."""
    return Ticket(client=job.client or "", level=job_level(job.settings), job_id=job.id)


def level_name(level: int) -> str:
    """``breaking`` / ``normal`` / ``bulk`` / ``live``, else the number."""
    if level == LIVE:
        return "live"
    for name, n in PRIORITIES.items():
        if n == level:
            return name
    return str(level)


@dataclass(frozen=True)
class Ticket:
    """Whose work an engine call serves: the client (``""``: the operator's), its lane and the job."""

    client: str = ""
    level: int = DEFAULT_LEVEL
    job_id: int = 0


class Scheduler:
    """The lanes' and clients' counters; thread-safe (the batchers of every device share one)."""

    def __init__(self, weights: dict[str, float] | None = None, min_share: float = MIN_SHARE):
        if not 0 <= min_share < 1:
            raise ValueError("min_share must be in [0, 1)")
        self.weights = {str(k): float(v) for k, v in (weights or {}).items()}
        self.min_share = float(min_share)
        self._lock = threading.Lock()
        self._vt: dict[str, float] = {}  # client -> virtual time (frames / weight served)
        self._owed: dict[int, float] = {}  # lane -> frames owed to it (its minimum share)
        self._active: dict[tuple[str, int], int] = {}  # (client, lane) -> jobs in flight
        self.frames_by_client: dict[str, int] = {}
        self.frames_by_level: dict[int, int] = {}
        #: every engine call's asks: (monotonic seconds, client, lane, frames, job id, the calls made
        #: while it waited, the highest lane queued when it was taken)
        self.calls: deque[tuple[float, str, int, int, int, int, int]] = deque(maxlen=CALL_LOG)

    def weight(self, client: str) -> float:
        return self.weights.get(client, 1.0) or 1.0

    # ---- jobs in flight -------------------------------------------------------------------

    def join(self, t: Ticket, lift: bool = True) -> None:
        """A job of ``t.client`` in lane ``t.level`` is in flight. ``lift``: a client with nothing in
        flight starts at the lowest counter of those with something (no credit banked while idle);
        the queue lifts at submit instead (``arrive``), so a client whose jobs waited in the queue
        keeps what it is owed."""
        with self._lock:
            if lift:
                self._lift(t.client)
            key = (t.client, t.level)
            self._active[key] = self._active.get(key, 0) + 1

    def arrive(self, client: str) -> None:
        """``client`` had nothing queued or in flight and submits a job: it starts at the lowest
        counter of the clients with work in flight."""
        with self._lock:
            self._lift(client)

    def _lift(self, client: str) -> None:
        if not any(n for (c, _), n in self._active.items() if c == client):
            busy = [self._vt.get(c, 0.0) for (c, _), n in self._active.items() if n]
            if busy:
                self._vt[client] = max(self._vt.get(client, 0.0), min(busy))

    def leave(self, t: Ticket) -> None:
        with self._lock:
            key = (t.client, t.level)
            n = self._active.get(key, 0) - 1
            if n > 0:
                self._active[key] = n
            else:
                self._active.pop(key, None)
            if not any(lv == t.level for (_, lv) in self._active):
                self._owed.pop(t.level, None)  # a lane with nothing in flight banks nothing

    # ---- one engine call ------------------------------------------------------------------

    def pick(self, asks: Sequence[tuple[Ticket | None, int]], budget: int) -> list[int]:
        """Indices of ``asks`` (ticket, frames) one engine call of ``budget`` frames takes, in
        order (at least one when there is any). An ask without a ticket is the operator's, normal."""
        if not asks:
            return []
        tickets = [t or Ticket() for t, _ in asks]
        with self._lock:
            lanes = sorted({t.level for t in tickets}, reverse=True)
            top = lanes[0]
            take: list[int] = []
            frames = 0
            if top != LIVE:  # a lane below owed its minimum share goes first
                for lv in lanes[1:]:
                    mine = self._fair([i for i, t in enumerate(tickets) if t.level == lv], tickets, asks)
                    if mine and self._owed.get(lv, 0.0) >= asks[mine[0]][1]:
                        i = mine[0]
                        if not take or frames + asks[i][1] <= budget:
                            take.append(i)
                            frames += asks[i][1]
            for i in self._within_one_batch([i for i, t in enumerate(tickets) if t.level == top], tickets, asks):
                if take and frames + asks[i][1] > budget:
                    break
                take.append(i)
                frames += asks[i][1]
            return take

    def _fair(self, idx: list[int], tickets: list[Ticket], asks) -> list[int]:
        """``idx`` by the client's counter, then arrival (called with the lock)."""
        return sorted(idx, key=lambda i: (self._vt.get(tickets[i].client, 0.0), i))

    def _within_one_batch(self, idx: list[int], tickets: list[Ticket], asks) -> list[int]:
        """The lane's asks whose client is within one batch of the lowest counter, lowest first."""
        order = self._fair(idx, tickets, asks)
        if not order:
            return []
        first = tickets[order[0]].client
        limit = self._vt.get(first, 0.0) + asks[order[0]][1] / self.weight(first) + 1e-9
        return [i for i in order if self._vt.get(tickets[i].client, 0.0) <= limit]

    def served(
        self,
        took: Iterable[tuple[Ticket | None, int]],
        waiting: Iterable[Ticket | None] = (),
        passed: Sequence[int] = (),
        top_queued: int | None = None,
    ) -> None:
        """An engine call served ``took`` (ticket, frames) while ``waiting`` asks stayed queued
        (``passed``: for each ask taken, the calls made while it waited; ``top_queued``: the highest
        lane queued when they were taken): the clients' counters grow, the lanes left out are owed
        their share, the call is logged."""
        now = time.monotonic()
        served = [(t or Ticket(), n) for t, n in took]
        queued = [w or Ticket() for w in waiting]
        with self._lock:
            total = 0
            top = max((t.level for t, _ in served), default=0)
            queued_top = max([top, *(w.level for w in queued)]) if top_queued is None else top_queued
            for k, (t, n) in enumerate(served):
                self._vt[t.client] = self._vt.get(t.client, 0.0) + n / self.weight(t.client)
                self.frames_by_client[t.client] = self.frames_by_client.get(t.client, 0) + n
                self.frames_by_level[t.level] = self.frames_by_level.get(t.level, 0) + n
                if t.level in self._owed:
                    self._owed[t.level] = max(0.0, self._owed[t.level] - n)
                self.calls.append(
                    (now, t.client, t.level, n, t.job_id, passed[k] if k < len(passed) else 0, queued_top)
                )
                total += n if t.level != LIVE else 0
            served_lanes = {t.level for t, _ in served}
            m = self.min_share
            for lv in {w.level for w in queued} - served_lanes:
                if lv < top and lv != LIVE and total:
                    self._owed[lv] = self._owed.get(lv, 0.0) + total * m / (1 - m)

    # ---- the queue's claim order ----------------------------------------------------------

    def rank(self, jobs: Sequence, level_of, client_of, rendering: dict[str, int] | None = None) -> list:
        """``jobs`` (the queue's, in its own order) in the order they should be claimed: highest lane,
        then the client with the fewest jobs rendering (``rendering``: client -> jobs whose frames
        are still going through the engine; default: those in flight), so each backlogged client has
        one in the batcher before any has two, then the lowest counter, then queue order."""
        with self._lock:
            busy = [self._vt.get(c, 0.0) for (c, _), n in self._active.items() if n]
            floor = min(busy) if busy else 0.0
            vt = dict(self._vt)
            flying: dict[str, int] = dict(rendering or {})
            if rendering is None:
                for (c, _), n in self._active.items():
                    flying[c] = flying.get(c, 0) + n

        def key(kj):
            k, j = kj
            c = client_of(j)
            return (-level_of(j), flying.get(c, 0), max(vt.get(c, 0.0), floor), k)

        return [j for _, j in sorted(enumerate(jobs), key=key)]

    def levels_in_flight(self) -> set[int]:
        with self._lock:
            return {lv for (_, lv), n in self._active.items() if n}

    def snapshot(self, since: float | None = None) -> dict:
        """The counters (``GET /v1/scheduler``): per client its weight, virtual time, frames served
        and jobs in flight; per lane the frames served and what it is owed; and the calls since
        ``since`` (monotonic seconds; ``now`` is the server's clock to compare with)."""
        with self._lock:
            clients = set(self._vt) | set(self.weights) | {c for c, _ in self._active}
            return {
                "now": time.monotonic(),
                "min_share": self.min_share,
                "clients": {
                    c: {
                        "weight": self.weight(c),
                        "virtual_time": round(self._vt.get(c, 0.0), 3),
                        "frames": self.frames_by_client.get(c, 0),
                        "in_flight": sum(n for (cc, _), n in self._active.items() if cc == c),
                    }
                    for c in sorted(clients)
                },
                "lanes": {
                    level_name(lv): {
                        "level": lv,
                        "frames": self.frames_by_level.get(lv, 0),
                        "owed": round(self._owed.get(lv, 0.0), 1),
                        "in_flight": sum(n for (_, l2), n in self._active.items() if l2 == lv),
                    }
                    for lv in sorted(set(self.frames_by_level) | {lv for _, lv in self._active}, reverse=True)
                },
                "calls": [list(c) for c in self.calls if since is None or c[0] >= since],
            }

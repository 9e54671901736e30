"""How long the queue's jobs will take: ``QueueService.estimates`` (position and expected seconds of
the running job and every queued one), from the speed of the last finished jobs and each job's frames
at its own output rate; and admission by deadline (``admit``): a job whose deadline the work ahead of
it cannot leave room for is refused at submit. ``QueueService`` owns one, built with its store and
a way to read a running job's last progress (the runner's)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from studio.core.errors import StudioError
from studio.core.store import jobs as J


@dataclass(frozen=True)
class Estimate:
    """Where a waiting job stands: ``position`` (1 = next; 0 = rendering now) and the seconds until it
    is expected to be done (None until the queue has finished a job to learn the speed from)."""

    position: int
    eta_s: float | None
    starts_in_s: float | None


class DeadlineRefused(StudioError):
    """A job whose deadline the queue ahead and the measured speed cannot meet (the server answers
    429 with ``Retry-After``: ``retry_after_s``)."""

    def __init__(self, message: str, retry_after_s: float):
        super().__init__(message)
        self.retry_after_s = retry_after_s


#: an accepted deadline leaves this much room: the estimate times MARGIN plus MARGIN_S must fit in it
MARGIN, MARGIN_S = 1.25, 1.0


class Estimates:
    """When the queue's jobs will be done, and whether a deadline can be promised. ``progress_of``:
    a running job's last ``Progress`` (None before its first batch)."""

    def __init__(self, store: J.JobStore, progress_of: Callable[[int], Any]) -> None:
        self.store = store
        self._progress_of = progress_of
        self._frames_cache: dict[tuple, int] = {}
        self._rates: dict[tuple, object] = {}

    def estimates(self) -> dict[int, Estimate]:
        """The running job and every queued one (in queue order): position and expected seconds.

        The speed is learnt from the last finished jobs (seconds per frame, loading included); the
        running job's remaining frames from its progress."""
        jobs = self.store.list((J.QUEUED, J.RUNNING))
        if not jobs:
            return {}
        spf = self._seconds_per_frame()
        out: dict[int, Estimate] = {}
        clock: float | None = 0.0  # seconds from now until the job being placed can start
        running = [j for j in jobs if j.state == J.RUNNING]
        for j in running:  # one, normally (another process may run one too)
            p = self._progress_of(j.id)
            frames = self.frames_of(j)
            if p is not None and p.fps > 0:
                left: float | None = max(0, p.total - p.done) / p.fps
            else:
                left = None if spf is None or frames is None else frames * (1 - j.progress) * spf
            out[j.id] = Estimate(0, left, 0.0)
            clock = None if clock is None or left is None else max(clock, left)
        waiting = sorted((j for j in jobs if j.state == J.QUEUED), key=lambda j: (j.position, j.id))
        for n, j in enumerate(waiting, start=1):
            frames = self.frames_of(j)
            took = None if spf is None or frames is None else frames * spf
            done = None if clock is None or took is None else clock + took
            out[j.id] = Estimate(n, done, clock)
            clock = done
        return out

    def admit(self, request, level: int, deadline_s: float) -> float | None:
        """The seconds a new job of ``request`` in lane ``level`` is expected to take, done, when that
        fits its deadline (``MARGIN`` x the estimate + ``MARGIN_S``); ``DeadlineRefused`` (with when to
        try again) when it cannot. The estimate counts every frame the device serves before or beside
        it: what running jobs have left and every queued job of its lane or above, at the speed the
        last finished jobs were rendered at, slowed by the minimum share the lanes below it are owed
        (``scheduler.MIN_SHARE`` each). None (accepted) until a finished job has told the speed."""
        from studio.service.scheduler import MIN_SHARE, job_level

        spf = self._seconds_per_frame()
        own = self._request_frames(request)
        if spf is None or own is None:
            return None
        ahead, lower = 0, set()
        for j in self.store.list((J.QUEUED, J.RUNNING)):
            lv = job_level(j.settings)
            frames = self.frames_of(j) or 0
            if j.state == J.RUNNING:
                p = self._progress_of(j.id)
                ahead += max(0, p.total - p.done) if p is not None and p.total else int(frames * (1 - j.progress))
            elif lv >= level:
                ahead += frames
            else:
                lower.add(lv)
        share = max(0.05, 1.0 - MIN_SHARE * len(lower))
        est = (ahead + own) * spf / share
        need = est * MARGIN + MARGIN_S
        if need <= deadline_s:
            return round(est, 2)
        wait = max(1, math.ceil(need - deadline_s))
        raise DeadlineRefused(
            f"this job cannot be done within its deadline of {deadline_s:g} s: with {ahead} frames ahead of it "
            f"and its own {own} at the measured {1 / spf:.0f} frames/s it would take about {est:.0f} s; "
            f"give a deadline of at least {math.ceil(need)} s, or retry in {wait} s",
            wait,
        )

    def _request_frames(self, request) -> int | None:
        if request.frames:
            return int(request.frames[1]) - int(request.frames[0])
        from studio.core.media.audio import probe

        try:
            return probe(request.audio).frames_at(request.output_rate)
        except (StudioError, OSError):
            return None

    def _seconds_per_frame(self) -> float | None:
        done = [j.result for j in self.store.page((J.DONE, J.EXPIRED), limit=20)]
        frames = sum(int(r.get("frames") or 0) for r in done if r.get("seconds"))
        seconds = sum(float(r.get("seconds") or 0) for r in done if r.get("frames"))
        return seconds / frames if frames > 0 and seconds > 0 else None

    def frames_of(self, job: J.Job) -> int | None:
        """The frames a job renders (its range, else its voice-over's length at its rate); None: unknown."""
        frames = job.settings.get("frames")
        if frames:
            return int(frames[1]) - int(frames[0])
        try:
            st = Path(job.audio).stat()
        except OSError:
            return None
        rate = self._rate_of(job)
        key = (job.audio, st.st_size, st.st_mtime_ns, rate)
        if key not in self._frames_cache:
            from studio.core.media.audio import probe

            try:
                self._frames_cache[key] = probe(job.audio).frames_at(rate)
            except StudioError:
                return None
        return self._frames_cache[key]

    def _rate_of(self, job: J.Job):
        """The job's own output rate (a 60 fps job has 2.4x the frames of a 25 fps one), once per job
        and setting: ``auto`` with a video file reads the video's header, not on every listing."""
        from studio.core.avatars.library import output_rate_for
        from studio.core.media.rates import DEFAULT_RATE, parse_rate

        if job.settings.get("rate"):
            return parse_rate(job.settings["rate"])  # resolved once, when the request was built
        key = (job.id, job.avatar, job.settings.get("fps"))
        if key not in self._rates:
            if len(self._rates) > 10_000:
                self._rates.clear()
            try:
                self._rates[key] = output_rate_for(key[2], job.avatar)
            except (StudioError, OSError, ValueError):
                return DEFAULT_RATE  # not kept: the avatar may be fixed before the job runs
        return self._rates[key]

"""How long the queue's jobs will take: ``QueueService.estimates`` (position and expected seconds of
the running job and every queued one), from the speed of the last finished jobs and each job's frames
at its own output rate. A mixin of ``QueueService`` (its attributes are the queue's)."""

from __future__ import annotations

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


class Estimates:
    """The part of ``QueueService`` that estimates when its jobs are done."""

    store: J.JobStore
    last_progress: dict[int, Any]  # job id -> its last Progress
    _frames_cache: dict[tuple, int]
    _rates: dict[tuple, object]

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
            p = self.last_progress.get(j.id)
            frames = self._frames_of(j)
            if p is not None and p.fps > 0:
                left: float | None = max(0, p.total - p.done) / p.fps
            else:
                left = None if spf is None or frames is None else frames * (1 - j.progress) * spf
            out[j.id] = Estimate(0, left, 0.0)
            clock = None if clock is None or left is None else max(clock, left)
        waiting = sorted((j for j in jobs if j.state == J.QUEUED), key=lambda j: (j.position, j.id))
        for n, j in enumerate(waiting, start=1):
            frames = self._frames_of(j)
            took = None if spf is None or frames is None else frames * spf
            done = None if clock is None or took is None else clock + took
            out[j.id] = Estimate(n, done, clock)
            clock = done
        return out

    def _seconds_per_frame(self) -> float | None:
        done = [j.result for j in self.store.page((J.DONE, J.EXPIRED), limit=20)]
        frames = sum(int(r.get("frames") or 0) for r in done if r.get("seconds"))
        seconds = sum(float(r.get("seconds") or 0) for r in done if r.get("frames"))
        return seconds / frames if frames > 0 and seconds > 0 else None

    def _frames_of(self, job: J.Job) -> int | None:
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

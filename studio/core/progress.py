"""Progress as people read it: one rounding rule shared by every view of a render.

``Startup`` is what a server says while it gets ready (``/v1/ready``).

The Live bar in the Render panel and the Queue's Progress column both show ``percent(done, total)``
so they never disagree (one said 99 % while the other said 100 %). The rule floors: 100 % only
when every frame is done, 0 % until the first one is.
"""

from __future__ import annotations

import math
import threading
import time


def percent(done: float, total: float) -> int:
    """Whole percent of ``done`` out of ``total``, floored (``total`` <= 0 gives 0)."""
    if not total or total <= 0:
        return 0
    frac = min(max(float(done) / float(total), 0.0), 1.0)
    return int(math.floor(frac * 100 + 1e-9))


def fraction_percent(frac: float) -> int:
    """The same rule for a stored fraction in [0, 1] (the job store keeps fractions)."""
    return percent(frac, 1.0)


class Startup:
    """What a server says while it gets ready, for ``/v1/ready``: 503 with what it is doing and for how
    long ("warming up: loading the musetalk engine (4 s so far)"), or why it failed; then 200. The
    engines' warm-up (``api.warmup.WarmUp``) and a farm's start (``studio serve --farm``) are each one."""

    def __init__(self, failed: str, doing: str = "starting") -> None:
        self.failed = failed  # how the sentence of a failure starts ("the warm-up failed")
        self.doing = doing  # what it does now, in words
        self.ready = False
        self.error: str | None = None
        self.started = time.monotonic()
        self.seconds: float | None = None  # how long it took, once ready
        self.over = threading.Event()  # set once it is ready or failed

    def succeed(self) -> None:
        self.seconds = time.monotonic() - self.started
        self.ready = True
        self.over.set()

    def fail(self, error: str) -> None:
        self.error = error
        self.over.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Until it is ready or failed, at most ``timeout`` seconds: whether it is ready."""
        self.over.wait(timeout)
        return self.ready

    def status(self) -> str:
        """What it is doing, for a client (``warming up: ... (3 s so far)``), or why it failed."""
        if self.error is not None:
            return f"{self.failed}: {self.error}"
        return f"warming up: {self.doing} ({time.monotonic() - self.started:.0f} s so far)"

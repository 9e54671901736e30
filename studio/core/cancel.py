"""Cancellation points in long core loops (decoding an hour of voice-over, computing its features).

    with stop_when(cancel_event.is_set):     # the caller's thread: what says "stop"
        wave = load(path)                    # decode loops call checkpoint() once per block

A render's preparation (the voice-over decoded, planned and turned into features) used to run to its
end after a cancel: a server asked to stop while a job prepared a 55-minute voice-over took 30 s
to exit, past the 10 s a container runtime waits before SIGKILL. ``checkpoint()`` raises
``Cancelled`` in the thread whose ``stop_when`` check says so; elsewhere (no check set) it costs a
thread-local lookup.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable

from studio.core.errors import Cancelled

_LOCAL = threading.local()


@contextlib.contextmanager
def stop_when(check: Callable[[], bool]):
    """``checkpoint()`` in this thread raises ``Cancelled`` once ``check()`` is true (nested: any)."""
    checks = getattr(_LOCAL, "checks", None)
    if checks is None:
        checks = _LOCAL.checks = []
    checks.append(check)
    try:
        yield
    finally:
        checks.remove(check)


def checkpoint() -> None:
    """Raise ``Cancelled`` when a ``stop_when`` check of this thread says stop."""
    for check in getattr(_LOCAL, "checks", None) or ():
        if check():
            raise Cancelled("render cancelled; nothing was written")

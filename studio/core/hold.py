"""The tests' hold on a running render or avatar build (``$STUDIO_TEST_HOLD``): a test that needs "a job
still running" (to cancel it, signal it, drop its client, watch two jobs overlap) creates a file, names
it in the variable, waits for the hold's ``.held`` file, does what it tests, then removes the file.
Three points: ``FILE`` holds every render before it writes its second batch; ``FILE.finish`` holds it
after its last frame, before its file is finished (its frames have left the engine: what a queue calls
finishing); ``FILE.build`` holds an avatar build after its first frame is in its temporary file. Off
(one look at the environment) unless the variable is set; no user sets it. Below every core package
that holds (the render, the avatar builder): it needs only the environment.

Written here because no library holds a loop on a file another process controls; a file works across
the processes a test starts (``studio serve``, the CLI, chunk workers, Ray actors), where an in-process
event would not.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from studio.core.env import get

POLL_S = 0.01


def hold(stop: Callable[[], bool], point: str = "") -> None:
    """While the hold file of ``point`` ($STUDIO_TEST_HOLD, or that name + ``.point``) exists, wait
    (until it is removed or ``stop()``); its ``.held`` file is created first, so the test knows."""
    name = get("STUDIO_TEST_HOLD")
    if not name:
        return
    path = Path(name + (f".{point}" if point else ""))
    if not path.exists():
        return
    path.with_name(path.name + ".held").touch()
    while path.exists() and not stop():
        time.sleep(POLL_S)

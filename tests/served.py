"""A real ``studio serve`` process for tests: 127.0.0.1, a free port, its own data folder."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from studio.service.serve_process import ServeProcess, free_port

__all__ = ["ROOT", "Hold", "Server", "free_port"]

ROOT = Path(__file__).resolve().parent.parent


class Hold:
    """The tests' hold on renders (``$STUDIO_TEST_HOLD``, ``studio.core.hold``): inside ``with hold:``
    every render of the processes given the variable stops after its first batch until the block ends
    or the render is cancelled, so "a job still running" never depends on how long a render takes."""

    def __init__(self, path: Path, point: str = ""):
        """``point``: "" holds before a render's second batch, "finish" after its last frame (its frames
        have left the engine, its file is not written yet), "build" an avatar build after its first frame."""
        self.path = Path(str(path) + (f".{point}" if point else ""))
        self.held_file = self.path.with_name(self.path.name + ".held")

    def __enter__(self) -> Hold:
        self.held_file.unlink(missing_ok=True)
        self.path.touch()
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def release(self) -> None:
        self.path.unlink(missing_ok=True)

    def wait_held(self, timeout: float = 120, proc: subprocess.Popen | None = None) -> None:
        """Until a render is held (``timeout`` guards against a hang, it is not a bet on speed); with
        ``proc``, fails at once if that process ends first."""
        deadline = time.monotonic() + timeout
        while not self.held_file.exists():
            if proc is not None and proc.poll() is not None:
                err = proc.stderr.read() if proc.stderr else ""
                raise AssertionError(f"the process ended (exit {proc.returncode}) before it was held: {err}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no render was held within {timeout:.0f} s")
            time.sleep(0.01)


class Server(ServeProcess):
    """``sys.executable -m studio serve --port FREE *args`` with ``STUDIO_HOME=home``; waits for /v1/health.
    ``hold``/``hold_finish``: its renders' ``Hold`` points (off until a test enters one)."""

    def __init__(self, home: Path, *args: str, token: str | None = None, timeout: float = 90):
        self.home = Path(home)
        self.home.mkdir(parents=True, exist_ok=True)
        self.hold = Hold(self.home / "test-hold")
        self.hold_finish = Hold(self.home / "test-hold", "finish")
        env = dict(os.environ, STUDIO_HOME=str(home), PYTHONPATH=str(ROOT), STUDIO_TEST_HOLD=str(self.hold.path))
        super().__init__(self.home, env, args, token=token, timeout=timeout, cwd=ROOT)

"""A real ``studio serve`` child process on a free 127.0.0.1 port, waited for until it answers.

    with ServeProcess(folder, env, ("--token", T), token=T) as srv:   # folder/server.log
        StudioClient(srv.url, token=T).generate(...)
    srv.start_s                                                      # seconds until /v1/health answered

What ``studio bench --user`` times its server rows on, and what the tests talk to (tests/served.py).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServeProcess:
    """``sys.executable -m studio serve --port FREE *args`` with ``env`` (its ``STUDIO_SERVER_TOKEN``
    dropped: the arguments say what the server takes), its output appended to ``folder/server.log``;
    returns once ``/v1/health`` answers 200 (RuntimeError, with the log's tail, when it exits or does
    not answer within ``timeout`` seconds)."""

    def __init__(
        self,
        folder: Path,
        env: dict,
        args: tuple[str, ...] = (),
        token: str | None = None,
        timeout: float = 180,
        cwd: Path | None = None,
    ):
        import httpx

        self.folder = Path(folder)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in env.items() if k != "STUDIO_SERVER_TOKEN"}
        self.log = open(self.folder / "server.log", "a")
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "studio", "serve", "--port", str(self.port), *args],
            env=env,
            cwd=cwd,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.log.close()
                raise RuntimeError(f"studio serve exited: {self.log_tail()}")
            try:
                if httpx.get(f"{self.url}/v1/health", headers=headers, timeout=2).status_code == 200:
                    self.start_s = time.perf_counter() - t0
                    return
            except httpx.TransportError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"studio serve did not answer within {timeout:.0f} s: {self.log_tail()}")

    def log_tail(self, chars: int = 1500) -> str:
        return (self.folder / "server.log").read_text(errors="replace")[-chars:]

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        """SIGTERM (the server finishes its requests and closes), SIGKILL after 30 s."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if not self.log.closed:
            self.log.close()

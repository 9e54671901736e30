"""A real ``studio serve`` process for tests: 127.0.0.1, a free port, its own data folder."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``sys.executable -m studio serve --port FREE *args`` with ``STUDIO_HOME=home``; waits for /v1/health."""

    def __init__(self, home: Path, *args: str, token: str | None = None, timeout: float = 90):
        import httpx

        self.home = Path(home)
        self.home.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ, STUDIO_HOME=str(home), PYTHONPATH=str(ROOT))
        env.pop("STUDIO_SERVER_TOKEN", None)
        self.log = open(self.home / "server.log", "a")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "studio", "serve", "--port", str(self.port), *args],
            env=env,
            cwd=ROOT,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, (self.home / "server.log").read_text()
            try:
                if httpx.get(f"{self.url}/v1/health", headers=headers, timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.2)
        self.stop()
        raise AssertionError(f"the server did not answer within {timeout:.0f} s")

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if not self.log.closed:
            self.log.close()

"""A real ``studio serve`` process for tests: 127.0.0.1, a free port, its own data folder."""

from __future__ import annotations

import os
from pathlib import Path

from studio.service.serve_process import ServeProcess, free_port

__all__ = ["ROOT", "Server", "free_port"]

ROOT = Path(__file__).resolve().parent.parent


class Server(ServeProcess):
    """``sys.executable -m studio serve --port FREE *args`` with ``STUDIO_HOME=home``; waits for /v1/health."""

    def __init__(self, home: Path, *args: str, token: str | None = None, timeout: float = 90):
        self.home = Path(home)
        self.home.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, STUDIO_HOME=str(home), PYTHONPATH=str(ROOT))
        super().__init__(self.home, env, args, token=token, timeout=timeout, cwd=ROOT)

"""Helpers of the hostile-data tests (issue 33): real tmpfs mounts, ``studio`` commands, one-line checks."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT


@contextlib.contextmanager
def tmpfs(where: Path, size: str):
    """A real tmpfs of ``size`` mounted on ``where`` (skips where mounting is not allowed)."""
    where.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode(errors='replace').strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def studio(*args: str, env: dict | None = None, timeout: float = 180, **kw) -> subprocess.CompletedProcess:
    full = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "studio", *args], env=full, capture_output=True, text=True, timeout=timeout, **kw
    )


def one_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip() and not ln.startswith("encoder ring")]
    assert len(lines) == 1 and "Traceback" not in text, text
    return lines[0]


def wait_job(c, jid: int, timeout: float = 120) -> dict:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        j = c.get(f"/v1/renders/{jid}").json()
        if j["state"] in ("done", "failed", "cancelled"):
            return j
        time.sleep(0.2)
    raise AssertionError(f"job {jid} still {j['state']}")


def old_file(path: Path, size: int = 1000, days: float = 30) -> Path:
    import time

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\0" * size)
    when = time.time() - days * 86400
    os.utime(path, (when, when))
    return path

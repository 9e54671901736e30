"""The house checks run with the tests: ruff (lint and format) and mypy, configured in pyproject.toml."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _tool(name: str) -> str:
    exe = Path(sys.executable).with_name(name)
    found = str(exe) if exe.exists() else shutil.which(name)
    if not found:
        pytest.fail(f"{name} is not installed: ./dev setup installs the dev extra, which has it")
    return found


@pytest.mark.parametrize("args", [["check", "."], ["format", "--check", "."]], ids=["lint", "format"])
def test_ruff_is_clean(args):
    r = subprocess.run([_tool("ruff"), *args], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


def test_mypy_is_clean():
    r = subprocess.run([_tool("mypy")], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "Success" in r.stdout, r.stdout[-4000:] + r.stderr[-2000:]


def test_every_noqa_names_a_rule_that_runs():
    """RUF100 is selected: a ``# noqa`` for a rule that is not enabled (or not hit) is itself an error."""
    import tomllib

    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]
    assert "RUF100" in cfg["select"]

"""Issue 40: a property-based API fuzzer (Schemathesis) against a real ``studio serve`` on 127.0.0.1
(classic engine) finds nothing: no 5xx, no status or header the document does not declare, no
schema-valid request refused, ``Allow`` right on every 405, answers that match their schemas, and the
stateful phase follows the document's links from what a POST makes (a job, a voice-over, an avatar)
to the operations on it. 25 examples an operation plus the stateful phase; the settings are
tests/schemathesis.toml, the upload hooks tests/fuzz_hooks.py. About 2.5 minutes on the 2-core
machine (CI has 2 cores), so it runs once, here, with the command docs/api.md gives integrators."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from served import ROOT, Server

pytest.importorskip("schemathesis")


def command(url: str) -> list[str]:
    """What docs/api.md tells integrators to run (``st``), with this run's server."""
    exe = Path(sys.executable).with_name("st")
    if not exe.exists():
        pytest.skip("schemathesis is not installed (the dev extra)")
    return [
        str(exe),
        "--config-file",
        str(ROOT / "tests" / "schemathesis.toml"),
        "run",
        f"{url}/openapi.json",
        "--seed",
        "1",
        "--no-color",
    ]


@pytest.mark.timeout(420)
def test_the_fuzzer_finds_no_failure(tmp_path):
    server = Server(tmp_path / "home", "--max-queued", "3")
    try:
        r = subprocess.run(
            command(server.url),
            cwd=tmp_path,  # Schemathesis keeps a .schemathesis/ cache in the working folder
            # the hooks by their module name on tests/ (a "tests" package elsewhere, such as the one
            # pycaption installs in site-packages, would hide tests.fuzz_hooks)
            env=dict(os.environ, PYTHONPATH=os.pathsep.join((str(ROOT / "tests"), str(ROOT)))),
            capture_output=True,
            text=True,
            timeout=400,
        )
    finally:
        server.stop()
    out = r.stdout + r.stderr
    failures = out[out.find("FAILURES") :] if "FAILURES" in out else out
    assert r.returncode == 0, failures[:10000]
    summary = out[out.rfind("SUMMARY") :]
    tested = int(re.search(r"Tested: (\d+)", summary).group(1))
    assert tested >= 21, summary  # every operation of the document
    assert "✅ Stateful" in summary and "✅ Fuzzing" in summary, summary
    cases = int(re.search(r"(\d+) generated", summary).group(1))
    assert cases >= 25 * tested, summary  # at least 25 examples an operation
    assert re.search(r"\b0 failures\b|No issues found", summary) or "failures" not in summary, summary

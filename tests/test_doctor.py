"""``studio doctor``: every check reports a status, a detail and, when not ok, a fix hint."""

from __future__ import annotations

import json
import subprocess
import sys

from studio.core import doctor

NAMES = {"GPU", "CUDA", "NVENC", "TensorRT", "weights", "engine", "data folder"}


def test_every_check_reports_and_problems_carry_a_fix_hint():
    checks = doctor.run_checks(include_gui=False)
    by_name = {c.name: c for c in checks}
    assert NAMES <= set(by_name)
    for c in checks:
        assert c.status in (doctor.OK, doctor.WARN, doctor.FAIL, doctor.INFO)
        assert c.detail
        if c.status in (doctor.WARN, doctor.FAIL):
            assert c.hint, c
    import torch

    gpu = by_name["GPU"]
    assert (gpu.status == doctor.OK) == torch.cuda.is_available()


def test_the_data_folder_check_names_the_folder(studio_home):
    c = doctor.check_data_folder()
    assert c.status in (doctor.OK, doctor.WARN)
    assert str(studio_home) in c.detail


def test_a_crashing_check_becomes_a_failed_line(monkeypatch):
    def check_gpu():
        raise RuntimeError("driver exploded")

    monkeypatch.setattr(doctor, "check_gpu", check_gpu)
    by_name = {c.name: c for c in doctor.run_checks(include_gui=False)}
    assert by_name["gpu"].status == doctor.FAIL
    assert "driver exploded" in by_name["gpu"].detail


def test_cli_doctor_json_is_one_object(studio_home):
    r = subprocess.run(
        [sys.executable, "-m", "studio", "doctor", "--json", "--no-gui"],
        capture_output=True,
        text=True,
        env={"STUDIO_HOME": str(studio_home), "PATH": "/usr/bin:/bin"},
    )
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["ok"] is True
    assert NAMES <= {c["name"] for c in data["checks"]}


def test_weights_line_reports_an_empty_store_and_a_damaged_manifest(studio_home):
    from studio.core.engines import weights

    empty = doctor.check_weights()
    assert empty.status == doctor.WARN and "studio models import" in empty.hint
    (weights.models_root() / weights.MANIFEST).write_text("{not json")
    damaged = doctor.check_weights()
    assert damaged.status == doctor.FAIL
    assert "manifest" in damaged.detail


def test_doctor_says_whether_bmx_is_installed(tmp_path, monkeypatch):
    """No bmxtranswrap on the PATH: an info line naming the optional re-wrap; one there: its version."""
    import os
    import stat

    monkeypatch.setenv("PATH", str(tmp_path))
    c = doctor.check_bmx()
    assert c.status == doctor.INFO and "bmxtranswrap is not installed" in c.detail
    tool = tmp_path / "bmxtranswrap"
    tool.write_text("#!/bin/sh\necho 'bmxtranswrap, bmx v1.2 (test build)'\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", str(tmp_path) + os.pathsep + "/bin:/usr/bin")
    c = doctor.check_bmx()
    assert c.status == doctor.OK and "bmx v1.2" in c.detail

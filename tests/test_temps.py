"""The temporary-file registry (studio.core.store.fsutil): a killed process's temporaries are removed by
the next sweep, nothing else ever is; atomic outputs get the user's umask or keep the old mode."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from studio.core.store import fsutil

CHILD = textwrap.dedent("""
    import os, sys, time
    from studio.core.store import fsutil
    out = sys.argv[1]
    f = fsutil.temp_file(out, ".clip.", ".part.mp4")
    d = fsutil.temp_dir(out, ".clip.chunks.")
    (d / "seg0000.mp4").write_bytes(b"segment")
    spill = fsutil.register_temp(os.path.join(out, f.name + ".chunk0"))
    open(spill, "wb").write(b"spill")
    fsutil.register_temp(os.path.join(out, ".never.created.part"))   # registered, never made
    with fsutil.atomic_path(os.path.join(out, "done.mp4")) as t:      # finished: must stay
        t.write_bytes(b"finished")
    print("ready", flush=True)
    if sys.argv[2] == "wait":
        time.sleep(60)
""")


def _child(out: Path, mode: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(out), mode], stdout=subprocess.PIPE, text=True, env=dict(os.environ)
    )


def test_a_killed_process_temporaries_are_swept_and_nothing_else(tmp_path, studio_home):
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("the user's")
    p = _child(out, "wait")
    try:
        assert p.stdout.readline().strip() == "ready"
        names = sorted(os.listdir(out))
        assert len(names) == 5 and "done.mp4" in names  # temp file, its spill, the folder, done, mine
        assert fsutil.sweep_dead_temps() == []  # alive: its lock is held, nothing is touched
        assert sorted(os.listdir(out)) == names
    finally:
        p.kill()
        p.wait()
    removed = fsutil.sweep_dead_temps()
    assert len(removed) == 3
    assert sorted(os.listdir(out)) == ["done.mp4", "mine.txt"]
    assert (out / "done.mp4").read_bytes() == b"finished"
    assert os.listdir(studio_home / "tmp") == []  # the dead record is gone too
    assert fsutil.sweep_dead_temps() == []


def test_a_normal_exit_removes_what_the_process_left_registered(tmp_path, studio_home):
    out = tmp_path / "out"
    out.mkdir()
    p = _child(out, "exit")
    assert p.stdout.readline().strip() == "ready"
    assert p.wait(30) == 0
    assert sorted(os.listdir(out)) == ["done.mp4"]
    assert os.listdir(studio_home / "tmp") == []


def test_a_damaged_record_never_deletes_anything_that_is_not_a_temporary(tmp_path, studio_home):
    out = tmp_path / "out"
    out.mkdir()
    keep = {
        "notes.txt": "a user file",  # not a temporary's name
        ".bashrc": "hidden, but not ours",  # hidden, no .part / .tmp
    }
    for name, text in keep.items():
        (out / name).write_text(text)
    (out / ".clip.x.part.mp4").mkdir()  # registered as a file, but it is a folder now
    (out / ".link.part.chunks").symlink_to(tmp_path)  # registered as a folder, but it is a link
    (out / ".ok.part.mp4").write_bytes(b"x")  # the only real leftover
    lines = [
        json.dumps({"studio_temps": 1, "pid": 1}),
        json.dumps(["+f", str(out / "notes.txt")]),
        json.dumps(["+f", str(out / ".bashrc")]),
        json.dumps(["+f", str(out / ".clip.x.part.mp4")]),
        json.dumps(["+d", str(out / ".link.part.chunks")]),
        json.dumps(["+f", "relative/.x.part"]),
        "garbage that is not json",
        json.dumps(["+f", str(out / ".ok.part.mp4")]),
        json.dumps(["+f", str(out / ".released.part.mp4")]),
        json.dumps(["-", str(out / ".released.part.mp4")]),
        '["+f", "' + str(out / ".torn"),
    ]  # a line cut by a power cut
    (out / ".released.part.mp4").write_bytes(b"renamed away then reused")
    rec = studio_home / "tmp"
    rec.mkdir()
    (rec / "1-dead.rec").write_text("\n".join(lines))
    assert fsutil.sweep_dead_temps() == [str(out / ".ok.part.mp4")]
    assert sorted(os.listdir(out)) == sorted([*keep, ".clip.x.part.mp4", ".link.part.chunks", ".released.part.mp4"])
    assert (tmp_path / "out").is_dir() and os.listdir(rec) == []


def test_only_temporary_names_can_be_registered(tmp_path):
    with pytest.raises(ValueError):
        fsutil.register_temp(tmp_path / "out.mp4")
    with pytest.raises(ValueError):
        fsutil.register_temp(tmp_path / ".hidden")


def test_sweep_without_a_records_folder_does_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("STUDIO_HOME", str(tmp_path / "none"))
    assert fsutil.sweep_dead_temps() == []
    assert not (tmp_path / "none").exists()  # a sweep creates nothing


@pytest.mark.parametrize("umask, want", [(0o022, 0o644), (0o027, 0o640), (0o002, 0o664)])
def test_a_new_output_gets_the_users_umask(tmp_path, umask, want):
    old = os.umask(umask)
    try:
        with fsutil.atomic_path(tmp_path / "out.mp4") as tmp:
            tmp.write_bytes(b"video")
    finally:
        os.umask(old)
    assert (tmp_path / "out.mp4").stat().st_mode & 0o777 == want


@pytest.mark.parametrize("mode", [0o600, 0o664, 0o640])
def test_a_replaced_output_keeps_its_mode(tmp_path, mode):
    target = tmp_path / "out.png"
    target.write_bytes(b"old")
    target.chmod(mode)
    fsutil.atomic_write_bytes(target, b"new")
    assert target.read_bytes() == b"new"
    assert target.stat().st_mode & 0o777 == mode


def test_a_failed_atomic_write_leaves_nothing_registered(tmp_path):
    with pytest.raises(RuntimeError), fsutil.atomic_path(tmp_path / "out.mp4") as tmp:
        tmp.write_bytes(b"half")
        raise RuntimeError("boom")
    assert os.listdir(tmp_path) == []
    assert not [p for p in fsutil.own_temps() if p.startswith(str(tmp_path))]

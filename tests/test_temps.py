"""The temporary-file registry (studio.core.store.temps): a killed process's temporaries are removed by
the next sweep, nothing else ever is; atomic outputs get the user's umask or keep the old mode."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from studio.core.store import fsutil, temps

CHILD = textwrap.dedent("""
    import os, sys, time
    from studio.core.store import fsutil, temps
    out = sys.argv[1]
    f = temps.temp_file(out, ".clip.", ".part.mp4")
    d = temps.temp_dir(out, ".clip.chunks.")
    (d / "seg0000.mp4").write_bytes(b"segment")
    spill = temps.register_temp(os.path.join(out, f.name + ".chunk0"))
    open(spill, "wb").write(b"spill")
    temps.register_temp(os.path.join(out, ".never.created.part"))   # registered, never made
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
        assert temps.sweep_dead_temps() == []  # alive: its lock is held, nothing is touched
        assert sorted(os.listdir(out)) == names
    finally:
        p.kill()
        p.wait()
    removed = temps.sweep_dead_temps()
    assert len(removed) == 3
    assert sorted(os.listdir(out)) == ["done.mp4", "mine.txt"]
    assert (out / "done.mp4").read_bytes() == b"finished"
    assert os.listdir(studio_home / "tmp") in ([], [temps.KEY_NAME])  # the dead record is gone too
    assert temps.sweep_dead_temps() == []


def test_a_normal_exit_removes_what_the_process_left_registered(tmp_path, studio_home):
    out = tmp_path / "out"
    out.mkdir()
    p = _child(out, "exit")
    assert p.stdout.readline().strip() == "ready"
    assert p.wait(30) == 0
    assert sorted(os.listdir(out)) == ["done.mp4"]
    assert os.listdir(studio_home / "tmp") in ([], [temps.KEY_NAME])


SLOW_CLEANUP = textwrap.dedent("""
    import sys, time
    from studio.core.signals import handle_stop_signals
    from studio.core.store import temps
    handle_stop_signals()
    try:  # the path is printed inside: a signal right after it must reach the except below
        print(temps.temp_file(sys.argv[1], ".clip.", ".part.mp4"), flush=True)
        time.sleep(60)
    except KeyboardInterrupt:
        print("cleaning up", flush=True)
        time.sleep(60)  # a slow clean-up: a second signal ends the process at once
""")


def test_a_second_signal_exits_at_once_and_still_removes_the_temporaries(tmp_path, studio_home):
    """The second stop signal skips the atexit handlers (os._exit); the store registered the removal
    of its temporaries with signals.on_forced_exit, so they go anyway (signals imports no store)."""
    import signal

    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_CLEANUP, str(tmp_path)], stdout=subprocess.PIPE, text=True, env=dict(os.environ)
    )
    try:
        tmp = Path(proc.stdout.readline().strip())
        assert tmp.exists() and temps.is_temp_name(tmp.name)
        proc.send_signal(signal.SIGTERM)
        assert proc.stdout.readline().strip() == "cleaning up"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    finally:
        proc.kill()
    assert not tmp.exists() and os.listdir(tmp_path) == []


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
    rec = studio_home / "tmp"
    rec.mkdir()
    key = temps.record_key(rec, create=True)  # signed as this data folder's own processes sign

    def line(op, path):
        return json.dumps([op, path, temps.record_mac(key, op, path)])

    lines = [
        json.dumps({"studio_temps": 1, "pid": 1}),
        line("+f", str(out / "notes.txt")),
        line("+f", str(out / ".bashrc")),
        line("+f", str(out / ".clip.x.part.mp4")),
        line("+d", str(out / ".link.part.chunks")),
        line("+f", "relative/.x.part"),
        "garbage that is not json",
        line("+f", str(out / ".ok.part.mp4")),
        line("+f", str(out / ".released.part.mp4")),
        line("-", str(out / ".released.part.mp4")),
        '["+f", "' + str(out / ".torn"),
    ]  # a line cut by a power cut
    (out / ".released.part.mp4").write_bytes(b"renamed away then reused")
    (rec / "1-dead.rec").write_text("\n".join(lines))
    assert temps.sweep_dead_temps() == [str(out / ".ok.part.mp4")]
    assert sorted(os.listdir(out)) == sorted([*keep, ".clip.x.part.mp4", ".link.part.chunks", ".released.part.mp4"])
    assert (tmp_path / "out").is_dir() and os.listdir(rec) == [temps.KEY_NAME]


def test_a_planted_record_deletes_nothing(tmp_path, studio_home):
    """Records Studio did not write (no key, another data folder's key, a forged one, another
    user's file) never remove anything, through the real ``studio`` command's sweep."""
    victims = tmp_path / "elsewhere"
    victims.mkdir()
    names = [".thesis.part", ".backup.tmp", ".db.part.mp4", ".cache.tmp.d"]
    for n in names[:-1]:
        (victims / n).write_bytes(b"someone's work")
    (victims / names[-1]).mkdir()
    rec = studio_home / "tmp"
    rec.mkdir()
    header = json.dumps({"studio_temps": 1, "pid": 1})
    plain = [json.dumps(["+f", str(victims / n)]) for n in names[:-1]] + [json.dumps(["+d", str(victims / names[-1])])]
    (rec / "1-planted.rec").write_text("\n".join([header, *plain]))  # the old, unsigned form
    other_key = os.urandom(32)  # signed, but with a key that is not this data folder's
    forged = [json.dumps(["+f", str(victims / n), temps.record_mac(other_key, "+f", str(victims / n))]) for n in names]
    (rec / "2-forged.rec").write_text("\n".join([header, *forged]))
    r = subprocess.run(
        [sys.executable, "-m", "studio", "queue", "list"], capture_output=True, text=True, timeout=120
    )  # any command sweeps first
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(victims)) == sorted(names)
    # a real process of this data folder is still cleaned up after as before
    p = _child(tmp_path, "exit")
    assert p.stdout.readline().strip() == "ready" and p.wait(30) == 0
    assert (rec / temps.KEY_NAME).stat().st_mode & 0o777 == 0o600
    key = temps.record_key(rec, create=False)
    bad = victims / names[0]
    (rec / "3-late.rec").write_text(
        "\n".join([header, json.dumps(["+f", str(bad), temps.record_mac(key, "+f", str(bad))])])
    )
    os.chmod(rec / temps.KEY_NAME, 0o644)  # a key others can read proves nothing: it is not used
    assert temps.sweep_dead_temps() == [] and bad.exists()


def test_only_temporary_names_can_be_registered(tmp_path):
    with pytest.raises(ValueError):
        temps.register_temp(tmp_path / "out.mp4")
    with pytest.raises(ValueError):
        temps.register_temp(tmp_path / ".hidden")


def test_sweep_without_a_records_folder_does_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("STUDIO_HOME", str(tmp_path / "none"))
    assert temps.sweep_dead_temps() == []
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
    assert not [p for p in temps.own_temps() if p.startswith(str(tmp_path))]

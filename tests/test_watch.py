"""Watch folders (issue 49, item 3): a real ``studio watch`` process and real files copied in slowly, a bad
file, two at once, an existing output kept; a restart in the middle; a read-only output folder."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import soundfile as sf
from conftest import DEMO_AVATAR, speechlike

from studio.service.watch import WatchFolder, is_candidate

TOML = '[settings]\nengine = "classic"\ndevice = "cpu"\ncanvas = "avatar"\nfps = "25"\n'


def _voice(path: Path, seconds: float, seed: int = 1) -> Path:
    sf.write(str(path), speechlike(seconds, 16_000, seed), 16_000, subtype="PCM_16")
    return path


def _wait(cond, what: str, timeout: float = 400.0):
    """Wait for ``cond()`` (the watcher's own files on disk), failing with ``what`` after ``timeout``."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _duration(path) -> float:
    import av

    with av.open(str(path)) as c:
        v = c.streams.video[0]
        return float(v.frames / v.average_rate)


def test_a_watch_folder_renders_slow_copies_two_files_and_a_bad_one(tmp_path):
    inbox, out = tmp_path / "in", tmp_path / "out"
    inbox.mkdir()
    out.mkdir()
    (inbox / "studio.toml").write_text(TOML)
    (out / "a.mp4").write_bytes(b"an earlier clip the user keeps")  # never overwritten
    src = _voice(tmp_path / "slow.wav", 2.0)
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.Popen(
        [sys.executable, "-m", "studio", "watch", str(inbox), "--delivery", "web-720p", "--out", str(out),
         "--avatar", str(DEMO_AVATAR), "--interval", "0.2", "--settle", "5", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        # a copy in ten pieces under its final name, a pause after each (far shorter than --settle: the test
        # process may be starved for seconds on a loaded machine, and a stall longer than --settle looks finished)
        data = src.read_bytes()
        with open(inbox / "slow.wav", "wb") as fh:
            for k in range(10):
                fh.write(data[k * len(data) // 10 : (k + 1) * len(data) // 10])
                fh.flush()
                time.sleep(0.3)
        (inbox / "broken.wav").write_text("this is not audio\n")
        (inbox / "copying.wav.part").write_bytes(data[:1000])  # a copy's temporary: never taken
        for name, seed in (("a", 2), ("b", 3)):  # two at once
            _voice(tmp_path / f"{name}.wav", 1.2, seed)
            os.replace(tmp_path / f"{name}.wav", inbox / f"{name}.wav")
        day = time.strftime("%Y-%m-%d")
        _wait(lambda: len(list((inbox / "done" / day).glob("*.wav"))) == 3, "three voice-overs in done/")
        _wait(lambda: (inbox / "failed" / "broken.wav.txt").exists(), "the bad file in failed/")
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
    assert sorted(p.name for p in (inbox / "done" / day).iterdir()) == ["a.wav", "b.wav", "slow.wav"]
    assert _duration(out / "slow.mp4") == pytest.approx(2.0, abs=0.08)  # the whole file, not a half-copied one
    assert (out / "a.mp4").read_bytes() == b"an earlier clip the user keeps"
    assert _duration(out / "a_002.mp4") == pytest.approx(1.2, abs=0.08) and (out / "b.mp4").is_file()
    why = (inbox / "failed" / "broken.wav.txt").read_text().strip()
    assert why.count("\n") == 0 and why.endswith(".") and "broken.wav" in why
    assert (inbox / "failed" / "broken.wav").read_text() == "this is not audio\n"  # nothing lost
    assert (inbox / "copying.wav.part").exists()  # left alone
    assert not list((inbox / ".studio-watch" / "work").iterdir())


def test_a_restart_redoes_what_was_in_flight_once_never_twice(tmp_path):
    """The state a watcher killed mid-render leaves: its file in .studio-watch/work with one attempt in the
    journal (redone at the next start), or two (failed, not tried a third time)."""
    import json

    inbox = tmp_path / "in"
    inbox.mkdir()
    (inbox / "studio.toml").write_text(TOML)
    w = WatchFolder(inbox, avatar=str(DEMO_AVATAR), out=tmp_path / "out")
    _voice(w.work / "once.wav", 1.0)
    _voice(w.work / "twice.wav", 1.0, 2)
    (w.state / "journal.json").write_text(json.dumps({"once.wav": 1, "twice.wav": 2}))
    outcomes = {
        Path(o.source).name: o for o in WatchFolder(inbox, avatar=str(DEMO_AVATAR), out=tmp_path / "out").recover()
    }
    assert outcomes["once.wav"].state == "done" and Path(outcomes["once.wav"].output).is_file()
    assert outcomes["twice.wav"].state == "failed"
    assert "not tried again" in (inbox / "failed" / "twice.wav.txt").read_text()
    assert not list(w.work.iterdir()) and json.loads((w.state / "journal.json").read_text()) == {}
    assert not (tmp_path / "out" / "twice.mp4").exists()


def _read_only_folder(tmp_path) -> Path:
    """A folder new files cannot go into: chmod 555, or (as root, whom modes do not stop) sysfs."""
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        (ro / "probe").write_bytes(b"")
    except OSError:
        return ro
    (ro / "probe").unlink()
    ro.chmod(0o755)
    return Path("/sys/kernel")


def test_a_read_only_output_folder_fails_the_file_in_one_sentence_and_keeps_it(tmp_path):
    inbox = tmp_path / "in"
    inbox.mkdir()
    (inbox / "studio.toml").write_text(TOML)
    w = WatchFolder(inbox, avatar=str(DEMO_AVATAR), out=_read_only_folder(tmp_path))
    w.settle_s = 0.0
    data = _voice(tmp_path / "v.wav", 1.0).read_bytes()
    (inbox / "v.wav").write_bytes(data)
    assert w.poll() == []  # seen once: not yet settled
    [o] = w.poll()
    assert o.state == "failed"
    why = (inbox / "failed" / "v.wav.txt").read_text()
    assert why.count("\n") == 1 and any(k in why for k in ("does not accept new files", "read-only", "ermission")), why
    assert (inbox / "failed" / "v.wav").read_bytes() == data


@pytest.mark.parametrize(
    "name, taken",
    [("news.wav", True), ("script.txt", True), (".news.wav", False), ("news.wav.part", False), ("news.crdownload", False),
     ("~news.wav", False), ("studio.toml", False), ("notes.pdf", False)],
)  # fmt: skip
def test_temporary_and_hidden_names_are_never_taken(name, taken):
    assert is_candidate(Path(name)) is taken


def test_a_bad_folder_settings_file_is_one_sentence(tmp_path):
    (tmp_path / "studio.toml").write_text("[settings]\ncodec = 'nope'\n")
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.run(
        [sys.executable, "-m", "studio", "watch", str(tmp_path), "--avatar", str(DEMO_AVATAR), "--once"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2 and "codec 'nope' is not one of" in proc.stderr, proc.stderr


def test_studio_serve_watches_a_folder_too(tmp_path):
    """``studio serve --watch IN_DIR``: the folder's studio.toml names avatar and delivery; a voice-over
    dropped in while the server runs comes out as a clip, its source in done/."""
    from served import Server

    inbox = tmp_path / "in"
    inbox.mkdir()
    (inbox / "studio.toml").write_text(f'avatar = "{DEMO_AVATAR}"\ndelivery = "web-720p"\nout = "clips"\n' + TOML)
    with Server(tmp_path / "home", "--watch", str(inbox)) as server:
        _voice(tmp_path / "n.wav", 1.0)
        os.replace(tmp_path / "n.wav", inbox / "n.wav")
        _wait(lambda: (inbox / "clips" / "n.mp4").is_file() and not list((inbox / ".studio-watch" / "work").iterdir()),
              "the clip of the dropped voice-over")  # fmt: skip
        assert "watching" in server.log_tail(4000)
    assert _duration(inbox / "clips" / "n.mp4") == pytest.approx(1.0, abs=0.08)
    assert [p.name for p in (inbox / "done").rglob("*.wav")] == ["n.wav"]


def test_a_script_dropped_in_is_spoken_and_captioned(tmp_path):
    """A .txt script: spoken with the folder's voice (Piper's joe), rendered, its captions from the spoken
    text (no --script needed), read back with pysubs2 inside the clip."""
    import pysubs2

    inbox = tmp_path / "in"
    inbox.mkdir()
    (inbox / "studio.toml").write_text(TOML + 'captions = "srt"\n')
    w = WatchFolder(inbox, avatar=str(DEMO_AVATAR), out=tmp_path / "out")
    w.settle_s = 0.0
    (inbox / "bulletin.txt").write_text("Good evening. Here is the news.\n")
    assert w.poll() == []
    [o] = w.poll()
    assert o.state == "done", o.reason
    clip = _duration(o.output)
    subs = pysubs2.load(o.files["captions"])
    assert [e.plaintext for e in subs] == ["Good evening.", "Here is the news."]
    assert all(0 <= e.start < e.end <= clip * 1000 + 1 for e in subs)
    assert (inbox / "done" / time.strftime("%Y-%m-%d") / "bulletin.txt").is_file()


def test_a_clip_that_misses_its_check_gate_is_marked_failed_and_kept(tmp_path):
    """``check = "ok,jitter=0.01"`` in the folder's settings (no render is that steady): the clip and its
    report stay in the output folder, the source goes to failed/ with the missed limit as its reason;
    a gate that is met leaves the source in done/."""
    inbox, out = tmp_path / "in", tmp_path / "out"
    inbox.mkdir()
    (inbox / "studio.toml").write_text(TOML + 'check = "ok,jitter=0.01"\n')
    w = WatchFolder(inbox, out=out, avatar=str(DEMO_AVATAR))
    assert w.settings.check_gate == "ok,jitter=0.01"
    _voice(inbox / "shaky.wav", 3.0)
    w.settle_s = 0.0
    w.settled()
    (outcome,) = w.poll()
    assert outcome.state == "failed" and "missed its gate" in outcome.reason and "jitter" in outcome.reason
    assert Path(outcome.output).is_file() and Path(outcome.files["check_report"]).is_file()
    assert outcome.check["gate"]["met"] is False
    assert (inbox / "failed" / "shaky.wav").is_file()
    assert "jitter" in (inbox / "failed" / "shaky.wav.txt").read_text()
    # the same folder with a gate it meets
    w2 = WatchFolder(inbox, out=out, avatar=str(DEMO_AVATAR), settings={"check_gate": "jitter=50"})
    w2.settle_s = 0.0
    _voice(inbox / "steady.wav", 3.0, seed=2)
    w2.settled()
    (ok,) = w2.poll()
    assert ok.state == "done" and ok.check["gate"]["met"] is True, ok
    assert list((inbox / "done").rglob("steady.wav"))

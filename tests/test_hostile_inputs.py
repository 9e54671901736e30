"""Hostile inputs and rude endings, as a user meets them: real ``studio`` subprocesses, real files.

Each case asserts the exit code, the one line on stderr, and what is left in the output folder
afterwards (nothing: no ``.part`` file, no spill file, no chunk folder). Signals: SIGTERM and
SIGHUP cancel like Ctrl-C (exit 128 + signal number); a SIGKILL'd render takes its worker
processes with it, and the next ``studio`` command (any) removes its temporaries. Same-file
refusals follow symlinks, ``./`` and hard links.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from conftest import DEMO_AUDIO, prepare_demo_avatar, speechlike, tone
from served import Hold

CANCEL = "cancelled{}; nothing was written"


# ------------------------------------------------------------------------------------------------
# Fixtures and helpers


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    """One data folder for the module, with the demo avatar prepared once (as "astro")."""
    home = tmp_path_factory.mktemp("hostile_home")
    prepare_demo_avatar(home, "astro")
    return home


@pytest.fixture(scope="module")
def voice(tmp_path_factory) -> Path:
    """20 s of speech-like sound: long enough that a signal lands mid-render."""
    path = tmp_path_factory.mktemp("voice") / "voice.wav"
    sf.write(path, speechlike(20.0, 16_000), 16_000, subtype="PCM_16")
    return path


@pytest.fixture(scope="module")
def short(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("short") / "short.wav"
    sf.write(path, speechlike(1.0, 16_000), 16_000, subtype="PCM_16")
    return path


@pytest.fixture
def out(tmp_path) -> Path:
    folder = tmp_path / "out"
    folder.mkdir()
    return folder


def _env(home: Path) -> dict:
    return dict(os.environ, STUDIO_HOME=str(home), STUDIO_X264_WORKERS="2")


def studio(home: Path, *args, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "studio", *map(str, args)],
        capture_output=True,
        text=True,
        env=_env(home),
        timeout=timeout,
    )


def start(home: Path, *args, hold: Path | None = None, point: str = "") -> subprocess.Popen:
    """``studio ARGS`` in the background; with ``hold`` (a file it creates) its render holds after its first
    batch (``point="build"``: its avatar build after its first frame) until the file goes or the render is
    cancelled ($STUDIO_TEST_HOLD, ``served.Hold``): "still running" is certain."""
    env = _env(home)
    if hold is not None:
        Hold(hold, point).__enter__()
        env["STUDIO_TEST_HOLD"] = str(hold)
    return subprocess.Popen(
        [sys.executable, "-m", "studio", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=_default_stop_signals,
    )


def _default_stop_signals() -> None:
    """In the child: SIGHUP and SIGINT as a terminal gives them. A suite started under ``nohup`` or as a
    shell's background job ignores them, the child inherits that, and studio rightly keeps an ignored
    SIGHUP ignored: the test of SIGHUP waited a minute for a render that never heard it."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_render(home: Path, out: Path, *args) -> subprocess.Popen:
    """A render into ``out`` that stays running (held, see ``start``) until it is signalled or killed."""
    return start(home, *args, hold=out.parent / "hold")


def one_error_line(r: subprocess.CompletedProcess, *needles: str) -> str:
    """Exit 2 and exactly one line on stderr, containing every needle."""
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert len(lines) == 1, r.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def render_args(audio, output, *extra):
    return ("render", "--avatar", "astro", "--audio", audio, "-o", output, "--engine", "classic", *extra)


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (from /proc)."""
    kids: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            kids.setdefault(int(fields[1]), []).append(int(d.name))
    found, todo = set(), [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            if c not in found:
                found.add(c)
                todo.append(c)
    return found


def alive(pid: int) -> bool:
    """Running (a zombie waiting for a parent that does not reap it counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def wait_until(cond, timeout: float, what: str, proc: subprocess.Popen | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the render ended (exit {proc.returncode}) before {what}: {proc.stderr.read()}")
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}")


def mid_render(proc: subprocess.Popen, folder: Path, chunks: bool) -> None:
    """Wait until ``proc`` (``start_render``) is really rendering into ``folder`` (its temporaries are
    there) and held after its first batch: it cannot finish before the test signals it."""
    wait_until(lambda: (folder.parent / "hold.held").exists(), 120, "the render to be held", proc)
    if chunks:  # a worker has its segment open inside the chunk folder
        wait_until(
            lambda: any(d.is_dir() and any(d.iterdir()) for d in folder.glob(".*.part")),
            90,
            "the chunk workers to start",
            proc,
        )
    else:
        wait_until(lambda: list(folder.glob(".*.part.mp4")), 60, "the writer to start", proc)


def _only_info_before(lines: list[str], err: str) -> None:
    """Before the last line only the start-up lines ("engine: ...", "2 local processes"): no
    warning (the leaked shared-memory one), no traceback, no second message."""
    for line in lines[:-1]:
        low = line.lower()
        assert not line.startswith("studio:") and not any(w in low for w in ("traceback", "warn", "leaked", "error")), (
            err
        )


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ------------------------------------------------------------------------------------------------
# Signals


@pytest.mark.parametrize(
    "sig, mode",
    # one mechanism for every stop signal: SIGINT and SIGHUP once, SIGTERM with each kind of worker
    [
        (signal.SIGINT, "plain"),
        (signal.SIGTERM, "plain"),
        (signal.SIGHUP, "plain"),
        (signal.SIGTERM, "x264-parallel"),
        (signal.SIGTERM, "chunks"),
    ],
    ids=lambda v: getattr(v, "name", v),
)
def test_sigterm_and_sighup_cancel_like_ctrl_c(home, voice, out, sig, mode):
    extra = {
        "plain": ("--encoder", "x264"),
        "x264-parallel": ("--encoder", "x264-parallel"),
        "chunks": ("--chunks", "2"),
    }[mode]
    proc = start_render(home, out, *render_args(voice, out / "talk.mp4", *extra))
    try:
        mid_render(proc, out, chunks=mode == "chunks")
        workers = descendants(proc.pid)
        if mode != "plain":
            assert len(workers) >= 2, workers  # encoder or chunk processes (+ the resource tracker)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + sig, err
    lines = err.strip().splitlines()
    assert lines[-1] == "studio: " + CANCEL.format("" if sig == signal.SIGINT else f" ({sig.name})"), err
    _only_info_before(lines, err)
    assert sorted(os.listdir(out)) == []
    wait_until(lambda: not any(alive(p) for p in workers), 15, "the worker processes to exit")
    assert not list((home / "tmp").glob(f"{proc.pid}-*.rec"))  # its record went with it


def test_sigterm_stops_chunk_workers_at_once_and_leaves_no_record(home, voice, out):
    """Workers busy in a batch (or still loading) are not waited for: they are killed after half a
    second and their registered temporaries (and records) removed by the exiting render itself
    (it used to take 10.3 s, and three workers' records waited for the next command)."""
    proc = start_render(home, out, *render_args(voice, out / "talk.mp4", "--chunks", "3"))
    try:
        mid_render(proc, out, chunks=True)
        workers = descendants(proc.pid)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, err
    assert err.strip().splitlines()[-1] == "studio: " + CANCEL.format(" (SIGTERM)"), err
    assert took < 6.0, f"{took:.1f} s to stop"
    # killed before the render exited; the kernel may still be tearing them down on a busy machine
    wait_until(lambda: not any(alive(p) for p in workers), 5, "the killed workers to be gone")
    ours = {proc.pid, *workers}  # (the test process keeps a record of its own: the fixture's avatar)
    left = [r.name for r in (home / "tmp").glob("*.rec") if int(r.name.split("-")[0]) in ours]
    assert left == []  # no worker's record is left behind for the next command
    assert os.listdir(out) == []


def test_a_second_signal_during_the_clean_up_still_leaves_nothing(home, voice, out):
    proc = start_render(home, out, *render_args(voice, out / "talk.mp4", "--encoder", "x264-parallel"))
    try:
        mid_render(proc, out, chunks=False)
        workers = descendants(proc.pid)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.02)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # impatient: the second one exits at once
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143
    assert os.listdir(out) == []
    wait_until(lambda: not any(alive(p) for p in workers), 15, "the worker processes to exit")


@pytest.mark.parametrize("mode", ["x264-parallel", "chunks"])
def test_sigkill_takes_the_workers_along_and_the_next_command_sweeps(home, voice, short, out, mode):
    extra = ("--encoder", "x264-parallel") if mode == "x264-parallel" else ("--chunks", "2")
    proc = start_render(home, out, *render_args(voice, out / "talk.mp4", *extra))
    try:
        mid_render(proc, out, chunks=mode == "chunks")
        workers = descendants(proc.pid)
        assert len(workers) >= 2, workers
    finally:
        proc.kill()
        proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    # every worker dies with its parent (they used to keep rendering, then block forever)
    wait_until(lambda: not any(alive(p) for p in workers), 20, "the orphaned workers to exit")
    left = os.listdir(out)
    assert left and all(name.startswith(".talk.") for name in left), left  # the dead run's temporaries
    r = studio(home, "analyze", short)  # any command sweeps them
    assert r.returncode == 0, r.stderr
    assert os.listdir(out) == []
    assert not list((home / "tmp").glob(f"{proc.pid}-*.rec"))


# ------------------------------------------------------------------------------------------------
# Same file, folders, names


def _inputs(tmp_path: Path, short: Path) -> Path:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "voice.wav").write_bytes(short.read_bytes())
    return folder


@pytest.mark.parametrize("how", ["same-path", "dot-path", "symlink", "hardlink"])
def test_render_refuses_to_write_over_the_voice_over(home, short, tmp_path, how):
    folder = _inputs(tmp_path, short)
    audio = folder / "voice.wav"
    before = sha(audio)
    if how == "same-path":
        target = audio
    elif how == "dot-path":
        target = Path(f"{folder}/./../{folder.name}/voice.wav")
    elif how == "symlink":
        target = folder / "talk.mp4"
        target.symlink_to("voice.wav")
    else:
        target = folder / "talk.mp4"
        os.link(audio, target)
    r = studio(home, *render_args(audio, target))
    one_error_line(r, "is the voice-over itself", "choose another output name")
    assert sha(audio) == before
    assert sorted(os.listdir(folder)) == sorted({"voice.wav", target.name})


def test_frame_refuses_to_write_over_the_avatar_image(home, short, tmp_path):
    photo = tmp_path / "presenter.png"
    photo.write_bytes((Path(__file__).parent.parent / "resources" / "demo" / "astronaut.png").read_bytes())
    link = tmp_path / "frame.png"
    link.symlink_to(photo)
    before = sha(photo)
    for target in (photo, link):
        r = studio(home, "frame", "--avatar", photo, "--audio", short, "-t", "0.5", "-o", target, "--engine", "classic")
        one_error_line(r, "is the avatar itself")
    assert sha(photo) == before


def test_demo_refuses_to_write_over_its_voice_over(home, tmp_path):
    link = tmp_path / "demo.mp4"
    link.symlink_to(DEMO_AUDIO)
    before = sha(DEMO_AUDIO)
    r = studio(home, "demo", "-o", link, "--engine", "classic")
    one_error_line(r, "is the voice-over itself")
    assert sha(DEMO_AUDIO) == before and link.is_symlink()


def test_an_output_that_is_a_folder_is_refused_before_the_render(home, short, out):
    t0 = time.monotonic()
    r = studio(home, *render_args(short, out))
    one_error_line(r, "is a folder; give a file name inside it", "out.mp4")
    assert time.monotonic() - t0 < 30  # refused up front, not after rendering
    assert os.listdir(out) == []


@pytest.mark.parametrize(
    "cmd, name, needle",
    [
        ("render", "talk.avi", "give the output a .mp4, .mov, .m4v, .webm or .mxf name"),
        ("render", "talk", "give the output a .mp4, .mov, .m4v, .webm or .mxf name"),
        ("frame", "frame.jpg", "give the output a .png name"),
    ],
)
def test_a_wrong_extension_is_refused(home, short, out, cmd, name, needle):
    args = (
        render_args(short, out / name)
        if cmd == "render"
        else ("frame", "--avatar", "astro", "--audio", short, "-t", "0.2", "-o", out / name, "--engine", "classic")
    )
    one_error_line(studio(home, *args), needle)
    assert os.listdir(out) == []


def test_a_mov_output_is_mp4_inside_and_gets_the_umask(home, short, out):
    import av

    from studio.core.render.outputs import check_output

    assert check_output(out / "talk.m4v", []) == out / "talk.m4v"  # .m4v is the same container
    r = studio(home, *render_args(short, out / "talk.mov", "--encoder", "x264"))
    assert r.returncode == 0, r.stderr
    with av.open(str(out / "talk.mov")) as c:
        assert "mp4" in c.format.name
        assert c.streams.video[0].codec_context.name == "h264" and len(c.streams.audio) == 1
    umask = os.umask(0)
    os.umask(umask)
    assert (out / "talk.mov").stat().st_mode & 0o777 == 0o666 & ~umask  # was 0600 (mkstemp)
    assert os.listdir(out) == ["talk.mov"]  # a replaced file keeps its mode: tests/test_temps.py


@pytest.fixture
def small_mount(tmp_path):
    """A 48 KiB tmpfs (needs root and mount rights; skipped otherwise), unmounted afterwards."""
    folder = tmp_path / "mnt"
    folder.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48k", "tmpfs", str(folder)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip() or r.returncode})")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def test_a_read_only_output_folder_is_refused_before_the_render(home, short, small_mount):
    r = subprocess.run(["mount", "-o", "remount,ro", str(small_mount)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot remount read-only ({r.stderr.strip()})")
    one_error_line(
        studio(home, *render_args(short, small_mount / "talk.mp4")), "is not writable", "Read-only file system"
    )


def test_a_full_disk_under_parallel_x264_names_the_folder(home, tmp_path, small_mount):
    # 4 s of the demo photo at 512x512 is ~95 KB of H.264: the encoder processes' spill files fill 48 KiB
    voice = tmp_path / "voice.wav"
    sf.write(voice, speechlike(4.0, 16_000), 16_000, subtype="PCM_16")
    r = studio(home, *render_args(voice, small_mount / "talk.mp4", "--encoder", "x264-parallel"))
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2, r.stderr
    assert lines[-1] == (
        f"studio: error: The disk is full (no space left on device in {small_mount}) while "
        "writing talk.mp4: free some space and render again."
    ), r.stderr
    assert "Broken pipe" not in r.stderr
    _only_info_before(lines, r.stderr)
    assert os.listdir(small_mount) == []


def test_an_encoder_process_that_fills_the_disk_reports_errno_and_file(small_mount):
    """The worker's error reaches the parent as ENOSPC on its spill file (closing that file on a
    full disk used to end the worker silently: the parent saw a broken pipe)."""
    import errno

    from studio.core.media.x264_pool import ProcessEncoder, shutdown_pool, worker_pool

    spill = small_mount / ".talk.x.part.mp4.chunk0"
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (4, 384, 256), dtype=np.uint8)  # noise: ~100 KB packets at CRF 20
    enc = ProcessEncoder(worker_pool(1)[0], 256, 256, 25, 20, "ultrafast", path=spill)
    try:
        with pytest.raises(OSError) as err:
            for i in range(200):
                enc.encode(frames[i % 4], i)
            enc.flush()
        assert err.value.errno == errno.ENOSPC
        assert err.value.filename == str(spill)
    finally:
        enc.abort()
        shutdown_pool()


def test_a_missing_output_folder_is_refused(home, short, tmp_path):
    one_error_line(studio(home, *render_args(short, tmp_path / "nope" / "talk.mp4")), "does not exist")


# ------------------------------------------------------------------------------------------------
# Audio that is not what it says


def _nan_wav(tmp_path: Path) -> Path:
    x = tone(1.0, 16_000)
    x[10:20] = np.nan
    x[400] = np.inf
    path = tmp_path / "damaged.wav"
    sf.write(path, x, 16_000, subtype="FLOAT")
    return path


def test_nan_audio_is_refused_with_the_count(home, tmp_path, out):
    path = _nan_wav(tmp_path)
    one_error_line(studio(home, "analyze", path), "11 of 16000 samples are not numbers")
    r = studio(home, *render_args(path, out / "talk.mp4"))
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].endswith(
        "11 of 16000 samples are not numbers (NaN or infinite), so the file is damaged; export the voice-over again"
    ), r.stderr
    assert "Traceback" not in r.stderr and os.listdir(out) == []


def test_a_text_file_named_mp3_says_so_in_one_line(home, tmp_path, out):
    path = tmp_path / "voice.mp3"
    path.write_text("Good evening. Here is the news.\n" * 20)
    for args in (("analyze", path), render_args(path, out / "talk.mp4")):
        one_error_line(studio(home, *args), "not an audio file (it looks like a text file)")
    assert os.listdir(out) == []


def test_a_fifo_is_named_and_never_waited_on(home, tmp_path, out):
    fifo = tmp_path / "voice.wav"
    os.mkfifo(fifo)
    for args in (("analyze", fifo), render_args(fifo, out / "talk.mp4")):
        one_error_line(studio(home, *args, timeout=30), "is a pipe (FIFO), not a regular file")
    assert os.listdir(out) == []


@pytest.mark.parametrize("t", ["nan", "inf"])
def test_frame_at_a_time_that_is_not_a_number(home, short, out, t):
    r = studio(home, "frame", "--avatar", "astro", "--audio", short, "-t", t, "-o", out / "f.png")
    one_error_line(r, f"-t {float(t)}: give the time as a number of seconds")
    assert os.listdir(out) == []


# ------------------------------------------------------------------------------------------------
# avatar add


@pytest.fixture(scope="module")
def presenter_clip(tmp_path_factory) -> Path:
    """8 s of the demo presenter as an H.264 video (a still, slightly moving), for ``avatar add``."""
    import av
    import PIL.Image

    rgb = np.asarray(
        PIL.Image.open(Path(__file__).parent.parent / "resources" / "demo" / "astronaut.png")
        .convert("RGB")
        .resize((256, 256))
    )
    path = tmp_path_factory.mktemp("clip") / "presenter.mp4"
    with av.open(str(path), "w") as c:
        s = c.add_stream("libx264", rate=25)
        s.width, s.height, s.pix_fmt = 256, 256, "yuv420p"
        s.options = {"preset": "ultrafast"}
        for i in range(200):
            frame = av.VideoFrame.from_ndarray(np.roll(rgb, i % 5, axis=1).copy(), format="rgb24")
            for pkt in s.encode(frame):
                c.mux(pkt)
        for pkt in s.encode(None):
            c.mux(pkt)
    return path


def test_sigterm_during_avatar_add_leaves_no_frames_temporary(home, presenter_clip, tmp_path):
    folder = home / "avatars" / "sigterm"
    proc = start(home, "avatar", "add", "sigterm", presenter_clip, hold=tmp_path / "hold", point="build")
    try:  # held after its first frame: the build cannot finish before the signal
        wait_until((tmp_path / "hold.build.held").exists, 90, "the build to be held", proc)
        assert list(folder.glob(".*.tmp.npy")), "the build holds without its frames temporary"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, err
    assert err.strip().splitlines()[-1] == "studio: " + CANCEL.format(" (SIGTERM)"), err
    assert not folder.exists() or not [p for p in folder.iterdir() if ".tmp" in p.name or ".part" in p.name]


# ------------------------------------------------------------------------------------------------
# Messages: one sentence, exit 2 (each was an internal error or a raw traceback)


@pytest.mark.parametrize(
    "var, value, needle",
    [
        ("STUDIO_CPU_THREADS", "-1", "STUDIO_CPU_THREADS=-1: give a whole number from 0 to 1024"),
        ("STUDIO_CPU_THREADS", "100000", "STUDIO_CPU_THREADS=100000: give a whole number from 0 to 1024"),
        ("STUDIO_X264_WORKERS", "abc", "STUDIO_X264_WORKERS=abc: give a whole number from 0 to 256"),
        ("STUDIO_SPILL_DIR", "/nonexistent/spill", "STUDIO_SPILL_DIR=/nonexistent/spill: no such folder"),
        ("STUDIO_HOME", "/dev/null", "STUDIO_HOME=/dev/null: is not a folder"),
        ("STUDIO_HOME", "/proc/x", "STUDIO_HOME=/proc/x: the data folder cannot be made there"),
    ],
)
def test_a_bad_environment_value_is_one_sentence(home, short, out, var, value, needle):
    r = subprocess.run(
        [sys.executable, "-m", "studio", *map(str, render_args(short, out / "talk.mp4", "--encoder", "x264-parallel"))],
        capture_output=True,
        text=True,
        env={**_env(home), var: value},
        timeout=120,
    )
    one_error_line(r, needle)
    assert "Traceback" not in r.stderr and os.listdir(out) == []


def test_file_names_at_and_over_the_file_systems_limit(home, short, out):
    frame = ("frame", "--avatar", "astro", "--audio", short, "-t", "0.2", "--engine", "classic", "-o")
    over = "n" * 256 + ".png"  # 260 bytes
    one_error_line(studio(home, *frame, out / over), "the file name is 260 bytes long", "at most 255")
    legal = "l" * 250 + ".png"  # 254 bytes: legal, though its temporary's name is longer
    r = studio(home, *frame, out / legal)
    assert r.returncode == 0, r.stderr
    assert os.listdir(out) == [legal]


def test_frame_on_a_full_disk_is_one_sentence(home, short, small_mount):
    r = studio(home, "frame", "--avatar", "astro", "--audio", short, "-t", "0.2", "-o", small_mount / "f.png")
    one_error_line(r, "The disk is full (no space left on device in", "while writing f.png")
    assert os.listdir(small_mount) == []


def test_avatar_rm_of_a_linked_avatar_folder_removes_the_link_only(home, tmp_path):
    import shutil

    elsewhere = tmp_path / "kept_avatar"
    shutil.copytree(home / "avatars" / "astro", elsewhere)
    link = home / "avatars" / "linked"
    link.symlink_to(elsewhere, target_is_directory=True)
    r = studio(home, "avatar", "rm", "linked")
    assert r.returncode == 0, r.stderr
    assert f"removed avatar 'linked' (a link to {elsewhere}; that folder is kept)" in r.stdout
    assert not link.exists() and not link.is_symlink() and (elsewhere / "meta.json").is_file()


def test_a_damaged_queue_row_is_warned_about_once_per_run(tmp_path):
    import sqlite3

    home = tmp_path / "home"
    home.mkdir()
    from studio.core.store.jobs import JobStore

    store = JobStore(home / "jobs.sqlite")
    job = store.add("astro", str(tmp_path / "v.wav"), {}, str(tmp_path / "o.mp4"))
    with sqlite3.connect(home / "jobs.sqlite") as db:
        db.execute("UPDATE jobs SET settings='{not json' WHERE id=?", (job.id,))
    r = studio(home, "queue", "run")
    assert r.returncode == 0, r.stderr
    warned = [ln for ln in r.stderr.splitlines() if f"job row {job.id} is damaged" in ln]
    assert len(warned) == 1, r.stderr  # it was printed six times

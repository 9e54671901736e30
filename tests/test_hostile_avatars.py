"""Hostile avatars, end to end: the real `studio` command in a subprocess, its own data folder.

Each case asserts the exit code, the number of stderr lines (bad input: exactly one) and that
no temporary is left in the avatar folders or beside the output.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import DEMO_AUDIO, DEMO_AVATAR, ROOT

STUDIO = (
    [str(ROOT / ".venv" / "bin" / "studio")]
    if (ROOT / ".venv" / "bin" / "studio").exists()
    else [sys.executable, "-m", "studio"]
)


def studio(home: Path, *argv, timeout: float = 300, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "STUDIO_HOME": str(home), "QT_QPA_PLATFORM": "offscreen"}
    return subprocess.run(
        [*STUDIO, *map(str, argv)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        **kw,
    )


def lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip()]


def leftovers(*folders: Path) -> list[str]:
    """Temporaries (dot-files with .tmp or .part in the name) anywhere under ``folders``."""
    out = []
    for folder in folders:
        if folder.exists():
            out += [str(p) for p in folder.rglob(".*") if ".tmp" in p.name or ".part" in p.name]
    return out


def flip_middle(path: Path) -> None:
    """One byte in the middle of the file changed: size, header, head and tail intact."""
    size = path.stat().st_size
    with open(path, "r+b") as fh:
        fh.seek(size // 2)
        b = fh.read(1)
        fh.seek(-1, 1)
        fh.write(bytes([b[0] ^ 0x5A]))


@pytest.fixture
def home(tmp_path) -> Path:
    h = tmp_path / "home"
    h.mkdir()
    return h


@pytest.fixture
def photo(tmp_path) -> Path:
    src = tmp_path / "presenter.png"
    shutil.copy(DEMO_AVATAR, src)
    return src


def _frame(home, out, name="anna", t="0.5"):
    return studio(home, "frame", "--avatar", name, "--audio", DEMO_AUDIO, "-t", t, "-o", out)


# --------------------------------------------------------------------------------------------
# Damaged caches


def test_damage_in_the_middle_of_frames_never_reaches_an_output(home, photo, tmp_path):
    r = studio(home, "avatar", "add", "anna", photo)
    assert r.returncode == 0, r.stderr
    good = tmp_path / "good.png"
    assert _frame(home, good).returncode == 0
    flip_middle(home / "avatars" / "anna" / "frames.npy")
    out = tmp_path / "after.png"
    r = _frame(home, out)
    assert r.returncode == 0, r.stderr
    err = lines(r.stderr)
    assert len(err) == 1 and "damaged" in err[0] and "frames.npy" in err[0] and "rebuilding" in err[0]
    from PIL import Image

    assert np.array_equal(np.asarray(Image.open(out)), np.asarray(Image.open(good)))
    assert not leftovers(home / "avatars", tmp_path)


def test_a_different_file_at_the_source_path_is_refused_in_one_line(home, photo, tmp_path):
    from PIL import Image

    assert studio(home, "avatar", "add", "anna", photo).returncode == 0
    folder = home / "avatars" / "anna"
    Image.open(DEMO_AVATAR).convert("RGB").transpose(Image.FLIP_LEFT_RIGHT).save(photo)  # another picture
    flip_middle(folder / "frames.npy")
    before = sorted(p.name for p in folder.iterdir())
    out = tmp_path / "f.png"
    r = _frame(home, out)
    assert r.returncode == 2
    err = lines(r.stderr)
    assert len(err) == 1 and "now a different file" in err[0] and "studio avatar add anna FILE --force" in err[0]
    assert not out.exists() and sorted(p.name for p in folder.iterdir()) == before
    assert not leftovers(home / "avatars", tmp_path)


def test_nan_landmarks_with_matching_checksums_do_not_crash(home, photo, tmp_path):

    assert studio(home, "avatar", "add", "anna", photo).returncode == 0
    good = tmp_path / "good.png"
    assert _frame(home, good, t="1.2").returncode == 0
    folder = home / "avatars" / "anna"
    lm = np.load(folder / "crop_landmarks.npy")
    lm[0, 100:200] = np.nan
    np.save(folder / "crop_landmarks.npy", lm)
    meta = json.loads((folder / "meta.json").read_text())
    from studio.core.avatars.cache import file_spec

    meta["files"]["crop_landmarks"] = file_spec(folder / "crop_landmarks.npy")
    (folder / "meta.json").write_text(json.dumps(meta))
    out = tmp_path / "f.png"
    r = _frame(home, out, t="1.2")
    assert r.returncode == 0, r.stderr
    assert len(lines(r.stderr)) == 1 and "NaN" in r.stderr
    from PIL import Image

    assert np.array_equal(np.asarray(Image.open(out)), np.asarray(Image.open(good)))


@pytest.mark.parametrize("change", [{"frames": 7}, {"files": []}])
def test_inconsistent_meta_json_list_still_works_and_render_says_one_thing(home, photo, tmp_path, change):
    assert studio(home, "avatar", "add", "anna", photo).returncode == 0
    assert studio(home, "avatar", "add", "bob", photo).returncode == 0
    meta_path = home / "avatars" / "anna" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta.update(change)
    meta_path.write_text(json.dumps(meta))
    photo.unlink()  # and the source is gone: nothing to rebuild from
    r = studio(home, "avatar", "list")
    assert r.returncode == 0 and not r.stderr
    anna = next(ln for ln in r.stdout.splitlines() if ln.startswith("anna"))
    bob = next(ln for ln in r.stdout.splitlines() if ln.startswith("bob"))
    assert "damaged:" in anna and "photo" in bob
    fix = "add it again with `studio avatar add anna SOURCE --force`, or remove it with `studio avatar rm anna`"
    assert anna.endswith(fix)
    out = tmp_path / "f.png"
    r = _frame(home, out)
    assert r.returncode == 2 and len(lines(r.stderr)) == 1 and r.stderr.strip().endswith(fix)
    assert not out.exists()
    r = studio(home, "avatar", "list", "--json")
    rows = {row["name"]: row for row in json.loads(r.stdout)}
    assert rows["anna"]["damaged"] and not rows["bob"]["damaged"]


# --------------------------------------------------------------------------------------------
# Hostile sources


def _video(path: Path, frames: int, size=(160, 120), faststart=False, fmt=None) -> Path:
    import av

    opts = {"movflags": "+faststart"} if faststart else {}
    with av.open(str(path), "w", format=fmt, options=opts) as c:
        s = c.add_stream("libx264", rate=25)
        s.width, s.height, s.pix_fmt = size[0], size[1], "yuv420p"
        s.options = {"preset": "ultrafast"}
        yy, xx = np.mgrid[0 : size[1], 0 : size[0]]
        for i in range(frames):  # a moving gradient: cheap to encode, every frame different
            frame = np.repeat((((xx + yy + 3 * i) % 256).astype(np.uint8))[..., None], 3, axis=2)
            for p in s.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    return path


def test_a_truncated_mp4_is_refused_not_silently_shortened(home, tmp_path):
    src = _video(tmp_path / "cut.mp4", 375, faststart=True)
    data = src.read_bytes()
    src.write_bytes(data[: len(data) // 5])
    r = studio(home, "avatar", "add", "cut", src)
    assert r.returncode == 2
    err = lines(r.stderr)
    assert len(err) == 1 and "of its 375 frames decode" in err[0] and "--trim-end" in err[0]
    assert not (home / "avatars" / "cut").exists() and not leftovers(home)


def test_a_huge_photo_is_downscaled_and_said_in_one_line(home, tmp_path):
    from PIL import Image

    src = tmp_path / "huge.jpg"
    Image.open(DEMO_AVATAR).convert("RGB").resize((8000, 6000), Image.BILINEAR).save(src, quality=80)
    r = studio(home, "avatar", "add", "big", src, "--json")
    assert r.returncode == 0, r.stderr
    err = lines(r.stderr)
    assert len(err) == 1 and "8000x6000; using it downscaled to 2880x2160" in err[0]
    info = json.loads(r.stdout)
    assert (info["width"], info["height"], info["downscaled_from"]) == (2880, 2160, [8000, 6000])


def test_two_faces_are_named_and_one_can_be_chosen(home, tmp_path):
    from test_avatar import two_faces

    src = two_faces(tmp_path / "two.png")
    r = studio(home, "avatar", "add", "two", src, "--json")
    assert r.returncode == 0, r.stderr
    err = lines(r.stderr)
    assert len(err) == 1 and "2 faces found" in err[0] and "--face N" in err[0]
    assert json.loads(r.stdout)["face"] == 2
    r = studio(home, "avatar", "add", "left", src, "--face", "1", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["box"][2] < 300
    r = studio(home, "avatar", "add", "third", src, "--face", "3")
    assert r.returncode == 2 and len(lines(r.stderr)) == 1 and "has 2 face(s)" in r.stderr
    assert not (home / "avatars" / "third").exists()


# --------------------------------------------------------------------------------------------
# A full disk, a killed command


@pytest.fixture
def small_disk(tmp_path):
    """A real 6 MiB file system (tmpfs), or a skip when this machine does not allow mounting."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({r.stderr.strip() or r.returncode}); needs root")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_full_disk_while_adding_a_video_of_unknown_length(small_disk, tmp_path):
    home = small_disk / "home"
    src = _video(tmp_path / "clip.h264", 120, size=(320, 240), fmt="h264")  # no duration in the stream
    r = studio(home, "avatar", "add", "clip", src)
    assert r.returncode == 2
    err = lines(r.stderr)
    assert len(err) == 1 and "No space left on device" in err[0] and "free some disk space" in err[0]
    assert not (home / "avatars" / "clip").exists() and not leftovers(home)
    used = shutil.disk_usage(small_disk).used
    assert used < 1 << 20, f"{used} bytes still used on the full disk"


def test_sigterm_during_avatar_add_leaves_no_temporary(home, tmp_path):
    from served import Hold

    src = _video(tmp_path / "long.mp4", 40, size=(640, 360))
    with Hold(tmp_path / "hold", "build") as hold:  # held after its first frame: it cannot finish first
        env = {
            **os.environ,
            "STUDIO_HOME": str(home),
            "QT_QPA_PLATFORM": "offscreen",
            "STUDIO_TEST_HOLD": str(tmp_path / "hold"),
        }
        proc = subprocess.Popen(
            [*STUDIO, "avatar", "add", "long", str(src)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        hold.wait_held(proc=proc)
        folder = home / "avatars" / "long"
        assert list(folder.glob(".frames.*.tmp.npy")), "the build never started writing its frames"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert len(lines(err)) == 1 and "cancelled" in err
    assert not folder.exists() and not leftovers(home)


def test_damage_met_by_two_chunk_workers_is_repaired_once(home, photo, tmp_path):
    """`--chunks 2`: every output frame shows the photo's one frame, so the command and both of its
    worker processes may meet the damage; it is rebuilt once (the folder's lock; a reader whose
    file was replaced adopts the new one) and the MP4 equals an undamaged render."""
    import av
    import soundfile as sf
    from conftest import speechlike

    audio = tmp_path / "voice.wav"
    sf.write(audio, speechlike(1.2, 16_000), 16_000)
    assert studio(home, "avatar", "add", "anna", photo).returncode == 0

    def render(out):
        return studio(
            home,
            "render",
            "--avatar",
            "anna",
            "--audio",
            audio,
            "-o",
            out,
            "--engine",
            "classic",
            "--chunks",
            "2",
            timeout=600,
        )

    good = tmp_path / "good.mp4"
    assert render(good).returncode == 0
    flip_middle(home / "avatars" / "anna" / "frames.npy")
    out = tmp_path / "out.mp4"
    r = render(out)
    assert r.returncode == 0, r.stderr
    warnings = [ln for ln in lines(r.stderr) if "damaged" in ln]
    assert len(warnings) == 1 and "frames.npy" in warnings[0], r.stderr

    def frames(path):
        with av.open(str(path)) as c:
            return [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]

    a, b = frames(good), frames(out)
    assert len(a) == len(b) == 30 and all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not leftovers(home / "avatars", tmp_path)


@pytest.mark.parametrize("offset", [10, 60])  # inside the header's dict: numpy's parser raised TokenError
def test_a_flipped_byte_in_a_small_arrays_header_is_damage_not_an_internal_error(home, photo, tmp_path, offset):
    assert studio(home, "avatar", "add", "anna", photo).returncode == 0
    good = tmp_path / "good.png"
    assert _frame(home, good).returncode == 0
    path = home / "avatars" / "anna" / "face_ok.npy"
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x5A
    path.write_bytes(bytes(data))
    listed = studio(home, "avatar", "list", "--json")
    assert listed.returncode == 0, listed.stderr  # the library still lists, the avatar as damaged
    (entry,) = json.loads(listed.stdout)
    assert entry["damaged"] and "face_ok.npy" in entry["problem"], entry
    shown = studio(home, "avatar", "show", "anna")
    assert shown.returncode in (0, 2) and "internal error" not in shown.stderr, shown.stderr
    out = tmp_path / "after.png"
    r = _frame(home, out)
    assert r.returncode == 0, r.stderr
    said = lines(shown.stderr + r.stderr)  # `show` opens the avatar, so it repairs it and says so
    assert [ln for ln in said if "damaged" in ln and "face_ok.npy" in ln], said
    from PIL import Image

    assert np.array_equal(np.asarray(Image.open(out)), np.asarray(Image.open(good)))
    (entry,) = json.loads(studio(home, "avatar", "list", "--json").stdout)
    assert not entry["damaged"]  # repaired once, for good
    assert not leftovers(home / "avatars", tmp_path)


def test_a_video_avatar_repaired_mid_render_renders_the_undamaged_mp4_and_keeps_its_hints(home, tmp_path):
    """Frames damaged mid-file, found and rebuilt while the render reads them: the repair empties the
    engine caches, and the video hints computed meanwhile are still written (their folder again),
    so the MP4 is the undamaged render's, frame for frame, and the next render reads the hints."""
    import av
    import soundfile as sf
    from conftest import speechlike
    from PIL import Image

    rgb = np.asarray(Image.open(DEMO_AVATAR).convert("RGB").resize((256, 256)))
    clip = tmp_path / "clip.mp4"
    with av.open(str(clip), "w") as c:  # a still backdrop with a moving strip: hints matter
        s = c.add_stream("libx264", rate=25)
        s.width, s.height, s.pix_fmt = 256, 256, "yuv420p"
        for i in range(50):
            f = rgb.copy()
            f[:40] = (i * 5) % 255
            for pkt in s.encode(av.VideoFrame.from_ndarray(f, format="rgb24")):
                c.mux(pkt)
        for pkt in s.encode(None):
            c.mux(pkt)
    audio = tmp_path / "voice.wav"
    sf.write(audio, speechlike(2.0, 16_000), 16_000)
    assert studio(home, "avatar", "add", "vid", clip).returncode == 0
    clean = tmp_path / "clean"
    shutil.copytree(home, clean)

    def render(data, out):
        return studio(data, "render", "--avatar", "vid", "--audio", audio, "-o", out, "--engine", "classic")

    good, out = tmp_path / "good.mp4", tmp_path / "out.mp4"
    assert render(clean, good).returncode == 0
    flip_middle(home / "avatars" / "vid" / "frames.npy")
    r = render(home, out)
    assert r.returncode == 0, r.stderr
    assert [ln for ln in lines(r.stderr) if "damaged" in ln and "frames.npy" in ln], r.stderr
    hints = list((home / "avatars" / "vid" / "engines" / "hints").glob("changing-*.npy"))
    assert hints, "the video hints were not written after the repair"

    def frames(path):
        with av.open(str(path)) as c:
            return [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]

    a, b = frames(good), frames(out)
    assert len(a) == len(b) == 50
    assert sum(not np.array_equal(x, y) for x, y in zip(a, b)) == 0
    assert not leftovers(home / "avatars", tmp_path)


def test_a_disk_too_small_for_an_avatar_says_how_much_in_readable_units(small_disk, tmp_path, photo):
    home = small_disk / "home"
    r = studio(home, "avatar", "add", "anna", photo)
    assert r.returncode == 2, r.stderr
    (line,) = lines(r.stderr)
    assert "0.0 GB" not in line and "needs 513 MB" in line and " MB is free" in line, line
    assert not (home / "avatars" / "anna").exists() and not leftovers(small_disk)

"""Avatars end to end: real photos and PyAV-made videos, the on-disk cache, the CLI."""

from __future__ import annotations

import json
import logging
import os
import shutil

import numpy as np
import pytest
from conftest import DEMO_AVATAR

from studio.core.avatars import assets as avatar_assets
from studio.core.avatars import cache as avatar_cache
from studio.core.avatars import library as avatar
from studio.core.avatars.checksums import CheckedArray
from studio.core.avatars.library import AvatarParams
from studio.core.errors import AvatarError, Cancelled

BLANK = range(45, 51)  # source frames (30 fps) that are black: times [1.5, 1.7) s (25 fps frames 38..42)


def make_video(path, seconds=3.0, fps=30, size=(320, 240), blank=BLANK, seed_shift=0.0):
    """The astronaut panned and zoomed (a virtual camera over the photo), with black frames."""
    import av
    import cv2
    from PIL import Image

    img = np.asarray(Image.open(DEMO_AVATAR).convert("RGB"))
    w, h = size
    n = int(round(seconds * fps))
    with av.open(str(path), "w") as c:
        s = c.add_stream("libx264", rate=fps)
        s.width, s.height, s.pix_fmt = w, h, "yuv420p"
        s.options = {"crf": "18", "preset": "ultrafast"}
        for i in range(n):
            u = i / max(1, n - 1)
            zoom = 1.0 + 0.35 * u
            cw, ch = 300 / zoom, 225 / zoom
            cx, cy = 225 + 30 * (u - 0.5) + seed_shift, 140 + 10 * (u - 0.5)
            m = np.float32([[w / cw, 0, -(cx - cw / 2) * w / cw], [0, h / ch, -(cy - ch / 2) * h / ch]])
            frame = cv2.warpAffine(img, m, (w, h), flags=cv2.INTER_LINEAR)
            if i in blank:
                frame[:] = 0
            for p in s.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    return path


@pytest.fixture(scope="module")
def pan_video(tmp_path_factory):
    return make_video(tmp_path_factory.mktemp("video") / "pan.mp4")


def _stat(a, name):
    st = (a.folder / f"{name}.npy").stat()
    return st.st_ino, st.st_mtime_ns


# --------------------------------------------------------------------------------------------
# Photos


def test_photo_avatar_is_prepared_cached_and_listed():
    a = avatar.prepare("astro", DEMO_AVATAR)
    assert (a.N, a.width, a.height, a.fps, a.kind) == (1, 512, 512, 25, "photo")
    assert a.frames.shape == (1, 512, 512, 3) and a.frames.dtype == np.uint8
    # memory-mapped, read through the block checks (small arrays: plain maps, checked whole at load)
    assert isinstance(a.frames, CheckedArray) and isinstance(a.masks, CheckedArray)
    assert str(a.frames.filename) == str(a.folder / "frames.npy") and isinstance(a.face_ok, np.memmap)
    assert a.crops.shape == (1, 256, 256, 3) and a.masks.shape == (1, 256, 256)
    assert a.landmarks.shape == a.crop_landmarks.shape == (1, 478, 2)
    assert a.boxes.dtype == np.int32 and a.face_ok.tolist() == [True]
    x1, y1, x2, y2 = a.boxes[0].tolist()
    assert 170 < x1 < 190 and 260 < x2 < 280 and 180 < y2 < 195 and 50 < y1 < 75
    assert a.meta["schema_version"] == avatar_assets.SCHEMA_VERSION and len(a.meta["source_sha256"]) == 64
    assert a.cycle_index(0) == 0 and a.cycle_index(17) == 0 and a.cycle_index(np.arange(4)).tolist() == [0] * 4
    b = avatar.load("astro")
    assert np.array_equal(b.masks, a.masks) and b.meta["rebuilt"] == ["frames", "crops", "masks"]
    rows = avatar.list_avatars()
    assert [r["name"] for r in rows] == ["astro"]
    assert rows[0]["frames"] == 1 and rows[0]["faceless_frames"] == 0 and os.path.exists(rows[0]["thumbnail"])
    eng = a.engine_dir("musetalk-vae-abc123")
    assert eng == a.folder / "engines" / "musetalk-vae-abc123" and eng.is_dir()
    avatar.remove("astro")
    assert avatar.list_avatars() == []
    with pytest.raises(AvatarError, match="no avatar named 'astro'"):
        avatar.load("astro")


def test_odd_sized_jpeg_photo_and_the_overlay(tmp_path):
    from PIL import Image

    src = tmp_path / "odd.jpg"
    Image.open(DEMO_AVATAR).convert("RGB").crop((41, 0, 452, 383)).save(src, quality=92)  # 411 x 383
    a = avatar.prepare("odd", src)
    assert (a.width, a.height) == (411, 383)
    img = avatar.overlay(a, 0)
    assert img.shape == (383, 411, 3)
    lips = a.landmarks[0, 13].round().astype(int)  # inner upper lip: tinted magenta
    r, g, b = img[lips[1], lips[0]].astype(int)
    assert r > g + 30 and b > g + 30
    with pytest.raises(AvatarError, match="out of range"):
        avatar.overlay(a, 1)


@pytest.mark.parametrize(
    "content, match",
    [
        (b"just some text\n", "not an image or video"),
        (None, "corrupt"),  # a truncated PNG
        (b"", "empty"),
    ],
)
def test_bad_sources_raise_one_sentence(tmp_path, content, match):
    src = tmp_path / "bad.png"
    src.write_bytes(DEMO_AVATAR.read_bytes()[:3000] if content is None else content)
    with pytest.raises(AvatarError, match=match) as exc:
        avatar.prepare("bad", src)
    assert "\n" not in str(exc.value)
    assert not (avatar.library_dir() / "bad").exists()


def test_a_source_without_any_face_is_refused(tmp_path):
    from PIL import Image

    src = tmp_path / "wall.png"
    Image.fromarray(np.full((200, 300, 3), 180, np.uint8)).save(src)
    with pytest.raises(AvatarError, match="no face found"):
        avatar.prepare("wall", src)
    assert not (avatar.library_dir() / "wall").exists()


# --------------------------------------------------------------------------------------------
# Videos


def test_video_avatar_keeps_its_own_rate_flagged_and_smooth(pan_video):
    from fractions import Fraction

    import av

    seen = []
    a = avatar.prepare("pan", pan_video, progress=lambda d, t, s: seen.append((d, t, s)))
    assert (a.N, a.width, a.height, a.kind) == (90, 320, 240, "video")  # 3 s at its own 30 fps
    assert a.fps == Fraction(30) and a.meta["rate"] == "30" and a.meta["source_fps"] == pytest.approx(30)
    with av.open(str(pan_video)) as c:  # not resampled: frame k is source frame k
        source = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
    assert all(np.array_equal(a.frames[k], source[k]) for k in (0, 1, 44, 45, 89))
    assert np.flatnonzero(~np.asarray(a.face_ok)).tolist() == list(BLANK)
    assert a.meta["faceless_frames"] == 6
    # face-less frames carry the nearest valid box (never a zero box)
    assert np.array_equal(a.boxes[45], a.boxes[44]) and np.array_equal(a.boxes[50], a.boxes[51])
    assert (a.boxes[:, 2] > a.boxes[:, 0]).all() and (a.boxes[:, 3] > a.boxes[:, 1]).all()
    # the camera zooms in: the face box grows
    assert (a.boxes[-1, 2] - a.boxes[-1, 0]) > 1.2 * (a.boxes[0, 2] - a.boxes[0, 0])
    # bounded frame-to-frame jitter inside each run of face frames (2nd difference of the box)
    for run in (slice(0, 45), slice(51, 90)):
        b = a.boxes[run].astype(int)
        assert np.abs(np.diff(b, 2, axis=0)).max() <= 2
    assert seen[-1][2] == "blend masks" and seen[-1][0] == seen[-1][1] == 90
    assert any(s == "decoding and tracking" and t == 90 for _, t, s in seen)
    # the ping-pong cycle
    assert a.cycle_index(np.array([0, 89, 90, 91, 179, 180])).tolist() == [0, 89, 89, 88, 0, 0]
    assert avatar.avatar_rate("pan") == avatar.avatar_rate(pan_video) == Fraction(30)
    # smoothing really reduces jitter: without it the boxes shake more
    raw = avatar.prepare("pan", pan_video, AvatarParams(smooth=0.0), force=True)
    assert raw.meta["rebuilt"] == ["crops", "masks"]

    def jitter(x):
        return np.abs(np.diff(x[:45].astype(int), 2, axis=0)).sum()

    assert jitter(a.boxes) < jitter(raw.boxes)


def test_trim_and_the_size_limit(pan_video, monkeypatch):
    a = avatar.prepare("cut", pan_video, AvatarParams(trim_start=0.5, trim_end=1.5))
    assert a.N == 30 and a.face_ok.all()  # one second at the video's own 30 fps
    whole = avatar.resolve(pan_video)
    # trimmed frame j is the source frame on screen at 0.5 + j/30 s: untrimmed frame 15 + j
    assert np.array_equal(a.frames[0], whole.frames[15])  # source frame 15 (0.500 .. 0.533 s)
    assert np.array_equal(a.frames[5], whole.frames[20])
    assert not np.array_equal(a.frames[0], whole.frames[14])
    with pytest.raises(AvatarError, match="past the end"):
        avatar.prepare("late", pan_video, AvatarParams(trim_start=9.0))
    monkeypatch.setenv("STUDIO_AVATAR_MAX_GB", "0.005")  # ~5 MB: 75 frames of 320x240 need ~ 22 MB
    with pytest.raises(AvatarError, match="--trim-start/--trim-end") as exc:
        avatar.prepare("huge", pan_video)
    assert "GB limit" in str(exc.value)
    assert not (avatar.library_dir() / "huge").exists()


@pytest.mark.parametrize("start, end, frames", [(None, None, 75), (0.5, 1.5, 25), (2.3, 2.9, 15), (2.5, None, 13)])
def test_25fps_resampling_picks_the_source_frame_on_screen(pan_video, start, end, frames):
    import math

    import av

    from studio.core.avatars.sources import VideoReader

    with av.open(str(pan_video)) as c:
        source = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]  # 30 fps
    out = list(VideoReader(pan_video, start, end))  # trim_start > 2 s takes the seek path
    assert len(out) == frames
    for j, frame in enumerate(out):
        t = (start or 0.0) + j / 25
        assert np.array_equal(frame, source[math.floor(t * 30 + 1e-6)]), j


def test_display_rotation_of_phone_videos_is_applied(tmp_path):
    import av
    from PIL import Image

    upright = np.asarray(Image.open(DEMO_AVATAR).convert("RGB"))[:, 56:456]  # 512 high, 400 wide
    stored = np.ascontiguousarray(np.rot90(upright, k=-1))  # what a phone writes: pixels on their side
    src = tmp_path / "phone.mp4"
    with av.open(str(src), "w") as c:
        s = c.add_stream("libx264", rate=25)
        s.width, s.height, s.pix_fmt = stored.shape[1], stored.shape[0], "yuv420p"
        s.set_display_rotation(90)  # players turn it back upright
        for _ in range(3):
            for p in s.encode(av.VideoFrame.from_ndarray(stored, format="rgb24")):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    a = avatar.prepare("phone", src)
    assert (a.width, a.height) == (400, 512) and a.face_ok.all()
    assert np.abs(a.frames[0].astype(int) - upright.astype(int)).mean() < 8


def test_truncated_video_is_refused(tmp_path, pan_video):
    src = tmp_path / "broken.mp4"
    src.write_bytes(pan_video.read_bytes()[:2000])
    with pytest.raises(AvatarError):
        avatar.prepare("broken", src)


# --------------------------------------------------------------------------------------------
# Cache: invalidation, corruption, cancellation


def test_changing_a_parameter_recomputes_only_what_depends_on_it(pan_video, tmp_path):
    a = avatar.prepare("inv", pan_video)
    eng = a.engine_dir("latents-x")
    (eng / "latents.npy").write_bytes(b"x")
    before = {n: _stat(a, n) for n in ("frames", "raw_landmarks", "crops", "boxes", "masks")}

    b = avatar.prepare("inv", pan_video, AvatarParams(feather=40), force=True)
    assert b.meta["rebuilt"] == ["masks"]
    after = {n: _stat(b, n) for n in before}
    assert all(after[n] == before[n] for n in ("frames", "raw_landmarks", "crops", "boxes"))
    assert after["masks"] != before["masks"] and not np.array_equal(a.masks, b.masks)
    assert (eng / "latents.npy").exists()  # masks do not touch engine arrays

    c = avatar.prepare("inv", pan_video, AvatarParams(feather=40, bbox_shift=4), force=True)
    assert c.meta["rebuilt"] == ["crops", "masks"]
    assert _stat(c, "frames") == before["frames"] and not (c.folder / "engines").exists()
    assert (c.boxes[:, 1] > b.boxes[:, 1]).all()

    d = avatar.prepare("inv", pan_video, AvatarParams(feather=40, bbox_shift=4), force=True)
    assert d.meta["rebuilt"] == ["crops", "masks"]  # nothing to do: the meta is unchanged
    assert _stat(d, "masks") == _stat(c, "masks")

    other = make_video(tmp_path / "other.mp4", seconds=2.0, blank=(), seed_shift=8.0)
    e = avatar.prepare("inv", other, force=True)
    assert e.meta["rebuilt"] == ["frames", "crops", "masks"] and e.N == 60 and e.face_ok.all()  # 2 s at 30 fps


def test_path_avatars_are_cached_and_follow_their_source(tmp_path, pan_video):
    src = tmp_path / "clip.mp4"
    shutil.copy(pan_video, src)
    a = avatar.resolve(str(src))
    assert a.N == 90 and "cache" in str(a.folder)
    b = avatar.resolve(src)
    assert b.folder == a.folder and _stat(b, "frames") == _stat(a, "frames")
    c = avatar.resolve(src, AvatarParams(mask_mode="raw"))
    assert c.meta["rebuilt"] == ["masks"]
    make_video(src, seconds=1.0, blank=())  # the file changes under the same path
    d = avatar.resolve(src, AvatarParams(mask_mode="raw"))
    assert d.N == 30 and d.meta["rebuilt"] == ["frames", "crops", "masks"]
    assert avatar.list_avatars() == []  # path avatars are not library entries
    lib = avatar.prepare("lib", DEMO_AVATAR)
    assert avatar.resolve("lib").folder == lib.folder
    assert avatar.resolve("lib", AvatarParams(feather=8)).meta["rebuilt"] == ["masks"]
    with pytest.raises(AvatarError, match="no avatar named 'nobody'"):
        avatar.resolve("nobody")


def test_damaged_cache_is_rebuilt_with_a_warning(tmp_path, caplog):
    src = tmp_path / "face.png"
    shutil.copy(DEMO_AVATAR, src)
    a = avatar.prepare("dmg", src)
    good_masks = np.array(a.masks)
    good_boxes = np.array(a.boxes)
    folder = a.folder
    del a

    with open(folder / "masks.npy", "r+b") as fh:  # truncated
        fh.truncate(1000)
    with caplog.at_level(logging.WARNING, logger="studio.core.avatars.library"):
        b = avatar.load("dmg")
    assert "damaged" in caplog.text and "masks.npy" in caplog.text
    assert b.meta["rebuilt"] == ["masks"] and np.array_equal(b.masks, good_masks)

    raw = bytearray((folder / "boxes.npy").read_bytes())  # same size, one value changed
    raw[-1] ^= 0x01
    (folder / "boxes.npy").write_bytes(bytes(raw))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="studio.core.avatars.library"):
        c = avatar.load("dmg")
    assert "checksum" in caplog.text and c.meta["rebuilt"] == ["crops", "masks"]
    assert np.array_equal(c.boxes, good_boxes)

    with open(folder / "frames.npy", "r+b") as fh:
        fh.truncate(5000)
    d = avatar.load("dmg")
    assert d.meta["rebuilt"] == ["frames", "crops", "masks"] and d.frames.shape == (1, 512, 512, 3)

    (folder / "frames.npy").unlink()
    src.unlink()
    with pytest.raises(AvatarError, match="source .* is gone"):
        avatar.load("dmg")
    (folder / "meta.json").write_text("{not json")
    with pytest.raises(AvatarError, match="damaged"):
        avatar.load("dmg")


def test_cancel_leaves_nothing_new_and_the_old_avatar_intact(pan_video):
    def cancel_at(stage_name):
        def progress(done, total, stage):
            if stage == stage_name and done == 10:
                raise Cancelled("cancelled by the user")

        return progress

    with pytest.raises(Cancelled):
        avatar.prepare("cx", pan_video, progress=cancel_at("decoding and tracking"))
    assert not (avatar.library_dir() / "cx").exists()
    a = avatar.prepare("cx", DEMO_AVATAR)
    with pytest.raises(Cancelled):
        avatar.prepare("cx", pan_video, force=True, progress=cancel_at("decoding and tracking"))
    b = avatar.load("cx")
    assert b.kind == "photo" and np.array_equal(b.frames, a.frames)
    assert not [p for p in b.folder.iterdir() if ".tmp" in p.name]


# --------------------------------------------------------------------------------------------
# CLI


def _cli(capsys, *argv):
    from studio.cli import main

    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_cli_add_list_show_rm(capsys, tmp_path):
    rc, out, err = _cli(capsys, "avatar", "add", "demo", str(DEMO_AVATAR), "--json")
    assert rc == 0, err
    info = json.loads(out)
    assert info["name"] == "demo" and (info["frames"], info["width"], info["height"], info["fps"]) == (1, 512, 512, 25)
    assert info["faceless_frames"] == 0 and len(info["box"]) == 4 and 170 < info["box"][0] < 190

    rc, out, err = _cli(capsys, "avatar", "add", "demo", str(DEMO_AVATAR))
    assert rc == 2 and err.count("\n") == 1 and "already exists" in err and "--force" in err
    rc, out, err = _cli(capsys, "avatar", "add", "demo", str(DEMO_AVATAR), "--force", "--feather", "10", "--json")
    assert rc == 0 and json.loads(out)["rebuilt"] == ["masks"] and json.loads(out)["params"]["feather"] == 10

    png = tmp_path / "overlay.png"
    rc, out, err = _cli(capsys, "avatar", "show", "demo", "--overlay", str(png), "--json")
    assert rc == 0 and json.loads(out)["overlay"] == str(png)
    from PIL import Image

    assert Image.open(png).size == (512, 512)

    rc, out, err = _cli(capsys, "avatar", "list", "--json")
    assert rc == 0 and [r["name"] for r in json.loads(out)] == ["demo"]
    rc, out, err = _cli(capsys, "avatar", "list")
    assert "demo" in out and "photo" in out
    rc, out, err = _cli(capsys, "avatar", "rm", "demo")
    assert rc == 0 and not (avatar.library_dir() / "demo").exists()


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["add", "x", "{tmp}/missing.png"], "no such file"),
        (["add", "x", "{tmp}/notes.txt"], "not an image or video"),
        (["add", "bad/name", "{demo}"], "not a valid avatar name"),
        (["add", "x", "{demo}", "--smooth", "2"], "--smooth"),
        (["add", "x", "{demo}", "--feather", "-1"], "--feather"),
        (["add", "x", "{demo}", "--trim-start", "2", "--trim-end", "1"], "--trim-end"),
        (["show", "ghost"], "no avatar named 'ghost'"),
        (["show", "{demo}", "--overlay", "{tmp}/o.jpg"], ".png"),
        (["rm", "ghost"], "no avatar named 'ghost'"),
    ],
)
def test_cli_bad_input_exits_2_with_one_line(capsys, tmp_path, argv, needle):
    (tmp_path / "notes.txt").write_text("hello\n")
    argv = [a.format(tmp=tmp_path, demo=DEMO_AVATAR) for a in argv]
    rc, out, err = _cli(capsys, "avatar", *argv)
    assert rc == 2
    assert err.startswith("studio: error: ") and err.count("\n") == 1 and needle in err


# --------------------------------------------------------------------------------------------
# Integrity: every byte of the big arrays is covered, checked as the render reads it


def _flip(path, row, row_bytes, header=128):
    """Change one byte in the middle of row ``row`` of a cached .npy (size and header unchanged)."""
    with open(path, "r+b") as fh:
        fh.seek(header + row * row_bytes + row_bytes // 2)
        b = fh.read(1)
        fh.seek(-1, 1)
        fh.write(bytes([b[0] ^ 0x5A]))


def _row_bytes(a, name):
    arr = getattr(a, name)
    return int(np.prod(arr.shape[1:])) * arr.dtype.itemsize


@pytest.mark.parametrize(
    "name, read",
    [
        ("frames", lambda a: np.array(a.frames[37])),  # what Compositor.background reads
        ("crops", lambda a: np.asarray(a.crops)),  # what the engines' prepare reads
        ("masks", lambda a: np.array(a.masks[30:40])),
        ("landmarks", lambda a: np.asarray(a.landmarks, np.float32)),
        ("crop_landmarks", lambda a: np.asarray(a.crop_landmarks)),
    ],
)
def test_damage_in_the_middle_of_a_big_array_is_caught_when_read_and_repaired(pan_video, caplog, name, read):
    from studio.core.avatars import checksums as avatar_check

    a = avatar.prepare("mid", pan_video)
    good = np.array(read(a))
    path = a.folder / f"{name}.npy"
    _flip(path, 37, _row_bytes(a, name))
    avatar_check.forget_verified()
    with caplog.at_level(logging.WARNING, logger="studio.core.avatars.library"):
        b = avatar.load("mid")  # the quick checks pass: head, tail, size and header are intact
        assert "damaged" not in caplog.text
        got = np.array(read(b))
    assert "damaged" in caplog.text and f"{name}.npy" in caplog.text and "checksum" in caplog.text
    assert np.array_equal(got, good)  # repaired from the source before anything was read
    assert b.meta["rebuilt"][0] == avatar_assets.ARRAY_STAGE[name]
    c = avatar.load("mid")
    assert np.array_equal(np.array(read(c)), good)
    assert not [p.name for p in a.folder.iterdir() if ".tmp" in p.name]


def test_damage_found_mid_render_is_repaired_without_changing_what_was_read(pan_video, caplog):
    """The crops went to the engine at the start; a frame read later is damaged: the rebuild
    (frames, crops, masks from the same source) must give the same crops, and the render goes on."""
    from studio.core.avatars import checksums as avatar_check

    a = avatar.prepare("late", pan_video)
    good_frames = np.array(a.frames)
    avatar_check.forget_verified()
    b = avatar.load("late")
    crops = np.asarray(b.crops).copy()  # handed out (and verified)
    _ = np.array(b.frames[:10])
    _flip(b.folder / "frames.npy", 60, _row_bytes(b, "frames"))  # damaged on disk after load()
    with caplog.at_level(logging.WARNING, logger="studio.core.avatars.library"):
        f60 = np.array(b.frames[55:65])
    assert "frames.npy row 60 fails its checksum" in caplog.text
    assert np.array_equal(f60, good_frames[55:65])
    assert np.array_equal(np.asarray(b.crops), crops) and b.meta["rebuilt"] == ["frames", "crops", "masks"]


def test_a_damaged_cache_is_not_rebuilt_from_a_different_file_at_its_source_path(tmp_path, pan_video):
    from studio.core.avatars import checksums as avatar_check

    src = tmp_path / "clip.mp4"
    shutil.copy(pan_video, src)
    a = avatar.prepare("who", src)
    before = {p.name: p.stat().st_mtime_ns for p in a.folder.iterdir()}
    make_video(src, seconds=3.0, blank=(), seed_shift=20.0)  # someone else's clip, same name
    _flip(a.folder / "frames.npy", 40, _row_bytes(a, "frames"))
    avatar_check.forget_verified()
    b = avatar.load("who")
    with pytest.raises(AvatarError, match="now a different file") as exc:
        np.array(b.frames[40])
    msg = str(exc.value)
    assert "\n" not in msg and "studio avatar add who FILE --force" in msg
    after = {p.name: p.stat().st_mtime_ns for p in a.folder.iterdir()}
    assert after.keys() == before.keys()  # nothing written, nothing left behind
    # the damage found at load (a truncated file) says the same
    with open(a.folder / "masks.npy", "r+b") as fh:
        fh.truncate(1000)
    with open(a.folder / "crops.npy", "r+b") as fh:
        fh.truncate(1000)
    (a.folder / "frames.npy").unlink()
    with pytest.raises(AvatarError, match="now a different file"):
        avatar.load("who")


def test_nan_and_huge_landmarks_are_damage_even_with_matching_checksums(pan_video, caplog):
    """Values written with the checksums recomputed (a buggy tool, not a bit flip) are caught too."""
    from studio.core.avatars import checksums as avatar_check

    a = avatar.prepare("nan", pan_video)
    good = np.array(a.crop_landmarks)
    folder = a.folder
    for name, value in (("crop_landmarks", np.nan), ("landmarks", 1e30)):
        arr = np.load(folder / f"{name}.npy")
        arr[50, 13] = value
        np.save(folder / f"{name}.npy", arr)
        meta = json.loads((folder / "meta.json").read_text())
        meta["files"][name] = avatar_cache.file_spec(folder / f"{name}.npy")  # checksums that match
        (folder / "meta.json").write_text(json.dumps(meta))
        avatar_check.forget_verified()
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="studio.core.avatars.library"):
            b = avatar.load(name="nan")
            lm = np.asarray(getattr(b, name))
        assert np.isfinite(lm).all() and np.abs(lm).max() < 1e4
        assert "NaN, infinite or far outside the frame" in caplog.text
    assert np.array_equal(np.asarray(b.crop_landmarks), good)


def _edit_meta(folder, **changes):
    meta = json.loads((folder / "meta.json").read_text())
    meta.update(changes)
    (folder / "meta.json").write_text(json.dumps(meta))


@pytest.mark.parametrize(
    "change, problem",
    [
        ({"frames": 40}, "says 40 frames but records 90 rows"),
        ({"files": []}, "lists no array files"),
        ({"frames": "many"}, "meta.json says 'many' frames"),
    ],
)
def test_inconsistent_meta_json_is_listed_as_damaged_and_rebuilt_from_its_source(
    tmp_path, pan_video, caplog, change, problem
):
    src = tmp_path / "clip.mp4"
    shutil.copy(pan_video, src)
    a = avatar.prepare("meta", src)
    _edit_meta(a.folder, **change)
    rows = avatar.list_avatars()
    assert rows[0]["damaged"] and problem in rows[0]["problem"]
    assert rows[0]["fix"] == f"it is rebuilt from its source {src} the next time it is used"
    with caplog.at_level(logging.WARNING, logger="studio.core.avatars.library"):
        b = avatar.load("meta")
    assert problem in caplog.text and b.N == 90 and b.meta["rebuilt"] == ["frames", "crops", "masks"]
    assert not avatar.list_avatars()[0]["damaged"]
    # without its source, load and list give the same one instruction
    _edit_meta(b.folder, **change)
    src.unlink()
    with pytest.raises(AvatarError) as exc:
        avatar.load("meta")
    fix = avatar.list_avatars()[0]["fix"]
    assert fix == "add it again with `studio avatar add meta SOURCE --force`, or remove it with `studio avatar rm meta`"
    assert str(exc.value).endswith(fix) and "\n" not in str(exc.value)


def test_unreadable_meta_json_gives_the_same_instruction_in_load_and_list(capsys):
    a = avatar.prepare("gone", DEMO_AVATAR)
    (a.folder / "meta.json").write_text("{not json")
    with pytest.raises(AvatarError, match="damaged") as exc:
        avatar.load("gone")
    row = avatar.list_avatars()[0]
    assert row["damaged"] and str(exc.value).endswith(row["fix"]) and "--force" in row["fix"]
    rc, out, err = _cli(capsys, "avatar", "list")
    assert rc == 0 and f"gone                 damaged: meta.json is missing or not valid JSON; {row['fix']}" in out
    rc, out, err = _cli(capsys, "avatar", "show", "gone")
    assert rc == 2 and err.count("\n") == 1 and row["fix"] in err


def test_a_schema_1_cache_is_upgraded_in_place_with_block_checksums(pan_video):
    a = avatar.prepare("old", pan_video)
    meta = json.loads((a.folder / "meta.json").read_text())
    for spec in meta["files"].values():
        spec.pop("block_rows"), spec.pop("block_crc32")
    meta["schema_version"] = 1
    (a.folder / "meta.json").write_text(json.dumps(meta))
    frames_id = _stat(a, "frames")
    b = avatar.load("old")
    assert b.meta["schema_version"] == avatar_assets.SCHEMA_VERSION and _stat(b, "frames") == frames_id
    assert json.loads((a.folder / "meta.json").read_text())["files"]["frames"]["block_rows"] == 1
    assert np.array_equal(np.asarray(b.frames), np.asarray(a.frames))


def test_a_truncated_video_whose_index_survives_is_refused_not_shortened(tmp_path):
    import av

    src = tmp_path / "cut.mp4"
    with av.open(str(src), "w", options={"movflags": "+faststart"}) as c:  # the index first, as streamed MP4s
        s = c.add_stream("libx264", rate=25)
        s.width, s.height, s.pix_fmt = 160, 120, "yuv420p"
        s.options = {"preset": "ultrafast"}
        for i in range(375):
            frame = np.full((120, 160, 3), (i * 7) % 255, np.uint8)
            for p in s.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    data = src.read_bytes()
    src.write_bytes(data[: len(data) // 5])
    with pytest.raises(AvatarError, match=r"only \d+ of its 375 frames decode") as exc:
        avatar.prepare("cut", src)
    assert "--trim-end" in str(exc.value) and "\n" not in str(exc.value)
    assert not (avatar.library_dir() / "cut").exists()


def test_a_huge_photo_is_downscaled_to_4k_and_says_so(tmp_path, caplog):
    from PIL import Image

    src = tmp_path / "huge.jpg"
    Image.open(DEMO_AVATAR).convert("RGB").resize((8000, 6000), Image.BILINEAR).save(src, quality=80)
    with caplog.at_level(logging.WARNING, logger="studio.core.avatars.library"):
        a = avatar.prepare("huge", src)
    assert (a.width, a.height) == (2880, 2160) and a.meta["downscaled_from"] == [8000, 6000]
    assert "8000x6000; using it downscaled to 2880x2160" in caplog.text
    assert a.face_ok.all()
    from studio.core.avatars.sources import fit_photo

    for (w, h), want in (((6000, 8000), (2160, 2880)), ((3840, 2160), (3840, 2160)), ((7001, 999), (3840, 546))):
        out, was = fit_photo(np.zeros((h, w, 3), np.uint8))
        assert out.shape[1::-1] == want and (was is None) == ((w, h) == want)


def two_faces(path):
    """Two astronaut close-ups side by side: a smaller one on the left, a larger one on the right."""
    from PIL import Image

    face = Image.open(DEMO_AVATAR).convert("RGB").crop((120, 20, 340, 260))
    canvas = Image.new("RGB", (740, 420), (90, 90, 90))
    canvas.paste(face.resize((300, 300)), (10, 110))
    canvas.paste(face.resize((400, 400)), (330, 10))
    canvas.save(path)
    return path


def test_two_faces_the_choice_is_said_and_can_be_made(tmp_path, caplog, capsys):
    src = two_faces(tmp_path / "two.png")
    with caplog.at_level(logging.WARNING, logger="studio.core.avatars.library"):
        a = avatar.prepare("two", src)
    assert "2 faces found in the photo; using face 2 from the left (the largest" in caplog.text
    assert "--face N" in caplog.text
    assert a.boxes[0, 0] > 400 and (a.meta["faces_found"], a.meta["face"]) == (2, 2)
    b = avatar.prepare("two", src, AvatarParams(face=1), force=True)
    assert b.boxes[0, 2] < 300 and b.meta["face"] == 1 and b.meta["rebuilt"] == ["frames", "crops", "masks"]
    with pytest.raises(AvatarError, match="--face 3 asked for, but the photo has 2 face"):
        avatar.prepare("two", src, AvatarParams(face=3), force=True)
    rc, out, err = _cli(capsys, "avatar", "add", "two2", str(src), "--face", "1", "--json")
    assert rc == 0 and json.loads(out)["face"] == 1 and json.loads(out)["faces_found"] == 2
    single = avatar.prepare("one", DEMO_AVATAR)
    assert "face" not in single.meta and "faces_found" not in single.meta


def test_two_faces_in_a_video_the_chosen_one_is_followed(tmp_path, caplog):
    import av
    from PIL import Image

    face = Image.open(DEMO_AVATAR).convert("RGB").crop((120, 20, 340, 260))
    small, large = face.resize((300, 300)), face.resize((400, 400))
    src = tmp_path / "two.mp4"
    with av.open(str(src), "w") as c:
        s = c.add_stream("libx264", rate=25)
        s.width, s.height, s.pix_fmt = 740, 420, "yuv420p"
        s.options = {"crf": "18", "preset": "ultrafast"}
        for i in range(20):  # the faces drift towards each other
            canvas = Image.new("RGB", (740, 420), (90, 90, 90))
            canvas.paste(small, (10 + i, 110))
            canvas.paste(large, (330 - i, 10))
            for p in s.encode(av.VideoFrame.from_ndarray(np.asarray(canvas), format="rgb24")):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    with caplog.at_level(logging.WARNING, logger="studio.core.avatars.library"):
        a = avatar.prepare("duo", src)
    assert "2 faces found in the first frame; using face 2 from the left (the largest" in caplog.text
    assert a.N == 20 and a.face_ok.all() and (a.boxes[:, 0] > 320).all()
    b = avatar.prepare("duo", src, AvatarParams(face=1), force=True)
    assert b.face_ok.all() and (b.boxes[:, 2] < 340).all() and b.meta["face"] == 1


def _verify_in_child(name):
    from studio.core.avatars import checksums as avatar_check

    avatar_check.forget_verified()
    avatar.load(name).frames.verify_all()  # parallel: 75 frames of 230 KB


def test_a_forked_worker_verifies_with_its_own_threads(pan_video):
    import multiprocessing

    from studio.core.avatars import checksums as avatar_check

    a = avatar.prepare("fork", pan_video)
    avatar_check.forget_verified()
    a.frames.verify_all()  # the parent's verify pool now exists
    assert avatar_check.pool_started()
    p = multiprocessing.get_context("fork").Process(target=_verify_in_child, args=("fork",))
    p.start()
    p.join(60)
    alive = p.is_alive()
    if alive:
        p.kill()
    assert not alive and p.exitcode == 0


def test_a_video_above_4k_is_downscaled_frame_by_frame(tmp_path, caplog):
    import av
    from PIL import Image

    big = np.asarray(Image.open(DEMO_AVATAR).convert("RGB").resize((4000, 2250), Image.BILINEAR))
    src = tmp_path / "big.mp4"
    with av.open(str(src), "w") as c:
        s = c.add_stream("libx264", rate=25)
        s.width, s.height, s.pix_fmt = 4000, 2250, "yuv420p"
        s.options = {"preset": "ultrafast"}
        for _ in range(3):
            for p in s.encode(av.VideoFrame.from_ndarray(big, format="rgb24")):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    with caplog.at_level(logging.WARNING, logger="studio.core.avatars.library"):
        a = avatar.prepare("big", src)
    assert (a.N, a.width, a.height) == (3, 3840, 2160) and a.meta["downscaled_from"] == [4000, 2250]
    assert "4000x2250; using it downscaled to 3840x2160" in caplog.text and a.face_ok.all()


def test_a_cache_repaired_by_another_reader_is_not_rebuilt_twice(pan_video, caplog):
    from studio.core.avatars import checksums as avatar_check

    a = avatar.prepare("twice", pan_video)
    good = np.array(a.frames[20])
    avatar_check.forget_verified()
    first, second = avatar.load("twice"), avatar.load("twice")  # two readers (threads, app + CLI)
    _flip(a.folder / "frames.npy", 20, _row_bytes(a, "frames"))
    with caplog.at_level(logging.WARNING, logger="studio.core.avatars.library"):
        assert np.array_equal(np.array(first.frames[20]), good)
        repaired = _stat(first, "frames")
        assert np.array_equal(np.array(second.frames[20]), good)  # it maps the damaged file still
    assert caplog.text.count("is damaged") == 1 and _stat(second, "frames") == repaired


def test_an_avatar_removed_while_it_is_opened_or_repaired_is_not_brought_back(tmp_path):
    """The window loads the selected avatar in the background while Remove moves its folder to the
    trash: whatever stage the load is at, the library folder stays gone (it used to be rebuilt,
    its files "missing" taken for damage)."""
    import threading

    from studio.core.avatars import builder

    src = tmp_path / "face.png"
    shutil.copy(DEMO_AVATAR, src)
    a = avatar.prepare("gone", src)
    folder, meta = a.folder, a.meta
    trash = tmp_path / "trash"
    trash.mkdir()

    def rebuild():  # what a load does when it finds a damaged (here: vanished) file
        return builder.build(
            folder, "gone", src, meta["source_sha256"], meta.get("source_key"), a.params, None, check_source=True
        )

    os.replace(folder, trash / "gone")
    with pytest.raises(AvatarError, match="'gone' was removed from the library while it was in use"):
        rebuild()
    with pytest.raises(AvatarError, match="no avatar named 'gone'"):
        builder.load_folder(folder, "gone")
    with pytest.raises(AvatarError, match="removed while it was in use"):
        a.engine_dir("musetalk-x")
    assert not folder.exists()

    # a repair waiting for the folder's lock while the folder is moved away gives up when it gets it
    os.replace(trash / "gone", folder)
    outcome: list = []
    with builder.FolderLock(folder):
        t = threading.Thread(target=lambda: outcome.append(_try(rebuild)))
        t.start()
        t.join(0.5)
        assert t.is_alive()  # waiting for the lock
        os.replace(folder, trash / "gone")
    t.join(30)
    assert isinstance(outcome[0], AvatarError) and "removed from the library" in str(outcome[0])
    assert not folder.exists() and (trash / "gone" / "meta.json").is_file()


def _try(fn):
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - the test looks at it
        return exc


def test_a_video_is_checked_for_a_face_in_frames_sampled_across_it(tmp_path, pan_video):
    """What a server does before it accepts an uploaded video: the first frame with a face among
    frames spread across the clip, or one sentence."""
    assert avatar.check_video_faces(pan_video) == 0
    late = make_video(tmp_path / "late.mp4", blank=range(0, 40))  # black for the first 1.33 s
    assert avatar.check_video_faces(late) == 36  # every 9th of 75 frames at 25 fps: 0..27 black, 36 a face
    dark = make_video(tmp_path / "dark.mp4", seconds=1.0, blank=range(0, 30))
    with pytest.raises(AvatarError, match=r"dark.mp4: no face found in 8 frame\(s\) sampled across the video"):
        avatar.check_video_faces(dark)
    (tmp_path / "text.mp4").write_text("not a video")
    with pytest.raises(AvatarError, match="cannot be opened"):
        avatar.check_video_faces(tmp_path / "text.mp4")

"""Issue 33, round three (data and resources): small shared memory, damaged, foreign and read-only
queues, retention and links, shared uploads, bounded face checks and avatar caches. Real tmpfs mounts
(root: ``mount -t tmpfs``), real files, real commands and a real ``studio serve``."""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hostile import old_file, one_line, studio, tmpfs, wait_job
from served import free_port

from studio.core.errors import RenderError


@pytest.fixture
def small_shm(tmp_path, monkeypatch):
    """``STUDIO_SHM_DIR`` and the temporary folder on 1 MB tmpfs mounts (a container's /dev/shm, smaller)."""
    with tmpfs(tmp_path / "shm", "1m") as shm, tmpfs(tmp_path / "tmp", "1m") as tmp:
        monkeypatch.setenv("STUDIO_SHM_DIR", str(shm))
        monkeypatch.setenv("TMPDIR", str(tmp))
        monkeypatch.setattr(tempfile, "tempdir", str(tmp))
        yield shm, tmp


# --------------------------------------------------------------------------------------------
# 1. Small /dev/shm


def _write_prores(path: Path, width: int, height: int, workers: int = 2) -> None:
    from studio.core.media.codec_writer import open_codec_writer
    from studio.core.render.plan import stripes

    frames = np.random.default_rng(1).integers(0, 255, (12, height, width, 3), dtype=np.uint8)
    with open_codec_writer(path, width, height, codec="prores", fps=25, total_frames=12, workers=workers) as w:
        assert w.window == workers
        for idx in stripes(12, 3, w.chunks, window=w.window):
            w.write(frames[idx], indices=idx)


def test_rings_are_reserved_up_front_and_fall_back_to_smaller_ones(small_shm, tmp_path):
    from studio.core.media import rings

    shm, tmp = small_shm
    ring = rings.allocate(100_000, 8)  # 0.8 MB: fits the 1 MB memory folder, reserved now
    try:
        assert ring.where == shm and ring.slots == 8
        st = os.statvfs(shm)
        assert st.f_bavail * st.f_frsize < 300_000  # the pages are taken before any frame is written
        assert os.listdir(shm) == []  # unlinked: a killed process leaves nothing behind
        ring.buf[:] = b"\1" * ring.size  # writing every page: no SIGBUS
    finally:
        ring.close()
    ring = rings.allocate(300_000, 8)  # 2.4 MB: neither folder has room; 4 frames fit the memory folder
    assert (ring.where, ring.slots) == (shm, 2) or (ring.where, ring.slots) == (shm, 4) or ring.slots < 8
    ring.close()
    with pytest.raises(RenderError, match=r"^There is no room for an encoder's frame buffers .*shm-size"):
        rings.allocate(600_000, 8)  # two frames (1.2 MB) fit nowhere: one sentence, not a SIGBUS


def test_a_prores_render_on_a_small_shm_falls_back_or_says_so(small_shm, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    _write_prores(out / "fits.mov", 320, 240)  # 8 x 230 KB per lane: smaller rings, the render completes
    import av

    with av.open(str(out / "fits.mov")) as c:
        assert c.streams.video[0].codec_context.name == "prores" and c.streams.video[0].frames == 12
    with pytest.raises(RenderError, match="no room for an encoder's frame buffers"):
        _write_prores(out / "none.mov", 640, 480)  # 2 x 920 KB fits nowhere
    assert sorted(p.name for p in out.iterdir()) == ["fits.mov"]  # nothing half-written
    assert os.listdir(small_shm[0]) == [] and os.listdir(small_shm[1]) == []


def test_h264_lanes_on_a_small_shm_fall_back_to_file_backed_rings(tmp_path, monkeypatch):
    from studio.core.media.writer import open_video

    with tmpfs(tmp_path / "shm", "1m") as shm:
        monkeypatch.setenv("STUDIO_SHM_DIR", str(shm))
        frames = np.random.default_rng(2).integers(0, 255, (24, 480, 640, 3), dtype=np.uint8)
        out = tmp_path / "h.mp4"
        with open_video(out, 640, 480, fps=25, total_frames=24, encoder="x264-parallel", workers=2) as w:
            assert "parallel" in w.encoder_name if hasattr(w, "encoder_name") else True
            w.write(frames, indices=np.arange(24))
        import av

        with av.open(str(out)) as c:
            assert sum(1 for _ in c.decode(video=0)) == 24


@pytest.mark.slow
def test_a_prores_job_on_a_small_shm_fails_with_a_sentence_and_the_server_lives(small_shm, tmp_path, monkeypatch):
    httpx = pytest.importorskip("httpx")
    from conftest import DEMO_AVATAR, speech_pause_speech
    from served import Server

    monkeypatch.setenv("STUDIO_X264_WORKERS", "2")
    voice = speech_pause_speech(tmp_path / "v.wav", 0.5, 0.2, 0.5)
    srv = Server(tmp_path / "home")
    try:
        with httpx.Client(base_url=srv.url, timeout=120) as c:
            with open(DEMO_AVATAR, "rb") as fh:
                assert c.post("/v1/avatars", data={"name": "astro"}, files={"file": ("a.png", fh)}).status_code == 201
            with open(voice, "rb") as fh:
                audio = c.post("/v1/audio", files={"file": ("v.wav", fh)}).json()["id"]
            job = c.post(
                "/v1/renders", data={"avatar": "astro", "audio_id": audio, "engine": "classic", "codec": "prores"}
            )
            assert job.status_code == 202, job.text
            for jid in (job.json()["id"], None):
                if jid is None:  # Retry: the same sentence again, and the server still answers
                    again = c.post(f"/v1/renders/{job.json()['id']}/retry")
                    assert again.status_code == 202, again.text
                    jid = again.json()["id"]
                j = wait_job(c, jid)
                assert j["state"] == "failed", j
                assert "no room for an encoder's frame buffers" in j["reason"] and "\n" not in j["reason"]
                assert c.get("/v1/health").status_code == 200 and srv.proc.poll() is None
            assert [p.name for p in (srv.home / "renders").iterdir() if ".part" in p.name] == []
    finally:
        srv.stop()


# --------------------------------------------------------------------------------------------
# 10, 11, 14. A cut, foreign or read-only queue: one sentence, the file untouched


def _nine_jobs(home: Path) -> Path:
    from studio.core.store.jobs import JobStore

    store = JobStore(home / "jobs.sqlite")
    for i in range(9):
        store.add("astro", str(home / "v.wav"), {"engine": "classic", "note": "x" * 300}, str(home / f"o{i}.mp4"))
    return home / "jobs.sqlite"


@pytest.mark.parametrize("cut", [3000, 8192])
def test_a_cut_queue_is_refused_at_open_and_left_byte_identical(tmp_path, cut):
    home = tmp_path / "home"
    home.mkdir()
    db = _nine_jobs(home)
    data = db.read_bytes()[:-cut]
    db.write_bytes(data)
    for args in (["queue", "list"], ["queue", "add", "--avatar", "astro", "--audio", str(db), "-o", "x.mp4"]):
        r = studio(*args, env={"STUDIO_HOME": str(home)})
        assert r.returncode == 2, r.stderr
        line = one_line(r.stderr)
        assert "the job queue file is damaged" in line and "left as it is" in line
    assert db.read_bytes() == data and sorted(p.name for p in home.iterdir() if "jobs" in p.name) == ["jobs.sqlite"]


@pytest.mark.parametrize("kind", ["foreign", "cut"])
def test_serve_on_a_damaged_or_foreign_queue_is_one_sentence_exit_2(tmp_path, kind):
    import sqlite3

    home = tmp_path / "home"
    home.mkdir()
    if kind == "foreign":
        db = home / "jobs.sqlite"
        with contextlib.closing(sqlite3.connect(db)) as con:
            con.execute("CREATE TABLE invoices(x)")
            con.commit()
    else:
        db = _nine_jobs(home)
        db.write_bytes(db.read_bytes()[:-3000])
    before = db.read_bytes()
    r = studio("serve", "--port", str(free_port()), env={"STUDIO_HOME": str(home)}, timeout=60)
    assert r.returncode == 2, (r.returncode, r.stderr)
    line = one_line(r.stderr)
    assert ("not a Studio job queue" if kind == "foreign" else "damaged") in line
    assert db.read_bytes() == before


def test_a_read_only_data_folder_says_read_only(tmp_path):
    from conftest import DEMO_AVATAR, speech_pause_speech

    voice = speech_pause_speech(tmp_path / "v.wav", 0.4, 0.1, 0.4)
    with tmpfs(tmp_path / "ro", "16m") as ro:
        home = ro / "home"
        home.mkdir()
        _nine_jobs(home)
        env = {"STUDIO_HOME": str(home)}
        subprocess.run(["mount", "-o", "remount,ro", str(ro)], check=True)
        before = {p.name: p.read_bytes() for p in home.rglob("*") if p.is_file()}
        cases = [
            ["queue", "list"],
            ["queue", "add", "--avatar", "astro", "--audio", str(voice), "-o", str(tmp_path / "q.mp4")],
            ["avatar", "add", "b", str(DEMO_AVATAR)],
            ["render", "--avatar", str(DEMO_AVATAR), "--audio", str(voice), "-o", str(tmp_path / "o.mp4")],
            ["serve", "--port", str(free_port())],
        ]
        for args in cases:
            r = studio(*args, env=env, timeout=120)
            assert r.returncode == 2, (args, r.returncode, r.stderr)
            line = one_line(r.stderr)
            assert "is read-only" in line and "damaged" not in line and "move it away" not in line, (args, line)
        assert {p.name: p.read_bytes() for p in home.rglob("*") if p.is_file()} == before
        assert not (tmp_path / "o.mp4").exists()


# --------------------------------------------------------------------------------------------
# 8. Retention never follows a link out of the data folder, and removes only what Studio wrote


def test_retention_never_follows_a_link_out_of_the_data_folder(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    mine = tmp_path / "my-videos"
    holiday = old_file(mine / "holiday.mp4")
    song = old_file(tmp_path / "my-audio" / "audio" / "0123456789abcdef.wav")
    (home / "renders").symlink_to(mine)  # renders/ is a link to a user's folder
    (home / "uploads").symlink_to(tmp_path / "my-audio")
    env = {"STUDIO_HOME": str(home), "STUDIO_KEEP_RENDERS": "20s"}
    r = studio("queue", "prune", env=env)
    assert r.returncode == 0, r.stderr
    assert holiday.is_file() and song.is_file()
    r = studio("queue", "prune", env={**env, "STUDIO_MAX_STORAGE_GB": "0.000000001"})
    assert r.returncode == 0, r.stderr
    assert holiday.is_file() and song.is_file()


def test_retention_removes_only_files_studio_recorded_writing(tmp_path):
    from studio.core.store.jobs import JobStore

    home = tmp_path / "home"
    renders = home / "renders"
    users = old_file(renders / "holiday.mp4")  # a user's file dropped into renders/: no job wrote it
    linked = renders / "link.mp4"
    linked.symlink_to(old_file(tmp_path / "elsewhere.mp4"))
    stray = old_file(home / "uploads" / "audio" / "my notes.wav")  # not a name the upload store gives
    upload = old_file(home / "uploads" / "audio" / "0123456789abcdef.wav")  # the upload store's: old, unused
    store = JobStore(home / "jobs.sqlite")
    ours = old_file(renders / "astro-voice.mp4")
    job = store.add("astro", str(upload), {}, str(ours), state="draft")
    store.enqueue(job.id)
    store.claim_next()
    store.finish(job.id, output=str(ours), result={"frames": 25})
    with store.transaction() as db:
        db.execute("UPDATE jobs SET updated=updated-86400*30 WHERE id=?", (job.id,))
    r = studio("queue", "prune", env={"STUDIO_HOME": str(home), "STUDIO_KEEP_RENDERS": "20s"})
    assert r.returncode == 0, r.stderr
    assert not ours.exists() and not upload.exists()  # Studio's own: removed, the job expired
    assert users.is_file() and stray.is_file() and linked.is_symlink() and (tmp_path / "elsewhere.mp4").is_file()
    assert store.get(job.id).state == "expired"


# --------------------------------------------------------------------------------------------
# 9, 17. Uploads: one client's refusal never removes another's file; a refused avatar leaves nothing


class _Upload:
    """What FastAPI hands the store: a file name and an async ``read`` (here over real bytes)."""

    def __init__(self, name: str, data: bytes):
        self.filename, self._data = name, data

    async def read(self, n: int) -> bytes:
        block, self._data = self._data[:n], self._data[n:]
        return block


def test_a_refused_request_never_removes_another_clients_upload_of_the_same_bytes(tmp_path):
    import asyncio

    from conftest import speech_pause_speech

    from studio.api.uploads import UploadStore

    data = speech_pause_speech(tmp_path / "v.wav", 0.3, 0.1, 0.3).read_bytes()
    store = UploadStore(tmp_path / "uploads", 10 * 2**20)

    async def scenario():
        b = await store.save_audio(_Upload("b.wav", data), settle=False)  # B's render stores it first ...
        a = await store.save_audio(_Upload("a.wav", data))  # ... A uploads the same bytes: 201
        assert a.path == b.path and b.new and not a.new
        store.discard(b)  # ... and B's render is refused (429)
        return a

    a = asyncio.run(scenario())
    assert a.path.is_file() and store.audio_path(a.id) == a.path  # A's id still works
    assert store.holders(a.path) == 0
    c = asyncio.run(store.save_audio(_Upload("c.wav", data + b"\0\0"), settle=False))
    store.discard(c)  # a refused request alone: nothing of it is left
    assert not c.path.exists() and not (tmp_path / "uploads" / "audio" / f"{c.id}.json").exists()
    d = asyncio.run(store.save_audio(_Upload("d.wav", data), settle=False))
    store.discard(d)  # refused, but the file was kept by A's upload before: it stays
    assert d.path.is_file()


def test_a_refused_avatar_upload_leaves_nothing_and_names_the_clients_file(tmp_path):
    httpx = pytest.importorskip("httpx")
    from PIL import Image
    from served import Server

    blank = tmp_path / "blank.png"
    Image.new("RGB", (256, 256), (120, 130, 140)).save(blank)
    srv = Server(tmp_path / "home")
    try:
        with httpx.Client(base_url=srv.url, timeout=120) as c, open(blank, "rb") as fh:
            r = c.post("/v1/avatars", data={"name": "nobody"}, files={"file": ("my-photo.png", fh)})
        assert r.status_code == 422, r.text
        msg = r.json()["error"]
        assert "'my-photo.png'" in msg and "uploads" not in msg and str(srv.home) not in msg
        assert [p.name for p in (srv.home / "uploads" / "avatars").iterdir()] == []
    finally:
        srv.stop()


# --------------------------------------------------------------------------------------------
# 3. Small uploads, huge costs: the face check's decode is bounded from the header


def _huge_video(path: Path, side: int = 9984) -> Path:
    """A 0.5 MB MOV of one side x side frame (PNG, grey: cheap to make, 100 megapixels to decode)."""
    import av

    with av.open(str(path), "w") as c:
        s = c.add_stream("png", rate=25)
        s.width = s.height = side
        s.pix_fmt = "gray"
        s.options = {"compression_level": "1"}
        f = av.VideoFrame(side, side, "gray")
        f.planes[0].update(bytes(f.planes[0].buffer_size))
        for pkt in [*s.encode(f), *s.encode(None)]:
            c.mux(pkt)
    return path


def _faceless_video(path: Path, seconds: int = 60) -> Path:
    import av

    with av.open(str(path), "w") as c:
        s = c.add_stream("libx264", rate=25)
        s.width, s.height, s.pix_fmt = 160, 120, "yuv420p"
        s.options = {"preset": "ultrafast", "g": "250"}
        base = np.random.default_rng(0).integers(0, 255, (120, 160, 3), dtype=np.uint8)
        for i in range(25 * seconds):
            for pkt in s.encode(av.VideoFrame.from_ndarray(np.roll(base, i, axis=1), format="rgb24")):
                c.mux(pkt)
        for pkt in s.encode(None):
            c.mux(pkt)
    return path


def test_the_face_check_refuses_huge_frames_from_the_header_and_samples_by_seeking(tmp_path, monkeypatch):
    from studio.core.avatars import library
    from studio.core.errors import AvatarError

    huge = _huge_video(tmp_path / "huge.mov")
    assert huge.stat().st_size < 1_000_000
    with pytest.raises(AvatarError, match=r"frames are 9984x9984 \(100 megapixels\), over the 33 megapixels"):
        library.check_video_faces(huge)
    faceless = _faceless_video(tmp_path / "faceless.mp4")
    decoded = []
    real = library.frame_near

    def counting(container, stream, t, budget, slack):
        frame, used = real(container, stream, t, budget, slack)
        decoded.append(used)
        return frame, used

    monkeypatch.setattr(library, "frame_near", counting)
    with pytest.raises(AvatarError, match="no face found in 8 frame"):
        library.check_video_faces(faceless)
    assert len(decoded) == 8 and sum(decoded) <= 8 * 250  # a keyframe interval per sample, not 1500 frames
    monkeypatch.setattr(library, "CHECK_BUDGET_PIXELS", 160 * 120 * 300)  # the budget stops it too
    decoded.clear()
    with pytest.raises(AvatarError):
        library.check_video_faces(faceless)
    assert sum(decoded) <= 300


def test_a_huge_video_upload_is_refused_before_it_is_decoded(tmp_path):
    httpx = pytest.importorskip("httpx")
    from served import Server

    huge = _huge_video(tmp_path / "huge.mov")
    voice = tmp_path / "v.wav"
    from conftest import speech_pause_speech

    speech_pause_speech(voice, 0.3, 0.1, 0.3)
    srv = Server(tmp_path / "home")
    try:
        with httpx.Client(base_url=srv.url, timeout=120) as c, open(huge, "rb") as fh, open(voice, "rb") as vh:
            r = c.post(
                "/v1/renders",
                data={"engine": "classic"},
                files={"avatar_file": ("huge.mov", fh), "audio": ("v.wav", vh)},
            )
        assert r.status_code == 422, r.text
        assert "9984x9984" in r.json()["error"] and "'huge.mov'" in r.json()["error"]
        assert [p.name for p in (srv.home / "uploads" / "avatars").iterdir()] == []
    finally:
        srv.stop()


def test_uploaded_avatars_caches_count_under_the_storage_limit_and_go_first(tmp_path):
    import json

    home = tmp_path / "home"
    upload = old_file(home / "uploads" / "avatars" / "0123456789abcdef.mp4", 1000, days=2)
    caches = home / "cache" / "avatars"
    theirs = caches / "0123456789abcdef-aaaaaaaaaaaa"
    mine = caches / "holiday-bbbbbbbbbbbb"  # prepared from a user's own file: never Studio's to prune
    for folder, source in ((theirs, upload), (mine, tmp_path / "holiday.mp4")):
        folder.mkdir(parents=True)
        (folder / "meta.json").write_text(json.dumps({"source": str(source)}))
        old_file(folder / "frames.npy", 3_000_000, days=1)
    env = {"STUDIO_HOME": str(home), "STUDIO_MAX_STORAGE_GB": str(2_000_000 / 2**30)}  # 2 MB
    r = studio("queue", "prune", env=env)
    assert r.returncode == 0, r.stderr
    assert not theirs.exists() and not upload.exists()  # the upload's 3 MB cache counted, and pruned with it
    assert (mine / "frames.npy").stat().st_size == 3_000_000

    upload = old_file(home / "uploads" / "avatars" / "fedcba9876543210.mp4", 1000, days=2)
    theirs.mkdir()
    (theirs / "meta.json").write_text(json.dumps({"source": str(upload)}))
    old_file(theirs / "frames.npy", 3_000_000, days=1)
    from studio.core.store.jobs import JobStore

    JobStore(home / "jobs.sqlite").add(str(upload), str(upload), {}, str(tmp_path / "o.mp4"))  # queued: in use
    r = studio("queue", "prune", env=env)
    assert r.returncode == 0, r.stderr
    assert (theirs / "frames.npy").is_file() and upload.is_file()

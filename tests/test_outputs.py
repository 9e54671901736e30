"""One rule for outputs: the name is claimed when the file is written, one owner per name, inputs never.

Real ``studio`` subprocesses started in different folders, a real ``studio serve`` process with a
real HTTP client, real threads racing for one name. Each case asserts what is on disk afterwards:
no file the user made was replaced, every job wrote its own file and serves only that one.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from conftest import DEMO_AVATAR, ROOT, prepare_demo_avatar, speechlike


def studio(home: Path, *args, cwd: Path = ROOT, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "studio", *map(str, args)],
        capture_output=True,
        text=True,
        env={**os.environ, "STUDIO_HOME": str(home), "PYTHONPATH": str(ROOT), "STUDIO_X264_WORKERS": "2"},
        timeout=timeout,
        cwd=cwd,
    )


def one_error_line(r: subprocess.CompletedProcess, *needles: str) -> str:
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert len(lines) == 1, r.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def frame_count(path: Path) -> int:
    import av

    with av.open(str(path)) as c:
        return sum(1 for _ in c.decode(video=0))


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("outputs_home")
    prepare_demo_avatar(home, "astro")
    return home


@pytest.fixture(scope="module")
def voice(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("voice") / "voice.wav"
    sf.write(path, speechlike(0.6, 16_000), 16_000, subtype="PCM_16")
    return path


def render_args(audio, output, *extra):
    return ("--avatar", "astro", "--audio", audio, "-o", output, "--engine", "classic", "--encoder", "x264", *extra)


# ------------------------------------------------------------------------------------------------
# The claim itself


def test_racing_writers_each_get_their_own_name_and_nothing_is_replaced(tmp_path):
    from studio.core.store.fsutil import atomic_output

    (tmp_path / "take.mp4").write_bytes(b"the user's own file")
    results: list[Path] = []
    start = threading.Barrier(8)

    def write(k: int) -> None:
        with atomic_output(tmp_path / "take.mp4", overwrite=False) as out:
            out.tmp.write_bytes(f"writer {k}".encode())
            start.wait()  # all finish at once: the claims race
        results.append(out.final)

    threads = [threading.Thread(target=write, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert (tmp_path / "take.mp4").read_bytes() == b"the user's own file"
    assert sorted(p.name for p in results) == [f"take_{n:03d}.mp4" for n in range(2, 10)]
    assert sorted(p.read_bytes() for p in results) == sorted(f"writer {k}".encode() for k in range(8))
    assert sorted(os.listdir(tmp_path)) == ["take.mp4"] + [f"take_{n:03d}.mp4" for n in range(2, 10)]


def test_without_hard_links_the_claim_takes_the_data_folders_lock(tmp_path, monkeypatch):
    import errno

    from studio.core.store import fsutil

    def no_links(src, dst):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    (tmp_path / "a.mp4").write_bytes(b"mine")
    with fsutil.atomic_output(tmp_path / "a.mp4", overwrite=False) as out:
        out.tmp.write_bytes(b"new")
    assert out.final == tmp_path / "a_002.mp4" and out.final.read_bytes() == b"new"
    assert (tmp_path / "a.mp4").read_bytes() == b"mine"


# ------------------------------------------------------------------------------------------------
# Inputs are never an output (item 1)


def test_a_library_avatars_source_and_cache_are_never_an_output(home, voice, tmp_path):
    import av

    src = tmp_path / "src.mp4"
    rgb = np.asarray(__import__("PIL.Image").Image.open(DEMO_AVATAR).convert("RGB").resize((256, 256)))
    with av.open(str(src), "w") as c:  # 1 s of the presenter
        s = c.add_stream("libx264", rate=25)
        s.width, s.height, s.pix_fmt = 256, 256, "yuv420p"
        for i in range(25):
            for pkt in s.encode(av.VideoFrame.from_ndarray(np.roll(rgb, i % 3, axis=1).copy(), format="rgb24")):
                c.mux(pkt)
        for pkt in s.encode(None):
            c.mux(pkt)
    r = studio(home, "avatar", "add", "hopv", src)
    assert r.returncode == 0, r.stderr
    before = sha(src)
    one_error_line(
        studio(home, "render", "--avatar", "hopv", "--audio", voice, "-o", src, "--engine", "classic"),
        f"{src}: is the avatar's source video itself",
        "choose another output name",
    )
    link = tmp_path / "talk.mp4"
    link.symlink_to(src)
    one_error_line(
        studio(home, "render", "--avatar", "hopv", "--audio", voice, "-o", link), "is the avatar's source video itself"
    )
    one_error_line(
        studio(home, "queue", "add", "--avatar", "hopv", "--audio", voice, "-o", src, "--overwrite"),
        "is the avatar's source video itself",
    )
    cache = home / "avatars" / "hopv"
    one_error_line(
        studio(home, "render", "--avatar", "hopv", "--audio", voice, "-o", cache / "x.mp4"),
        "is inside the avatar's cache folder",
    )
    one_error_line(
        studio(home, "frame", "--avatar", "hopv", "--audio", voice, "-t", "0.1", "-o", home / "avatars" / "f.png"),
        "is inside Studio's own avatars folder",
    )
    assert sha(src) == before and link.is_symlink()


# ------------------------------------------------------------------------------------------------
# Names decided at write time (items 2 and 3)


def test_queued_paths_are_absolute_and_mean_the_folder_they_were_typed_in(home, voice, tmp_path):
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir()
    there.mkdir()
    (here / "voice.wav").write_bytes(voice.read_bytes())
    (there / "talk.mp4").write_bytes(b"someone else's talk")  # the same relative name, another folder
    r = studio(home, "queue", "add", "--avatar", "astro", "--audio", "voice.wav", "-o", "talk.mp4", cwd=here)
    assert r.returncode == 0, r.stderr
    job_id = int(r.stdout.split()[-1])
    job = json.loads(studio(home, "queue", "show", job_id).stdout)
    assert job["audio"] == str(here / "voice.wav") and job["output"] == str(here / "talk.mp4")
    r = studio(home, "queue", "run", cwd=there)  # another folder, even with --overwrite semantics absent
    assert r.returncode == 0, r.stderr
    assert (there / "talk.mp4").read_bytes() == b"someone else's talk"
    assert frame_count(here / "talk.mp4") == 15
    studio(home, "queue", "rm", job_id)


def test_a_file_that_appears_after_queue_add_is_kept_and_the_job_numbers_its_name(home, voice, tmp_path):
    r = studio(home, "queue", "add", *render_args(voice, tmp_path / "late.mp4"))
    assert r.returncode == 0, r.stderr
    job_id = int(r.stdout.split()[-1])
    (tmp_path / "late.mp4").write_bytes(b"made meanwhile")
    r = studio(home, "queue", "run")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "late.mp4").read_bytes() == b"made meanwhile"
    job = json.loads(studio(home, "queue", "show", job_id).stdout)
    assert job["state"] == "done" and job["output"] == str(tmp_path / "late_002.mp4")
    assert frame_count(tmp_path / "late_002.mp4") == 15
    studio(home, "queue", "rm", job_id)


def test_render_keeps_an_existing_file_unless_told_to_overwrite(home, voice, tmp_path):
    (tmp_path / "talk.mp4").write_bytes(b"yesterday's take")
    r = studio(home, "render", *render_args(voice, tmp_path / "talk.mp4"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "talk.mp4").read_bytes() == b"yesterday's take"
    assert r.stdout.startswith(f"wrote {tmp_path / 'talk_002.mp4'}: 15 frames")
    assert "(talk.mp4 exists and was kept; --overwrite replaces it)" in r.stdout
    r = studio(home, "render", *render_args(voice, tmp_path / "talk.mp4", "--overwrite"))
    assert r.returncode == 0, r.stderr
    assert frame_count(tmp_path / "talk.mp4") == 15
    assert sorted(os.listdir(tmp_path)) == ["talk.mp4", "talk_002.mp4"]


def test_an_overwriting_job_leaves_the_earlier_job_without_a_file_it_does_not_own(home, voice, tmp_path, monkeypatch):
    from studio.core.settings import RenderSettings
    from studio.service.job_requests import owned_output
    from studio.service.queue import QueueService
    from studio.service.request import RenderRequest

    monkeypatch.setenv("STUDIO_HOME", str(home))
    qs = QueueService(tmp_path / "jobs.sqlite")
    s = RenderSettings(engine="classic", encoder="x264")
    out = str(tmp_path / "same.mp4")
    first = qs.add(RenderRequest("astro", str(voice), out, s, frames=(0, 5)))
    qs.run_until_empty()
    assert owned_output(qs.get(first.id)) == Path(out)
    second = qs.add(RenderRequest("astro", str(voice), out, s, frames=(0, 9), overwrite=True))
    qs.run_until_empty()
    assert owned_output(qs.get(second.id)) == Path(out) and frame_count(Path(out)) == 9
    assert owned_output(qs.get(first.id)) is None  # it never serves the second job's file


# ------------------------------------------------------------------------------------------------
# A server under concurrent submissions (item 4)


def test_concurrent_renders_on_a_server_each_own_one_file(tmp_path, voice):
    import httpx
    from served import Server

    home = tmp_path / "srv"
    prepare_demo_avatar(home, "astro")
    n = 12
    with Server(home, "--max-queued", "50") as srv, httpx.Client(base_url=srv.url, timeout=120) as client:
        with open(voice, "rb") as fh:
            audio_id = client.post("/v1/audio", files={"file": ("voice.wav", fh)}).json()["id"]
        jobs: dict[int, int] = {}  # job id -> frames it renders
        go = threading.Barrier(n)

        def submit(k: int) -> None:
            data = {"avatar": "astro", "audio_id": audio_id, "engine": "classic", "encoder": "x264"}
            data.update(frame_start=0, frame_end=3 + k)  # a different length each: whose file is whose
            go.wait()
            r = httpx.post(f"{srv.url}/v1/renders", data=data, timeout=120)
            assert r.status_code == 202, r.text
            jobs[r.json()["id"]] = 3 + k

        threads = [threading.Thread(target=submit, args=(k,)) for k in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(jobs) == n
        for job_id in jobs:
            client.get(f"/v1/renders/{job_id}/events", timeout=300).read()  # the stream ends when it is done
        done = {j["id"]: j for j in client.get("/v1/renders").json()["renders"]}
        assert all(done[i]["state"] == "done" for i in jobs), [done[i]["state"] for i in jobs]
        names = {done[i]["output"] for i in jobs}
        assert len(names) == n, names  # 12 jobs, 12 files (it was 4)
        videos = home / "renders"
        assert sorted(p.name for p in videos.iterdir()) == sorted(names)
        for job_id, frames in jobs.items():
            got = tmp_path / f"got{job_id}.mp4"
            r = client.get(f"/v1/renders/{job_id}/video")
            assert r.status_code == 200
            got.write_bytes(r.content)
            assert frame_count(got) == frames  # its own render, not another job's
            assert r.content == (videos / done[job_id]["output"]).read_bytes()

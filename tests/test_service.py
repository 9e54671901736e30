"""The render service: one driver, the queue runner over jobs.sqlite, `studio queue` end to end."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import prepare_demo_avatar, speech_pause_speech
from served import Hold

from studio.service.runner import STORE_PROGRESS_S

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """A data folder with the demo avatar prepared as "astro" (subprocesses share it)."""
    h = tmp_path_factory.mktemp("svc_home")
    prepare_demo_avatar(h)
    return h


@pytest.fixture
def env(home, monkeypatch):
    monkeypatch.setenv("STUDIO_HOME", str(home))
    e = dict(os.environ, STUDIO_HOME=str(home))
    e.pop("STUDIO_CPU_THREADS", None)
    return e


def studio(env, *args, timeout=300, check=True):
    r = subprocess.run(
        [sys.executable, "-m", "studio", *args], env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )
    if check:
        assert r.returncode == 0, r.stderr
    return r


def queue_list(env) -> dict[int, dict]:
    return {j["id"]: j for j in json.loads(studio(env, "queue", "list", "--json").stdout)}


def frames_of(path) -> np.ndarray:
    import av

    with av.open(str(path)) as c:
        return np.stack([f.to_ndarray(format="rgb24") for f in c.decode(video=0)])


def test_a_range_renders_the_same_frames_as_the_whole_clip(tmp_path, env):
    from studio.core.settings import RenderSettings
    from studio.service.driver import Render
    from studio.service.request import RenderRequest

    audio = speech_pause_speech(tmp_path / "v.wav", 1.0, 0.4, 1.0)
    s = RenderSettings(engine="classic", encoder="x264", crf=0, preset="ultrafast")
    whole = Render(RenderRequest("astro", str(audio), str(tmp_path / "whole.mp4"), s))
    list(whole.run())
    part = Render(RenderRequest("astro", str(audio), str(tmp_path / "part.mp4"), s, frames=(20, 45)))
    list(part.run())
    assert part.result.frames == 25 and whole.result.frames == 60
    a, b = frames_of(tmp_path / "whole.mp4"), frames_of(tmp_path / "part.mp4")
    assert b.shape[0] == 25
    assert np.array_equal(a[20:45], b)  # lossless: exactly the whole render's frames 20..44
    import av

    with av.open(str(tmp_path / "part.mp4")) as c:
        audio_s = float(c.streams.audio[0].duration * c.streams.audio[0].time_base)
    assert abs(audio_s - 1.0) < 0.06  # 25 frames of the original audio, not the whole clip


def test_a_bad_request_is_one_sentence_before_any_work(tmp_path, env):
    from studio.core.errors import InputError
    from studio.core.settings import from_dict as settings_from_dict
    from studio.service.request import Placement, RenderRequest

    with pytest.raises(InputError, match="placement"):
        Placement("moon")
    with pytest.raises(InputError, match="out point"):
        RenderRequest("astro", "v.wav", "o.mp4", frames=(50, 10))
    with pytest.raises(InputError, match="crf"):
        settings_from_dict({"crf": "high"})
    with pytest.raises(InputError, match="encoder"):
        settings_from_dict({"encoder": "divx"})


def test_engine_pool_keys_and_shares_warm_engines(env):
    from studio.core.settings import RenderSettings
    from studio.service.pool import EnginePool

    pool = EnginePool()
    a, _ = pool.get(RenderSettings(engine="classic", device="cpu"))
    b, _ = pool.get(RenderSettings(engine="classic", device=None, crf=30))  # encoder settings: same engine
    c, _ = pool.get(RenderSettings(engine="classic", device="cpu", batch=4))
    assert a is b and a is c  # batch only changes speed: the warm engine runs it
    assert pool.lock_for(a) is not None
    pool.close()


def test_identical_jobs_get_numbered_outputs_and_retry_writes_a_new_file(tmp_path, env):
    from studio.core.settings import RenderSettings
    from studio.service.queue import QueueService
    from studio.service.request import RenderRequest

    audio = speech_pause_speech(tmp_path / "v.wav", 0.4, 0.2, 0.4)
    qs = QueueService()
    req = RenderRequest("astro", str(audio), str(tmp_path / "out.mp4"), RenderSettings(engine="classic"))
    j1, j2 = qs.add(req), qs.add(req)
    assert Path(j1.output).name == "out.mp4" and Path(j2.output).name == "out_002.mp4"
    events = []
    done = qs.run_until_empty(events.append)
    assert [j.state for j in done] == ["done", "done"]
    assert (tmp_path / "out.mp4").exists() and (tmp_path / "out_002.mp4").exists()
    again = qs.retry(j1.id)
    assert Path(again.output).name == "out_003.mp4"
    qs.run_until_empty()
    assert (tmp_path / "out_003.mp4").exists() and qs.get(j1.id).state == "done"
    kinds = [e.kind for e in events]
    assert kinds.count("progress") >= 2 and kinds[0] == "state"
    # pipelined: the second job may start before the first one's file is finished
    states = [(e.job_id, e.job.state) for e in events if e.kind == "state"]
    assert [st for i, st in states if i == j1.id] == ["running", "done"]
    assert [st for i, st in states if i == j2.id] == ["running", "done"] and states[0] == (j1.id, "running")


def queue_run(env, hold: Hold) -> subprocess.Popen:
    """``studio queue run`` in the background, its renders held by ``hold`` while it is entered."""
    return subprocess.Popen(
        [sys.executable, "-m", "studio", "queue", "run"],
        env=dict(env, STUDIO_TEST_HOLD=str(hold.path)),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_queue_run_three_jobs_one_bad_one_cancelled(tmp_path, env):
    out = tmp_path / "out"
    out.mkdir()
    held = speech_pause_speech(tmp_path / "held.wav", 1.5, 0.2, 1.5)  # 80 frames: 10 batches of 8
    short = speech_pause_speech(tmp_path / "short.wav", 0.6, 0.2, 0.6)
    doomed = speech_pause_speech(tmp_path / "doomed.wav", 0.6, 0.2, 0.6)
    ids = []
    for audio, name in ((held, "c.mp4"), (short, "a.mp4"), (doomed, "b.mp4")):
        r = studio(
            env,
            "queue",
            "add",
            "--avatar",
            "astro",
            "--audio",
            str(audio),
            "-o",
            str(out / name),
            "--engine",
            "classic",
        )
        ids.append(int(r.stdout.split()[-1]))  # the id is the last word
    doomed.write_bytes(b"no longer audio " * 64)  # damaged after it was queued
    assert [queue_list(env)[i]["state"] for i in ids] == ["queued"] * 3

    with Hold(tmp_path / "hold") as hold:  # the first job stops after its first batch: it cannot finish first
        run = queue_run(env, hold)
        try:
            hold.wait_held()
            assert queue_list(env)[ids[0]]["state"] == "running"
            studio(env, "queue", "cancel", str(ids[0]))  # from another process, mid-render
            # the runner reads a cancel made elsewhere when it next stores the job's progress (at most every
            # STORE_PROGRESS_S; it last stored it just before the hold): released after that, its next
            # batch's progress finds the job cancelled, and the batch after it stops
            since = time.time() - hold.held_file.stat().st_mtime
            time.sleep(max(0.0, STORE_PROGRESS_S + 0.2 - since))
            hold.release()
            stdout, stderr = run.communicate(timeout=300)
        finally:
            run.kill()
    assert run.returncode == 0, stderr
    jobs = queue_list(env)
    assert [jobs[i]["state"] for i in ids] == ["cancelled", "done", "failed"], stderr
    assert "audio" in jobs[ids[2]]["reason"].lower() and "\n" not in jobs[ids[2]]["reason"]
    assert "1 done, 1 failed, 1 cancelled" in stdout
    assert sorted(p.name for p in out.iterdir()) == ["a.mp4"]  # nothing else, no temporaries


def test_a_killed_queue_runner_leaves_its_job_interrupted_and_retry_succeeds(tmp_path, env):
    out = tmp_path / "out"
    out.mkdir()
    audio = speech_pause_speech(tmp_path / "talk.wav", 0.6, 0.2, 0.6)
    r = studio(
        env, "queue", "add", "--avatar", "astro", "--audio", str(audio), "-o", str(out / "k.mp4"), "--engine", "classic"
    )
    job_id = int(r.stdout.split()[-1])
    with Hold(tmp_path / "hold") as hold:  # the job stays running (held after its first batch) until the kill
        run = queue_run(env, hold)
        try:
            hold.wait_held()
            assert queue_list(env)[job_id]["state"] == "running"  # a live runner's job is not "interrupted"
        finally:
            run.send_signal(signal.SIGKILL)
            run.wait(30)
    job = queue_list(env)[job_id]
    assert job["state"] == "interrupted" and job["reason"].startswith("interrupted")
    assert not (out / "k.mp4").exists()
    studio(env, "queue", "retry", str(job_id))  # a new job; the interrupted one stays as it was
    studio(env, "queue", "run")
    jobs = queue_list(env)
    again = max(jobs)
    assert jobs[again]["retry_of"] == job_id and jobs[job_id]["state"] == "interrupted"
    assert jobs[again]["state"] == "done" and Path(jobs[again]["output"]).exists()


def test_the_contract_check_fails_when_core_imports_the_service(tmp_path):
    """Proves the import-linter contracts bite: a copy of the package whose core imports the service."""
    lint = Path(sys.executable).with_name("lint-imports")
    if not lint.exists():
        pytest.skip("import-linter is not installed (it is in the dev extra)")
    ok = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stdout[-2000:]
    copy = tmp_path / "copy"
    shutil.copytree(ROOT / "studio", copy / "studio", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    bad = copy / "studio" / "core" / "constants.py"
    bad.write_text(bad.read_text() + "\nfrom studio.service import queue  # noqa\n")
    env = dict(os.environ, PYTHONPATH=str(copy))
    broken = subprocess.run([str(lint)], cwd=copy, capture_output=True, text=True, timeout=120, env=env)
    assert broken.returncode != 0
    assert "studio.core.constants -> studio.service" in broken.stdout


def test_the_core_contracts_bite_too(tmp_path):
    """A copy whose engine imports the renderer, whose media module imports the plan and whose
    command line imports the farm: each breaks its contract (docs/architecture.md). And the three
    upward edges of issue 34 that the old contracts let through (the job store importing the
    renderer, the audio module the avatar library, an engine the avatars), one of them inside a
    function body: the core's layers contract refuses each."""
    lint = Path(sys.executable).with_name("lint-imports")
    if not lint.exists():
        pytest.skip("import-linter is not installed (it is in the dev extra)")
    copy = tmp_path / "copy"
    shutil.copytree(ROOT / "studio", copy / "studio", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    for rel, line in (
        ("core/engines/classic.py", "from studio.core.render import renderer  # noqa"),
        ("core/media/timecode.py", "from studio.core.render import plan  # noqa"),
        ("cli/render.py", "from studio.core.scale import farm  # noqa"),
        ("core/render/plan.py", "from studio.core.scale import chunks  # noqa"),
        ("core/store/jobs.py", "from studio.core.render import renderer  # noqa"),
        ("core/media/audio.py", "def _late():\n    from studio.core.avatars import library  # noqa"),
        ("core/engines/base.py", "from studio.core.avatars import faces  # noqa"),
    ):
        bad = copy / "studio" / rel
        bad.write_text(bad.read_text() + f"\n{line}\n")
    env = dict(os.environ, PYTHONPATH=str(copy))
    broken = subprocess.run([str(lint)], cwd=copy, capture_output=True, text=True, timeout=120, env=env)
    assert broken.returncode != 0
    out = " ".join(broken.stdout.split())
    for edge in (
        "studio.core.engines.classic -> studio.core.render.renderer",
        "studio.core.media.timecode -> studio.core.render.plan",
        "studio.cli.render -> studio.core.scale.farm",
        "studio.core.render.plan -> studio.core.scale.chunks",
        "studio.core.store.jobs -> studio.core.render.renderer",
        "studio.core.media.audio -> studio.core.avatars.library",
        "studio.core.engines.base -> studio.core.avatars.faces",
    ):
        assert edge in out, (edge, broken.stdout[-3000:])

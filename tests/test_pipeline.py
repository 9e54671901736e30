"""The pipelined queue (issue 26): the next job's engine work starts while the previous job's
encoders drain, at most one job drains at a time, and every job writes the file it writes alone."""

from __future__ import annotations

import threading

import av
import numpy as np
import pytest
import soundfile as sf
from conftest import prepare_demo_avatar, speechlike

from studio.core.media.writer import VideoWriter
from studio.core.settings import RenderSettings
from studio.service.queue import QueueService
from studio.service.request import RenderRequest

JOBS = 3


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    h = tmp_path_factory.mktemp("pipe_home")
    prepare_demo_avatar(h)
    return h


@pytest.fixture
def setup(home, tmp_path, monkeypatch):
    monkeypatch.setenv("STUDIO_HOME", str(home))
    monkeypatch.setenv("STUDIO_X264_WORKERS", "2")
    voices = []
    for k in range(JOBS):
        x = speechlike(1.6 + 0.4 * k, 48_000, seed=k)
        path = tmp_path / f"voice{k}.wav"
        sf.write(path, np.stack([x, 0.7 * x], 1), 48_000, subtype="PCM_16")
        voices.append(path)
    settings = RenderSettings(engine="classic", device="cpu", encoder="x264-parallel", preset="ultrafast")
    return voices, settings


def _queue(tmp_path, name, voices, settings, pipeline):
    qs = QueueService(tmp_path / f"{name}.sqlite", pipeline=pipeline)
    jobs = [
        qs.add(RenderRequest("astro", str(v), str(tmp_path / f"{name}{k}.mp4"), settings)) for k, v in enumerate(voices)
    ]
    return qs, jobs


def _packets(path):
    with av.open(str(path)) as c:
        return [(p.stream.type, bytes(p), p.pts, p.dts) for p in c.demux() if p.size]


def test_pipelined_jobs_overlap_one_drain_at_a_time_and_write_the_serial_files(setup, tmp_path, monkeypatch):
    voices, settings = setup
    serial, _ = _queue(tmp_path, "serial", voices, settings, pipeline=False)
    assert [j.state for j in serial.run_until_empty()] == ["done"] * JOBS
    serial.close()

    # hold the first job's file at its finish: the next job must render meanwhile
    gate, holding = threading.Event(), threading.Event()
    close = VideoWriter.close

    def held_close(self):
        if self.path.name == "pipe0.mp4":
            holding.set()
            assert gate.wait(120), "the test never released the first job"
        return close(self)

    monkeypatch.setattr(VideoWriter, "close", held_close)
    qs, jobs = _queue(tmp_path, "pipe", voices, settings, pipeline=True)
    seen: list = []  # (event, job id, running job ids) in order
    second_rendered = threading.Event()

    def on_event(ev):
        seen.append((ev.kind, ev.job_id, tuple(qs.running_job_ids)))
        if ev.kind == "progress" and ev.job_id == jobs[1].id and ev.progress.done > 0:
            second_rendered.set()

    result: dict = {}
    runner = threading.Thread(target=lambda: result.setdefault("done", qs.run_until_empty(on_event)), daemon=True)
    runner.start()
    try:
        assert holding.wait(120), "the first job never reached its finish"
        assert second_rendered.wait(120), "the second job did not render while the first one drained"
        assert qs.get(jobs[0].id).state == "running"  # still finishing its file
        assert set(qs.running_job_ids) == {jobs[0].id, jobs[1].id}
    finally:
        gate.set()
    runner.join(300)
    assert not runner.is_alive()
    qs.close()
    assert [j.state for j in result["done"]] == ["done"] * JOBS
    assert max(len(r) for _, _, r in seen) <= 2  # one job on the engine, at most one draining
    # job 2 only started once job 0 was done (the second drain waited for the first)
    first_done = next(i for i, (k, j, _) in enumerate(seen) if k == "state" and j == jobs[0].id and _final(qs, j))
    third_start = next(i for i, (k, j, _) in enumerate(seen) if j == jobs[2].id and k == "progress")
    assert first_done < third_start
    for k in range(JOBS):
        assert _packets(tmp_path / f"pipe{k}.mp4") == _packets(tmp_path / f"serial{k}.mp4")


def _final(qs, job_id) -> bool:
    return qs.get(job_id).state == "done"


def test_interrupting_the_queue_while_a_job_drains_finishes_that_file_and_writes_no_other(setup, tmp_path, monkeypatch):
    """A job whose frames have all left the engine is finishing its file: stopping the queue (a
    server shutting down) lets it finish; the job on the engine stops and leaves nothing."""
    voices, settings = setup
    gate, holding = threading.Event(), threading.Event()
    close = VideoWriter.close

    def held_close(self):
        if self.path.name == "c0.mp4":
            holding.set()
            gate.wait(120)
        return close(self)

    monkeypatch.setattr(VideoWriter, "close", held_close)
    qs, jobs = _queue(tmp_path, "c", voices[:2], settings, pipeline=True)
    runner = threading.Thread(target=qs.run_until_empty, daemon=True)
    runner.start()
    assert holding.wait(120)
    stopper = threading.Thread(target=qs.stop, kwargs={"interrupt": True}, daemon=True)
    stopper.start()
    gate.set()
    stopper.join(300)
    runner.join(300)
    states = [qs.get(j.id).state for j in jobs]
    assert states[0] == "done" and (tmp_path / "c0.mp4").is_file()
    assert states[1] in ("interrupted", "queued") and not (tmp_path / "c1.mp4").exists()
    assert sorted(p.name for p in tmp_path.glob("c*.mp4")) == ["c0.mp4"]
    assert not list(tmp_path.glob(".c*"))  # no temporaries
    qs.close()

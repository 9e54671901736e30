"""The stage trace (``STUDIO_STAGE_TRACE``) of a real render, and the warm-up render's shape (issue 38:
what the benchmarks trace, and what the first request after ready no longer pays for)."""

from __future__ import annotations

import json

import pytest
from conftest import prepare_demo_avatar, speech_pause_speech

from studio.core.render.renderer import Renderer
from studio.core.settings import RenderSettings


@pytest.fixture
def traced(tmp_path, monkeypatch):
    """The process's tracer pointed at a fresh file (it is read once a process: reset here)."""
    from studio.core.render import stagetrace

    path = tmp_path / "trace.jsonl"
    monkeypatch.setenv("STUDIO_STAGE_TRACE", str(path))
    stagetrace.reset()
    yield path
    stagetrace.reset()  # the tracer the test's renders wrote to is closed


def test_the_trace_holds_every_stage_of_a_render_and_sums_to_its_stage_times(tmp_path, traced):
    avatar = prepare_demo_avatar(tmp_path / "home")
    voice = speech_pause_speech(tmp_path / "voice.wav", 1.0, 0.6, 0.8)
    r = Renderer(avatar, str(voice), RenderSettings(engine="classic", device="cpu", batch=8))
    res = r.render(tmp_path / "out.mp4")
    lines = [json.loads(x) for x in traced.read_text().splitlines()]
    (run,) = [x for x in lines if x["k"] == "run"]
    assert run["out"] == "out.mp4" and run["frames"] == res.frames
    mine = [x for x in lines if x.get("r") == run["r"] and x["k"] == "cpu"]
    assert {x["th"] for x in mine} == {"MainThread"}
    assert all(x["t1"] >= x["t0"] for x in mine)
    for name, ms in res.stage_ms.items():  # each stage's spans add up to its milliseconds
        spans = [1e3 * (x["t1"] - x["t0"]) for x in mine if x["s"] == name]
        assert spans, name
        assert sum(spans) == pytest.approx(ms, abs=0.5 + 0.01 * ms), name
    # the caller's turn after each batch (one "encode" span a batch), a "made" line before them all
    assert sum(x["s"] == "consumer" for x in mine) == sum(x["s"] == "encode" for x in mine) >= 2
    assert min(x["t0"] for x in mine) >= next(x["t0"] for x in lines if x["s"] == "made" and x["r"] == run["r"])
    assert not [x for x in lines if x["k"] == "gpu"]  # GPU spans only on CUDA


def test_no_trace_without_the_variable(tmp_path, monkeypatch):
    from studio.core.render import stagetrace

    monkeypatch.delenv("STUDIO_STAGE_TRACE", raising=False)
    stagetrace.reset()
    assert stagetrace.tracer() is None


def test_the_warm_up_render_reaches_every_lane_in_a_users_format_once_per_writer(tmp_path):
    import os

    import numpy as np

    from studio.api.warmup import WarmUp, frames_for_every_lane, synthetic_voice, writers_of
    from studio.core.media.writer import MIN_CHUNK, parallel_chunks
    from studio.service.queue import QueueService

    n = frames_for_every_lane()
    cores = os.cpu_count() or 1
    assert parallel_chunks(n, cores, MIN_CHUNK) == cores  # every lane gets frames
    x = synthetic_voice(n, 48_000)
    assert x.shape == (n * 48_000 // 25, 2) and x.dtype == np.float32 and 0.05 < float(np.abs(x).max()) < 1
    assert synthetic_voice(38, 16_000, channels=1).shape == (38 * 16_000 // 25,)

    class Q:  # what WarmUp reads of the queue whose start it is given
        def __init__(self, jobs_per_device, pipeline):
            self.jobs_per_device, self.pipeline = jobs_per_device, pipeline

        def start(self):
            pass

    assert writers_of(None) == 1
    assert writers_of(Q(1, True)) == 2  # the next job renders while the last one drains
    assert writers_of(Q(1, False)) == 1 and writers_of(Q(3, True)) == 3
    assert WarmUp(None, [], [], then=Q(2, True).start).writers == 2
    assert WarmUp(None, [], [], then=lambda: None).writers == 1
    qs = QueueService(tmp_path / "jobs.sqlite")  # a real queue: pipelined, one job a device
    assert writers_of(qs) == 2 and WarmUp(None, [], [], then=qs.start).writers == 2
    qs.close()

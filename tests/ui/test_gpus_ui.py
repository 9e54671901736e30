"""'Render on: All GPUs here': offered with two GPUs or more, the queue renders each job split over them.

This machine has no GPU: two CPU devices stand in for two GPUs (the same code path: one render
thread and engine per device, one writer, one mux).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ui_helpers import SLOW, clip, decode, load_demo, window  # noqa: F401 (fixture)

from studio.core.store import jobs
from studio.ui.render_panel import TARGETS


def test_all_gpus_here_renders_a_queued_job_on_every_device(window, qtbot, tmp_path):
    from studio.ui.render_panel import RenderPanel
    from studio.ui.render_queue import job_devices

    panel = window.render_panel
    qtbot.waitUntil(lambda: getattr(window, "gpus_task", None) is not None, timeout=SLOW)
    qtbot.waitUntil(window.gpus_task.finished_event.is_set, timeout=SLOW)  # the real list (none here) first
    qtbot.wait(50)
    panel.set_gpus(["cuda:0"])  # one GPU: nothing to split over
    assert panel.target.findText(TARGETS["gpus"]) < 0 and panel.render_devices() is None
    panel.set_gpus(["cpu", "cpu"])
    assert panel.target.findText(TARGETS["gpus"]) == 1
    load_demo(window, qtbot, audio=clip(tmp_path, 2.4))
    panel.engine.setCurrentText("classic")
    panel.encoder.setCurrentText("x264-parallel")  # chunks to share out between the devices
    panel.preset.setCurrentText("ultrafast")
    panel.folder.setText(str(tmp_path / "renders"))
    panel.target.setCurrentText(TARGETS["gpus"])
    assert panel.render_devices() == ("cpu", "cpu") and panel.farm_address() is None
    assert not panel.device.isEnabled()  # the devices are named by the choice
    output = Path(panel.output_path())
    progress, placed = [], []
    window.worker.progress.connect(lambda req, p: progress.append(p))
    window.worker.placed.connect(lambda req, where: placed.append(where))
    with qtbot.waitSignal(window.jobFinished, timeout=SLOW) as finished:
        job_id = window.render_now()
    assert finished.args == [job_id, jobs.DONE], window.store.get(job_id).reason
    assert placed == ["2 GPUs here"]
    assert progress[-1].finished and progress[-1].done == progress[-1].total == 60
    frames, audio_s, first = decode(output)
    assert frames == 60 and audio_s == pytest.approx(2.4, abs=0.05) and first.shape == (512, 512, 3)
    job = window.store.get(job_id)
    assert job_devices(job.settings) == ("cpu", "cpu") and job.result["ran_on"] == "2 GPUs here"
    assert job.result["frames"] == 60 and panel.live.progress_bar.value() == 1000
    # the choice is saved, and offered again once the GPUs are known
    panel.save()
    from studio.ui import settings as cfg

    assert cfg.value(panel.settings, "render/target", str) == "gpus"
    again = RenderPanel()
    qtbot.addWidget(again)
    assert again.target.currentText() == TARGETS["local"]
    again.save()  # closed before the GPUs are known: the choice is kept
    assert cfg.value(again.settings, "render/target", str) == "gpus"
    again.set_gpus(["cpu", "cpu"])
    assert again.target.currentText() == TARGETS["gpus"] and again.render_devices() == ("cpu", "cpu")

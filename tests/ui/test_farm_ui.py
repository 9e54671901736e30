"""The render queue on a Ray render farm: a local cluster (127.0.0.1) with 2 CPU workers.

A job queued while "Render on" says "Render farm" renders there in chunks; its progress
(frames, aggregate fps, per-worker fps, retries) reaches the Render panel and the Queue panel;
Cancel from the queue stops every chunk and writes nothing; a bad address fails the job with
one readable sentence.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from ui_helpers import SLOW, clip, decode, load_demo, window  # noqa: F401 (fixture)

from studio.core.store import jobs
from studio.ui.queue_panel import ID_COL, NOTE_COL, STATE_COL
from studio.ui.render_panel import TARGETS

NEEDS_RAY = "the farm needs Ray: pip install 'studio[farm]' (ray is not installed)"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A local Ray cluster with 2 CPU slots (its address); its workers' data folder is the module's own."""
    ray = pytest.importorskip("ray", reason=NEEDS_RAY)

    from studio.core.scale.farm import init_ray

    home = tmp_path_factory.mktemp("farm_ui_home")
    old = os.environ.get("STUDIO_HOME"), os.environ.get("RAY_ADDRESS")
    os.environ["STUDIO_HOME"] = str(home)
    os.environ["RAY_ADDRESS"] = "local"  # a new cluster even where `studio farm up` runs one
    try:
        assert init_ray(None, num_cpus=2) == "local cluster on 127.0.0.1"
        os.environ.pop("RAY_ADDRESS")
        yield ray.get_runtime_context().gcs_address  # given explicitly: another cluster may run here
    finally:
        ray.shutdown()
        for key, value in zip(("STUDIO_HOME", "RAY_ADDRESS"), old):
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _on_farm(window, tmp_path, address: str = "") -> None:
    p = window.render_panel
    p.engine.setCurrentText("classic")
    p.encoder.setCurrentText("x264")
    p.preset.setCurrentText("ultrafast")
    p.folder.setText(str(tmp_path / "renders"))
    p.target.setCurrentText(TARGETS["farm"])
    p.farm_edit.setText(address)
    assert p.farm_address() == address and p.farm_edit.isEnabled() and p.farm_edit.isVisibleTo(p)


def test_render_on_is_saved_with_the_settings_and_travels_with_queued_jobs(window, qtbot, tmp_path):
    from studio.ui.render_panel import RenderPanel
    from studio.ui.render_queue import job_farm

    panel = window.render_panel
    assert panel.target.currentText() == "This computer" and panel.farm_address() is None
    assert not panel.farm_edit.isEnabled() and not panel.farm_edit.isVisibleTo(panel)  # the row shows on "farm"
    local = window.queue.add("astronaut", "/x/a.wav", start=False)
    _on_farm(window, tmp_path, "10.0.0.5:6379")
    farm = window.queue.add("astronaut", "/x/a.wav", start=False)
    panel.save()
    again = RenderPanel()
    qtbot.addWidget(again)
    assert again.target.currentText() == "Render farm" and again.farm_address() == "10.0.0.5:6379"
    assert again.farm_edit.isEnabled() and again.farm_edit.isVisibleTo(again)
    assert job_farm(window.store.get(local).settings) is None
    assert job_farm(window.store.get(farm).settings) == "10.0.0.5:6379"
    tips = {
        window.queue_panel.table.item(r, ID_COL).text(): window.queue_panel.table.item(r, STATE_COL).toolTip()
        for r in range(window.queue_panel.table.rowCount())
    }
    assert "renders on this computer" in tips[str(local)] and "renders on farm 10.0.0.5:6379" in tips[str(farm)]


def test_a_bad_farm_address_fails_the_job_with_one_readable_line(window, qtbot, tmp_path):
    pytest.importorskip("ray", reason=NEEDS_RAY)
    audio = clip(tmp_path, 1.0)
    # an address that is not HOST:PORT is refused before it reaches the queue: one sentence, no job
    _on_farm(window, tmp_path, "no-port")
    before = window.store.list()
    assert window.queue.add("astronaut", str(audio)) is None
    assert "HOST:PORT" in window.banner_text.text() and "\n" not in window.banner_text.text()
    assert window.store.list() == before
    for address, words in (("127.0.0.1:1", ("127.0.0.1:1", "studio farm up")),):
        _on_farm(window, tmp_path, address)
        with qtbot.waitSignal(window.jobFinished, timeout=SLOW) as finished:
            job_id = window.queue.add("astronaut", str(audio))
        assert finished.args == [job_id, jobs.FAILED]
        reason = window.store.get(job_id).reason
        assert "\n" not in reason and all(w in reason for w in words), reason
        assert "Traceback" not in reason and "internal error" not in reason
        assert window.banner_text.text() == reason
        row = [window.queue_panel.table.item(r, ID_COL).text() for r in range(window.queue_panel.table.rowCount())]
        note = window.queue_panel.table.item(row.index(str(job_id)), NOTE_COL)
        assert note.text() == reason and f"renders on farm {address}" in note.toolTip()
    assert window.current is None and window.render_panel.render_btn.isEnabled()
    assert not (tmp_path / "renders").exists() or not list((tmp_path / "renders").iterdir())


def test_the_queue_renders_on_the_farm_and_cancel_stops_every_chunk(cluster, window, qtbot, tmp_path):
    load_demo(window, qtbot, audio=clip(tmp_path, 2.4))
    _on_farm(window, tmp_path, cluster)
    window.render_panel.batch.setValue(2)  # small batches: the cancel below lands mid-chunk
    output = Path(window.render_panel.output_path())
    progress, placed = [], []
    window.worker.progress.connect(lambda req, p: progress.append(p))
    window.worker.placed.connect(lambda req, where: placed.append(where))

    with qtbot.waitSignal(window.jobFinished, timeout=SLOW) as finished:
        job_id = window.render_now()
    assert finished.args == [job_id, jobs.DONE], window.store.get(job_id).reason
    assert placed == ["farm (2 workers)"]
    last = progress[-1]
    assert last.finished and last.done == last.total == 60 and last.chunks == last.chunks_done == 2
    assert set(last.workers) == {"cpu0", "cpu1"} and all(v > 0 for v in last.workers.values())
    assert last.retries == 0 and [p.done for p in progress] == sorted(p.done for p in progress)
    frames, audio_s, first = decode(output)
    assert frames == 60 and audio_s == pytest.approx(2.4, abs=0.05) and first.shape == (512, 512, 3)
    # the Render panel showed it: bar at 100 %, aggregate fps, per-worker fps and retries
    panel = window.render_panel
    assert panel.live.progress_bar.value() == 1000 and panel.live.fps_label.text() != "— fps"
    assert (
        panel.live.stage_label.text().startswith("farm: cpu0 ")
        and "chunks 2/2 · 0 retries" in panel.live.stage_label.text()
    )
    assert "farm (2 workers)" in panel.result_detail.text() and "2 segments" in panel.result_detail.text()
    # the Queue panel says where it ran
    job = window.store.get(job_id)
    assert job.result["ran_on"] == "farm (2 workers)" and job.result["frames"] == 60 and job.progress == 1.0
    note = window.queue_panel.table.item(0, NOTE_COL)
    assert note.text().startswith("farm (2 workers) · classic") and "rendered on farm (2 workers)" in note.toolTip()
    farm = window.worker.farm

    # a longer job, cancelled from the Queue panel mid-render: every chunk stops, nothing is written
    with qtbot.waitSignal(window.analysisReady, timeout=SLOW):
        window.load_script(str(clip(tmp_path, 8.0, "long.wav")))
    long_output = Path(panel.output_path())
    assert long_output != output
    progress.clear()
    job_id = window.render_now()
    qtbot.waitUntil(lambda: any(p.done > 0 for p in progress), timeout=SLOW)
    row = [window.queue_panel.table.item(r, ID_COL).text() for r in range(window.queue_panel.table.rowCount())]
    window.queue_panel.table.selectRow(row.index(str(job_id)))
    assert window.queue_panel.table.item(row.index(str(job_id)), NOTE_COL).text() == "farm (2 workers)"
    with qtbot.waitSignal(window.jobFinished, timeout=SLOW) as finished:
        window.queue_panel.cancel_btn.click()
    assert finished.args == [job_id, jobs.CANCELLED]
    assert progress[-1].done < 200 and not progress[-1].finished
    assert not long_output.exists() and sorted(p.name for p in output.parent.iterdir()) == [output.name]
    assert "cancelled" in panel.live.progress_bar.format() and window.current is None
    # one connection for both jobs, and each worker loaded its engine once (kept warm between jobs)
    assert window.worker.farm is farm and farm.alive
    assert [s["engines_loaded"] for s in farm.stats().values()] == [1, 1]


def test_a_farm_that_goes_away_fails_the_job_not_the_app_and_the_next_job_reconnects(cluster, window, qtbot, tmp_path):
    load_demo(window, qtbot, audio=clip(tmp_path, 6.0, "six.wav"))
    _on_farm(window, tmp_path, cluster)
    window.render_panel.batch.setValue(2)
    output = Path(window.render_panel.output_path())
    progress = []
    window.worker.progress.connect(lambda req, p: progress.append(p))
    with qtbot.waitSignal(window.jobFinished, timeout=SLOW) as finished:
        job_id = window.render_now()
        qtbot.waitUntil(lambda: any(p.done > 0 for p in progress), timeout=SLOW)
        os.kill(window.worker.farm.pid, signal.SIGKILL)  # as when its Ray node stops: the driver dies
    assert finished.args == [job_id, jobs.FAILED]
    reason = window.store.get(job_id).reason
    assert reason.startswith("The connection to the farm at 127.0.0.1:") and "studio farm status" in reason, reason
    assert "\n" not in reason and not output.exists() and window.isVisible()
    # the next job opens a new link to the same farm and completes
    window.load_script(str(clip(tmp_path, 1.2, "short.wav")))
    qtbot.waitUntil(lambda: window.library.script.endswith("short.wav"), timeout=SLOW)
    with qtbot.waitSignal(window.jobFinished, timeout=SLOW) as finished:
        job_id = window.render_now()
    assert finished.args == [job_id, jobs.DONE], window.store.get(job_id).reason
    assert decode(window.store.get(job_id).output)[0] == 30

"""The Ray render farm on one machine: a local cluster (127.0.0.1) with 2 CPU replicas.

The farm is one dispatcher (``core.scale.dispatch``: a controller owning the replicas, a router
picking them by frames queued, replicas with one progress call, one cancel and one file protocol);
a chunked render is a job holding slots on several replicas."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import numpy as np
import pytest
import soundfile as sf
from conftest import DEMO_AVATAR, speechlike
from served import Hold

from studio.core.errors import Cancelled
from studio.core.render.renderer import Renderer
from studio.core.settings import RenderSettings

pytest.importorskip("ray", reason="the farm needs Ray: pip install 'studio[farm]' (ray is not installed)")

RATE = 16_000
LOSSLESS = RenderSettings(engine="classic", device="cpu", encoder="x264", crf=0, preset="ultrafast", batch=4)


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """The module's data folder: the avatar is prepared here and the Ray workers inherit it."""
    home = tmp_path_factory.mktemp("farm_home")
    old = os.environ.get("STUDIO_HOME")
    os.environ["STUDIO_HOME"] = str(home)
    os.environ["STUDIO_TEST_HOLD"] = str(home / "test-hold")  # the workers' renders hold while it exists
    yield home
    os.environ.pop("STUDIO_TEST_HOLD", None)
    if old is None:
        os.environ.pop("STUDIO_HOME", None)
    else:
        os.environ["STUDIO_HOME"] = old


@pytest.fixture(scope="module")
def avatar(home):
    import torch

    from studio.core.avatars import library as avatar_mod

    old = torch.get_num_threads()
    torch.set_num_threads(1)  # a shared 2-core machine: torch's thread pool is much slower here
    yield avatar_mod.prepare("astro", DEMO_AVATAR)
    torch.set_num_threads(old)


@pytest.fixture(scope="module")
def voice(tmp_path_factory):
    """3 s: speech 0-1.2 s, silence 1.2-1.6 s, speech 1.6-3.0 s (75 frames)."""
    path = tmp_path_factory.mktemp("voice") / "voice.wav"
    x = np.concatenate([speechlike(1.2, RATE, 1), np.zeros(int(0.4 * RATE), np.float32), speechlike(1.4, RATE, 2)])
    sf.write(path, x, RATE, subtype="PCM_16")
    return path


@pytest.fixture(scope="module")
def single(avatar, voice, tmp_path_factory):
    out = tmp_path_factory.mktemp("single") / "single.mp4"
    Renderer(avatar, voice, LOSSLESS).render(out)
    return decode(out)


@pytest.fixture(scope="module")
def farm(home, avatar):
    import ray

    from studio.core.scale.farm import Farm, init_ray

    how = init_ray(None, num_cpus=2)
    f = None
    try:
        f = Farm.attach(workers=2)
        yield f, how
    finally:
        if f is not None:
            f.shutdown()
        ray.shutdown()


def decode(path):
    import av

    with av.open(str(path)) as c:
        frames = [(f.pts, f.to_ndarray(format="rgb24")) for f in c.decode(video=0)]
        n_audio = len(c.streams.audio)
    return frames, n_audio


def same_video(got, want) -> bool:
    (g, ga), (w, wa) = got, want
    return (
        ga == wa == 1
        and len(g) == len(w) == 75
        and all(x[0] == y[0] and np.array_equal(x[1], y[1]) for x, y in zip(g, w))
    )


def test_local_cluster_listens_on_loopback_only(farm):
    import shutil

    _, how = farm
    assert how == "local cluster on 127.0.0.1"
    if shutil.which("ss") is None:
        pytest.skip("needs the ss tool (iproute2) to list listening sockets")
    lines = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout.splitlines()
    ray_lines = [x for x in lines if any(k in x for k in ("raylet", "gcs_server", "ray::", f"pid={os.getpid()},"))]
    assert any("gcs_server" in x for x in ray_lines) and any("raylet" in x for x in ray_lines), lines
    addresses = {x.split()[3].rsplit(":", 1)[0] for x in ray_lines}
    assert addresses <= {"127.0.0.1", "[::ffff:127.0.0.1]", "[::1]"}, ray_lines


def test_farm_render_equals_the_single_process_render(farm, home, avatar, voice, single, tmp_path):
    f, _ = farm
    out = tmp_path / "farm.mp4"
    progress = []
    with Hold(home / "test-hold") as hold:  # the chunks stop after their first batch until progress shows it
        for p in f.render(avatar, voice, out, LOSSLESS):
            progress.append(p)
            if 0 < p.done < 75:
                hold.release()  # seen mid-render (a fast machine's chunks would end between two reads)
    last = progress[-1]
    assert last.finished and last.output == str(out) and last.chunks == 2 and last.retries == 0
    assert set(last.workers) == set(f.workers) == {"cpu0", "cpu1"}  # per-replica fps, by device on one node
    assert all(v > 0 for v in last.workers.values())
    dones = [p.done for p in progress]
    assert dones == sorted(dones) and any(0 < d < 75 for d in dones)  # streamed, not only at the end
    assert same_video(decode(out), single)
    assert f.result.frames == 75 and f.result.engine == "classic" and "2 segments" in f.result.encoder
    assert [p.name for p in tmp_path.iterdir()] == ["farm.mp4"]  # the fetched segments' folder is gone
    # a second job: the workers' engines stay warm and the avatar came from the shared folder
    list(f.render(avatar, voice, tmp_path / "again.mp4", LOSSLESS, chunks=4))
    stats = f.stats()
    assert all(s["engines_loaded"] == 1 and s["avatar_fetches"] == 0 for s in stats.values()), stats
    assert sum(s["chunks"] for s in stats.values()) == 6


def test_a_worker_killed_mid_chunk_is_survived(farm, home, avatar, voice, single, tmp_path):
    f, _ = farm
    out = tmp_path / "killed.mp4"
    killed, pid = None, 0
    with Hold(home / "test-hold") as hold:  # every chunk stops after its first batch: killed mid-chunk, surely
        for p in f.render(avatar, voice, out, LOSSLESS):
            busy = [w for w in p.workers if w in f.pids]
            if killed is None and p.done > 0 and p.chunks_done == 0 and busy:
                killed, pid = busy[0], f.pids[busy[0]]
                os.kill(pid, signal.SIGKILL)  # the replica's process dies mid-chunk
                assert not out.exists()
                hold.release()  # the other chunk and the retried one go on
    assert killed is not None and p.finished and p.retries >= 1
    assert same_video(decode(out), single)
    assert [x.name for x in tmp_path.iterdir()] == ["killed.mp4"]
    # the controller replaced the dead replica on its node: two again, the dead process not among them
    healthy(f)
    assert sorted(f.workers) == ["cpu0", "cpu1"] and f.pids[killed] != pid


def healthy(f, timeout: float = 120) -> dict:
    """Every replica answers and there are two (one killed by an earlier test is replaced by the
    controller: a new process on its node, within a discovery round on a busy machine)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            stats = f.stats(timeout=10)
            if len(stats) == 2:
                return stats
        except Exception:  # noqa: BLE001 - GetTimeoutError while a replica starts
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"the farm has {f.workers}, not two answering replicas")
        time.sleep(0.2)


def test_cancel_stops_every_chunk_and_writes_nothing(farm, home, avatar, voice, tmp_path):
    """A chunked render reserves a slot on both replicas (the router's one job), and one cancel per
    chunk (the replicas' one cancel) stops every chunk: each replica counts its cancelled task."""
    f, _ = farm
    before = healthy(f)
    out = tmp_path / "keep.mp4"
    out.write_bytes(b"previous render")
    seen = []
    with Hold(home / "test-hold") as hold:  # every chunk stops after its first batch: it cannot finish first
        with pytest.raises(Cancelled):
            for p in f.render(avatar, voice, out, LOSSLESS.with_(batch=2)):
                seen.append(p.done)
                if p.done > 0 and len(p.workers) == 2 and all(p.workers.values()):  # both chunks run (held)
                    rows = [r for r in f.dispatcher.status()["actors"] if r["state"] != "dead"]
                    assert [r["jobs_in_flight"] for r in rows] == [[f.job_id], [f.job_id]], rows
                    f.cancel()
        hold.release()
    assert 0 < seen[-1] < 75
    assert out.read_bytes() == b"previous render" and [x.name for x in tmp_path.iterdir()] == ["keep.mp4"]
    after = f.stats(timeout=10)  # both replicas answer at once: their chunks stopped, nothing still renders
    assert {w: after[w]["cancelled"] - before[w]["cancelled"] for w in after} == {w: 1 for w in before}
    assert all(r["jobs_in_flight"] == [] for r in f.dispatcher.status()["actors"]), f.dispatcher.status()  # slots free


def test_a_damaged_piece_of_a_file_is_refused(farm, home, avatar, voice, tmp_path):
    """The one file protocol: a replica's file comes in pieces whose size and SHA-256 must match what
    the replica measured; one flipped byte on the replica's disk and the head keeps nothing."""
    import threading
    import uuid

    from studio.core.render.clip import Clip
    from studio.core.scale.dispatch import Lost

    f, _ = farm
    healthy(f)
    d = f.dispatcher
    actor = d.router.wait_reserve(-7, 0, (), threading.Event())
    clip = Clip(avatar, voice, LOSSLESS)
    task = dict(d.inputs(clip.avatar, voice), settings=LOSSLESS, job=uuid.uuid4().hex, range=(0, 16))
    call = d.call(actor, -7, task)
    try:
        out = call.outcome()
        assert out["size"] > 0 and not out["shared"] and out["segment"]["end"] == 16
        parts = list((home / "renders").glob(".farm-*"))  # the replica's registered temporary (same data folder here)
        assert len(parts) == 1
        data = bytearray(parts[0].read_bytes())
        data[len(data) // 2] ^= 0xFF
        parts[0].write_bytes(bytes(data))
        target = tmp_path / "seg.mp4"
        with pytest.raises(Lost, match="arrived damaged"):
            call.fetch(out, target, threading.Event())
        assert list(tmp_path.iterdir()) == []
    finally:
        call.close()
        d.router.release(-7)


def test_a_node_without_the_avatar_folder_fetches_it_once(farm, avatar):
    from studio.core.scale.cluster import local_avatar, ship_avatar

    spec = ship_avatar(avatar)
    elsewhere = dict(spec, folder="/nonexistent/avatar")  # as seen from another host
    assets, fetched = local_avatar(elsewhere)
    assert fetched == 1 and np.array_equal(np.asarray(assets.frames), np.asarray(avatar.frames))
    assert np.array_equal(np.asarray(assets.masks), np.asarray(avatar.masks))
    again, fetched = local_avatar(dict(elsewhere, files=[None]))  # no object store access at all
    assert fetched == 0 and again.folder == assets.folder


def test_the_workers_load_a_new_engine_when_the_weights_are_imported_again(farm, home, avatar, tmp_path, monkeypatch):
    """The workers keep engines in core's ``EngineCache``: its key holds the imported weights' id
    and ``compile`` (the old key of engine/device/precision/decoder/batch/runtime saw neither, so a
    re-import went unseen and a compiled job got the plain engine)."""
    from musetalk_fakes import write_official_and_taesd, write_official_models

    from studio.core.engines import weights
    from studio.core.engines.cache import EngineKey

    f, _ = farm
    monkeypatch.setenv("STUDIO_HOME", str(home))  # the workers' data folder: their model store
    voice = tmp_path / "short.wav"
    sf.write(voice, speechlike(0.8, RATE, 3), RATE, subtype="PCM_16")  # 20 frames: two chunks
    settings = RenderSettings(engine="musetalk", device="cpu", batch=4, encoder="x264", preset="ultrafast")

    def loaded() -> int:
        return sum(s["engines_loaded"] for s in f.stats().values())

    try:
        folder, taesd = write_official_and_taesd(tmp_path / "weights1")
        weights.import_models(folder, taesd=taesd)
        first = EngineKey.of(settings)
        list(f.render(avatar, voice, tmp_path / "one.mp4", settings, chunks=2))
        before = loaded()
        list(f.render(avatar, voice, tmp_path / "two.mp4", settings, chunks=2))
        assert loaded() == before  # same weights, same settings: the warm engines
        other = write_official_models(tmp_path / "weights2", seed=7)  # other weights, imported over the first
        weights.import_models(other, taesd=taesd)
        assert EngineKey.of(settings).weights != first.weights
        assert EngineKey.of(settings.with_(compile=True)) != EngineKey.of(settings)
        list(f.render(avatar, voice, tmp_path / "three.mp4", settings, chunks=2))
        assert loaded() == before + 2  # both workers saw the new weights
        assert f.result.engine == "musetalk" and f.result.frames == 20
    finally:
        import shutil

        shutil.rmtree(weights.models_root(), ignore_errors=True)  # the module's other tests render classic


def test_cli_farm_status_without_a_cluster_says_how_to_start_one(home, tmp_path):
    import sys

    env = {**os.environ, "STUDIO_HOME": str(home), "RAY_ADDRESS": ""}
    r = subprocess.run(
        [sys.executable, "-m", "studio", "farm", "status", "--address", "127.0.0.1:1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("studio: error: ") and "studio farm up" in r.stderr


def test_the_farm_join_has_the_timecode_track_and_chapters(farm, avatar, voice, tmp_path):
    """As a one-process render: the start timecode (drop-frame at 29.97) and the markers as chapters."""
    import av

    f, _ = farm
    s = LOSSLESS.with_(fps="29.97", start_tc="01:00:00:00", markers="0.5=Intro, 2=Later")
    list(f.render(avatar, voice, tmp_path / "farm.mp4", s))
    with av.open(str(tmp_path / "farm.mp4")) as c:
        tmcd = [st.metadata["timecode"] for st in c.streams if st.metadata.get("handler_name") == "TimeCodeHandler"]
        chapters = [(round(float(ch["start"] * ch["time_base"]), 1), ch["metadata"]["title"]) for ch in c.chapters()]
    assert tmcd == ["01:00:00;00"] and chapters == [(0.0, "Start"), (0.5, "Intro"), (2.0, "Later")]

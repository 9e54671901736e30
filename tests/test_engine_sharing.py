"""A server's engines (issue 38): a bounded cache, one batch across many jobs, jobs over several devices.

Real engines on the CPU (classic, and MuseTalk with small random weights in the official layout),
real renders and files; the "devices" of the --gpus tests are the CPU named twice."""

from __future__ import annotations

import threading
import time
import weakref

import av
import numpy as np
import pytest
import soundfile as sf
import torch
from conftest import prepare_demo_avatar, speechlike
from musetalk_fakes import write_official_and_taesd
from served import Hold

from studio.core.engines import weights as models
from studio.core.settings import RenderSettings


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    h = tmp_path_factory.mktemp("sharing_home")
    prepare_demo_avatar(h)
    return h


@pytest.fixture(scope="module")
def official(tmp_path_factory):
    return write_official_and_taesd(tmp_path_factory.mktemp("official"))


@pytest.fixture
def env(home, monkeypatch):
    monkeypatch.setenv("STUDIO_HOME", str(home))
    monkeypatch.setenv("STUDIO_X264_WORKERS", "2")
    return home


@pytest.fixture
def weights(env, official):
    models.import_models(official[0], taesd=official[1])
    yield
    import shutil

    shutil.rmtree(models.models_root(), ignore_errors=True)


def _voice(path, seconds, seed):
    x = speechlike(seconds, 48_000, seed=seed)
    sf.write(path, np.stack([x, 0.7 * x], 1), 48_000, subtype="PCM_16")
    return path


def _frames(renderer) -> np.ndarray:
    return np.concatenate([f.cpu().numpy() for _, f in sorted(renderer.iter_frames(), key=lambda p: p[0])])


# --- the bounded cache ------------------------------------------------------------------------------


def test_the_cache_never_holds_more_than_its_bound_and_eviction_frees_the_networks(weights):
    from studio.core.engines.cache import engine_bytes
    from studio.service.pool import EnginePool

    pool = EnginePool(max_engines=2)
    base = RenderSettings(engine="musetalk", device="cpu")
    held, nets = [], []
    for decoder in ("taesd", "sd-vae"):
        for runtime in ("auto", "torch"):
            for precision, batch in (("fp32", 4), ("auto", 8), ("bf16", 128)):  # one engine: speed, or fp32 on a CPU
                engine, _ = pool.get(base.with_(decoder=decoder, runtime=runtime, precision=precision, batch=batch))
                engine.networks()
                assert pool.measure(engine) > 0
                if not nets or nets[-1][0] is not engine:
                    nets.append((engine, weakref.ref(engine.networks()["unet"])))
                held.append(len(pool))
                assert len(pool) <= 2
    assert max(held) == 2 and len(nets) == 4  # four keys (decoder x runtime), each loaded once
    assert pool.loaded == 4 and pool.evictions == 2
    import gc

    gc.collect()
    for engine, unet in nets[:2]:  # evicted: closed, its networks gone from memory
        assert unet() is None and engine_bytes(engine) == 0
    for _, unet in nets[2:]:
        assert unet() is not None
    assert pool.held_bytes() == sum(engine_bytes(e) for e, _ in nets[2:])
    pool.close()


def test_the_memory_bound_evicts_before_a_new_engine_loads_and_a_held_engine_stays(weights):
    from studio.service.pool import EnginePool

    pool = EnginePool(max_engines=8, max_fraction=1e-9)  # any engine fills the "device"
    base = RenderSettings(engine="musetalk", device="cpu")
    a, _ = pool.get(base, hold=True)
    a.networks()
    pool.measure(a)
    done = threading.Event()
    got = []

    def second():
        got.append(pool.get(base.with_(decoder="sd-vae"))[0])
        done.set()

    t = threading.Thread(target=second)
    t.start()
    assert not done.wait(1.5), "a held engine was evicted (or the bound ignored)"
    assert len(pool) == 1 and a.loaded
    pool.release(a)  # the render on it is done: the waiting request evicts it and loads its own
    assert done.wait(30)
    t.join()
    assert len(pool) == 1 and pool.evictions == 1 and not a.loaded and got[0] is not a
    pool.close()


def test_two_threads_asking_for_one_key_load_it_once(env):
    from studio.service.pool import EnginePool

    pool = EnginePool()
    out = []
    threads = [
        threading.Thread(target=lambda: out.append(pool.get(RenderSettings(engine="classic", device="cpu"))[0]))
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert pool.loaded == 1 and len({id(e) for e in out}) == 1
    pool.close()


def test_clients_loading_different_engines_at_once_stay_under_the_bound(env, monkeypatch):
    from studio.core.engines import selection
    from studio.service.pool import EnginePool

    select = selection.select_for

    def slow(settings):  # every load takes a while: the clients' loads overlap
        time.sleep(0.3)
        return select(settings)

    monkeypatch.setattr(selection, "select_for", slow)
    pool = EnginePool(max_engines=2)
    sizes = []
    settings = RenderSettings(engine="classic", device="cpu")

    def client(slot):
        pool.get(settings, slot=slot)
        sizes.append(len(pool))

    threads = [threading.Thread(target=client, args=(k,)) for k in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert max(sizes) <= 2 and len(pool) == 2 and pool.loaded == 5 and pool.evictions == 3
    pool.close()


# --- one batch, many jobs ---------------------------------------------------------------------------


CUDA = pytest.param(
    "cuda",
    marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")],
)


@pytest.mark.parametrize("device", ["cpu", CUDA])
@pytest.mark.parametrize("engine", ["classic", "musetalk"])
def test_jobs_sharing_batches_get_the_frames_they_get_alone(engine, device, request, tmp_path, env):
    if engine == "musetalk":
        request.getfixturevalue("weights")
    from studio.core.render.renderer import Renderer
    from studio.service.pool import EnginePool

    voices = [_voice(tmp_path / f"v{k}.wav", s, k) for k, s in enumerate((0.9, 1.5, 0.5))]
    settings = RenderSettings(engine=engine, device=device, batch=4)
    alone = [_frames(Renderer("astro", v, settings)) for v in voices]
    pool = EnginePool()
    pool.batching = True
    renderers = [pool.renderer("astro", v, settings) for v in voices]
    out: dict[int, np.ndarray] = {}
    start = threading.Barrier(len(renderers))

    def run(k):
        start.wait()
        out[k] = _frames(renderers[k])

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(renderers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    (batcher,) = pool.batchers()
    assert batcher.batches > batcher.calls  # batches of several jobs went through one engine call
    for k in range(len(voices)):
        assert out[k].shape == alone[k].shape
        diff = np.abs(out[k].astype(int) - alone[k].astype(int)).max()
        assert diff <= 1, (k, diff)  # within one grey level
    pool.close()


def _packets(path):
    with av.open(str(path)) as c:
        return [(p.stream.type, bytes(p), p.pts) for p in c.demux() if p.size]


def test_a_short_job_behind_a_long_one_finishes_first_and_every_file_is_the_one_made_alone(tmp_path, env, monkeypatch):
    from studio.service.pool import EnginePool
    from studio.service.queue import QueueService
    from studio.service.request import RenderRequest

    long_v, short_v = _voice(tmp_path / "long.wav", 4.0, 1), _voice(tmp_path / "short.wav", 0.6, 2)
    settings = RenderSettings(engine="classic", device="cpu", batch=4, encoder="x264", preset="ultrafast")

    def queue(name, jobs_per_device, batching):
        pool = EnginePool()
        pool.batching = batching
        qs = QueueService(tmp_path / f"{name}.sqlite", pool=pool, jobs_per_device=jobs_per_device)
        jobs = [
            qs.add(RenderRequest("astro", str(v), str(tmp_path / f"{name}-{v.stem}.mp4"), settings))
            for v in (long_v, short_v)
        ]
        return qs, pool, jobs

    alone, pool, _ = queue("alone", 1, False)
    assert [j.state for j in alone.run_until_empty()] == ["done", "done"]
    alone.close()
    pool.close()

    qs, pool, (long_job, short_job) = queue("shared", 2, True)
    finished: list[int] = []
    both = threading.Event()
    started: set[int] = set()
    both_started = threading.Event()

    def on_event(ev):
        if ev.kind == "progress" and ev.progress is not None and ev.progress.done > 0:
            started.add(ev.job_id)
            if len(started) == 2:
                both_started.set()
        if ev.kind == "state" and ev.job is not None and ev.job.state == "done":
            finished.append(ev.job_id)
            if len(finished) == 2:
                both.set()

    qs.subscribe(on_event)
    # both jobs hold after their first batch until both are in: the long one cannot have finished
    # before the short one started, however the threads are scheduled
    with Hold(tmp_path / "hold") as hold:
        monkeypatch.setenv("STUDIO_TEST_HOLD", str(hold.path))
        qs.start()
        assert both_started.wait(300), qs.list()
    assert both.wait(300), qs.list()
    assert finished == [short_job.id, long_job.id]  # submitted second, done first
    (batcher,) = pool.batchers()
    assert batcher.batches > batcher.calls
    qs.close()
    pool.close()
    for v in (long_v, short_v):
        assert _packets(tmp_path / f"shared-{v.stem}.mp4") == _packets(tmp_path / f"alone-{v.stem}.mp4")


def test_jobs_spread_over_the_devices_each_with_its_own_warm_engine(tmp_path, env, monkeypatch):
    from studio.service.pool import EnginePool
    from studio.service.queue import QueueService
    from studio.service.request import RenderRequest

    pool = EnginePool(max_engines=4)
    pool.batching = True
    qs = QueueService(tmp_path / "gpus.sqlite", pool=pool, devices=["cpu", "cpu"], jobs_per_device=1)
    settings = RenderSettings(engine="classic", batch=4, encoder="x264", preset="ultrafast")
    voices = [_voice(tmp_path / f"g{k}.wav", 1.2, k) for k in range(3)]
    jobs = [qs.add(RenderRequest("astro", str(v), str(tmp_path / f"g{k}.mp4"), settings)) for k, v in enumerate(voices)]
    overlap = threading.Event()

    def on_event(ev):
        if ev.kind == "progress" and len(qs.running_job_ids) == 2:
            overlap.set()

    qs.subscribe(on_event)
    with Hold(tmp_path / "hold") as hold:  # each job holds after its first batch: two run at once, however fast
        monkeypatch.setenv("STUDIO_TEST_HOLD", str(hold.path))
        qs.start()
        assert overlap.wait(300), qs.list()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and any(qs.get(j.id).state != "done" for j in jobs):
        time.sleep(0.2)
    assert [qs.get(j.id).state for j in jobs] == ["done"] * 3
    assert overlap.is_set()  # two jobs at once, one on each device
    assert sorted(k.slot for k in pool.keys()) == [0, 1]  # one warm engine per device
    assert {k.device for k in pool.keys()} == {"cpu"}
    qs.close()
    pool.close()


def test_the_warm_up_loads_the_engine_renders_the_library_once_and_leaves_no_file(env):
    from studio.api.warmup import WarmUp, parse_warm
    from studio.core.env import data_dir
    from studio.service.pool import EnginePool

    before = {p.name for p in data_dir().iterdir()}
    pool = EnginePool()
    started = []
    w = WarmUp(pool, [parse_warm("engine=classic")], ["cpu", "cpu"], then=lambda: started.append(True))
    assert not w.ready and w.status().startswith("warming up: starting")
    w.start()
    assert w.wait(300) and w.error is None and started == [True]
    assert w.rendered == ["astro", "astro"]  # once on each device
    assert sorted(k.slot for k in pool.keys()) == [0, 1] and pool.loaded == 2
    # the warm-up's voice and video are gone (its voice's AAC stays cached: the same entry every start)
    assert not [p for p in data_dir().rglob("*") if p.suffix in (".mp4", ".wav") or p.name.startswith(".warm-")]
    assert {p.name for p in data_dir().iterdir()} - before <= {"cache", "models"}  # the AAC cache, the model store
    pool.close()

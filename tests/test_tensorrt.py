"""TensorRT runtime: ONNX export parity (onnxruntime), engine keys and the cache, acceptance bounds,
the CLI without TensorRT, and the build/run path where TensorRT and a GPU exist (marked ``tensorrt``)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from musetalk_fakes import TAESD_TINY, WIDTH, write_official_models

from studio.cli import main as cli_main
from studio.core.engines import random_models as rm
from studio.core.engines import runtime_tensorrt as rtt
from studio.core.engines import tensorrt_build, weights
from studio.core.errors import StudioError

TARGET = rtt.Target("NVIDIA GeForce RTX 4090", "8.9", "10.13.0")


@pytest.fixture(scope="module")
def official(tmp_path_factory):
    """Tiny random MuseTalk weights in the official layout, TAESD inside it (resolve() finds it)."""
    folder = write_official_models(tmp_path_factory.mktemp("official"))
    rm.write_taesd(folder / "taesd", seed=0, config=TAESD_TINY)
    return folder


@pytest.fixture
def cache(tmp_path, monkeypatch):
    path = tmp_path / "engine-cache"
    monkeypatch.setenv("STUDIO_ENGINE_CACHE", str(path))
    return path


@pytest.fixture
def store(official):
    weights.import_models(official)
    return weights.resolve()


def _ort(path):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def _randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# --- ONNX export ------------------------------------------------------------------------------------


def test_unet_onnx_has_a_dynamic_batch_and_matches_pytorch_at_t0_for_batch_1_and_7(official, tmp_path):
    paths = weights.resolve(official)
    out = tensorrt_build.export_onnx("unet", paths, tmp_path / "unet.onnx")
    graph = onnx.load(str(out))
    dims = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in graph.graph.input}
    assert dims == {"latents": ["batch", 8, 32, 32], "audio": ["batch", 50, WIDTH]}
    # the reference is the plain diffusers UNet called with timestep 0: the folded embedding is exact
    unet = weights.load_module("unet", paths.unet, paths.weight_file(paths.unet), "cpu", torch.float32)
    session = _ort(out)
    for b in (1, 7):
        lat, audio = _randn(b, 8, 32, 32, seed=b), _randn(b, 50, WIDTH, seed=10 + b)
        with torch.inference_mode():
            ref = unet(lat, 0, encoder_hidden_states=audio, return_dict=False)[0].numpy()
        got = session.run(None, {"latents": lat.numpy(), "audio": audio.numpy()})[0]
        assert got.shape == (b, 4, 32, 32)
        assert np.abs(got - ref).max() < 1e-4 * max(1.0, np.abs(ref).max())
        assert ref.std() > 0.01  # the output really depends on the inputs


def test_the_real_unet_is_exported_at_32x32_latents_and_50_whisper_tokens():
    from diffusers import UNet2DConditionModel

    with torch.device("meta"):  # the real architecture, no memory
        unet = UNet2DConditionModel.from_config(rm.MUSETALK_UNET_CONFIG)
    inputs = tensorrt_build.example_inputs("unet", tensorrt_build.graphs()["unet"](unet, 50), batch=3)
    assert {k: tuple(v.shape) for k, v in inputs.items()} == {"latents": (3, 8, 32, 32), "audio": (3, 50, 384)}


@pytest.mark.parametrize("component", ["taesd", "sd-vae"])
def test_decoder_onnx_maps_latents_to_minus1_1_images_like_the_engine(official, tmp_path, component):
    paths = weights.resolve(official)
    out = tensorrt_build.export_onnx(component, paths, tmp_path / f"{component}.onnx")
    kind, folder = ("taesd", paths.taesd) if component == "taesd" else ("vae", paths.vae)
    net = weights.load_module(kind, folder, paths.weight_file(folder), "cpu", torch.float32)
    divide = 1.0 if component == "taesd" else 0.18215  # the SD-VAE decodes latents / 0.18215
    session = _ort(out)
    for b in (1, 7):
        lat = _randn(b, 4, 32, 32, seed=b)
        with torch.inference_mode():
            ref = net.decode(lat / divide, return_dict=False)[0].numpy()
        got = session.run(None, {"latents": lat.numpy()})[0]
        assert got.shape == (b, 3, 256, 256)
        assert np.abs(got - ref).max() < 1e-4
    if component == "sd-vae":  # without the division the image is clearly different
        with torch.inference_mode():
            undivided = net.decode(lat, return_dict=False)[0].numpy()
        assert np.abs(undivided - got).max() > 0.01


def test_large_graphs_keep_their_weights_in_one_data_file_beside_the_onnx(official, tmp_path):
    paths = weights.resolve(official)
    out = tensorrt_build.export_onnx("taesd", paths, tmp_path / "t.onnx", external_data_bytes=0)
    data = tmp_path / "t.onnx.data"
    module = tensorrt_build.reference_module("taesd", paths)
    nbytes = sum(t.numel() * 4 for t in module.net.decoder.state_dict().values())  # the graph is the decoder
    assert data.stat().st_size >= 0.9 * nbytes and out.stat().st_size < nbytes / 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.onnx", "t.onnx.data"]  # no per-tensor litter
    lat = _randn(3, 4, 32, 32)
    with torch.inference_mode():
        ref = module(lat).numpy()
    assert np.abs(_ort(out).run(None, {"latents": lat.numpy()})[0] - ref).max() < 1e-4


# --- profiles and cache keys ------------------------------------------------------------------------


def test_profiles_parse_and_the_checked_in_default_is_1_32_64():
    assert rtt.load_profile("1, 8,16") == rtt.Profile(1, 8, 16)
    assert rtt.load_profile() == rtt.Profile(1, 32, 64) == rtt.Profile()
    assert rtt.load_profile("small-gpu").max == 16
    with pytest.raises(StudioError, match="min <= opt <= max"):
        rtt.load_profile("4,2,1")
    with pytest.raises(StudioError, match="unknown engine profile 'huge'"):
        rtt.load_profile("huge")


def test_changing_any_part_of_the_key_changes_the_engine_name():
    base = rtt.EngineKey(
        "unet", "musetalkV15", "a" * 64, "fp16", rtt.Profile(), TARGET.gpu, TARGET.capability, TARGET.tensorrt
    )
    variants = [
        dataclasses.replace(base, **{k: v})
        for k, v in (
            ("component", "taesd"),
            ("model", "musetalk"),
            ("model_sha256", "b" * 64),
            ("precision", "fp8"),
            ("profile", rtt.Profile(1, 16, 64)),
            ("gpu", "NVIDIA H200"),
            ("capability", "9.0"),
            ("tensorrt", "11.0.0"),
            ("export", rtt.EXPORT_FORMAT + 1),
        )
    ]
    names = [base.name] + [v.name for v in variants]
    assert len(set(names)) == len(names)
    assert base.name == (
        "unet-musetalkV15-aaaaaaaaaaaaaaaa-fp16-b1-32-64-nvidia-geforce-rtx-4090-sm89-trt10.13.0-x1.plan"
    )
    assert rtt.EngineKey.from_json(json.loads(json.dumps(base.to_json()))) == base


def test_the_model_hash_comes_from_the_store_manifest_and_follows_reimports(store, tmp_path):
    key = rtt.engine_key("taesd", "fp16", rtt.Profile(), TARGET, store)
    assert key.model == "taesd" and len(key.model_sha256) == 64
    assert rtt.engine_key("taesd", "fp16", rtt.Profile(), TARGET, weights.resolve()) == key  # deterministic
    rm.write_taesd(tmp_path / "taesd2", seed=5, config=TAESD_TINY)  # other weights, same architecture
    weights.import_models(taesd=tmp_path / "taesd2")
    new = rtt.engine_key("taesd", "fp16", rtt.Profile(), TARGET, weights.resolve())
    assert new.model_sha256 != key.model_sha256 and new.name != key.name
    unet = rtt.engine_key("unet", "fp16", rtt.Profile(), TARGET, weights.resolve())
    assert unet.model == "musetalkV15" and unet.model_sha256 != new.model_sha256


def _fake_engine(cache, store, component="taesd", target=TARGET, size=1000):
    """A plan file + sidecar as build() writes them (the plan's bytes are not a real engine)."""
    key = rtt.engine_key(component, "fp16", rtt.Profile(), target, store)
    cache.mkdir(parents=True, exist_ok=True)
    (cache / key.name).write_bytes(b"\0" * size)
    rtt.write_sidecar(cache / key.name, key, seconds=1.0, validation="test")
    return cache / key.name


def test_list_reports_valid_and_stale_engines_with_reasons(cache, store, tmp_path):
    assert rtt.list_engines(target=TARGET) == []
    good = _fake_engine(cache, store, "unet")
    other_gpu = _fake_engine(cache, store, "sd-vae", rtt.Target("NVIDIA H200", "9.0", "10.13.0"))
    truncated = _fake_engine(cache, store, "taesd")
    truncated.write_bytes(b"\0" * 10)
    (cache / "orphan.plan").write_bytes(b"x")
    rows = {r["file"]: r for r in rtt.list_engines(target=TARGET)}
    assert rows[good.name]["status"] == "valid" and rows[good.name]["reasons"] == []
    assert rows[other_gpu.name]["status"] == "stale"
    assert rows[other_gpu.name]["reasons"] == [
        "built for GPU NVIDIA H200, this machine has NVIDIA GeForce RTX 4090",
        "built for compute capability 9.0, this machine has 8.9",
    ]
    assert rows[truncated.name]["status"] == "stale" and "truncated" in rows[truncated.name]["reasons"][0]
    assert rows["orphan.plan"]["status"] == "stale" and "no readable sidecar" in rows["orphan.plan"]["reasons"][0]
    # new weights for the UNet: its engine goes stale, and says why
    rm.write_unet(tmp_path / "v15", "unet.pth", rm.UNET_TINY, seed=9)
    (tmp_path / "src").mkdir()
    (tmp_path / "v15").rename(tmp_path / "src" / "musetalkV15")
    weights.import_models(tmp_path / "src")
    row = {r["file"]: r for r in rtt.list_engines(target=TARGET)}[good.name]
    assert row["status"] == "stale" and "the unet weights changed since the build" in row["reasons"][0]


def test_without_tensorrt_list_cannot_check_the_gpu_and_says_so(cache, store):
    try:
        rtt.current_target()
        pytest.skip("TensorRT and a GPU are here")
    except StudioError:
        pass
    plan = _fake_engine(cache, store)
    (row,) = rtt.list_engines()
    assert row["file"] == plan.name and row["status"] == "unchecked"
    assert row["reasons"][0].startswith("GPU and TensorRT version not checked here: TensorRT")


def test_clean_removes_stale_engines_and_all_removes_everything(cache, store):
    keep = _fake_engine(cache, store, "unet")
    stale = _fake_engine(cache, store, "taesd", rtt.Target("NVIDIA A10", "8.6", "10.0.1"))
    (cache / "timing-x.cache").write_bytes(b"t")
    (cache / "onnx").mkdir()
    (cache / "onnx" / "left.onnx").write_bytes(b"o")
    removed = rtt.clean(target=TARGET)
    assert sorted(removed) == sorted([stale.name, stale.with_suffix(".json").name, "left.onnx"])
    assert keep.is_file() and not stale.exists() and not (cache / "onnx").exists()
    assert sorted(rtt.clean(everything=True, target=TARGET)) == sorted(
        [keep.name, keep.with_suffix(".json").name, "timing-x.cache"]
    )
    assert list(cache.iterdir()) == []


# --- acceptance on recorded outputs ------------------------------------------------------------------


@pytest.fixture(scope="module")
def recorded(official):
    """The tiny UNet's output in fp32, with FP8 (E4M3, per-tensor scale) Linear weights and inputs as
    ModelOpt's Q/DQ computes them, and as fp16: the arrays the build compares (recorded here, not
    checked in as binaries)."""

    def fp8(x):
        scale = x.abs().max() / 448.0  # E4M3's largest finite value
        return (x / scale).to(torch.float8_e4m3fn).float() * scale

    paths = weights.resolve(official)
    module = tensorrt_build.reference_module("unet", paths)
    inputs = tensorrt_build.example_inputs("unet", module, batch=4, seed=3)
    with torch.inference_mode():
        ref = module(*inputs.values()).numpy()
        for m in module.modules():
            if isinstance(m, torch.nn.Linear):
                m.weight.copy_(fp8(m.weight))
                m.register_forward_pre_hook(lambda _m, args: (fp8(args[0]),))
        q8 = module(*inputs.values()).numpy()
    fp16 = ref.astype(np.float16).astype(np.float32)
    return ref, q8, fp16


def test_fp8_and_fp16_outputs_are_accepted_with_their_figures(recorded):
    ref, fp8, fp16 = recorded
    assert 0 < np.abs(fp8 - ref).max()  # the quantization really changed the output
    v = rtt.compare(ref, fp8, rtt.FP8_BOUND)
    assert (
        v.ok and not rtt.compare(ref, fp8, rtt.Bound(min_psnr=v.psnr + 1, max_abs=1)).ok
    )  # a real margin and v.psnr >= rtt.FP8_BOUND.min_psnr and "PSNR" in v.reason
    v16 = rtt.compare(ref, fp16, rtt.LOAD_BOUND)
    assert v16.ok and v16.psnr > 60 and v16.max_abs < 1e-3


def test_grey_noisy_broken_or_misshapen_outputs_are_rejected_with_a_reason(recorded):
    ref = recorded[0]
    rng = np.random.default_rng(0)
    grey = np.full_like(ref, ref.mean()) + rng.normal(0, 0.01 * ref.std(), ref.shape)
    v = rtt.compare(ref, grey, rtt.FP8_BOUND)
    assert not v.ok and "grey" in v.reason and v.std_ratio < 0.1
    noisy = ref + rng.normal(0, 0.3 * ref.std(), ref.shape)
    v = rtt.compare(ref, noisy, rtt.FP8_BOUND)
    assert not v.ok and "below" in v.reason and v.psnr < rtt.FP8_BOUND.min_psnr
    spike = ref.copy()
    spike.flat[17] += 0.6 * (ref.max() - ref.min())  # one wild value: fine PSNR, bad max error
    v = rtt.compare(ref, spike, rtt.LOAD_BOUND)
    assert not v.ok and "max error" in v.reason and v.psnr > rtt.LOAD_BOUND.min_psnr
    nan = ref.copy()
    nan[0, 0, 0, :3] = np.nan
    assert rtt.compare(ref, nan, rtt.FP8_BOUND).reason.startswith("3 non-finite values")
    assert "shape" in rtt.compare(ref, ref[:2], rtt.FP8_BOUND).reason


# --- CLI and fallback without TensorRT ---------------------------------------------------------------


def _no_tensorrt():
    try:
        rtt.require_tensorrt()
    except StudioError:
        return True
    return False


@pytest.mark.skipif(not _no_tensorrt(), reason="TensorRT is importable here")
def test_build_without_tensorrt_exits_2_with_one_line_saying_what_to_install(cache, capsys):
    assert cli_main(["engines", "build", "--precision", "fp16", "--profile", "1,32,64"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1
    assert err.startswith("studio: error: TensorRT cannot be imported") and "pip install" in err
    assert not cache.exists() or list(cache.iterdir()) == []  # nothing exported or written


def test_cli_list_on_an_empty_and_a_populated_cache(cache, store, capsys):
    assert cli_main(["engines", "list"]) == 0
    assert "no engines built" in capsys.readouterr().out
    try:  # the CLI checks against this machine's GPU where it can
        here = rtt.current_target()
    except StudioError:
        here = TARGET
    plan = _fake_engine(cache, store, "unet", here)
    stale = _fake_engine(cache, store, "taesd", here)
    stale.write_bytes(b"half a plan")
    assert cli_main(["engines", "list", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = {r["file"]: r for r in data["engines"]}
    assert data["cache"] == str(cache) and set(rows) == {plan.name, stale.name}
    assert rows[stale.name]["status"] == "stale" and "truncated" in rows[stale.name]["reasons"][0]
    assert rows[plan.name]["status"] in ("valid", "unchecked") and rows[plan.name]["precision"] == "fp16"
    assert cli_main(["engines", "clean", "--json"]) == 0
    assert set(json.loads(capsys.readouterr().out)["removed"]) == {stale.name, stale.with_suffix(".json").name}


def test_on_cpu_musetalk_runs_on_pytorch_and_says_why(store):
    from studio.core.engines.musetalk import MuseTalkEngine
    from studio.core.engines.selection import select_engine

    choice = select_engine("auto", device="cpu")
    assert choice.engine.name == "musetalk" and "PyTorch runtime (TensorRT needs a CUDA GPU)" in choice.reason
    choice.engine.networks()
    d = choice.engine.describe()
    assert d["runtime"] == "torch" and d["runtime_reason"].startswith("PyTorch runtime: TensorRT needs a CUDA GPU")
    with pytest.raises(StudioError, match="needs a CUDA GPU"):
        MuseTalkEngine(device="cpu", runtime="tensorrt")


# --- the build and run path (TensorRT + a CUDA GPU) --------------------------------------------------


@pytest.mark.tensorrt
@pytest.mark.gpu
def test_tiny_engines_build_validate_and_replace_pytorch_in_the_engine(cache, store):
    pytest.importorskip("tensorrt")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from musetalk_fakes import FakeAvatar

    from studio.core.engines.musetalk import MuseTalkEngine

    results = tensorrt_build.build(["unet", "taesd", "sd-vae"], "fp16", rtt.Profile(1, 4, 8))
    assert [r["status"] for r in results] == ["built"] * 3, results
    assert {r["status"] for r in rtt.list_engines()} == {"valid"}
    assert [r["status"] for r in tensorrt_build.build(["unet"], "fp16", rtt.Profile(1, 4, 8))] == ["cached"]
    faces = {}
    for runtime in ("torch", "tensorrt"):
        eng = MuseTalkEngine(device="cuda", decoder="taesd", runtime=runtime, cuda_graphs=False)
        prepared = eng.prepare(FakeAvatar(cache / "avatar", n=3))
        eng.bind(_features(eng))
        faces[runtime] = eng.generate(prepared, [0, 1, 2, 0, 1], [0, 1, 2, 3, 4]).cpu().numpy()
        assert eng.describe()["runtime"] == runtime
    diff = np.abs(faces["torch"].astype(int) - faces["tensorrt"].astype(int))
    assert diff.mean() < 2 and faces["tensorrt"].std() > 5


def _features(engine):
    import soundfile as sf
    from conftest import speechlike

    from studio.core.constants import SAMPLE_RATE
    from studio.core.media.audio import load

    path = rtt.cache_dir() / "v.wav"
    sf.write(path, speechlike(0.4, SAMPLE_RATE), SAMPLE_RATE, subtype="FLOAT")
    return engine.audio_features(load(path))

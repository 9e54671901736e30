"""The MuseTalk engine on tiny configs of the real classes: features windowing, latents, generation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import soundfile as sf
import torch
from conftest import speechlike
from musetalk_fakes import WIDTH, FakeAvatar, write_official_and_taesd

from studio.cli import main as cli_main
from studio.core.constants import FPS, SAMPLE_RATE
from studio.core.engines import runtime_torch as rt
from studio.core.engines import weights
from studio.core.engines.whisper_features import (
    PAD_LEFT,
    WINDOW,
    WhisperFeatures,
    positional_encoding,
    window_steps,
)
from studio.core.media.audio import load


@pytest.fixture(scope="module")
def official(tmp_path_factory):
    return write_official_and_taesd(tmp_path_factory.mktemp("official"))


@pytest.fixture
def store(official):
    """The fake weights imported into this test's data folder."""
    weights.import_models(official[0], taesd=official[1])
    return weights.models_root()


@pytest.fixture(scope="module")
def whisper(official):
    return WhisperFeatures(official[0] / "whisper")


def _wave(tmp_path, seconds: float, name: str = "v.wav"):
    path = tmp_path / name
    sf.write(path, speechlike(seconds, SAMPLE_RATE), SAMPLE_RATE, subtype="FLOAT")
    return load(path)


# --- audio features --------------------------------------------------------------------------------


def test_window_steps_are_2f_minus_4_to_2f_plus_5():
    assert window_steps(0) == [-4, -3, -2, -1, 0, 1, 2, 3, 4, 5]
    assert window_steps(7) == list(range(10, 20))


def test_positional_encoding_is_the_transformer_sinusoid():
    pe = positional_encoding(50, 384).numpy()
    p, i = 13, 7
    assert pe[p, 2 * i] == pytest.approx(math.sin(p / 10000 ** (2 * i / 384)), abs=1e-6)
    assert pe[p, 2 * i + 1] == pytest.approx(math.cos(p / 10000 ** (2 * i / 384)), abs=1e-6)
    assert np.all(pe[0, 0::2] == 0) and np.all(pe[0, 1::2] == 1)


def test_features_follow_the_window_exactly_on_our_ceil_grid(whisper, tmp_path):
    wave = _wave(tmp_path, 1.03)  # 16480 samples: T = ceil(25.75) = 26, whisper steps floor(51.5) = 51
    assert wave.frames == 26
    states = whisper.hidden_states(wave.samples).numpy()
    assert states.shape == (51, 5, WIDTH)
    feats = whisper(wave)
    arr = feats.array()
    assert len(feats) == 26 and arr.shape == (26, 50, WIDTH) and arr.dtype == np.float32
    pe = positional_encoding(50, WIDTH).numpy()
    expected = np.zeros_like(arr)
    for f in range(26):
        for t, step in enumerate(range(2 * f - 4, 2 * f + 6)):  # hand-computed window
            for layer in range(5):
                if 0 <= step < 51:
                    expected[f, 5 * t + layer] = states[step, layer]  # token k = 5 t + l
    np.testing.assert_allclose(arr, expected + pe, atol=1e-6)
    assert np.abs(arr[25, 40:] - pe[40:]).max() < 1e-6  # past the clip: zero steps, PE only
    np.testing.assert_allclose(feats.window([3, 25]).numpy(), arr[[3, 25]], atol=1e-6)


def test_hidden_states_are_the_stacked_encoder_states_last_one_layer_normed(whisper, tmp_path):
    wave = _wave(tmp_path, 2.0)
    states = whisper.hidden_states(wave.samples)
    assert states.shape == (100, 5, WIDTH)  # floor(2.0 * 50) steps, embedding + 4 layers
    enc = whisper.encoder
    mel = whisper.log_mel([wave.samples])
    layer_out = []
    hooks = [
        m.register_forward_hook(lambda m, i, o: layer_out.append(o[0] if isinstance(o, tuple) else o))
        for m in enc.layers
    ]
    with torch.no_grad():
        enc(mel)
        emb = torch.nn.functional.gelu(enc.conv2(torch.nn.functional.gelu(enc.conv1(mel))))
        emb = emb.permute(0, 2, 1) + enc.embed_positions.weight
        last = enc.layer_norm(layer_out[3])
    for h in hooks:
        h.remove()
    torch.testing.assert_close(states[:, 0], emb[0, :100], atol=1e-5, rtol=1e-5)
    for layer in range(3):
        torch.testing.assert_close(states[:, layer + 1], layer_out[layer][0, :100], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(states[:, 4], last[0, :100], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(states[:, 4], layer_out[3][0, :100], atol=1e-3)  # normed, not raw


def test_long_audio_is_cut_in_30_second_pieces(whisper, tmp_path):
    wave = _wave(tmp_path, 31.0)
    states = whisper.hidden_states(wave.samples)
    assert states.shape[0] == 1550
    second = whisper.hidden_states(wave.samples[30 * SAMPLE_RATE :])
    torch.testing.assert_close(states[1500:], second, atol=1e-5, rtol=1e-5)
    assert len(whisper(wave)) == wave.frames == 31 * FPS


def test_features_cli_writes_the_t_50_width_array(official, tmp_path, whisper):
    wave = _wave(tmp_path, 0.97)
    out = tmp_path / "f.npy"
    assert (
        cli_main(["features", str(tmp_path / "v.wav"), "--whisper", str(official[0] / "whisper"), "-o", str(out)]) == 0
    )
    arr = np.load(out)
    assert arr.shape == (math.ceil(0.97 * FPS), 50, WIDTH) == (25, 50, WIDTH)
    np.testing.assert_allclose(arr, whisper(wave).array(), atol=1e-6)
    assert cli_main(["features", str(tmp_path / "v.wav"), "--whisper", str(tmp_path), "-o", str(out)]) == 2


# --- the runtime --------------------------------------------------------------------------------------


def test_runtime_cpu_choices():
    assert rt.resolve_dtype(torch.device("cpu"), "auto") == torch.float32
    assert rt.resolve_dtype(torch.device("cpu"), "fp16") == torch.float32
    assert [rt.bucket_for(n) for n in (1, 3, 8, 9, 64)] == [1, 4, 8, 16, 64]
    assert rt.vram_batch(1 << 20, "cpu") == rt.CPU_BATCH
    calls = []
    run = rt.GraphRunner(lambda x: calls.append(len(x)) or x * 2, torch.device("cpu"))
    assert not run.enabled and torch.equal(run(torch.ones(3)), torch.full((3,), 2.0)) and calls == [3]
    big = run(torch.arange(130.0))  # larger than the largest bucket: split into pieces
    assert torch.equal(big, torch.arange(130.0) * 2) and calls[1:] == [64, 64, 2]


def test_folded_time_embedding_gives_the_same_unet_output(official):
    unet = weights.load_module("unet", official[0] / "musetalkV15", official[0] / "musetalkV15" / "unet.pth")
    g = torch.Generator().manual_seed(0)
    lat, audio = torch.randn(2, 8, 32, 32, generator=g), torch.randn(2, 50, WIDTH, generator=g)
    with torch.no_grad():
        ref = unet(lat, torch.tensor([0]), encoder_hidden_states=audio).sample
        rt.fold_time_embedding(unet)
        folded = unet(lat, torch.tensor([0]), encoder_hidden_states=audio).sample
    assert isinstance(unet.time_embedding, rt.ConstantEmbedding)
    torch.testing.assert_close(folded, ref, atol=1e-5, rtol=1e-5)
    assert ref.shape == (2, 4, 32, 32) and ref.abs().mean() > 0
    half = weights.load_module(
        "unet", official[0] / "musetalkV15", official[0] / "musetalkV15" / "unet.pth", dtype=torch.bfloat16
    )
    want = half.time_embedding(half.time_proj(torch.zeros(1)).to(torch.bfloat16))
    rt.fold_time_embedding(half)
    assert half.time_embedding.emb.dtype == torch.bfloat16
    torch.testing.assert_close(half.time_embedding.emb, want, atol=0.02, rtol=0.02)


# --- the engine ---------------------------------------------------------------------------------------


def test_latents_are_masked_and_reference_means_scaled_and_cached(store, tmp_path):
    from studio.core.engines.musetalk import MuseTalkEngine

    avatar = FakeAvatar(tmp_path, n=3)
    engine = MuseTalkEngine(device="cpu")
    prepared = engine.prepare(avatar)
    assert prepared.latents.shape == (3, 8, 32, 32) and not prepared.from_cache
    vae_sha = weights.list_models()["sd-vae"]["files"]["diffusion_pytorch_model.bin"]["sha256"]
    assert prepared.cache_file == avatar.engine_dir(f"musetalk-{vae_sha[:16]}") / "latents.npy"
    vae = engine.networks()["vae"]
    x = torch.from_numpy(avatar.crops).permute(0, 3, 1, 2).float() / 255
    masked = x.clone()
    masked[:, :, 128:] = 0  # rows 128..255 black in [0,1], i.e. -1 after the [-1,1] mapping
    with torch.no_grad():
        want = torch.cat([vae.encode(masked * 2 - 1).latent_dist.mean, vae.encode(x * 2 - 1).latent_dist.mean], 1)
    torch.testing.assert_close(prepared.latents, want * 0.18215, atol=1e-6, rtol=1e-5)
    assert not torch.allclose(prepared.latents[:, :4], prepared.latents[:, 4:], atol=1e-2)
    again = MuseTalkEngine(device="cpu").prepare(avatar)
    assert again.from_cache and torch.equal(again.latents, prepared.latents)


def test_generate_returns_uint8_faces_from_unet_and_taesd(store, tmp_path):
    from studio.core.engines.musetalk import MuseTalkEngine

    engine = MuseTalkEngine(device="cpu", decoder="taesd")
    prepared = engine.prepare(FakeAvatar(tmp_path, n=2))
    feats = engine.audio_features(_wave(tmp_path, 0.6))
    engine.bind(feats)
    faces = engine.generate(prepared, [0, 1, 1], [0, 7, 14])
    assert faces.shape == (3, 256, 256, 3) and faces.dtype == torch.uint8 and faces.device.type == "cpu"
    assert faces.float().std() > 1  # not a flat image
    nets = engine.networks()
    with torch.no_grad():  # the same maths by hand
        pred = nets["unet"](prepared.latents[[1]], 0, encoder_hidden_states=feats.window([7])).sample
        img = nets["taesd"].decode(pred).sample
    want = ((img / 2 + 0.5).clamp(0, 1) * 255).round().to(torch.uint8).permute(0, 2, 3, 1)
    # a batch of 3 and a batch of 1 take different CPU kernels (diffusers 0.3x+ attention, oneDNN
    # blocking): the same maths to one grey level, not bit for bit
    assert (faces[1:2].int() - want.int()).abs().max() <= 1
    alone = engine.generate(prepared, [1], [7])
    assert (alone.int() - faces[1:2].int()).abs().max() <= 1  # batch-independent, to one grey level
    other = engine.generate(prepared, [1], [0])
    assert not torch.equal(other, faces[1:2])  # the audio changes the face
    with pytest.raises(IndexError):
        engine.generate(prepared, [2], [0])


def test_sd_vae_decoder_divides_by_the_scaling_factor(store, tmp_path):
    from studio.core.engines.musetalk import MuseTalkEngine

    engine = MuseTalkEngine(device="cpu", decoder="sd-vae")
    prepared = engine.prepare(FakeAvatar(tmp_path, n=1))
    engine.bind(engine.audio_features(_wave(tmp_path, 0.2)))
    faces = engine.generate(prepared, [0], [2])
    nets = engine.networks()
    with torch.no_grad():
        pred = nets["unet"](prepared.latents, 0, encoder_hidden_states=engine.features.window([2])).sample
        img = nets["vae"].decode(pred / 0.18215).sample
    want = ((img / 2 + 0.5).clamp(0, 1) * 255).round().to(torch.uint8).permute(0, 2, 3, 1)
    assert faces.shape == (1, 256, 256, 3) and torch.equal(faces, want)
    assert engine.describe()["decoder"] == "sd-vae"


def test_select_engine_musetalk_when_imported_and_a_clear_error_otherwise(store, studio_home):
    from studio.core.engines.selection import auto_engine, engine_status, select_engine
    from studio.core.errors import StudioError

    status = engine_status()
    assert str(status["musetalk"]) == "ready: v1.5 UNet, sd-vae, whisper-tiny, taesd" and status["musetalk"].ready
    assert auto_engine(status) == "musetalk"
    choice = select_engine("auto", device="cpu", decoder="taesd")
    assert choice.engine.name == "musetalk" and "weights are imported" in choice.reason
    (studio_home / "models" / "manifest.json").unlink()
    with pytest.raises(StudioError, match="studio models import DIR"):
        select_engine("musetalk", device="cpu")


def test_the_compile_setting_reaches_the_engine_the_pool_key_and_the_command_line(store, studio_home):
    """``RenderSettings.compile`` (the window's checkbox, ``--compile``, a job's settings) makes a
    compiling MuseTalk engine, warm apart from the plain one; the classic engine ignores it."""
    from studio.cli import build_parser
    from studio.cli.render import settings_from_args as _settings
    from studio.core.render.renderer import Renderer
    from studio.core.settings import RenderSettings
    from studio.core.settings import from_dict as settings_from_dict
    from studio.service.pool import EnginePool

    on = RenderSettings(engine="musetalk", device="cpu", compile=True)
    assert Renderer("a", "b.wav", on).engine.compile is True
    assert Renderer("a", "b.wav", on.with_(compile=False)).engine.compile is False
    pool = EnginePool()
    assert pool.key(on) != pool.key(on.with_(compile=False)) and pool.key(on).compile
    assert not pool.key(on.with_(engine="classic")).compile  # one warm classic engine either way
    assert settings_from_dict({"engine": "musetalk", "compile": 1}).compile is True
    args = build_parser().parse_args(["render", "--avatar", "a", "--audio", "b.wav", "-o", "o.mp4", "--compile"])
    assert _settings(args).compile is True
    args = build_parser().parse_args(["render", "--avatar", "a", "--audio", "b.wav", "-o", "o.mp4"])
    assert _settings(args).compile is False


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("decoder", ["taesd", "sd-vae"])
def test_fp16_faces_match_fp32_on_cuda(store, tmp_path, decoder):
    from studio.core.engines.musetalk import MuseTalkEngine

    avatar = FakeAvatar(tmp_path, n=4)
    wave = _wave(tmp_path, 1.0)
    faces = {}
    for precision in ("fp32", "fp16"):
        engine = MuseTalkEngine(device="cuda", precision=precision, decoder=decoder)
        prepared = engine.prepare(avatar)
        engine.bind(engine.audio_features(wave))
        faces[precision] = engine.generate(prepared, [0, 1, 2, 3, 0], [0, 5, 10, 20, 24]).float()
        engine.close()
    diff = (faces["fp16"] - faces["fp32"]).abs()
    assert diff.mean() < 2.0 and diff.max() < 40, (diff.mean(), diff.max())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_graph_buckets_match_eager_on_cuda(store, tmp_path):
    from studio.core.engines.musetalk import MuseTalkEngine

    avatar = FakeAvatar(tmp_path, n=3)
    wave = _wave(tmp_path, 3.0)  # 75 frames: room for the batch of 70
    out = {}
    for graphs in (False, True):
        engine = MuseTalkEngine(device="cuda", precision="fp32", cuda_graphs=graphs, batch=8)
        prepared = engine.prepare(avatar)
        engine.bind(engine.audio_features(wave))
        out[graphs] = [
            engine.generate(prepared, [i % 3 for i in range(n)], list(range(n))).cpu() for n in (1, 3, 8, 70)
        ]
        if graphs:  # a bucket is captured on its second use: run them again, graphed this time
            again = [engine.generate(prepared, [i % 3 for i in range(n)], list(range(n))).cpu() for n in (1, 3, 8, 70)]
            assert all((a.int() - b.int()).abs().max() <= 1 for a, b in zip(out[graphs], again))
            out[graphs] = again
        if graphs:
            captured = engine.networks()["run"].captured()
            assert set(captured) >= {1, 4, 8, 64}  # padded up to buckets
            assert all(g is not False for g in captured.values()), "a capture failed (the bucket ran eagerly)"
        engine.close()
    for eager, graphed in zip(out[False], out[True]):
        assert eager.shape == graphed.shape
        assert (eager.int() - graphed.int()).abs().max() <= 1


def test_pad_left_and_window_constants_are_the_spec():
    assert (PAD_LEFT, WINDOW) == (4, 10)


def test_render_with_musetalk_on_cpu_and_frame_at_matches(store, tmp_path):
    from conftest import DEMO_AVATAR

    from studio.core.avatars import library as avatar_mod
    from studio.core.render.plan import frame_index
    from studio.core.render.renderer import Renderer
    from studio.core.settings import RenderSettings

    av = avatar_mod.prepare("astro", DEMO_AVATAR)
    voice = tmp_path / "voice.wav"
    sf.write(voice, speechlike(0.4, SAMPLE_RATE), SAMPLE_RATE, subtype="PCM_16")
    settings = RenderSettings(engine="musetalk", device="cpu", batch=4, encoder="x264")
    r = Renderer(av, voice, settings)
    full = np.concatenate([f.numpy() for _, f in sorted(r.iter_frames(), key=lambda p: p[0])])
    assert full.shape[0] == 10 and r.engine.name == "musetalk"
    assert np.abs(full.astype(int) - av.frames[0].astype(int)).max() > 0  # the generated mouth is pasted
    scrub = Renderer(av, voice, settings, engine=r.engine)  # the warm engine, as the GUI reuses it
    for t in (0.0, 0.13, 0.39):
        assert np.array_equal(scrub.frame_at(t), full[frame_index(t)]), t
    out = tmp_path / "out.mp4"
    progress = list(scrub.run(out))
    assert progress[-1].finished and scrub.result.engine == "musetalk" and scrub.result.frames == 10
    assert out.stat().st_size > 0

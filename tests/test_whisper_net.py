"""Our torch whisper (log-mel + encoder) against transformers' WhisperFeatureExtractor and WhisperEncoder.

transformers is the reference here only; the studio code under test never imports it. Real parts:
weight files written by ``random_models.write_whisper`` (tiny and the real whisper-tiny sizes),
real audio (a chirp with noise, speech-like buzz) and a real subprocess for the import check.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf
import torch
from conftest import ROOT, speechlike

from studio.core.constants import SAMPLE_RATE
from studio.core.engines import random_models as rm
from studio.core.engines import weights
from studio.core.engines import whisper_features as wf
from studio.core.engines.whisper_net import WhisperEncoderNet, encoder_config, log_mel, mel_filters
from studio.core.errors import ModelError
from studio.core.media.audio import load

transformers = pytest.importorskip("transformers")
from transformers import WhisperConfig, WhisperFeatureExtractor  # noqa: E402
from transformers.models.whisper.modeling_whisper import WhisperEncoder  # noqa: E402


def chirp(seconds: float, seed: int = 0) -> np.ndarray:
    """A 100 Hz -> 7 kHz sweep with noise and a loudness wobble: energy in every mel band."""
    n = int(round(seconds * SAMPLE_RATE))
    t = np.arange(n) / SAMPLE_RATE
    f0, f1 = 100.0, 7000.0
    phase = 2 * np.pi * (f0 * t + (f1 - f0) * t**2 / (2 * max(seconds, 1e-3)))
    env = 0.5 + 0.4 * np.sin(2 * np.pi * 3 * t)
    noise = 0.05 * np.random.default_rng(seed).standard_normal(n)
    return (0.3 * env * np.sin(phase) + noise).astype(np.float32)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("whisper")
    rm.write_whisper(root / "tiny", seed=3, config=rm.WHISPER_TINY)
    rm.write_whisper(root / "real", seed=4)  # the real whisper-tiny sizes (d_model 384, 4 layers)
    return {"tiny": root / "tiny", "real": root / "real"}


def hf_encoder(folder) -> WhisperEncoder:
    """transformers' encoder with the folder's weights (the reference)."""
    cfg = json.loads((folder / "config.json").read_text())
    enc = WhisperEncoder(WhisperConfig.from_dict(cfg))
    state = weights.normalize_keys("whisper", weights.read_state_dict(folder / "pytorch_model.bin"))
    enc.load_state_dict(state, strict=True)
    return enc.eval()


def hf_states(enc, mel) -> list[torch.Tensor]:
    with torch.inference_mode():
        res = enc(mel, output_hidden_states=True)
    return list(res.hidden_states[:-1]) + [res.last_hidden_state]


def old_features(folder, samples: np.ndarray, frames: int, batch: int = 8):
    """The transformers-based WhisperFeatures of before (extractor + HF encoder + stacking/padding)."""
    extractor = WhisperFeatureExtractor.from_pretrained(str(folder), local_files_only=True)
    enc = hf_encoder(folder)
    layers, width = enc.config.encoder_layers + 1, enc.config.d_model
    keep = len(samples) // wf.SAMPLES_PER_STEP
    pieces = [samples[i : i + wf.SEGMENT_SAMPLES] for i in range(0, max(len(samples), 1), wf.SEGMENT_SAMPLES)]
    out = []
    for i in range(0, len(pieces), batch):
        mel = extractor(pieces[i : i + batch], sampling_rate=SAMPLE_RATE, return_tensors="pt").input_features
        out.append(torch.stack(hf_states(enc, mel), dim=2).reshape(-1, layers, width))
    states = torch.cat(out)[:keep]
    pad_right = max(wf.PAD_RIGHT_MIN, wf.STEPS_PER_FRAME * frames + wf.WINDOW - wf.PAD_LEFT - len(states))
    return torch.cat([states.new_zeros(wf.PAD_LEFT, layers, width), states, states.new_zeros(pad_right, layers, width)])


def assert_rel(got: torch.Tensor, ref: torch.Tensor, rel: float = 1e-4) -> None:
    assert got.shape == ref.shape
    err = (got.float() - ref.float()).abs().max().item()
    scale = ref.float().abs().max().item()
    assert scale > 0 and err <= rel * scale, f"max error {err:.3g} against scale {scale:.3g}"


# --- (a) the log-mel --------------------------------------------------------------------------------


def test_mel_filters_are_transformers_slaney_bank():
    from transformers.audio_utils import mel_filter_bank

    ref = mel_filter_bank(
        num_frequency_bins=201,
        num_mel_filters=80,
        min_frequency=0.0,
        max_frequency=8000.0,
        sampling_rate=16000,
        norm="slaney",
        mel_scale="slaney",
    )
    got = mel_filters(400, 80, 16000)
    assert got.shape == (201, 80)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-15)
    assert (got.max(axis=0) > 0).all()


@pytest.mark.parametrize("seconds", [27.0, 45.0, 90 / SAMPLE_RATE, 0.0])
def test_log_mel_equals_the_feature_extractor(folders, seconds):
    samples = chirp(seconds)
    if seconds == 27.0:
        samples = samples + speechlike(seconds, SAMPLE_RATE, seed=2)
    pieces = [samples[i : i + wf.SEGMENT_SAMPLES] for i in range(0, max(len(samples), 1), wf.SEGMENT_SAMPLES)]
    assert len(pieces) == (2 if seconds == 45.0 else 1)
    extractor = WhisperFeatureExtractor.from_pretrained(str(folders["real"]), local_files_only=True)
    ref = extractor(pieces, sampling_rate=SAMPLE_RATE, return_tensors="pt").input_features
    settings = wf.mel_settings(folders["real"], 80)
    got = log_mel([torch.from_numpy(p) for p in pieces], **settings)
    assert got.shape == ref.shape == (len(pieces), 80, 3000) and got.dtype == torch.float32
    assert (got - ref).abs().max().item() < 1e-4
    if seconds == 27.0:  # the real part of the clip is not flat: the test can see a wrong filter
        assert ref[0, :, :2500].std() > 0.1
        # a [B, n] tensor (already padded) gives the same
        padded = torch.nn.functional.pad(torch.from_numpy(samples), (0, wf.SEGMENT_SAMPLES - len(samples)))
        torch.testing.assert_close(log_mel(padded[None]), got, atol=1e-6, rtol=0)


def test_log_mel_floor_is_per_piece():
    loud = chirp(30.0)
    quiet = loud * 1e-3
    both = log_mel([torch.from_numpy(loud), torch.from_numpy(quiet)])
    one = log_mel(torch.from_numpy(quiet)[None])
    torch.testing.assert_close(both[1], one[0], atol=1e-6, rtol=0)  # not floored at the loud piece's max
    assert both[0].max() - both[1].max() > 1.0


# --- (b) the encoder -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["tiny", "real"])
def test_encoder_states_equal_transformers(folders, name):
    folder = folders[name]
    ours = weights.load_module("whisper", folder, folder / "pytorch_model.bin")
    assert isinstance(ours, WhisperEncoderNet)
    ref_enc = hf_encoder(folder)
    assert {k: tuple(v.shape) for k, v in ours.state_dict().items()} == {
        k: tuple(v.shape) for k, v in ref_enc.state_dict().items()
    }
    for field in (
        "d_model",
        "encoder_layers",
        "num_mel_bins",
        "max_source_positions",
        "encoder_attention_heads",
        "encoder_ffn_dim",
    ):
        assert getattr(ours.config, field) == getattr(ref_enc.config, field)
    mel = log_mel([torch.from_numpy(chirp(20.0)), torch.from_numpy(speechlike(30.0, SAMPLE_RATE))])
    with torch.inference_mode():
        got = ours(mel)
    ref = hf_states(ref_enc, mel)
    assert len(got) == len(ref) == ours.config.encoder_layers + 1
    for g, r in zip(got, ref):
        assert g.shape == (2, 1500, ours.config.d_model)
        assert_rel(g, r)
    assert not torch.allclose(got[-1], got[-2], atol=1e-3)  # the last one is layer-normed


def test_config_defaults_are_whisper_configs():
    cfg, ref = encoder_config({}), WhisperConfig()
    for field in (
        "d_model",
        "encoder_layers",
        "num_mel_bins",
        "max_source_positions",
        "encoder_attention_heads",
        "encoder_ffn_dim",
        "activation_function",
    ):
        assert getattr(cfg, field) == getattr(ref, field)
    with pytest.raises(ModelError, match="not a valid a whisper model config.*activation_function"):
        weights.build_module("whisper", {**rm.WHISPER_TINY, "activation_function": "relu"})
    with pytest.raises(ModelError, match="not divisible"):
        weights.build_module("whisper", {**rm.WHISPER_TINY, "encoder_attention_heads": 3})


# --- (c) WhisperFeatures against the transformers-based implementation -------------------------------


@pytest.mark.parametrize("name,seconds", [("tiny", 31.0), ("tiny", 0.5), ("real", 3.3)])
def test_whisper_features_equal_the_old_transformers_path(folders, tmp_path, name, seconds):
    path = tmp_path / "v.wav"
    sf.write(path, 0.7 * speechlike(seconds, SAMPLE_RATE, seed=5) + 0.3 * chirp(seconds), SAMPLE_RATE, subtype="FLOAT")
    wave = load(path)
    feats = wf.WhisperFeatures(folders[name], batch=1 if seconds > 30 else 8)(wave)
    ref = old_features(folders[name], np.asarray(wave.samples, np.float32), wave.frames)
    assert feats.steps.dtype == torch.float32 and feats.steps.shape == ref.shape
    assert_rel(feats.steps, ref)
    arr = feats.array()
    assert arr.shape == (wave.frames, 50, feats.width)
    pe = feats.pe.numpy()
    old = torch.stack([ref[2 * f : 2 * f + wf.WINDOW].reshape(-1, feats.width) for f in range(wave.frames)])
    np.testing.assert_allclose(arr, old.numpy() + pe, atol=1e-4 * float(ref.abs().max()))


# --- (d) no transformers on the way -------------------------------------------------------------------


def test_features_never_import_transformers(folders, tmp_path):
    path = tmp_path / "v.wav"
    sf.write(path, speechlike(1.5, SAMPLE_RATE), SAMPLE_RATE, subtype="FLOAT")
    code = (
        "import sys\n"
        "from studio.core.media.audio import load\n"
        "from studio.core.engines.whisper_features import WhisperFeatures\n"
        f"feats = WhisperFeatures({str(folders['tiny'])!r})(load({str(path)!r}))\n"
        "assert feats.array().shape[0] == 38, feats.array().shape\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('transformers', 'librosa'))\n"
        "sys.stdout.write('imported: ' + ','.join(bad) + '\\n')\n"
    )
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip() == "imported:", res.stdout


def test_a_musetalk_render_never_imports_transformers(tmp_path, studio_home):
    """The whole CPU render (store -> engine -> whisper features -> UNet -> TAESD -> x264) in a child."""
    from musetalk_fakes import write_official_and_taesd

    official, taesd = write_official_and_taesd(tmp_path / "official")
    weights.import_models(official, taesd=taesd)
    voice = tmp_path / "voice.wav"
    sf.write(voice, speechlike(0.4, SAMPLE_RATE), SAMPLE_RATE, subtype="PCM_16")
    out = tmp_path / "out.mp4"
    code = (
        "import sys\n"
        f"sys.path.insert(0, {str(ROOT / 'tests')!r})\n"
        "from conftest import DEMO_AVATAR\n"
        "from studio.core.avatars import library as avatar\n"
        "from studio.core.render.renderer import Renderer\nfrom studio.core.settings import RenderSettings\n"
        "r = Renderer(avatar.prepare('astro', DEMO_AVATAR), sys.argv[1],\n"
        "             RenderSettings(engine='musetalk', device='cpu', batch=4, encoder='x264'))\n"
        "steps = list(r.run(sys.argv[2]))\n"
        "assert steps[-1].finished and r.result.engine == 'musetalk' and r.result.frames == 10\n"
        "sys.stdout.write('imported: ' + ','.join(sorted(m for m in sys.modules if m.split('.')[0] == 'transformers')) + '\\n')\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code, str(voice), str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip().splitlines()[-1] == "imported:", res.stdout[-2000:]
    assert out.stat().st_size > 0


# --- (e) strict loading and the preprocessor file ----------------------------------------------------


def test_strict_loading_refuses_a_wrong_file(folders, tmp_path):
    bad = tmp_path / "whisper"
    shutil.copytree(folders["tiny"], bad)
    cfg = json.loads((bad / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**cfg, "encoder_layers": 3}))
    with pytest.raises(
        ModelError, match=r"not a whisper model matching config\.json: .*unexpected \(e\.g\. layers\.3\."
    ):
        wf.WhisperFeatures(bad)
    (bad / "config.json").write_text(json.dumps({**cfg, "encoder_ffn_dim": 48}))
    with pytest.raises(
        ModelError, match=r"tensor layers\.0\.fc1\.weight has shape \[64, 32\] but config\.json needs \[48, 32\]"
    ):
        wf.WhisperFeatures(bad)
    (bad / "config.json").write_text(json.dumps(cfg))
    state = torch.load(bad / "pytorch_model.bin", weights_only=True)
    state["model.encoder.layers.0.self_attn.k_proj.bias"] = torch.zeros(rm.WIDTH)  # whisper's k has no bias
    torch.save(state, bad / "pytorch_model.bin")
    with pytest.raises(ModelError, match=r"1 unexpected \(e\.g\. layers\.0\.self_attn\.k_proj\.bias\)"):
        wf.WhisperFeatures(bad)


def test_preprocessor_settings_are_read_and_checked(folders, tmp_path):
    assert wf.mel_settings(folders["real"], 80) == {
        "n_fft": 400,
        "hop": 160,
        "n_mels": 80,
        "sample_rate": 16000,
        "chunk_length": 30,
        "padding_value": 0.0,
    }
    assert wf.mel_settings(tmp_path, 80)["n_mels"] == 80  # no file: whisper's defaults
    pre = json.loads((folders["real"] / "preprocessor_config.json").read_text())
    (tmp_path / "preprocessor_config.json").write_text(json.dumps({**pre, "feature_size": 128}))
    with pytest.raises(ModelError, match="feature_size 128 but config.json has num_mel_bins 80"):
        wf.mel_settings(tmp_path, 80)
    (tmp_path / "preprocessor_config.json").write_text(json.dumps({**pre, "sampling_rate": 22050}))
    with pytest.raises(ModelError, match="sampling_rate 22050"):
        wf.mel_settings(tmp_path, 80)
    (tmp_path / "preprocessor_config.json").write_text("{broken")
    with pytest.raises(ModelError, match="not a readable JSON config"):
        wf.mel_settings(tmp_path, 80)

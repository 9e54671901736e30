"""random_models: the random-weight folders are written without diffusers or transformers, in the
files, key names and config fields those libraries write (checked against them here, the tests'
references), and they import and load like official weights."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from studio.core.engines import random_models as rm
from studio.core.engines import weights


def test_writing_and_loading_the_folders_needs_neither_diffusers_nor_transformers(tmp_path):
    code = (
        "import sys\n"
        "sys.modules.update({'diffusers': None, 'transformers': None})  # importing either now fails\n"
        "from pathlib import Path\n"
        "from studio.core.engines import weights\nfrom studio.core.engines import random_models as rm\n"
        f"root = Path({str(tmp_path)!r})\n"
        "folder = rm.write_official_models(root, v10=True, tiny=True)\n"
        "rm.write_taesd(folder / 'taesd', config=rm.TAESD_TINY)\n"
        "p = weights.resolve(folder)\n"
        "for kind, f in (('unet', p.unet), ('vae', p.vae), ('taesd', p.taesd), ('whisper', p.whisper)):\n"
        "    weights.load_module(kind, f, p.weight_file(f))\n"
        "print(sorted(str(x.relative_to(folder)) for x in folder.rglob('*') if x.is_file()))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1].replace("'", '"')) == [
        "musetalk/musetalk.json",
        "musetalk/pytorch_model.bin",
        "musetalkV15/musetalk.json",
        "musetalkV15/unet.pth",
        "sd-vae/config.json",
        "sd-vae/diffusion_pytorch_model.bin",
        "taesd/config.json",
        "taesd/diffusion_pytorch_model.safetensors",
        "whisper/config.json",
        "whisper/preprocessor_config.json",
        "whisper/pytorch_model.bin",
    ]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    root = tmp_path_factory.mktemp("random")
    folder = rm.write_official_models(root, tiny=True)
    rm.write_taesd(folder / "taesd", config=rm.TAESD_TINY)
    return folder


def test_unet_and_vae_files_hold_diffusers_keys_and_the_vae_its_old_attention_names(written):
    diffusers = pytest.importorskip("diffusers")
    unet = diffusers.UNet2DConditionModel.from_config(rm.UNET_TINY)
    got = weights.read_state_dict(written / "musetalkV15" / "unet.pth")
    assert {k: tuple(v.shape) for k, v in got.items()} == {k: tuple(v.shape) for k, v in unet.state_dict().items()}
    assert json.loads((written / "musetalkV15" / "musetalk.json").read_text()) == rm.UNET_TINY
    vae = weights.read_state_dict(written / "sd-vae" / "diffusion_pytorch_model.bin")
    assert "encoder.mid_block.attentions.0.query.weight" in vae and not any(".to_q." in k for k in vae)
    ref = diffusers.AutoencoderKL.from_config(rm.VAE_TINY).state_dict()
    assert set(weights.normalize_keys("vae", vae)) == set(ref)


def test_taesd_folder_is_what_save_pretrained_writes(written, tmp_path):
    diffusers = pytest.importorskip("diffusers")
    ref = tmp_path / "ref"
    diffusers.AutoencoderTiny.from_config(rm.TAESD_TINY).save_pretrained(str(ref), safe_serialization=True)
    assert sorted(p.name for p in ref.iterdir()) == sorted(p.name for p in (written / "taesd").iterdir())
    mine, theirs = (json.loads((d / "config.json").read_text()) for d in (written / "taesd", ref))
    assert set(mine) == set(theirs)
    assert {k: v for k, v in mine.items() if k != "_diffusers_version"} == {
        k: v for k, v in theirs.items() if k != "_diffusers_version"
    }
    from safetensors import safe_open

    with (
        safe_open(str(written / "taesd" / "diffusion_pytorch_model.safetensors"), "pt") as a,
        safe_open(str(ref / "diffusion_pytorch_model.safetensors"), "pt") as b,
    ):
        assert a.metadata() == b.metadata() == {"format": "pt"}
        assert {k: a.get_slice(k).get_shape() for k in a.keys()} == {k: b.get_slice(k).get_shape() for k in b.keys()}


def test_whisper_folder_has_transformers_fields_and_encoder_tensors(written, tmp_path):
    transformers = pytest.importorskip("transformers")
    folder = written / "whisper"
    cfg = json.loads((folder / "config.json").read_text())
    ref_cfg = json.loads(transformers.WhisperConfig.from_dict(rm.WHISPER_TINY).to_json_string())  # as to_json_file
    assert set(cfg) == set(ref_cfg) - {"transformers_version"}
    assert all(cfg[k] == ref_cfg[k] for k in cfg), {k: (cfg[k], ref_cfg[k]) for k in cfg if cfg[k] != ref_cfg[k]}
    transformers.WhisperFeatureExtractor(feature_size=cfg["num_mel_bins"]).save_pretrained(str(tmp_path))
    assert json.loads((folder / "preprocessor_config.json").read_text()) == json.loads(
        (tmp_path / "preprocessor_config.json").read_text()
    )
    state = weights.read_state_dict(folder / "pytorch_model.bin")
    enc = transformers.models.whisper.modeling_whisper.WhisperEncoder(transformers.WhisperConfig.from_dict(cfg))
    want = {f"model.encoder.{k}": tuple(v.shape) for k, v in enc.state_dict().items()}
    assert {k: tuple(v.shape) for k, v in state.items()} == want  # the encoder only: MuseTalk has no decoder
    # transformers' initialisation: sinusoidal positions, small normal weights, zero biases
    from transformers.models.whisper.modeling_whisper import sinusoids

    torch.testing.assert_close(state["model.encoder.embed_positions.weight"], sinusoids(1500, rm.WIDTH))
    w = state["model.encoder.layers.0.fc1.weight"]
    assert 0.015 < w.std().item() < 0.025 and not state["model.encoder.layers.0.fc1.bias"].any()


def test_weights_follow_the_seed_and_leave_torch_global_generator_alone(tmp_path):
    torch.manual_seed(7)
    expected = torch.rand(4)
    torch.manual_seed(7)
    a = weights.read_state_dict(rm.write_unet(tmp_path / "a", config=rm.UNET_TINY, seed=1))
    b = weights.read_state_dict(rm.write_unet(tmp_path / "b", config=rm.UNET_TINY, seed=1))
    c = weights.read_state_dict(rm.write_unet(tmp_path / "c", config=rm.UNET_TINY, seed=2))
    assert torch.equal(torch.rand(4), expected)
    assert all(torch.equal(a[k], b[k]) for k in a)
    k = "conv_in.weight"
    assert not torch.equal(a[k], c[k]) and a[k].std() > 0.01

"""studio's own UNet / SD-VAE / TAESD modules (engines/nets*.py) against diffusers' classes: the same
state-dict names and shapes, the same outputs for the same weights, and no diffusers import on the
loading path."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from studio.core.engines import nets, nets_unet, nets_vae, weights
from studio.core.engines import random_models as rm
from studio.core.errors import ModelError

ATOL = 1e-5


def _diffusers(kind: str, config: dict, seed: int = 0):
    from diffusers import AutoencoderKL, AutoencoderTiny, UNet2DConditionModel

    cls = {"unet": UNet2DConditionModel, "vae": AutoencoderKL, "taesd": AutoencoderTiny}[kind]
    torch.manual_seed(seed)
    ref = cls.from_config(config).eval()
    rm.randomize(ref, seed)  # zero-initialised layers too, so every output depends on every weight
    return ref


def _pair(kind: str, config: dict, seed: int = 0):
    ref = _diffusers(kind, config, seed)
    mine = nets.build(kind, config).eval()
    mine.load_state_dict(ref.state_dict(), strict=True)
    return ref, mine


def _close(got, want, atol=ATOL):
    assert got.shape == want.shape
    assert float(want.abs().max()) > 0.01  # a real signal, not zeros on both sides
    torch.testing.assert_close(got, want, atol=atol, rtol=1e-5)


def test_tiny_unet_matches_diffusers():
    ref, mine = _pair("unet", rm.UNET_TINY)
    g = torch.Generator().manual_seed(1)
    lat = torch.randn(3, 8, 32, 32, generator=g)
    audio = torch.randn(3, 50, rm.WIDTH, generator=g)
    with torch.no_grad():
        for t in (torch.zeros(1, dtype=torch.long), torch.zeros((), dtype=torch.long), 0, torch.tensor([7, 7, 7])):
            want = ref(lat, t, encoder_hidden_states=audio, return_dict=False)[0]
            got = mine(lat, t, encoder_hidden_states=audio, return_dict=False)[0]
            _close(got, want)
        # a size that is not a multiple of the up factor forwards the skip sizes to the upsamplers
        odd = torch.randn(1, 8, 18, 22, generator=g)
        want = ref(odd, 0, encoder_hidden_states=audio[:1]).sample
        _close(mine(odd, 0, encoder_hidden_states=audio[:1]).sample, want)
    assert mine.config.in_channels == 8 and mine.config.cross_attention_dim == rm.WIDTH
    assert mine.config.block_out_channels == [32, 64] and mine.config.upcast_attention is False  # a default


def test_tiny_unet_time_modules_match_diffusers():
    ref, mine = _pair("unet", rm.UNET_TINY)
    t = torch.tensor([0.0, 3.0, 999.0])
    with torch.no_grad():
        torch.testing.assert_close(mine.time_proj(t), ref.time_proj(t), atol=0, rtol=0)
        e = ref.time_proj(t)
        _close(mine.time_embedding(e), ref.time_embedding(e))
    for cfg in ({"flip_sin_to_cos": False, "freq_shift": 1}, {"center_input_sample": True}):
        r, m = _pair("unet", {**rm.UNET_TINY, **cfg})
        x, a = torch.randn(2, 8, 16, 16), torch.randn(2, 10, rm.WIDTH)
        with torch.no_grad():
            _close(m(x, 5, a, return_dict=False)[0], r(x, 5, a, return_dict=False)[0])


def test_tiny_unet_linear_projection_and_deeper_transformers_match():
    cfg = {
        **rm.UNET_TINY,
        "use_linear_projection": True,
        "transformer_layers_per_block": [2, 1],
        "attention_head_dim": [2, 4],
        "layers_per_block": [1, 2],
    }
    ref, mine = _pair("unet", cfg)
    x, a = torch.randn(2, 8, 16, 16), torch.randn(2, 10, rm.WIDTH)
    with torch.no_grad():
        _close(mine(x, 0, a, return_dict=False)[0], ref(x, 0, a, return_dict=False)[0])


def test_tiny_vae_matches_diffusers():
    ref, mine = _pair("vae", rm.VAE_TINY)
    g = torch.Generator().manual_seed(2)
    x = torch.rand(2, 3, 64, 64, generator=g) * 2 - 1
    z = torch.randn(2, 4, 8, 8, generator=g)
    with torch.no_grad():
        want = ref.encode(x).latent_dist
        got = mine.encode(x).latent_dist
        _close(got.mean, want.mean)
        _close(got.logvar, want.logvar)
        _close(mine.decode(z, return_dict=False)[0], ref.decode(z, return_dict=False)[0])
        _close(mine.decode(z).sample, ref.decode(z).sample)
    assert mine.config.scaling_factor == 0.18215 and mine.config.latent_channels == 4


def test_tiny_taesd_matches_diffusers():
    ref, mine = _pair("taesd", rm.TAESD_TINY)
    g = torch.Generator().manual_seed(3)
    z = torch.randn(2, 4, 8, 8, generator=g) * 4  # beyond TAESD's +-3 clamp
    x = torch.rand(2, 3, 64, 64, generator=g) * 2 - 1
    with torch.no_grad():
        want = ref.decode(z, return_dict=False)[0]
        got = mine.decode(z, return_dict=False)[0]
        _close(got, want)  # the latent clamp and the [0, 1] -> [-1, 1] mapping included
        _close(mine.encode(x).latents, ref.encode(x).latents)
    assert mine.config.scaling_factor == 1.0 and mine.config.block_out_channels == [8, 8, 8, 8]


@pytest.mark.parametrize("kind,config", [("unet", rm.UNET_TINY), ("vae", rm.VAE_TINY), ("taesd", rm.TAESD_TINY)])
def test_half_precision_matches_diffusers(kind, config):
    """bf16 on the CPU (the GPU runs fp16): the same operations in the same order, the same rounding."""
    ref, mine = (torch.nn.Module.to(m, dtype=torch.bfloat16) for m in _pair(kind, config))
    g = torch.Generator().manual_seed(5)
    with torch.inference_mode():
        if kind == "unet":
            x, a = (
                torch.randn(2, 8, 32, 32, generator=g).bfloat16(),
                torch.randn(2, 50, rm.WIDTH, generator=g).bfloat16(),
            )
            want, got = (m(x, 0, encoder_hidden_states=a, return_dict=False)[0] for m in (ref, mine))
        else:
            z = torch.randn(2, 4, 8, 8, generator=g).bfloat16()
            want, got = (m.decode(z, return_dict=False)[0] for m in (ref, mine))
    assert got.dtype == torch.bfloat16
    _close(got.float(), want.float(), atol=0.02)


@pytest.mark.parametrize(
    "kind,config", [("unet", rm.MUSETALK_UNET_CONFIG), ("vae", rm.SD_VAE_CONFIG), ("taesd", rm.TAESD_CONFIG)]
)
def test_real_architectures_have_diffusers_keys_and_shapes(kind, config):
    from diffusers import AutoencoderKL, AutoencoderTiny, UNet2DConditionModel

    cls = {"unet": UNet2DConditionModel, "vae": AutoencoderKL, "taesd": AutoencoderTiny}[kind]
    with torch.device("meta"):
        want = {k: tuple(v.shape) for k, v in cls.from_config(config).state_dict().items()}
        got = {k: tuple(v.shape) for k, v in nets.build(kind, config).state_dict().items()}
    assert len(want) > 100
    assert got == want


def test_meta_build_channels_last_and_eval():
    with torch.device("meta"):
        unet = nets.build("unet", rm.UNET_TINY)
    assert all(p.is_meta for p in unet.parameters())
    unet = nets.build("unet", rm.UNET_TINY).eval()
    torch.nn.Module.to(unet, memory_format=torch.channels_last)
    x = torch.randn(2, 8, 16, 16).contiguous(memory_format=torch.channels_last)
    with torch.inference_mode():
        a = unet(x, 0, torch.randn(2, 10, rm.WIDTH), return_dict=False)[0]
    assert a.shape == (2, 4, 16, 16) and torch.isfinite(a).all()


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    root = tmp_path_factory.mktemp("nets_models")
    models_dir = rm.write_official_models(root, tiny=True)
    rm.write_taesd(models_dir / "taesd", config=rm.TAESD_TINY)
    return models_dir


@pytest.mark.parametrize("kind,folder", [("unet", "musetalkV15"), ("vae", "sd-vae"), ("taesd", "taesd")])
def test_load_module_of_written_weights_matches_diffusers(written, kind, folder):
    from diffusers import AutoencoderKL, AutoencoderTiny, UNet2DConditionModel

    p = weights.resolve(written)
    path = written / folder
    mine = weights.load_module(kind, path, p.weight_file(path))
    assert isinstance(mine, (nets_unet.UNet, nets_vae.AutoencoderKL, nets_vae.AutoencoderTiny))
    comp = next(c for c in weights.COMPONENTS.values() if c.kind == kind)
    cfg = json.loads((path / comp.config).read_text())
    cls = {"unet": UNet2DConditionModel, "vae": AutoencoderKL, "taesd": AutoencoderTiny}[kind]
    if kind == "taesd":
        cfg = {k: v for k, v in cfg.items() if k != "block_out_channels"}
    ref = cls.from_config(cfg).eval()
    state = weights.normalize_keys(kind, weights.read_state_dict(p.weight_file(path)))  # the VAE's old names
    ref.load_state_dict(state, strict=True)
    g = torch.Generator().manual_seed(4)
    with torch.no_grad():
        if kind == "unet":
            lat, audio = torch.randn(2, 8, 32, 32, generator=g), torch.randn(2, 50, rm.WIDTH, generator=g)
            t = torch.zeros(1, dtype=torch.long)
            _close(
                mine(lat, t, encoder_hidden_states=audio, return_dict=False)[0],
                ref(lat, t, encoder_hidden_states=audio, return_dict=False)[0],
            )
        elif kind == "vae":
            x = torch.rand(1, 3, 64, 64, generator=g) * 2 - 1
            _close(mine.encode(x).latent_dist.mean, ref.encode(x).latent_dist.mean)
            z = torch.randn(1, 4, 8, 8, generator=g)
            _close(mine.decode(z, return_dict=False)[0], ref.decode(z, return_dict=False)[0])
        else:
            z = torch.randn(1, 4, 8, 8, generator=g)
            _close(mine.decode(z, return_dict=False)[0], ref.decode(z, return_dict=False)[0])


def test_loading_the_networks_never_imports_diffusers(written):
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from studio.core.engines import weights\n"
        f"root = Path({str(written)!r})\n"
        "p = weights.resolve(root)\n"
        "for kind, folder in (('unet', p.unet), ('vae', p.vae), ('taesd', p.taesd)):\n"
        "    m = weights.load_module(kind, folder, p.weight_file(folder))\n"
        "    weights.check_component(weights.COMPONENTS[p.manifest_name(folder)], folder)\n"
        "print(sorted(k for k in ('diffusers', 'transformers', 'torch._dynamo') if k in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    loaded = out.stdout.strip().splitlines()[-1]
    assert "diffusers" not in loaded and "transformers" not in loaded, loaded


@pytest.mark.parametrize(
    "kind,change,field",
    [
        ("unet", {"cross_attention_norm": "group_norm"}, "cross_attention_norm"),
        ("unet", {"addition_embed_type": "text"}, "addition_embed_type"),
        ("unet", {"mid_block_type": "UNetMidBlock2DSimpleCrossAttn"}, "mid_block_type"),
        ("unet", {"down_block_types": ["SimpleCrossAttnDownBlock2D", "DownBlock2D"]}, "down_block_types"),
        ("unet", {"act_fn": "tanh"}, "act_fn"),
        ("unet", {"attention_head_dim": None}, "attention_head_dim"),
        ("vae", {"down_block_types": ["AttnDownEncoderBlock2D"] * 4}, "down_block_types"),
        ("taesd", {"upsample_fn": "area-ish"}, "upsample_fn"),
    ],
)
def test_unsupported_config_features_are_refused_in_one_sentence(tmp_path, kind, change, field):
    config = {"unet": rm.UNET_TINY, "vae": rm.VAE_TINY, "taesd": rm.TAESD_TINY}[kind]
    with pytest.raises(ValueError, match=field):
        nets.build(kind, {**config, **change})
    cfg_path = tmp_path / "config.json"
    with pytest.raises(ModelError) as info:
        weights.build_module(kind, {**config, **change}, cfg_path)
    msg = str(info.value)
    assert "\n" not in msg and str(cfg_path) in msg and field in msg and "not a valid" in msg


def test_unknown_fields_are_ignored_and_private_ones_kept():
    unet = nets.build("unet", {**rm.UNET_TINY, "some_future_option": 3})
    assert "some_future_option" not in unet.config
    assert unet.config["_class_name"] == "UNet2DConditionModel"
    with pytest.raises(AttributeError):
        unet.config.in_channels = 4

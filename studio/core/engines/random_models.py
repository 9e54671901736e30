"""Random-weight MuseTalk model folders in the official layout (real or tiny architectures).

Used by ``studio bench`` when no weights are imported (speed does not depend on the values) and by
the tests (tiny configs of the same classes). Nothing here downloads anything.

The networks are studio's own (``engines.nets`` and ``engines.whisper_net``, which keep diffusers'
and transformers' state-dict names), so writing a folder needs neither diffusers nor transformers:
the frozen desktop app and a plain ``pip install`` run ``studio bench`` without them. The files
are the ones those libraries write: ``unet.pth`` / ``pytorch_model.bin`` torch state dicts, the
SD-VAE's ``diffusion_pytorch_model.bin`` with its old attention names (as sd-vae-ft-mse),
TAESD's ``config.json`` + ``diffusion_pytorch_model.safetensors`` (as ``save_pretrained``), and
whisper's ``config.json`` / ``preprocessor_config.json`` (WhisperConfig's and
WhisperFeatureExtractor's fields and defaults, written as JSON here) + ``pytorch_model.bin`` with
the encoder's ``model.encoder.*`` tensors (the decoder is not used by MuseTalk and not written).
Weights are drawn from a generator seeded with ``seed`` (the global torch RNG is left alone):
torch's default initialisation for the UNet and the VAEs (what diffusers' classes use), and
transformers' whisper initialisation (normal(0, 0.02) weights, zero biases, sinusoidal positions).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

WIDTH = 32  # the tiny whisper's d_model == the tiny UNet's cross_attention_dim


# --- the real architectures (spec §1.1-1.4) ---------------------------------------------------
MUSETALK_UNET_CONFIG = {
    "_class_name": "UNet2DConditionModel",
    "_diffusers_version": "0.6.0.dev0",
    "act_fn": "silu",
    "attention_head_dim": 8,
    "block_out_channels": [320, 640, 1280, 1280],
    "center_input_sample": False,
    "cross_attention_dim": 384,
    "down_block_types": ["CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"],
    "downsample_padding": 1,
    "flip_sin_to_cos": True,
    "freq_shift": 0,
    "in_channels": 8,
    "layers_per_block": 2,
    "mid_block_scale_factor": 1,
    "norm_eps": 1e-05,
    "norm_num_groups": 32,
    "out_channels": 4,
    "sample_size": 64,
    "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"],
}
SD_VAE_CONFIG = {
    "_class_name": "AutoencoderKL",
    "_diffusers_version": "0.4.2",
    "act_fn": "silu",
    "block_out_channels": [128, 256, 512, 512],
    "down_block_types": ["DownEncoderBlock2D"] * 4,
    "up_block_types": ["UpDecoderBlock2D"] * 4,
    "in_channels": 3,
    "out_channels": 3,
    "latent_channels": 4,
    "layers_per_block": 2,
    "norm_num_groups": 32,
    "sample_size": 256,
}
# TAESD's released config.json: every field of it is diffusers' default, which AutoencoderTiny fills
# in from nets_vae.TAESD_DEFAULTS (the one place those values stand)
TAESD_CONFIG = {"_class_name": "AutoencoderTiny"}
WHISPER_TINY_CONFIG = {
    "model_type": "whisper",
    "d_model": 384,
    "encoder_layers": 4,
    "encoder_attention_heads": 6,
    "encoder_ffn_dim": 1536,
    "decoder_layers": 4,
    "decoder_attention_heads": 6,
    "decoder_ffn_dim": 1536,
    "num_mel_bins": 80,
    "max_source_positions": 1500,
    "max_target_positions": 448,
    "vocab_size": 51865,
}

# --- tiny versions of the same classes ---------------------------------------------------------
UNET_TINY = {
    **MUSETALK_UNET_CONFIG,
    "block_out_channels": [32, 64],
    "layers_per_block": 1,
    "down_block_types": ["CrossAttnDownBlock2D", "DownBlock2D"],
    "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D"],
    "attention_head_dim": 2,
    "norm_num_groups": 8,
    "cross_attention_dim": WIDTH,
    "sample_size": 32,
}
VAE_TINY = {**SD_VAE_CONFIG, "block_out_channels": [8, 8, 16, 16], "layers_per_block": 1, "norm_num_groups": 4}
TAESD_TINY = {
    **TAESD_CONFIG,
    "decoder_block_out_channels": [8, 8, 8, 8],
    "encoder_block_out_channels": [8, 8, 8, 8],
    "num_decoder_blocks": [1, 1, 1, 1],
    "num_encoder_blocks": [1, 1, 1, 1],
}
WHISPER_TINY = {
    **WHISPER_TINY_CONFIG,
    "d_model": WIDTH,
    "encoder_attention_heads": 2,
    "encoder_ffn_dim": 64,
    "decoder_layers": 1,
    "decoder_attention_heads": 2,
    "decoder_ffn_dim": 64,
    "max_target_positions": 32,
}

# The rest of what WhisperConfig writes to config.json (its defaults; decoder fields included, as
# in openai/whisper-tiny's file, though only the encoder is used).
WHISPER_CONFIG_FIELDS = {
    "activation_dropout": 0.0,
    "activation_function": "gelu",
    "apply_spec_augment": False,
    "attention_dropout": 0.0,
    "begin_suppress_tokens": [220, 50256],
    "bos_token_id": 50256,
    "classifier_proj_size": 256,
    "decoder_layerdrop": 0.0,
    "decoder_start_token_id": 50257,
    "dropout": 0.0,
    "encoder_layerdrop": 0.0,
    "eos_token_id": 50256,
    "init_std": 0.02,
    "is_encoder_decoder": True,
    "mask_feature_length": 10,
    "mask_feature_min_masks": 0,
    "mask_feature_prob": 0.0,
    "mask_time_length": 10,
    "mask_time_min_masks": 2,
    "mask_time_prob": 0.05,
    "median_filter_width": 7,
    "pad_token_id": 50256,
    "scale_embedding": False,
    "suppress_tokens": None,
    "tie_word_embeddings": True,
    "use_cache": True,
    "use_weighted_layer_sum": False,
}
# WhisperFeatureExtractor's defaults, as its save_pretrained writes them (feature_size = num_mel_bins).
WHISPER_PREPROCESSOR = {
    "chunk_length": 30,
    "dither": 0.0,
    "feature_extractor_type": "WhisperFeatureExtractor",
    "feature_size": 80,
    "hop_length": 160,
    "n_fft": 400,
    "n_samples": 480000,
    "nb_max_frames": 3000,
    "padding_side": "right",
    "padding_value": 0.0,
    "return_attention_mask": False,
    "sampling_rate": 16000,
}
DIFFUSERS_VERSION = "0.42.1"  # the diffusers release whose save_pretrained layout TAESD's folder copies

_OLD_ATTN = {".to_q.": ".query.", ".to_k.": ".key.", ".to_v.": ".value.", ".to_out.0.": ".proj_attn."}


def write_official_models(
    root: Path, v15: bool = True, v10: bool = False, vae_folder: str = "sd-vae", seed: int = 0, tiny: bool = False
) -> Path:
    """``root/models`` in the official layout with random weights; returns that folder."""
    models = Path(root) / "models"
    unet, vae, whisper = (UNET_TINY, VAE_TINY, WHISPER_TINY) if tiny else (None, None, None)
    if v15:
        write_unet(models / "musetalkV15", "unet.pth", config=unet, seed=seed)
    if v10:
        write_unet(models / "musetalk", "pytorch_model.bin", config=unet, seed=seed + 1)
    write_vae(models / vae_folder, seed=seed, config=vae)
    write_whisper(models / "whisper", seed=seed, config=whisper)
    return models


def write_unet(folder: Path, weights: str = "unet.pth", config: dict | None = None, seed: int = 0) -> Path:
    """``musetalk.json`` (the config as given) + the UNet2DConditionModel state dict in ``weights``."""
    import torch

    config = config or MUSETALK_UNET_CONFIG
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "musetalk.json").write_text(json.dumps(config, indent=2))
    model = _build("unet", config, seed)
    torch.save(model.state_dict(), folder / weights)
    return folder / weights


def write_vae(folder: Path, seed: int = 0, config: dict | None = None) -> Path:
    """``config.json`` + ``diffusion_pytorch_model.bin`` with the old attention names, as sd-vae-ft-mse."""
    import torch

    config = config or SD_VAE_CONFIG
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    model = _build("vae", config, seed)
    state = {}
    for k, v in model.state_dict().items():
        if ".attentions." in k:
            for new, old in _OLD_ATTN.items():
                k = k.replace(new, old)
        state[k] = v
    torch.save(state, folder / "diffusion_pytorch_model.bin")
    return folder / "diffusion_pytorch_model.bin"


def write_whisper(folder: Path, seed: int = 0, config: dict | None = None) -> Path:
    """HF whisper layout: config.json, pytorch_model.bin (``model.encoder.*`` keys), preprocessor_config.json."""
    import torch

    from studio.core.engines.whisper_net import WhisperEncoderNet

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    cfg = {**WHISPER_CONFIG_FIELDS, **(config or WHISPER_TINY_CONFIG)}
    _write_json(folder / "config.json", cfg)
    _write_json(folder / "preprocessor_config.json", {**WHISPER_PREPROCESSOR, "feature_size": cfg["num_mel_bins"]})
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = WhisperEncoderNet(cfg)
    _whisper_init(model, float(cfg["init_std"]), torch.Generator().manual_seed(seed))
    randomize(model, seed)
    state = {f"model.encoder.{k}": v.contiguous() for k, v in model.state_dict().items()}
    torch.save(state, folder / "pytorch_model.bin")
    return folder / "pytorch_model.bin"


def write_taesd(folder: Path, seed: int = 0, config: dict | None = None) -> Path:
    """diffusers AutoencoderTiny layout: config.json + diffusion_pytorch_model.safetensors."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model = _build("taesd", config or TAESD_CONFIG, seed)
    # the module's config is the file's with diffusers' defaults filled in, as save_pretrained writes it
    _write_json(folder / "config.json", {**model.config, "_diffusers_version": DIFFUSERS_VERSION})
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(folder / "diffusion_pytorch_model.safetensors"), metadata={"format": "pt"})
    return folder / "diffusion_pytorch_model.safetensors"


def _build(kind: str, config: dict, seed: int):
    """``nets.build(kind, config)`` on the CPU, torch's default initialisation drawn from ``seed``."""
    import torch

    from studio.core.engines import nets

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = nets.build(kind, config)
    randomize(model, seed)
    return model


def _whisper_init(model, std: float, g) -> None:
    """transformers' whisper initialisation: linear/conv weights normal(0, std), biases zero,
    LayerNorms one/zero, the encoder's positions sinusoidal (its ``sinusoids``)."""
    import torch
    from torch import nn

    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.Linear, nn.Conv1d)):
                m.weight.normal_(0.0, std, generator=g)
                if m.bias is not None:
                    m.bias.zero_()
            elif isinstance(m, nn.LayerNorm):
                m.weight.fill_(1.0)
                m.bias.zero_()
        length, channels = model.embed_positions.weight.shape
        step = math.log(10000) / (channels // 2 - 1)
        inv = torch.exp(-step * torch.arange(channels // 2))
        t = torch.arange(length).view(-1, 1) * inv.view(1, -1)
        model.embed_positions.weight.copy_(torch.cat([t.sin(), t.cos()], dim=1))


def _write_json(path: Path, data: dict) -> None:
    """As diffusers' and transformers' ``to_json_file``: sorted keys, two-space indent, newline."""
    Path(path).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def randomize(model, seed: int) -> None:
    """Give zero-initialised layers random values too, so every output depends on every input."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim >= 2 and not p.abs().sum():
                p.copy_(torch.randn(p.shape, generator=g) * 0.02)

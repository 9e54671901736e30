"""Random-weight MuseTalk model folders in the official layout (real or tiny architectures).

Used by ``studio bench`` when no weights are imported (speed does not depend on the values) and by
the tests (tiny configs of the same classes). Nothing here downloads anything.
"""

from __future__ import annotations

import json
from pathlib import Path

WIDTH = 32  # the tiny whisper's d_model == the tiny UNet's cross_attention_dim


# --- the real architectures (spec §1.1-1.4) ---------------------------------------------------
MUSETALK_UNET_CONFIG = {
    "_class_name": "UNet2DConditionModel", "_diffusers_version": "0.6.0.dev0",
    "act_fn": "silu", "attention_head_dim": 8, "block_out_channels": [320, 640, 1280, 1280],
    "center_input_sample": False, "cross_attention_dim": 384,
    "down_block_types": ["CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"],
    "downsample_padding": 1, "flip_sin_to_cos": True, "freq_shift": 0, "in_channels": 8,
    "layers_per_block": 2, "mid_block_scale_factor": 1, "norm_eps": 1e-05, "norm_num_groups": 32,
    "out_channels": 4, "sample_size": 64,
    "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"],
}
SD_VAE_CONFIG = {
    "_class_name": "AutoencoderKL", "_diffusers_version": "0.4.2", "act_fn": "silu",
    "block_out_channels": [128, 256, 512, 512],
    "down_block_types": ["DownEncoderBlock2D"] * 4, "up_block_types": ["UpDecoderBlock2D"] * 4,
    "in_channels": 3, "out_channels": 3, "latent_channels": 4, "layers_per_block": 2,
    "norm_num_groups": 32, "sample_size": 256,
}
TAESD_CONFIG = {
    "_class_name": "AutoencoderTiny", "act_fn": "relu", "decoder_block_out_channels": [64, 64, 64, 64],
    "encoder_block_out_channels": [64, 64, 64, 64], "in_channels": 3, "latent_channels": 4,
    "num_decoder_blocks": [3, 3, 3, 1], "num_encoder_blocks": [1, 3, 3, 3], "out_channels": 3,
    "scaling_factor": 1.0, "upsampling_scaling_factor": 2,
}
WHISPER_TINY_CONFIG = {
    "model_type": "whisper", "d_model": 384, "encoder_layers": 4, "encoder_attention_heads": 6,
    "encoder_ffn_dim": 1536, "decoder_layers": 4, "decoder_attention_heads": 6, "decoder_ffn_dim": 1536,
    "num_mel_bins": 80, "max_source_positions": 1500, "max_target_positions": 448, "vocab_size": 51865,
}

# --- tiny versions of the same classes ---------------------------------------------------------
UNET_TINY = {
    **MUSETALK_UNET_CONFIG, "block_out_channels": [32, 64], "layers_per_block": 1,
    "down_block_types": ["CrossAttnDownBlock2D", "DownBlock2D"],
    "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D"], "attention_head_dim": 2,
    "norm_num_groups": 8, "cross_attention_dim": WIDTH, "sample_size": 32,
}
VAE_TINY = {**SD_VAE_CONFIG, "block_out_channels": [8, 8, 16, 16], "layers_per_block": 1, "norm_num_groups": 4}
TAESD_TINY = {**TAESD_CONFIG, "decoder_block_out_channels": [8, 8, 8, 8],
              "encoder_block_out_channels": [8, 8, 8, 8], "num_decoder_blocks": [1, 1, 1, 1],
              "num_encoder_blocks": [1, 1, 1, 1]}
WHISPER_TINY = {**WHISPER_TINY_CONFIG, "d_model": WIDTH, "encoder_attention_heads": 2, "encoder_ffn_dim": 64,
                "decoder_layers": 1, "decoder_attention_heads": 2, "decoder_ffn_dim": 64,
                "max_target_positions": 32}

_OLD_ATTN = {".to_q.": ".query.", ".to_k.": ".key.", ".to_v.": ".value.", ".to_out.0.": ".proj_attn."}


def write_official_models(root: Path, v15: bool = True, v10: bool = False, vae_folder: str = "sd-vae",
                          seed: int = 0, tiny: bool = False) -> Path:
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
    import torch
    from diffusers import UNet2DConditionModel

    config = config or MUSETALK_UNET_CONFIG
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "musetalk.json").write_text(json.dumps(config, indent=2))
    torch.manual_seed(seed)
    model = UNet2DConditionModel.from_config(config)
    _randomize(model, seed)
    torch.save(model.state_dict(), folder / weights)
    return folder / weights


def write_vae(folder: Path, seed: int = 0, config: dict | None = None) -> Path:
    """``config.json`` + ``diffusion_pytorch_model.bin`` with the old attention names, as sd-vae-ft-mse."""
    import torch
    from diffusers import AutoencoderKL

    config = config or SD_VAE_CONFIG
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    torch.manual_seed(seed)
    model = AutoencoderKL.from_config(config)
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
    from transformers import WhisperConfig, WhisperFeatureExtractor, WhisperForConditionalGeneration

    folder.mkdir(parents=True, exist_ok=True)
    cfg = WhisperConfig.from_dict(config or WHISPER_TINY_CONFIG)
    cfg.to_json_file(str(folder / "config.json"))
    WhisperFeatureExtractor(feature_size=cfg.num_mel_bins).save_pretrained(str(folder))
    torch.manual_seed(seed)
    model = WhisperForConditionalGeneration(cfg)
    torch.save({k: v.contiguous() for k, v in model.state_dict().items()}, folder / "pytorch_model.bin")
    return folder / "pytorch_model.bin"


def write_taesd(folder: Path, seed: int = 0, config: dict | None = None) -> Path:
    """diffusers AutoencoderTiny layout: config.json + diffusion_pytorch_model.safetensors."""
    import torch
    from diffusers import AutoencoderTiny

    torch.manual_seed(seed)
    model = AutoencoderTiny.from_config(config or TAESD_CONFIG)
    model.save_pretrained(str(folder), safe_serialization=True)
    return folder / "diffusion_pytorch_model.safetensors"


def _randomize(model, seed: int) -> None:
    """Give zero-initialised layers random values too, so every output depends on every input."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim >= 2 and not p.abs().sum():
                p.copy_(torch.randn(p.shape, generator=g) * 0.02)

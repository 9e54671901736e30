"""What a weight file holds, checked against its config: the architectures (configs -> modules,
built on ``torch.device("meta")`` so a 3.4 GB UNet is checked without memory), state-dict reading
(``.pth``/``.bin``/``.safetensors``, memory-mapped), the old key names some checkpoints still use,
and the one-sentence refusals of a file that does not match. The model store (``weights``) and the
engines build on these."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from studio.core.errors import ModelError

KIND_NAMES = {
    "unet": "a MuseTalk UNet (UNet2DConditionModel)",
    "vae": "an SD VAE (AutoencoderKL)",
    "taesd": "a TAESD (AutoencoderTiny)",
    "whisper": "a whisper model",
}
# Old diffusers attention names still used by the sd-vae-ft-mse checkpoint (spec §1.2).
_VAE_OLD_ATTN = {".query.": ".to_q.", ".key.": ".to_k.", ".value.": ".to_v.", ".proj_attn.": ".to_out.0."}


def read_config(path: Path) -> dict:
    try:
        cfg = json.loads(Path(path).read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelError(
            f"{path}: not a readable JSON config ({exc}); copy it again from the original download"
        ) from None
    if not isinstance(cfg, dict):
        raise ModelError(f"{path}: not a model config (expected a JSON object)")
    return cfg


def build_module(kind: str, config: dict, cfg_path: Path | None = None, device: str = "meta"):
    """The torch module for ``config`` (random init unless ``device`` is ``meta``)."""
    import torch

    where = cfg_path or "the config"
    try:
        with torch.device(device):
            if kind in ("unet", "vae", "taesd"):
                # our own modules (diffusers' keys and outputs, without importing diffusers)
                from studio.core.engines import nets

                module = nets.build(kind, config)
            elif kind == "whisper":
                # our torch copy of transformers' WhisperEncoder (same state dict; no transformers import)
                from studio.core.engines.whisper_net import WhisperEncoderNet

                module = WhisperEncoderNet(config)
            else:
                raise ValueError(kind)
    except ModelError:
        raise
    except Exception as exc:  # noqa: BLE001 - deliberate: any failure here is reported, not fatal
        raise ModelError(f"{where}: not a valid {KIND_NAMES[kind]} config ({short_reason(exc)})") from None
    cfg: Any = module.config
    if kind == "unet" and (cfg.in_channels != 8 or cfg.out_channels != 4):
        raise ModelError(
            f"{where}: in_channels {cfg.in_channels} / out_channels {cfg.out_channels}; "
            "a MuseTalk UNet takes 8 and gives 4 (this is not a musetalk.json)"
        )
    return module


def expected_shapes(kind: str, config: dict, cfg_path: Path | None = None) -> dict[str, tuple]:
    """Tensor name -> shape of the architecture ``config`` describes (built on ``meta``)."""
    module = build_module(kind, config, cfg_path)
    return {k: tuple(v.shape) for k, v in module.state_dict().items()}


def read_state_dict(path: Path, mmap: bool = True) -> dict:
    """All tensors of a ``.safetensors``, ``.pth`` or ``.bin`` file (memory-mapped where possible)."""
    path = Path(path)
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            return load_file(str(path))
        import torch

        try:
            obj = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
        except RuntimeError as exc:
            if not mmap or "mmap" not in str(exc):
                raise
            obj = torch.load(path, map_location="cpu", weights_only=True)  # legacy (non-zip) format
    except Exception as exc:  # noqa: BLE001 - deliberate: any failure here is reported, not fatal
        raise ModelError(
            f"{path}: cannot be read ({short_reason(exc)}); the file is truncated or corrupt, copy it again"
        ) from None
    if isinstance(obj, dict) and isinstance(obj.get("state_dict"), dict):
        obj = obj["state_dict"]  # a training checkpoint wrapper
    if not isinstance(obj, dict) or not obj:
        raise ModelError(f"{path}: holds no state dict (a dict of tensors); use the official weight file")
    if all(k.startswith("module.") for k in obj):
        obj = {k[len("module.") :]: v for k, v in obj.items()}  # saved from DataParallel
    return obj


def read_shapes(path: Path) -> dict[str, tuple]:
    """Tensor name -> shape without reading the data (safetensors header, or a mmapped torch file)."""
    if Path(path).suffix == ".safetensors":
        try:
            from safetensors import safe_open

            with safe_open(str(path), framework="pt") as fh:
                return {k: tuple(fh.get_slice(k).get_shape()) for k in fh.keys()}
        except Exception as exc:  # noqa: BLE001 - deliberate: any failure here is reported, not fatal
            raise ModelError(
                f"{path}: cannot be read ({short_reason(exc)}); the file is truncated or corrupt, copy it again"
            ) from None
    return {k: tuple(v.shape) for k, v in read_state_dict(path).items() if hasattr(v, "shape")}


def normalize_keys(kind: str, tensors: dict) -> dict:
    """Map a file's names onto the module's: whisper's encoder prefix, the VAE's old attention names."""
    if kind == "whisper":
        out = {}
        for k, v in tensors.items():
            for prefix in ("model.encoder.", "encoder."):
                if k.startswith(prefix):
                    out[k[len(prefix) :]] = v
                    break
        return out
    if kind == "vae":
        out = {}
        for k, v in tensors.items():
            if ".attentions." in k:
                for old, new in _VAE_OLD_ATTN.items():
                    k = k.replace(old, new)
                shape = tuple(v.shape) if hasattr(v, "shape") else tuple(v)
                if k.endswith(".weight") and ".to_" in k and len(shape) == 4:  # conv 1x1 -> linear
                    v = v.reshape(shape[:2]) if hasattr(v, "reshape") else shape[:2]
            out[k] = v
        return out
    return dict(tensors)


def config_facts(kind: str, config: dict) -> dict:
    keys = {
        "unet": ("in_channels", "out_channels", "cross_attention_dim", "block_out_channels"),
        "vae": ("latent_channels", "block_out_channels", "scaling_factor"),
        "taesd": ("latent_channels", "scaling_factor"),
        "whisper": ("d_model", "encoder_layers", "num_mel_bins", "max_source_positions"),
    }[kind]
    facts = {k: config[k] for k in keys if k in config}
    if kind == "vae":
        facts.setdefault("latent_channels", 4)
        facts.setdefault("scaling_factor", 0.18215)  # the diffusers default; absent from sd-vae's JSON
    return facts


def _guess_kind(keys) -> str | None:
    keys = set(keys)
    if {"conv_in.weight", "time_embedding.linear_1.weight"} <= keys:
        return "unet"
    if {"encoder.conv_in.weight", "quant_conv.weight"} <= keys:
        return "vae"
    if "encoder.layers.0.weight" in keys and any(k.startswith("decoder.layers.") for k in keys):
        return "taesd"
    if any(k.endswith("encoder.conv1.weight") for k in keys):
        return "whisper"
    return None


def check_tensors(kind, path: Path, cfg_path: Path, got: dict, expected: dict, raw: dict) -> None:
    missing = [k for k in expected if k not in got]
    extra = [k for k in got if k not in expected]
    guess = _guess_kind(raw)
    if (missing or extra) and guess and guess != kind:
        raise ModelError(
            f"{path}: holds {KIND_NAMES[guess]}, not {KIND_NAMES[kind]}; the files are mixed up, "
            "put each file in its own folder (spec: musetalkV15/unet.pth, sd-vae/, whisper/)"
        )
    if missing or extra:
        detail = f"{len(missing)} of {len(expected)} expected tensors missing"
        detail += f" (e.g. {missing[0]})" if missing else ""
        detail += f", {len(extra)} unexpected (e.g. {extra[0]})" if extra else ""
        raise ModelError(f"{path}: not {KIND_NAMES[kind]} matching {cfg_path.name}: {detail}")
    for k, shape in expected.items():
        if tuple(got[k]) != tuple(shape):
            raise ModelError(
                f"{path}: tensor {k} has shape {list(got[k])} but {cfg_path.name} needs {list(shape)}; "
                "the weights and their config do not belong together"
            )


def short_reason(exc: Exception) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:160]

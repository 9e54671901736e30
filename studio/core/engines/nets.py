"""MuseTalk's three networks as plain torch modules: the UNet (``nets_unet``), the SD-VAE and TAESD
(``nets_vae``), on the blocks they share (``nets_blocks``: ResNet, attention, transformer, the
config handling); this module builds them.

    unet = nets.build("unet", config)      # UNet2DConditionModel's layout, keys and outputs
    vae = nets.build("vae", config)        # AutoencoderKL: encode(x).latent_dist.mean, decode(z)
    taesd = nets.build("taesd", config)    # AutoencoderTiny: decode(z) in [-1, 1]

Why hand-written: importing diffusers to build these costs ~4-5 s on a cold render (it pulls
transformers, dozens of model modules and torch._dynamo), and its classes carry per-call
machinery (processors, LoRA scales, deprecation checks, tiling/slicing switches) that this
inference-only path does not use. These modules import only torch, support exactly the config
features MuseTalk's weights use (anything else raises ``ValueError`` naming the field, rather
than computing something different), and keep diffusers' state-dict names and shapes, so the
same weight files load strictly. ``tests/test_nets.py`` loads diffusers' randomly initialised
models into these and checks the outputs agree to float tolerance; diffusers stays the
reference there only (a test dependency; ``random_models`` writes its folders with these modules).

Facts taken from diffusers 0.42 (unet_2d_condition, unet_2d_blocks, resnet, attention,
transformer_2d, autoencoder_kl/tiny, vae): heads of a UNet transformer = ``attention_head_dim``
(diffusers' historical naming), head width = channels / heads; SDPA attention with the default
1/sqrt(d) scale; transformer GroupNorm eps 1e-6 and LayerNorm eps 1e-5; VAE norms eps 1e-6 with
a single-head self-attention in the mid blocks; the VAE encoder downsamples with a right/bottom
zero pad then a stride-2 conv, the UNet with padding ``downsample_padding``; TAESD's decoder
clamps latents with ``tanh(x/3)*3`` and maps its [0, 1] output to [-1, 1].
"""

from __future__ import annotations

from torch import nn

from studio.core.engines.nets_unet import UNet
from studio.core.engines.nets_vae import AutoencoderKL, AutoencoderTiny


def build(kind: str, config: dict) -> nn.Module:
    """The module for ``kind`` (unet | vae | taesd) and a diffusers-style ``config`` dict."""
    cls = {"unet": UNet, "vae": AutoencoderKL, "taesd": AutoencoderTiny}.get(kind)
    if cls is None:
        raise ValueError(f"unknown network kind {kind!r}")
    return cls(config)

"""The blocks MuseTalk's networks share (ResNet, up/down sampling, attention, transformer), their
outputs and the config handling; the networks are ``nets_unet`` and ``nets_vae``, built by ``nets``."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


class Config(dict):
    """A model's config: its fields (diffusers' defaults filled in), readable as attributes."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name, value):
        raise AttributeError("a model config is read-only")


@dataclass
class Output:
    """What ``return_dict=True`` gives: ``.sample`` (UNet, decoders) or ``.latents`` (TAESD encode)."""

    sample: torch.Tensor | None = None
    latents: torch.Tensor | None = None


@dataclass
class LatentDist:
    """The part of diffusers' DiagonalGaussianDistribution MuseTalk uses: the mean (and logvar)."""

    mean: torch.Tensor
    logvar: torch.Tensor


@dataclass
class EncoderOutput:
    latent_dist: LatentDist


# --------------------------------------------------------------------------------------------
# Config handling


def merge_config(defaults: dict, config: dict) -> Config:
    """Defaults overlaid with the config's known fields; names starting with ``_`` are kept as they
    are; other unknown fields are ignored (as diffusers' ``from_config`` does)."""
    merged = dict(defaults)
    for k, v in config.items():
        if k in defaults or k.startswith("_"):
            merged[k] = list(v) if isinstance(v, tuple) else v
    return Config(merged)


def require(cfg: Config, what: str, **allowed) -> None:
    """Refuse a field whose value is not the one this module implements."""
    for key, ok in allowed.items():
        value = cfg[key]
        good = ok(value) if callable(ok) else value == ok
        if not good:
            raise ValueError(f"{key}={value!r} is not supported by studio's {what}")


def per_block(value, n: int, key: str) -> list:
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ValueError(f"{key} has {len(value)} entries for {n} blocks")
        return list(value)
    return [value] * n


ACTIVATIONS = {"silu": nn.SiLU, "swish": nn.SiLU, "relu": nn.ReLU, "gelu": nn.GELU, "mish": nn.Mish}


def activation(name: str) -> nn.Module:
    if name not in ACTIVATIONS:
        raise ValueError(f"activation {name!r} is not supported (use one of {', '.join(ACTIVATIONS)})")
    return ACTIVATIONS[name]()


def is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def ints_or_one(v, n: int) -> bool:
    """An int, or one int per block."""
    return is_int(v) or (isinstance(v, (list, tuple)) and len(v) == n and all(map(is_int, v)))


# --------------------------------------------------------------------------------------------
# Shared building blocks


class ResnetBlock(nn.Module):
    """GroupNorm-act-conv twice, the time embedding added between, a 1x1 shortcut when widths differ."""

    def __init__(self, cin: int, cout: int, temb: int | None, groups: int, eps: float, act: str):
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, cin, eps=eps)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.time_emb_proj = nn.Linear(temb, cout) if temb else None
        self.norm2 = nn.GroupNorm(groups, cout, eps=eps)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.nonlinearity = activation(act)
        self.conv_shortcut = nn.Conv2d(cin, cout, 1) if cin != cout else None

    def forward(self, x, temb=None):
        h = self.conv1(self.nonlinearity(self.norm1(x)))
        if self.time_emb_proj is not None:
            h = h + self.time_emb_proj(self.nonlinearity(temb))[:, :, None, None]
        h = self.conv2(self.nonlinearity(self.norm2(h)))
        if self.conv_shortcut is not None:
            x = self.conv_shortcut(x)
        return x + h


class Downsample(nn.Module):
    """Stride-2 3x3 conv; ``padding=0`` pads right and bottom by one first (the VAE encoder)."""

    def __init__(self, cin: int, cout: int, padding: int):
        super().__init__()
        self.pad_right = padding == 0
        self.conv = nn.Conv2d(cin, cout, 3, stride=2, padding=padding)

    def forward(self, x):
        if self.pad_right:
            x = F.pad(x, (0, 1, 0, 1))
        return self.conv(x)


class Upsample(nn.Module):
    """Nearest x2 (or to ``size``) then a 3x3 conv."""

    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1)

    def forward(self, x, size=None):
        if size is None:
            x = F.interpolate(x, scale_factor=2.0, mode="nearest")
        else:
            x = F.interpolate(x, size=size, mode="nearest")
        return self.conv(x)


def _heads(x, n: int):
    """[B, L, n*d] -> [B, n, L, d]"""
    return x.view(x.shape[0], x.shape[1], n, x.shape[2] // n).transpose(1, 2)


def _attend(q, k, v, n: int):
    out = F.scaled_dot_product_attention(_heads(q, n), _heads(k, n), _heads(v, n))
    return out.transpose(1, 2).flatten(2)


class Attention(nn.Module):
    """Multi-head attention over tokens (self, or cross with ``context``); q/k/v without bias."""

    def __init__(self, dim: int, context_dim: int, heads: int, head_dim: int):
        super().__init__()
        inner = heads * head_dim
        self.heads = heads
        self.to_q = nn.Linear(dim, inner, bias=False)
        self.to_k = nn.Linear(context_dim, inner, bias=False)
        self.to_v = nn.Linear(context_dim, inner, bias=False)
        self.to_out = nn.ModuleList([nn.Linear(inner, dim)])

    def forward(self, x, context=None):
        ctx = x if context is None else context
        return self.to_out[0](_attend(self.to_q(x), self.to_k(ctx), self.to_v(ctx), self.heads))


class GEGLU(nn.Module):
    def __init__(self, dim: int, inner: int):
        super().__init__()
        self.proj = nn.Linear(dim, inner * 2)

    def forward(self, x):
        x, gate = self.proj(x).chunk(2, dim=-1)
        return x * F.gelu(gate)


class FeedForward(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        # net.1 is diffusers' dropout (no weights); the index keeps net.2's name
        self.net = nn.ModuleList([GEGLU(dim, dim * 4), nn.Identity(), nn.Linear(dim * 4, dim)])

    def forward(self, x):
        return self.net[2](self.net[0](x))


class TransformerBlock(nn.Module):
    """Pre-norm self-attention, cross-attention to the audio, GEGLU feed-forward; residual each."""

    def __init__(self, dim: int, heads: int, head_dim: int, context_dim: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-5)
        self.attn1 = Attention(dim, dim, heads, head_dim)
        self.norm2 = nn.LayerNorm(dim, eps=1e-5)
        self.attn2 = Attention(dim, context_dim, heads, head_dim)
        self.norm3 = nn.LayerNorm(dim, eps=1e-5)
        self.ff = FeedForward(dim)

    def forward(self, x, context):
        x = self.attn1(self.norm1(x)) + x
        x = self.attn2(self.norm2(x), context) + x
        return self.ff(self.norm3(x)) + x


class Transformer2D(nn.Module):
    """GroupNorm, projection to tokens (1x1 conv or linear), transformer blocks, projection back, residual."""

    def __init__(self, channels: int, heads: int, context_dim: int, groups: int, layers: int, linear: bool):
        super().__init__()
        head_dim = channels // heads
        inner = heads * head_dim
        self.linear = linear
        self.norm = nn.GroupNorm(groups, channels, eps=1e-6)
        self.proj_in = nn.Linear(channels, inner) if linear else nn.Conv2d(channels, inner, 1)
        self.transformer_blocks = nn.ModuleList(
            [TransformerBlock(inner, heads, head_dim, context_dim) for _ in range(layers)]
        )
        self.proj_out = nn.Linear(inner, channels) if linear else nn.Conv2d(inner, channels, 1)

    def forward(self, x, context):
        b, _, h, w = x.shape
        t = self.norm(x)
        if not self.linear:
            t = self.proj_in(t)
        t = t.permute(0, 2, 3, 1).reshape(b, h * w, t.shape[1])
        if self.linear:
            t = self.proj_in(t)
        for block in self.transformer_blocks:
            t = block(t, context)
        if self.linear:
            t = self.proj_out(t)
        t = t.reshape(b, h, w, t.shape[-1]).permute(0, 3, 1, 2).contiguous()
        if not self.linear:
            t = self.proj_out(t)
        return t + x


class SpatialSelfAttention(nn.Module):
    """The VAE mid block's attention: GroupNorm, one head over all pixels (biased q/k/v), residual."""

    def __init__(self, channels: int, groups: int, eps: float):
        super().__init__()
        self.group_norm = nn.GroupNorm(groups, channels, eps=eps)
        self.to_q = nn.Linear(channels, channels)
        self.to_k = nn.Linear(channels, channels)
        self.to_v = nn.Linear(channels, channels)
        self.to_out = nn.ModuleList([nn.Linear(channels, channels)])

    def forward(self, x):
        b, c, h, w = x.shape
        t = self.group_norm(x).flatten(2).transpose(1, 2)
        out = self.to_out[0](_attend(self.to_q(t), self.to_k(t), self.to_v(t), 1))
        return out.transpose(1, 2).reshape(b, c, h, w) + x

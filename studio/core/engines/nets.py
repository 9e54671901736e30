"""MuseTalk's three networks as plain torch modules: the UNet, the SD-VAE and TAESD.

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

import math
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


def build(kind: str, config: dict) -> nn.Module:
    """The module for ``kind`` (unet | vae | taesd) and a diffusers-style ``config`` dict."""
    cls = {"unet": UNet, "vae": AutoencoderKL, "taesd": AutoencoderTiny}.get(kind)
    if cls is None:
        raise ValueError(f"unknown network kind {kind!r}")
    return cls(config)


# --------------------------------------------------------------------------------------------
# Config handling


def _merge(defaults: dict, config: dict) -> Config:
    """Defaults overlaid with the config's known fields; names starting with ``_`` are kept as they
    are; other unknown fields are ignored (as diffusers' ``from_config`` does)."""
    merged = dict(defaults)
    for k, v in config.items():
        if k in defaults or k.startswith("_"):
            merged[k] = list(v) if isinstance(v, tuple) else v
    return Config(merged)


def _require(cfg: Config, what: str, **allowed) -> None:
    """Refuse a field whose value is not the one this module implements."""
    for key, ok in allowed.items():
        value = cfg[key]
        good = ok(value) if callable(ok) else value == ok
        if not good:
            raise ValueError(f"{key}={value!r} is not supported by studio's {what}")


def _per_block(value, n: int, key: str) -> list:
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ValueError(f"{key} has {len(value)} entries for {n} blocks")
        return list(value)
    return [value] * n


_ACTS = {"silu": nn.SiLU, "swish": nn.SiLU, "relu": nn.ReLU, "gelu": nn.GELU, "mish": nn.Mish}


def _act(name: str) -> nn.Module:
    if name not in _ACTS:
        raise ValueError(f"activation {name!r} is not supported (use one of {', '.join(_ACTS)})")
    return _ACTS[name]()


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _ints(v, n: int) -> bool:
    """An int, or one int per block."""
    return _is_int(v) or (isinstance(v, (list, tuple)) and len(v) == n and all(map(_is_int, v)))


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
        self.nonlinearity = _act(act)
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


# --------------------------------------------------------------------------------------------
# The UNet (UNet2DConditionModel)

UNET_DEFAULTS = {
    "sample_size": None,
    "in_channels": 4,
    "out_channels": 4,
    "center_input_sample": False,
    "flip_sin_to_cos": True,
    "freq_shift": 0,
    "down_block_types": ["CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"],
    "mid_block_type": "UNetMidBlock2DCrossAttn",
    "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"],
    "only_cross_attention": False,
    "block_out_channels": [320, 640, 1280, 1280],
    "layers_per_block": 2,
    "downsample_padding": 1,
    "mid_block_scale_factor": 1,
    "dropout": 0.0,
    "act_fn": "silu",
    "norm_num_groups": 32,
    "norm_eps": 1e-5,
    "cross_attention_dim": 1280,
    "transformer_layers_per_block": 1,
    "reverse_transformer_layers_per_block": None,
    "encoder_hid_dim": None,
    "encoder_hid_dim_type": None,
    "attention_head_dim": 8,
    "num_attention_heads": None,
    "dual_cross_attention": False,
    "use_linear_projection": False,
    "class_embed_type": None,
    "addition_embed_type": None,
    "addition_time_embed_dim": None,
    "num_class_embeds": None,
    "upcast_attention": False,
    "resnet_time_scale_shift": "default",
    "resnet_skip_time_act": False,
    "resnet_out_scale_factor": 1.0,
    "time_embedding_type": "positional",
    "time_embedding_dim": None,
    "time_embedding_act_fn": None,
    "timestep_post_act": None,
    "time_cond_proj_dim": None,
    "conv_in_kernel": 3,
    "conv_out_kernel": 3,
    "projection_class_embeddings_input_dim": None,
    "attention_type": "default",
    "class_embeddings_concat": False,
    "mid_block_only_cross_attention": None,
    "cross_attention_norm": None,
    "addition_embed_type_num_heads": 64,
}
_DOWN = ("CrossAttnDownBlock2D", "DownBlock2D")
_UP = ("CrossAttnUpBlock2D", "UpBlock2D")


class Timesteps(nn.Module):
    """Sinusoidal timestep features (diffusers' ``get_timestep_embedding``, max period 10000)."""

    def __init__(self, dim: int, flip_sin_to_cos: bool, shift: float):
        super().__init__()
        self.dim, self.flip, self.shift = dim, bool(flip_sin_to_cos), float(shift)

    def forward(self, t):
        half = self.dim // 2
        exponent = -math.log(10000.0) * torch.arange(half, dtype=torch.float32, device=t.device)
        freqs = torch.exp(exponent / (half - self.shift))
        arg = t[:, None].float() * freqs[None, :]
        emb = torch.cat([torch.cos(arg), torch.sin(arg)] if self.flip else [torch.sin(arg), torch.cos(arg)], -1)
        if self.dim % 2:
            emb = F.pad(emb, (0, 1))
        return emb


class TimestepEmbedding(nn.Module):
    """linear_1 -> act -> linear_2 (``condition`` is accepted for diffusers' call signature)."""

    def __init__(self, cin: int, dim: int, act: str):
        super().__init__()
        self.linear_1 = nn.Linear(cin, dim)
        self.act = _act(act)
        self.linear_2 = nn.Linear(dim, dim)

    def forward(self, sample, condition=None):
        return self.linear_2(self.act(self.linear_1(sample)))


class DownBlock(nn.Module):
    """ResNets (each followed by a transformer when ``heads``), then an optional stride-2 conv."""

    def __init__(
        self, cin, cout, temb, layers, groups, eps, act, heads, context_dim, tf_layers, linear, downsample, padding
    ):
        super().__init__()
        self.resnets = nn.ModuleList(
            [ResnetBlock(cin if i == 0 else cout, cout, temb, groups, eps, act) for i in range(layers)]
        )
        if heads:
            self.attentions = nn.ModuleList(
                [Transformer2D(cout, heads, context_dim, groups, tf_layers, linear) for _ in range(layers)]
            )
        else:
            self.attentions = None
        self.downsamplers = nn.ModuleList([Downsample(cout, cout, padding)]) if downsample else None

    def forward(self, x, temb, context):
        skips = ()
        for i, resnet in enumerate(self.resnets):
            x = resnet(x, temb)
            if self.attentions is not None:
                x = self.attentions[i](x, context)
            skips += (x,)
        if self.downsamplers is not None:
            x = self.downsamplers[0](x)
            skips += (x,)
        return x, skips


class UpBlock(nn.Module):
    """ResNets over the input joined with the matching down-path outputs, transformers when
    ``heads``, then an optional nearest x2 upsample and conv."""

    def __init__(
        self, cin, prev, cout, temb, layers, groups, eps, act, heads, context_dim, tf_layers, linear, upsample
    ):
        super().__init__()
        self.resnets = nn.ModuleList(
            [
                ResnetBlock(
                    (prev if i == 0 else cout) + (cin if i == layers - 1 else cout), cout, temb, groups, eps, act
                )
                for i in range(layers)
            ]
        )
        if heads:
            self.attentions = nn.ModuleList(
                [Transformer2D(cout, heads, context_dim, groups, tf_layers, linear) for _ in range(layers)]
            )
        else:
            self.attentions = None
        self.upsamplers = nn.ModuleList([Upsample(cout, cout)]) if upsample else None

    def forward(self, x, skips, temb, context, size=None):
        for i, resnet in enumerate(self.resnets):
            x = resnet(torch.cat([x, skips[-1 - i]], dim=1), temb)
            if self.attentions is not None:
                x = self.attentions[i](x, context)
        if self.upsamplers is not None:
            x = self.upsamplers[0](x, size)
        return x


class MidBlockCrossAttn(nn.Module):
    def __init__(self, ch, temb, groups, eps, act, heads, context_dim, tf_layers, linear):
        super().__init__()
        self.resnets = nn.ModuleList([ResnetBlock(ch, ch, temb, groups, eps, act) for _ in range(2)])
        self.attentions = nn.ModuleList([Transformer2D(ch, heads, context_dim, groups, tf_layers, linear)])

    def forward(self, x, temb, context):
        x = self.resnets[0](x, temb)
        return self.resnets[1](self.attentions[0](x, context), temb)


class UNet(nn.Module):
    """UNet2DConditionModel for the configs MuseTalk uses (cross-attention to audio features).

    ``unet(sample, timestep, encoder_hidden_states=audio, return_dict=False)[0]``.
    """

    def __init__(self, config: dict):
        super().__init__()
        cfg = self.config = _merge(UNET_DEFAULTS, config)
        what = "UNet (studio/core/engines/nets.py)"
        n = len(cfg.down_block_types)
        _require(
            cfg,
            what,
            mid_block_type="UNetMidBlock2DCrossAttn",
            num_attention_heads=None,
            dual_cross_attention=False,
            class_embed_type=None,
            addition_embed_type=None,
            num_class_embeds=None,
            addition_time_embed_dim=None,
            encoder_hid_dim=None,
            encoder_hid_dim_type=None,
            resnet_time_scale_shift="default",
            resnet_skip_time_act=False,
            resnet_out_scale_factor=1.0,
            mid_block_scale_factor=1,
            time_embedding_type="positional",
            time_embedding_act_fn=None,
            timestep_post_act=None,
            time_cond_proj_dim=None,
            conv_in_kernel=3,
            conv_out_kernel=3,
            projection_class_embeddings_input_dim=None,
            attention_type="default",
            class_embeddings_concat=False,
            cross_attention_norm=None,
            reverse_transformer_layers_per_block=None,
            act_fn=lambda v: v in _ACTS,
            norm_num_groups=_is_int,
            cross_attention_dim=_is_int,
            only_cross_attention=lambda v: not any(v) if isinstance(v, (list, tuple)) else v is False,
            mid_block_only_cross_attention=lambda v: v in (None, False),
            down_block_types=lambda v: all(t in _DOWN for t in v),
            up_block_types=lambda v: all(t in _UP for t in v) and len(v) == n,
            block_out_channels=lambda v: len(v) == n,
            time_embedding_dim=lambda v: v is None or _is_int(v),
            attention_head_dim=lambda v: _ints(v, n),
            transformer_layers_per_block=lambda v: _ints(v, n),
            layers_per_block=lambda v: _ints(v, n),
        )
        heads = _per_block(cfg.attention_head_dim, n, "attention_head_dim")
        layers = _per_block(cfg.layers_per_block, n, "layers_per_block")
        tf_layers = _per_block(cfg.transformer_layers_per_block, n, "transformer_layers_per_block")
        chans = list(cfg.block_out_channels)
        groups, eps, act, ctx, lin = (
            cfg.norm_num_groups,
            cfg.norm_eps,
            cfg.act_fn,
            cfg.cross_attention_dim,
            bool(cfg.use_linear_projection),
        )
        temb = cfg.time_embedding_dim or chans[0] * 4

        self.center_input_sample = bool(cfg.center_input_sample)
        self.conv_in = nn.Conv2d(cfg.in_channels, chans[0], 3, padding=1)
        self.time_proj = Timesteps(chans[0], cfg.flip_sin_to_cos, cfg.freq_shift)
        self.time_embedding = TimestepEmbedding(chans[0], temb, act)

        self.down_blocks = nn.ModuleList()
        cout = chans[0]
        for i, kind in enumerate(cfg.down_block_types):
            cin, cout = cout, chans[i]
            self.down_blocks.append(
                DownBlock(
                    cin,
                    cout,
                    temb,
                    layers[i],
                    groups,
                    eps,
                    act,
                    heads[i] if kind == "CrossAttnDownBlock2D" else 0,
                    ctx,
                    tf_layers[i],
                    lin,
                    i < n - 1,
                    cfg.downsample_padding,
                )
            )
        self.mid_block = MidBlockCrossAttn(chans[-1], temb, groups, eps, act, heads[-1], ctx, tf_layers[-1], lin)

        rchans, rheads, rlayers, rtf = chans[::-1], heads[::-1], layers[::-1], tf_layers[::-1]
        self.up_blocks = nn.ModuleList()
        cout = rchans[0]
        for i, kind in enumerate(cfg.up_block_types):
            prev, cout, cin = cout, rchans[i], rchans[min(i + 1, n - 1)]
            self.up_blocks.append(
                UpBlock(
                    cin,
                    prev,
                    cout,
                    temb,
                    rlayers[i] + 1,
                    groups,
                    eps,
                    act,
                    rheads[i] if kind == "CrossAttnUpBlock2D" else 0,
                    ctx,
                    rtf[i],
                    lin,
                    i < n - 1,
                )
            )
        self.up_factor = 2 ** (n - 1)

        self.conv_norm_out = nn.GroupNorm(groups, chans[0], eps=eps)
        self.conv_act = _act(act)
        self.conv_out = nn.Conv2d(chans[0], cfg.out_channels, 3, padding=1)

    def forward(self, sample, timestep, encoder_hidden_states, return_dict: bool = True):
        if self.center_input_sample:
            sample = 2 * sample - 1.0
        if not torch.is_tensor(timestep):
            timestep = torch.tensor([timestep], device=sample.device)
        t = timestep.reshape(-1).expand(sample.shape[0])
        emb = self.time_embedding(self.time_proj(t).to(sample.dtype))
        context = encoder_hidden_states

        x = self.conv_in(sample)
        skips = (x,)
        for block in self.down_blocks:
            x, res = block(x, emb, context)
            skips += res
        x = self.mid_block(x, emb, context)
        odd = any(s % self.up_factor for s in sample.shape[-2:])  # sizes are fixed per graph
        last = len(self.up_blocks) - 1
        for i, block in enumerate(self.up_blocks):
            k = len(block.resnets)  # type: ignore[arg-type]  # a ModuleList (torch types attributes as Tensor | Module)
            res, skips = skips[-k:], skips[:-k]
            size = skips[-1].shape[2:] if odd and i < last else None
            x = block(x, res, emb, context, size)
        out = self.conv_out(self.conv_act(self.conv_norm_out(x)))
        return Output(sample=out) if return_dict else (out,)


# --------------------------------------------------------------------------------------------
# The SD-VAE (AutoencoderKL)

VAE_DEFAULTS = {
    "in_channels": 3,
    "out_channels": 3,
    "down_block_types": ["DownEncoderBlock2D"],
    "up_block_types": ["UpDecoderBlock2D"],
    "block_out_channels": [64],
    "layers_per_block": 1,
    "act_fn": "silu",
    "latent_channels": 4,
    "norm_num_groups": 32,
    "sample_size": 32,
    "scaling_factor": 0.18215,
    "shift_factor": None,
    "latents_mean": None,
    "latents_std": None,
    "force_upcast": True,
    "use_quant_conv": True,
    "use_post_quant_conv": True,
    "mid_block_add_attention": True,
}
_VAE_EPS = 1e-6


class MidBlock(nn.Module):
    """ResNet, (self-attention), ResNet; no time embedding."""

    def __init__(self, ch: int, groups: int, act: str, attention: bool):
        super().__init__()
        self.resnets = nn.ModuleList([ResnetBlock(ch, ch, None, groups, _VAE_EPS, act) for _ in range(2)])
        self.attentions = nn.ModuleList([SpatialSelfAttention(ch, groups, _VAE_EPS)]) if attention else None

    def forward(self, x):
        x = self.resnets[0](x)
        if self.attentions is not None:
            x = self.attentions[0](x)
        return self.resnets[1](x)


class CoderBlock(nn.Module):
    """The VAE's DownEncoderBlock2D / UpDecoderBlock2D: ResNets then a resampling conv."""

    def __init__(self, cin: int, cout: int, layers: int, groups: int, act: str, down: bool, up: bool):
        super().__init__()
        self.resnets = nn.ModuleList(
            [ResnetBlock(cin if i == 0 else cout, cout, None, groups, _VAE_EPS, act) for i in range(layers)]
        )
        self.downsamplers = nn.ModuleList([Downsample(cout, cout, 0)]) if down else None
        self.upsamplers = nn.ModuleList([Upsample(cout, cout)]) if up else None

    def forward(self, x):
        for resnet in self.resnets:
            x = resnet(x)
        if self.downsamplers is not None:
            x = self.downsamplers[0](x)
        if self.upsamplers is not None:
            x = self.upsamplers[0](x)
        return x


class VAEEncoder(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        chans, groups, act = list(cfg.block_out_channels), cfg.norm_num_groups, cfg.act_fn
        self.conv_in = nn.Conv2d(cfg.in_channels, chans[0], 3, padding=1)
        self.down_blocks = nn.ModuleList(
            [
                CoderBlock(chans[max(i - 1, 0)], chans[i], cfg.layers_per_block, groups, act, i < len(chans) - 1, False)
                for i in range(len(chans))
            ]
        )
        self.mid_block = MidBlock(chans[-1], groups, act, bool(cfg.mid_block_add_attention))
        self.conv_norm_out = nn.GroupNorm(groups, chans[-1], eps=_VAE_EPS)
        self.conv_act = _act(act)
        self.conv_out = nn.Conv2d(chans[-1], 2 * cfg.latent_channels, 3, padding=1)

    def forward(self, x):
        x = self.conv_in(x)
        for block in self.down_blocks:
            x = block(x)
        return self.conv_out(self.conv_act(self.conv_norm_out(self.mid_block(x))))


class VAEDecoder(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        chans, groups, act = list(cfg.block_out_channels)[::-1], cfg.norm_num_groups, cfg.act_fn
        self.conv_in = nn.Conv2d(cfg.latent_channels, chans[0], 3, padding=1)
        self.mid_block = MidBlock(chans[0], groups, act, bool(cfg.mid_block_add_attention))
        self.up_blocks = nn.ModuleList(
            [
                CoderBlock(
                    chans[max(i - 1, 0)], chans[i], cfg.layers_per_block + 1, groups, act, False, i < len(chans) - 1
                )
                for i in range(len(chans))
            ]
        )
        self.conv_norm_out = nn.GroupNorm(groups, chans[-1], eps=_VAE_EPS)
        self.conv_act = _act(act)
        self.conv_out = nn.Conv2d(chans[-1], cfg.out_channels, 3, padding=1)

    def forward(self, z):
        x = self.mid_block(self.conv_in(z))
        for block in self.up_blocks:
            x = block(x)
        return self.conv_out(self.conv_act(self.conv_norm_out(x)))


class AutoencoderKL(nn.Module):
    """``encode(x).latent_dist.mean`` (x in [-1, 1]) and ``decode(z, return_dict=False)[0]``."""

    def __init__(self, config: dict):
        super().__init__()
        cfg = self.config = _merge(VAE_DEFAULTS, config)
        n = len(cfg.block_out_channels)
        _require(
            cfg,
            "SD-VAE (studio/core/engines/nets.py)",
            act_fn=lambda v: v in _ACTS,
            down_block_types=lambda v: list(v) == ["DownEncoderBlock2D"] * n,
            up_block_types=lambda v: list(v) == ["UpDecoderBlock2D"] * n,
            layers_per_block=_is_int,
            norm_num_groups=_is_int,
            latent_channels=_is_int,
        )
        self.encoder = VAEEncoder(cfg)
        self.decoder = VAEDecoder(cfg)
        lat = 2 * cfg.latent_channels
        self.quant_conv = nn.Conv2d(lat, lat, 1) if cfg.use_quant_conv else None
        self.post_quant_conv = (
            nn.Conv2d(cfg.latent_channels, cfg.latent_channels, 1) if cfg.use_post_quant_conv else None
        )

    def encode(self, x, return_dict: bool = True):
        moments = self.encoder(x)
        if self.quant_conv is not None:
            moments = self.quant_conv(moments)
        mean, logvar = moments.chunk(2, dim=1)
        dist = LatentDist(mean, logvar)
        return EncoderOutput(dist) if return_dict else (dist,)

    def decode(self, z, return_dict: bool = True):
        if self.post_quant_conv is not None:
            z = self.post_quant_conv(z)
        out = self.decoder(z)
        return Output(sample=out) if return_dict else (out,)

    def forward(self, x, return_dict: bool = True):
        return self.decode(self.encode(x).latent_dist.mean, return_dict)


# --------------------------------------------------------------------------------------------
# TAESD (AutoencoderTiny)

TAESD_DEFAULTS = {
    "in_channels": 3,
    "out_channels": 3,
    "encoder_block_out_channels": [64, 64, 64, 64],
    "decoder_block_out_channels": [64, 64, 64, 64],
    "act_fn": "relu",
    "upsample_fn": "nearest",
    "latent_channels": 4,
    "upsampling_scaling_factor": 2,
    "num_encoder_blocks": [1, 3, 3, 3],
    "num_decoder_blocks": [3, 3, 3, 1],
    "latent_magnitude": 3,
    "latent_shift": 0.5,
    "force_upcast": False,
    "scaling_factor": 1.0,
    "shift_factor": 0.0,
    "block_out_channels": None,
}


class TinyBlock(nn.Module):
    """Three 3x3 convs (act between) plus a skip, then ReLU."""

    def __init__(self, cin: int, cout: int, act: str):
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(cin, cout, 3, padding=1),
            _act(act),
            nn.Conv2d(cout, cout, 3, padding=1),
            _act(act),
            nn.Conv2d(cout, cout, 3, padding=1),
        )
        self.skip = nn.Conv2d(cin, cout, 1, bias=False) if cin != cout else nn.Identity()
        self.fuse = nn.ReLU()

    def forward(self, x):
        return self.fuse(self.conv(x) + self.skip(x))


class TinyEncoder(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        chans, act = list(cfg.encoder_block_out_channels), cfg.act_fn
        layers: list[nn.Module] = []
        for i, blocks in enumerate(cfg.num_encoder_blocks):
            c = chans[i]
            layers.append(
                nn.Conv2d(cfg.in_channels, c, 3, padding=1)
                if i == 0
                else nn.Conv2d(c, c, 3, padding=1, stride=2, bias=False)
            )
            layers += [TinyBlock(c, c, act) for _ in range(blocks)]
        layers.append(nn.Conv2d(chans[-1], cfg.latent_channels, 3, padding=1))
        self.layers = nn.Sequential(*layers)

    def forward(self, x):
        return self.layers((x + 1) / 2)  # [-1, 1] -> TAESD's [0, 1]


class TinyDecoder(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        chans, act, n = list(cfg.decoder_block_out_channels), cfg.act_fn, len(cfg.num_decoder_blocks)
        layers: list[nn.Module] = [nn.Conv2d(cfg.latent_channels, chans[0], 3, padding=1), _act(act)]
        for i, blocks in enumerate(cfg.num_decoder_blocks):
            c, final = chans[i], i == n - 1
            layers += [TinyBlock(c, c, act) for _ in range(blocks)]
            if not final:
                layers.append(nn.Upsample(scale_factor=cfg.upsampling_scaling_factor, mode=cfg.upsample_fn))
            layers.append(nn.Conv2d(c, cfg.out_channels if final else c, 3, padding=1, bias=final))
        self.layers = nn.Sequential(*layers)

    def forward(self, z):
        x = self.layers(torch.tanh(z / 3) * 3)  # TAESD's latent clamp
        return x * 2 - 1  # [0, 1] -> [-1, 1]


class AutoencoderTiny(nn.Module):
    """``decode(z, return_dict=False)[0]`` in [-1, 1]; ``encode(x).latents`` (x in [-1, 1])."""

    def __init__(self, config: dict):
        super().__init__()
        cfg = _merge(TAESD_DEFAULTS, config)
        _require(
            cfg,
            "TAESD (studio/core/engines/nets.py)",
            act_fn=lambda v: v in _ACTS,
            upsample_fn=lambda v: v in ("nearest", "bilinear", "bicubic"),
            encoder_block_out_channels=lambda v: len(v) == len(cfg.num_encoder_blocks),
            decoder_block_out_channels=lambda v: len(v) == len(cfg.num_decoder_blocks),
        )
        # diffusers records the decoder's widths as block_out_channels, whatever the file said
        self.config = cfg = Config({**cfg, "block_out_channels": list(cfg.decoder_block_out_channels)})
        self.encoder = TinyEncoder(cfg)
        self.decoder = TinyDecoder(cfg)

    def encode(self, x, return_dict: bool = True):
        out = self.encoder(x)
        return Output(latents=out) if return_dict else (out,)

    def decode(self, z, return_dict: bool = True):
        out = self.decoder(z)
        return Output(sample=out) if return_dict else (out,)

    def forward(self, x, return_dict: bool = True):
        return self.decode(self.encode(x, False)[0], return_dict)

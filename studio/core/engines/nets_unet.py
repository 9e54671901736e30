"""The UNet of MuseTalk (diffusers' UNet2DConditionModel layout, keys and outputs), on ``nets_blocks``."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from studio.core.engines.nets_blocks import (
    ACTIVATIONS,
    Downsample,
    Output,
    ResnetBlock,
    Transformer2D,
    Upsample,
    activation,
    ints_or_one,
    is_int,
    merge_config,
    per_block,
    require,
)

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
        self.act = activation(act)
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


#: diffusers' UNet2DConditionModel fields this UNet implements only at their defaults (``UNET_DEFAULTS``)
AT_DEFAULT = (
    "mid_block_type",
    "num_attention_heads",
    "dual_cross_attention",
    "class_embed_type",
    "addition_embed_type",
    "num_class_embeds",
    "addition_time_embed_dim",
    "encoder_hid_dim",
    "encoder_hid_dim_type",
    "resnet_time_scale_shift",
    "resnet_skip_time_act",
    "resnet_out_scale_factor",
    "mid_block_scale_factor",
    "time_embedding_type",
    "time_embedding_act_fn",
    "timestep_post_act",
    "time_cond_proj_dim",
    "conv_in_kernel",
    "conv_out_kernel",
    "projection_class_embeddings_input_dim",
    "attention_type",
    "class_embeddings_concat",
    "cross_attention_norm",
    "reverse_transformer_layers_per_block",
)


class UNet(nn.Module):
    """UNet2DConditionModel for the configs MuseTalk uses (cross-attention to audio features).

    ``unet(sample, timestep, encoder_hidden_states=audio, return_dict=False)[0]``.
    """

    def __init__(self, config: dict):
        super().__init__()
        cfg = self.config = merge_config(UNET_DEFAULTS, config)
        what = "UNet (studio/core/engines/nets_unet.py)"
        n = len(cfg.down_block_types)
        require(
            cfg,
            what,
            **{k: UNET_DEFAULTS[k] for k in AT_DEFAULT},
            act_fn=lambda v: v in ACTIVATIONS,
            norm_num_groups=is_int,
            cross_attention_dim=is_int,
            only_cross_attention=lambda v: not any(v) if isinstance(v, (list, tuple)) else v is False,
            mid_block_only_cross_attention=lambda v: v in (None, False),
            down_block_types=lambda v: all(t in _DOWN for t in v),
            up_block_types=lambda v: all(t in _UP for t in v) and len(v) == n,
            block_out_channels=lambda v: len(v) == n,
            time_embedding_dim=lambda v: v is None or is_int(v),
            attention_head_dim=lambda v: ints_or_one(v, n),
            transformer_layers_per_block=lambda v: ints_or_one(v, n),
            layers_per_block=lambda v: ints_or_one(v, n),
        )
        heads = per_block(cfg.attention_head_dim, n, "attention_head_dim")
        layers = per_block(cfg.layers_per_block, n, "layers_per_block")
        tf_layers = per_block(cfg.transformer_layers_per_block, n, "transformer_layers_per_block")
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
        self.conv_act = activation(act)
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

"""MuseTalk's image coders on ``nets_blocks``: the SD-VAE (diffusers' AutoencoderKL) and TAESD
(AutoencoderTiny), same layouts, keys and outputs."""

from __future__ import annotations

import torch
from torch import nn

from studio.core.engines.nets_blocks import (
    ACTIVATIONS,
    Config,
    Downsample,
    EncoderOutput,
    LatentDist,
    Output,
    ResnetBlock,
    SpatialSelfAttention,
    Upsample,
    activation,
    is_int,
    merge_config,
    require,
)

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
        self.conv_act = activation(act)
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
        self.conv_act = activation(act)
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
        cfg = self.config = merge_config(VAE_DEFAULTS, config)
        n = len(cfg.block_out_channels)
        require(
            cfg,
            "SD-VAE (studio/core/engines/nets_vae.py)",
            act_fn=lambda v: v in ACTIVATIONS,
            down_block_types=lambda v: list(v) == ["DownEncoderBlock2D"] * n,
            up_block_types=lambda v: list(v) == ["UpDecoderBlock2D"] * n,
            layers_per_block=is_int,
            norm_num_groups=is_int,
            latent_channels=is_int,
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
            activation(act),
            nn.Conv2d(cout, cout, 3, padding=1),
            activation(act),
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
        layers: list[nn.Module] = [nn.Conv2d(cfg.latent_channels, chans[0], 3, padding=1), activation(act)]
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
        cfg = merge_config(TAESD_DEFAULTS, config)
        require(
            cfg,
            "TAESD (studio/core/engines/nets_vae.py)",
            act_fn=lambda v: v in ACTIVATIONS,
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

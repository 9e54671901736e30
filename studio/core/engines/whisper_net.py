"""whisper-tiny's audio encoder and log-mel spectrogram in plain torch (spec §1.4), without transformers.

    net = WhisperEncoderNet(config)            # config.json's dict; HF WhisperEncoder's state-dict names
    mel = log_mel(samples)                     # [B, n] float32 torch (any device) -> [B, 80, 3000]
    states = net(mel)                          # [embedding, layer 0, .., layer N-1 layer-normed], [B, 1500, d]

Why hand-written: importing ``transformers`` (for ``WhisperFeatureExtractor`` and ``WhisperEncoder``)
cost most of a cold ``studio render --engine musetalk`` (~11 s of the whisper start on the GPU
machine, holding the GIL against the UNet loading in another thread), and the extractor pads with
numpy and computes the spectrogram on the CPU whatever the engine's device. MuseTalk needs only the
encoder's forward pass and the log-mel, a page of torch each, so they live here.

What it matches (transformers 5.x ``modeling_whisper`` / ``feature_extraction_whisper``, checked
against them in tests/test_whisper_net.py):

* ``WhisperEncoderNet``: exactly ``WhisperEncoder``'s parameter names and shapes (the same weight
  files load strictly), ``WhisperConfig``'s defaults for fields absent from config.json. Forward:
  ``gelu(conv1)``, ``gelu(conv2)`` (stride 2), plus the learned positions (sliced to the input
  length); pre-norm layers (LayerNorm eps 1e-5 -> self-attention with the query scaled by
  ``head_dim ** -0.5`` before the product, as HF does -> residual; LayerNorm -> fc1 -> exact erf gelu
  -> fc2 -> residual); the final LayerNorm applied to the last layer's output. It returns every
  state MuseTalk stacks: the embedding output, each layer's output, the last one layer-normed
  (HF's ``hidden_states[:-1] + (last_hidden_state,)``).
* ``log_mel``: ``WhisperFeatureExtractor``: each piece zero-padded or cut to ``chunk_length`` s,
  ``torch.stft`` (periodic Hann window, ``center=True``, reflect padding), power spectrum, last frame
  dropped, slaney-scale slaney-normalised mel filters over 0..8000 Hz (``mel_filters``, computed
  here the way ``transformers.audio_utils.mel_filter_bank`` does), ``log10(max(x, 1e-10))``, floored
  at the piece's maximum - 8, then ``(x + 4) / 4``.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

# WhisperConfig's defaults (openai/whisper-tiny) for the fields the encoder reads.
CONFIG_DEFAULTS = {
    "d_model": 384,
    "encoder_layers": 4,
    "encoder_attention_heads": 6,
    "encoder_ffn_dim": 1536,
    "num_mel_bins": 80,
    "max_source_positions": 1500,
    "activation_function": "gelu",
}
LN_EPS = 1e-5  # nn.LayerNorm's default, as HF builds them


def encoder_config(config: dict) -> SimpleNamespace:
    """The encoder's fields of a whisper ``config.json`` dict, HF's defaults where absent."""
    cfg = SimpleNamespace(**{k: v if config.get(k) is None else config[k] for k, v in CONFIG_DEFAULTS.items()})
    for k in (
        "d_model",
        "encoder_layers",
        "encoder_attention_heads",
        "encoder_ffn_dim",
        "num_mel_bins",
        "max_source_positions",
    ):
        value = getattr(cfg, k)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{k} must be a positive integer, not {value!r}")
    if cfg.d_model % cfg.encoder_attention_heads:
        raise ValueError(
            f"d_model {cfg.d_model} is not divisible by encoder_attention_heads {cfg.encoder_attention_heads}"
        )
    if cfg.activation_function != "gelu":
        raise ValueError(f"activation_function {cfg.activation_function!r} (whisper uses 'gelu')")
    return cfg


class WhisperAttention(nn.Module):
    """Bidirectional multi-head self-attention; ``k_proj`` has no bias (as whisper's)."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.head_dim = width // heads
        self.scaling = self.head_dim**-0.5
        self.k_proj = nn.Linear(width, width, bias=False)
        self.v_proj = nn.Linear(width, width)
        self.q_proj = nn.Linear(width, width)
        self.out_proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        shape = (b, n, self.heads, self.head_dim)
        # The query is scaled before the product (HF and openai keep this order; it changes the
        # rounding), so the attention itself runs unscaled.
        q = (self.q_proj(x) * self.scaling).view(shape).transpose(1, 2)
        k = self.k_proj(x).view(shape).transpose(1, 2)
        v = self.v_proj(x).view(shape).transpose(1, 2)
        out = F.scaled_dot_product_attention(q, k, v, scale=1.0)
        return self.out_proj(out.transpose(1, 2).reshape(b, n, -1))


class WhisperEncoderLayer(nn.Module):
    """Pre-norm transformer block: ``x + attn(ln(x))``, then ``x + fc2(gelu(fc1(ln(x))))``."""

    def __init__(self, width: int, heads: int, ffn: int):
        super().__init__()
        self.self_attn = WhisperAttention(width, heads)
        self.self_attn_layer_norm = nn.LayerNorm(width, eps=LN_EPS)
        self.fc1 = nn.Linear(width, ffn)
        self.fc2 = nn.Linear(ffn, width)
        self.final_layer_norm = nn.LayerNorm(width, eps=LN_EPS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.self_attn_layer_norm(x))
        x = x + self.fc2(F.gelu(self.fc1(self.final_layer_norm(x))))
        if x.dtype == torch.float16:  # as HF: keep fp16 activations finite
            big = torch.finfo(x.dtype).max - 1000
            x = x.clamp(-big, big)
        return x


class WhisperEncoderNet(nn.Module):
    """whisper's audio encoder with ``WhisperEncoder``'s state-dict names; ``forward`` gives all states.

    No buffers: ``models.build_module`` builds it on ``meta`` and ``load_module`` assigns the
    file's tensors, so everything the module holds must come from the weight file.
    """

    def __init__(self, config: dict):
        super().__init__()
        self.config = cfg = encoder_config(config)
        width = cfg.d_model
        self.conv1 = nn.Conv1d(cfg.num_mel_bins, width, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(width, width, kernel_size=3, stride=2, padding=1)
        # nn.Embedding's own init (normal_) on "meta" imports torch's Python decompositions (~2-3 s
        # on a cold start); the table comes from the weight file anyway, so it is made empty there.
        table = torch.empty(cfg.max_source_positions, width)
        if not table.is_meta:
            nn.init.normal_(table)
        self.embed_positions = nn.Embedding(cfg.max_source_positions, width, _weight=table)
        self.layers = nn.ModuleList(
            WhisperEncoderLayer(width, cfg.encoder_attention_heads, cfg.encoder_ffn_dim)
            for _ in range(cfg.encoder_layers)
        )
        self.layer_norm = nn.LayerNorm(width, eps=LN_EPS)

    def forward(self, mel: torch.Tensor) -> list[torch.Tensor]:
        """``mel`` ``[B, num_mel_bins, frames]`` (3000 for 30 s) -> ``encoder_layers + 1`` tensors
        ``[B, ceil(frames / 2), d_model]``: the embedding output, then each layer's output, the
        last one passed through the final LayerNorm."""
        x = F.gelu(self.conv1(mel))
        x = F.gelu(self.conv2(x)).transpose(1, 2)
        n = x.shape[1]
        if n > self.config.max_source_positions:
            raise ValueError(
                f"{mel.shape[-1]} mel frames give {n} positions; the encoder has {self.config.max_source_positions}"
            )
        x = x + self.embed_positions.weight[:n]
        states = [x]
        for layer in self.layers:
            x = layer(x)
            states.append(x)
        states[-1] = self.layer_norm(x)
        return states


# --- the log-mel spectrogram ---------------------------------------------------------------------


def _hz_to_mel(freq: np.ndarray | float) -> np.ndarray:
    """Slaney's mel scale: linear (3 / 200 mel per Hz) below 1 kHz, logarithmic above."""
    freq = np.asarray(freq, np.float64)
    mels = 3.0 * freq / 200.0
    log = freq >= 1000.0
    return np.where(log, 15.0 + np.log(np.maximum(freq, 1e-12) / 1000.0) * (27.0 / np.log(6.4)), mels)


def _mel_to_hz(mels: np.ndarray) -> np.ndarray:
    mels = np.asarray(mels, np.float64)
    freq = 200.0 * mels / 3.0
    return np.where(mels >= 15.0, 1000.0 * np.exp(np.log(6.4) / 27.0 * (mels - 15.0)), freq)


def mel_filters(
    n_fft: int = 400, n_mels: int = 80, sample_rate: int = 16000, fmin: float = 0.0, fmax: float = 8000.0
) -> np.ndarray:
    """Slaney-scale, slaney-normalised triangular filters: float64 ``[1 + n_fft // 2, n_mels]``."""
    bins = 1 + n_fft // 2
    fft_freqs = np.linspace(0, sample_rate // 2, bins)
    edges = _mel_to_hz(np.linspace(_hz_to_mel(fmin), _hz_to_mel(fmax), n_mels + 2))
    slopes = edges[None, :] - fft_freqs[:, None]  # [bins, n_mels + 2]
    gaps = np.diff(edges)
    down = -slopes[:, :-2] / gaps[:-1]
    up = slopes[:, 2:] / gaps[1:]
    filters = np.maximum(0.0, np.minimum(down, up))
    return filters * (2.0 / (edges[2:] - edges[:-2]))[None, :]  # about equal energy per filter


@functools.lru_cache(maxsize=8)
def _stft_constants(n_fft: int, n_mels: int, sample_rate: int, device: str):
    dev = torch.device(device)
    window = torch.hann_window(n_fft, periodic=True, dtype=torch.float32, device=dev)
    filters = torch.from_numpy(mel_filters(n_fft, n_mels, sample_rate).T.astype(np.float32)).to(dev)
    return window, filters  # filters [n_mels, bins]


def log_mel(
    samples: torch.Tensor,
    n_fft: int = 400,
    hop: int = 160,
    n_mels: int = 80,
    sample_rate: int = 16000,
    chunk_length: int = 30,
    padding_value: float = 0.0,
) -> torch.Tensor:
    """whisper's log-mel of each row of ``samples`` (``[B, n]`` or ``[n]`` float tensor on any device,
    or a list of 1-D pieces of any lengths): float32 ``[B, n_mels, chunk_length * sample_rate // hop]``
    on the tensor's device. Each piece is zero-padded (``padding_value``) or cut to ``chunk_length`` s."""
    length = chunk_length * sample_rate
    if isinstance(samples, (list, tuple)):
        rows = [torch.as_tensor(p).to(torch.float32).reshape(-1)[:length] for p in samples]
        x = torch.stack([F.pad(r, (0, length - len(r)), value=padding_value) for r in rows])
    else:
        x = torch.as_tensor(samples).to(torch.float32)
        x = x[None] if x.dim() == 1 else x
        x = x[:, :length] if x.shape[1] >= length else F.pad(x, (0, length - x.shape[1]), value=padding_value)
    window, filters = _stft_constants(n_fft, n_mels, sample_rate, str(x.device))
    spec = torch.stft(x, n_fft, hop, window=window, center=True, pad_mode="reflect", return_complex=True)
    power = spec.abs().pow_(2)  # [B, bins, frames + 1]
    logs = torch.matmul(filters, power)[..., :-1].clamp_(min=1e-10).log10_()  # the last frame is dropped
    peak = logs.amax(dim=(1, 2), keepdim=True)
    return torch.maximum(logs, peak - 8.0).add_(4.0).div_(4.0)

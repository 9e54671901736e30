"""MuseTalk's audio tokens: whisper-tiny encoder states windowed per video frame (spec §1.4–1.6).

    enc = WhisperFeatures("models/whisper")
    feats = enc(wave)                  # Features; len(feats) == wave.frames == ceil(duration * 25)
    tokens = feats.window([0, 1, 2])   # [3, 50, 384] float32, positional encoding added
    full = feats.array()               # [T, 50, 384] numpy (what ``studio features`` writes)

The waveform (16 kHz) is cut into 30 s pieces; each piece is zero-padded to 30 s, turned into
whisper's log-mel spectrogram (on the engine's device) and run through the encoder, keeping all
hidden states: the embedding output, the outputs of layers 0..2 and the layer-normed output of the
last layer, stacked to ``[steps, 5, 384]`` at 50 Hz and trimmed to ``floor(samples / 320)`` steps.
Video frame ``f`` takes whisper steps ``2f-4 .. 2f+5`` (zeros outside the clip), flattened
time-major (token ``k = 5 t + l``), plus the fixed sinusoidal positional encoding.

The spectrogram and the encoder are our own torch code (``whisper_net``), not transformers'
``WhisperFeatureExtractor`` and ``WhisperEncoder``: importing transformers cost most of a cold
MuseTalk start (~11 s on the GPU machine, against the UNet loading in another thread), and the
extractor always ran on the CPU. They load the same HF whisper folder (config.json, the weight file,
preprocessor_config.json read as JSON) and give the same values to float rounding
(tests/test_whisper_net.py compares both against transformers).

Our frame grid has ``T = ceil(duration * 25)`` frames (the official code uses ``floor``); the
right padding is sized so that every one of those T windows exists (at least the official 12 steps).
Only the windows' source (``[steps, 5, 384]``) is kept in memory, 5x smaller than ``[T, 50, 384]``.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from studio.core.constants import FPS, SAMPLE_RATE, SAMPLES_PER_FRAME
from studio.core.errors import ModelError

log = logging.getLogger(__name__)

STEP_RATE = 50  # whisper encoder steps per second
STEPS_PER_FRAME = STEP_RATE // FPS  # 2
WINDOW = 10  # steps per frame: 2 * (pad_left 2 + pad_right 2 + 1)
PAD_LEFT = 4  # zero steps before the clip (frame 0 sees steps -4..5)
PAD_RIGHT_MIN = 12  # the official right padding
SEGMENT_SAMPLES = 30 * SAMPLE_RATE  # whisper's 30 s window
SAMPLES_PER_STEP = SAMPLE_RATE // STEP_RATE  # 320
PE_MAX_LEN = 5000


@dataclass(frozen=True, eq=False)
class Features:
    """The clip's whisper states, zero-padded, and the per-frame window maths."""

    steps: object  # torch float32 [PAD_LEFT + S + pad_right, layers, width]
    frames: int  # T
    pe: object  # torch float32 [WINDOW * layers, width]
    origin: int = 0  # the whisper step ``steps[PAD_LEFT]`` holds (> 0: only a stretch of the clip)
    partial: bool = False  # only a stretch of the clip: frames outside it raise IndexError

    def __len__(self) -> int:
        return self.frames

    @property
    def tokens(self) -> int:
        return WINDOW * self.steps.shape[1]

    @property
    def width(self) -> int:
        return self.steps.shape[2]

    def window(self, frame_idx):
        """Tokens for video frames ``frame_idx`` ([B]): torch float32 ``[B, 50, 384]``, PE added."""
        import torch

        idx = torch.as_tensor(frame_idx, dtype=torch.long, device=self.steps.device).reshape(-1)
        pos = idx[:, None] * STEPS_PER_FRAME - self.origin + torch.arange(WINDOW, device=idx.device)  # padded
        if self.partial and (int(pos.min()) < 0 or int(pos.max()) >= len(self.steps)):
            raise IndexError("frames outside the stretch of the clip these features were computed for")
        chunk = self.steps[pos]  # [B, 10, layers, width]
        return chunk.reshape(len(idx), self.tokens, self.width) + self.pe

    def array(self, block: int = 1024) -> np.ndarray:
        """All frames' tokens as one float32 ``[T, 50, 384]`` array."""
        out = np.empty((self.frames, self.tokens, self.width), np.float32)
        for start in range(0, self.frames, block):
            stop = min(self.frames, start + block)
            out[start:stop] = self.window(np.arange(start, stop)).cpu().numpy()
        return out


def window_steps(frame: int) -> list[int]:
    """The (unpadded) whisper steps frame ``frame`` reads: ``2f-4 .. 2f+5``; negatives are zeros."""
    first = frame * STEPS_PER_FRAME - PAD_LEFT
    return list(range(first, first + WINDOW))


def positional_encoding(length: int, width: int):
    """The fixed Transformer sinusoid: ``PE[p,2i] = sin(p w_i)``, ``PE[p,2i+1] = cos(p w_i)``,
    ``w_i = 10000^(-2i/width)`` (spec §1.6). float32 ``[length, width]``."""
    import torch

    pos = torch.arange(length, dtype=torch.float32)[:, None]
    div = torch.exp(torch.arange(0, width, 2, dtype=torch.float32) * (-math.log(10000.0) / width))
    pe = torch.zeros(length, width)
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div)[:, : width // 2]
    return pe


class WhisperFeatures:
    """The whisper-tiny encoder and its log-mel settings from a Hugging Face folder (no network)."""

    def __init__(self, folder: str | Path, device="cpu", weights: str | Path | None = None, batch: int = 8):
        import torch

        from studio.core.store import models

        self.folder = Path(folder)
        self.device = torch.device(device)
        comp = models.COMPONENTS["whisper"]
        weights = Path(weights) if weights else models.find_weights(self.folder, comp)
        # fp32 always: the encoder costs ~0.05 GFLOP per video frame, precision is free here.
        self.encoder = models.load_module("whisper", self.folder, weights, device=self.device)
        self.mel_settings = mel_settings(self.folder, self.encoder.config.num_mel_bins)
        self.batch = max(1, batch)
        self.layers = self.encoder.config.encoder_layers + 1
        self.width = self.encoder.config.d_model
        self._pe = positional_encoding(WINDOW * self.layers, self.width).to(self.device)

    def __call__(self, wave) -> Features:
        """The clip's features; for a wave holding only a stretch (``wave.span``: an in/out range),
        those of the 30 s pieces that stretch covers, which are the whole clip's (pieces start at
        multiples of 30 s of the clip, and the stretch is decoded from whole pieces)."""
        first, end = getattr(wave, "span", (0, wave.frames))
        if (first, end) == (0, wave.frames):
            return self.features(np.asarray(wave.samples, np.float32), wave.frames)
        a = first * SAMPLES_PER_FRAME // SEGMENT_SAMPLES * SEGMENT_SAMPLES
        b = min(len(wave.samples), -(-end * SAMPLES_PER_FRAME // SEGMENT_SAMPLES) * SEGMENT_SAMPLES)
        samples = np.asarray(wave.samples[a:b], np.float32)
        return self.features(samples, wave.frames, origin=a // SAMPLES_PER_STEP, end=end)

    def features(self, samples: np.ndarray, frames: int, origin: int = 0, end: int | None = None) -> Features:
        """``origin``: the whisper step ``samples`` start at (a multiple of a 30 s piece's 1500);
        ``end``: the frame the stretch ends at (default: the clip's end)."""
        import torch

        end = frames if end is None else int(end)
        states = self.hidden_states(samples)  # [S, layers, width]
        pad_right = max(PAD_RIGHT_MIN, STEPS_PER_FRAME * end - origin + WINDOW - PAD_LEFT - len(states))
        steps = torch.cat([
            states.new_zeros(PAD_LEFT, self.layers, self.width),
            states,
            states.new_zeros(pad_right, self.layers, self.width),
        ])
        partial = origin > 0 or end < frames
        return Features(steps=steps, frames=int(frames), pe=self._pe, origin=int(origin), partial=partial)

    def log_mel(self, pieces):
        """whisper's log-mel of each (at most 30 s) piece: float32 ``[B, mel_bins, 3000]`` on ``self.device``."""
        import torch

        from studio.core.engines.whisper_net import log_mel

        rows = [torch.from_numpy(np.ascontiguousarray(p, np.float32)).to(self.device) for p in pieces]
        return log_mel(rows, **self.mel_settings)

    def hidden_states(self, samples: np.ndarray):
        """float32 ``[floor(n / 320), layers, width]`` on ``self.device``."""
        import torch

        n = len(samples)
        keep = n // SAMPLES_PER_STEP
        pieces = [samples[i : i + SEGMENT_SAMPLES] for i in range(0, max(n, 1), SEGMENT_SAMPLES)]
        out = []
        with torch.inference_mode():
            for i in range(0, len(pieces), self.batch):
                hs = self.encoder(self.log_mel(pieces[i : i + self.batch]))  # embedding .. last (normed)
                out.append(torch.stack(hs, dim=2).reshape(-1, self.layers, self.width))
        states = torch.cat(out)[:keep]
        log.debug("whisper: %d samples -> %d steps", n, len(states))
        return states.float()


def mel_settings(folder: Path, mel_bins: int) -> dict:
    """``log_mel``'s arguments from ``preprocessor_config.json`` (WhisperFeatureExtractor's defaults
    for absent fields, or for the whole file when there is none)."""
    from studio.core.store import models

    path = Path(folder) / "preprocessor_config.json"
    if path.is_file():
        cfg = models.read_config(path)
    else:
        log.warning("%s has no preprocessor_config.json; using whisper's defaults", folder)
        cfg = {}
    out = {
        "n_fft": cfg.get("n_fft", 400),
        "hop": cfg.get("hop_length", 160),
        "n_mels": cfg.get("feature_size", mel_bins),
        "sample_rate": cfg.get("sampling_rate", SAMPLE_RATE),
        "chunk_length": cfg.get("chunk_length", 30),
        "padding_value": float(cfg.get("padding_value", 0.0) or 0.0),
    }
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0
               for k, v in out.items() if k != "padding_value"):
        raise ModelError(f"{path}: n_fft, hop_length, feature_size, sampling_rate and chunk_length must be "
                         "positive integers; copy it again from openai/whisper-tiny")
    if out["n_mels"] != mel_bins:
        raise ModelError(f"{path}: feature_size {out['n_mels']} but config.json has num_mel_bins {mel_bins}; "
                         "the files do not belong together")
    if out["sample_rate"] != SAMPLE_RATE:
        raise ModelError(f"{path}: sampling_rate {out['sample_rate']}, but whisper here takes {SAMPLE_RATE} Hz")
    if out["chunk_length"] * out["sample_rate"] != SEGMENT_SAMPLES or out["hop"] * STEP_RATE * 2 != SAMPLE_RATE:
        raise ModelError(f"{path}: chunk_length {out['chunk_length']} s / hop_length {out['hop']}; whisper-tiny "
                         "uses 30 s and 160 (MuseTalk's 50 Hz steps depend on them)")
    if cfg.get("dither"):
        log.warning("%s: dither %s ignored (whisper-tiny uses none)", path, cfg["dither"])
    return out

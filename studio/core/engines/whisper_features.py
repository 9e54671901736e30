"""MuseTalk's audio tokens: whisper-tiny encoder states windowed per video frame (spec §1.4–1.6).

    enc = WhisperFeatures("models/whisper")
    feats = enc(wave)                  # Features; len(feats) == wave.frames == ceil(duration * wave.rate)
    tokens = feats.window([0, 1, 2])   # [3, 50, 384] float32, positional encoding added
    full = feats.array()               # [T, 50, 384] numpy (what ``studio features`` writes)

The waveform (16 kHz) is cut into 30 s pieces; each piece is zero-padded to 30 s, turned into
whisper's log-mel spectrogram (on the engine's device) and run through the encoder, keeping all
hidden states: the embedding output, the outputs of layers 0..2 and the layer-normed output of the
last layer, stacked to ``[steps, 5, 384]`` at 50 Hz and trimmed to ``floor(samples / 320)`` steps.
Video frame ``f`` takes whisper steps ``2f-4 .. 2f+5`` (zeros outside the clip), flattened
time-major (token ``k = 5 t + l``), plus the fixed sinusoidal positional encoding.

At other output rates the window keeps its length (10 steps, 200 ms) and its place: centred on the
frame's centre, ``(f + 0.5) / rate`` seconds, as at 25 fps. That centre falls between two steps
(everywhere but 25 fps), so the window's states are interpolated linearly between the steps around
it: the mouth follows the audio at the output frame times, without the jitter of rounding each frame
to a step (at 30 fps, frames would take 1 or 2 steps in turn). At 25 fps nothing is interpolated.

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
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from studio.core.constants import SAMPLE_RATE
from studio.core.errors import ModelError
from studio.core.media.rates import DEFAULT_RATE, first_sample

log = logging.getLogger(__name__)

STEP_RATE = 50  # whisper encoder steps per second
STEPS_PER_FRAME = STEP_RATE // int(DEFAULT_RATE)  # 2 at 25 fps
WINDOW = 10  # steps per frame: 2 * (pad_left 2 + pad_right 2 + 1)
PAD_LEFT = 4  # zero steps before the clip (frame 0 sees steps -4..5)
PAD_RIGHT_MIN = 12  # the official right padding
SEGMENT_SAMPLES = 30 * SAMPLE_RATE  # whisper's 30 s window
SAMPLES_PER_STEP = SAMPLE_RATE // STEP_RATE  # 320
PE_MAX_LEN = 5000


@dataclass(frozen=True, eq=False)
class Features:
    """The clip's whisper states, zero-padded, and the per-frame window maths."""

    steps: Any  # torch float32 [pad_left + S + pad_right, layers, width]
    frames: int  # T
    pe: object  # torch float32 [WINDOW * layers, width]
    origin: int = 0  # the whisper step ``steps[pad_left]`` holds (> 0: only a stretch of the clip)
    partial: bool = False  # only a stretch of the clip: frames outside it raise IndexError
    rate: Fraction = DEFAULT_RATE  # the video frames' rate
    pad_left: int = PAD_LEFT  # zero steps before the clip in ``steps``

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
        lo, w = window_start(idx, self.rate, self.pad_left)
        pos = lo[:, None] - self.origin + torch.arange(WINDOW, device=idx.device)  # padded coords
        # Only a stretch's features check the positions (reading them back waits for the GPU: done
        # every batch, it kept the render loop from queueing the next batch behind this one); the
        # whole clip's padded steps hold every frame's window (the engine checks the frame indices).
        if self.partial:
            last = int(pos.max()) + (w is not None)  # the interpolation reads one step more
            if int(pos.min()) < 0 or last >= len(self.steps):
                raise IndexError("frames outside the stretch of the clip these features were computed for")
        chunk = self.steps[pos]  # [B, 10, layers, width]
        if w is not None:  # between two steps: interpolate
            chunk = torch.lerp(chunk, self.steps[pos + 1], w.to(chunk.dtype)[:, None, None, None])
        return chunk.reshape(len(idx), self.tokens, self.width) + self.pe

    def array(self, block: int = 1024) -> np.ndarray:
        """All frames' tokens as one float32 ``[T, 50, 384]`` array."""
        out = np.empty((self.frames, self.tokens, self.width), np.float32)
        for start in range(0, self.frames, block):
            stop = min(self.frames, start + block)
            out[start:stop] = self.window(np.arange(start, stop)).cpu().numpy()
        return out


def window_steps(frame: int) -> list[int]:
    """The (unpadded) whisper steps frame ``frame`` reads at 25 fps: ``2f-4 .. 2f+5``; negatives are zeros."""
    first = frame * STEPS_PER_FRAME - PAD_LEFT
    return list(range(first, first + WINDOW))


def window_start(idx, rate=DEFAULT_RATE, pad_left: int = PAD_LEFT):
    """Where frame ``idx``'s window starts in padded steps: ``(lo, w)``, the window being steps
    ``lo .. lo + 9`` moved ``w`` (0..1) of a step on (``w`` None: on the steps, 25 fps). Its centre is
    the frame's centre, ``(2 idx + 1) * 25 / rate`` steps, as the official ``2f - 4 .. 2f + 5`` at 25."""
    rate = Fraction(rate)
    if rate == DEFAULT_RATE and pad_left == PAD_LEFT:
        return idx * STEPS_PER_FRAME, None
    # start = centre - WINDOW / 2 + pad_left = ((2 idx + 1) * 25 den - 5 num + pad_left num) / num, exactly
    num, den = rate.numerator, rate.denominator
    top = (2 * idx + 1) * (STEP_RATE // 2) * den + (pad_left - WINDOW // 2) * num
    lo = top // num
    return lo, (top - lo * num).double() / num


def pad_left_for(rate) -> int:
    """Zero steps before the clip: the official 4 at 25 fps; one more where windows are interpolated
    (above 25 fps the first frame's window starts up to a step earlier)."""
    return PAD_LEFT if Fraction(rate) == DEFAULT_RATE else PAD_LEFT + 1


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

        from studio.core.engines import weights as store

        self.folder = Path(folder)
        self.device = torch.device(device)
        comp = store.COMPONENTS["whisper"]
        weights = Path(weights) if weights else store.find_weights(self.folder, comp)
        # fp32 always: the encoder costs ~0.05 GFLOP per video frame, precision is free here.
        self.encoder = store.load_module("whisper", self.folder, weights, device=self.device)
        self.mel_settings = mel_settings(self.folder, self.encoder.config.num_mel_bins)
        self.batch = max(1, batch)
        self.layers = self.encoder.config.encoder_layers + 1
        self.width = self.encoder.config.d_model
        self._pe = positional_encoding(WINDOW * self.layers, self.width).to(self.device)

    def __call__(self, wave) -> Features:
        """The clip's features; for a wave holding only a stretch (``wave.span``: an in/out range),
        those of the 30 s pieces that stretch covers, which are the whole clip's (pieces start at
        multiples of 30 s of the clip, and the stretch is decoded from whole pieces)."""
        rate = getattr(wave, "rate", DEFAULT_RATE)
        first, end = getattr(wave, "span", (0, wave.frames))
        if (first, end) == (0, wave.frames):
            return self.features(np.asarray(wave.samples, np.float32), wave.frames, rate=rate)
        a = int(first_sample(first, rate)) // SEGMENT_SAMPLES * SEGMENT_SAMPLES
        b = min(len(wave.samples), -(-int(first_sample(end, rate)) // SEGMENT_SAMPLES) * SEGMENT_SAMPLES)
        samples = np.asarray(wave.samples[a:b], np.float32)
        return self.features(samples, wave.frames, origin=a // SAMPLES_PER_STEP, end=end, rate=rate)

    def features(
        self, samples: np.ndarray, frames: int, origin: int = 0, end: int | None = None, rate=DEFAULT_RATE
    ) -> Features:
        """``origin``: the whisper step ``samples`` start at (a multiple of a 30 s piece's 1500);
        ``end``: the frame the stretch ends at (default: the clip's end); ``rate``: the frames' rate."""
        import torch

        rate = Fraction(rate)
        end = frames if end is None else int(end)
        states = self.hidden_states(samples)  # [S, layers, width]
        left = pad_left_for(rate)
        if rate == DEFAULT_RATE:
            pad_right = max(PAD_RIGHT_MIN, STEPS_PER_FRAME * end - origin + WINDOW - PAD_LEFT - len(states))
        else:  # the last frame's window, and the step after it that the interpolation reads
            last, _ = window_start(torch.tensor([max(0, end - 1)]), rate, left)
            pad_right = max(PAD_RIGHT_MIN, int(last[0]) - origin + WINDOW + 1 - left - len(states))
        steps = torch.cat(
            [
                states.new_zeros(left, self.layers, self.width),
                states,
                states.new_zeros(pad_right, self.layers, self.width),
            ]
        )
        partial = origin > 0 or end < frames
        return Features(
            steps=steps, frames=int(frames), pe=self._pe, origin=int(origin), partial=partial, rate=rate, pad_left=left
        )

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
    from studio.core.engines import weights as store

    path = Path(folder) / "preprocessor_config.json"
    if path.is_file():
        cfg = store.read_config(path)
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
    if not all(
        isinstance(v, int) and not isinstance(v, bool) and v > 0 for k, v in out.items() if k != "padding_value"
    ):
        raise ModelError(
            f"{path}: n_fft, hop_length, feature_size, sampling_rate and chunk_length must be "
            "positive integers; copy it again from openai/whisper-tiny"
        )
    if out["n_mels"] != mel_bins:
        raise ModelError(
            f"{path}: feature_size {out['n_mels']} but config.json has num_mel_bins {mel_bins}; "
            "the files do not belong together"
        )
    if out["sample_rate"] != SAMPLE_RATE:
        raise ModelError(f"{path}: sampling_rate {out['sample_rate']}, but whisper here takes {SAMPLE_RATE} Hz")
    if out["chunk_length"] * out["sample_rate"] != SEGMENT_SAMPLES or out["hop"] * STEP_RATE * 2 != SAMPLE_RATE:
        raise ModelError(
            f"{path}: chunk_length {out['chunk_length']} s / hop_length {out['hop']}; whisper-tiny "
            "uses 30 s and 160 (MuseTalk's 50 Hz steps depend on them)"
        )
    if cfg.get("dither"):
        log.warning("%s: dither %s ignored (whisper-tiny uses none)", path, cfg["dither"])
    return out

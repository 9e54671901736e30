"""Broadcast loudness: integrated loudness (ITU-R BS.1770-4 / EBU R128), true peak, and normalisation
to a target with a true-peak limiter, streamed through the file in blocks.

    lufs, peak = measure("voice.flac")                 # LUFS, dBTP
    with normalised("voice.flac", -23.0, -1.0) as (path, report):
        ...                                            # path: a 24-bit FLAC at -23 LUFS, peaks <= -1 dBTP
    report.before_lufs, report.after_lufs, report.gain_db, report.limited

**Loudness** is BS.1770-4's integrated loudness: K-weighting (pyloudnorm's two filter stages, designed
for the file's sample rate), mean square per 400 ms block with 75 % overlap, channel weights 1.0 (Studio
writes mono or stereo), the absolute gate at -70 LUFS and the relative gate 10 LU below. pyloudnorm's
``Meter.integrated_loudness`` does the same on an array in memory; here the filters run block by block
with their state carried over and the blocks' sums are kept (a few floats per 100 ms), so a two-hour
file needs no more memory than one block, and the value equals pyloudnorm's (``tests/test_loudness.py``).

**True peak** (BS.1770-4 Annex 2) is the largest magnitude of the signal oversampled 4x (soxr).

**Normalisation** applies the gain that brings the loudness to the target, then limits: every sample's
gain is at most what keeps its 4x-oversampled neighbourhood under the ceiling; the gain is the minimum of
that over a window of 2 x 5 ms around it, smoothed by a 5 ms moving average (so it changes over
milliseconds, never on a sample, and never exceeds what any nearby peak allows). Limiting lowers the
loudness a little; the gain is corrected and the pass repeated (at most 4 times) until the result is
within 0.1 LU of the target. The limiter is written here because it is a few vectorised lines; the
libraries that have one (pedalboard, ...) bring a large native dependency for it.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from studio.core.errors import AudioError

log = logging.getLogger(__name__)

BLOCK = 1 << 16  # source frames per processed block
OVERSAMPLE = 4
LOOKAHEAD_S = 0.005
MARGIN_DB = 0.2  # the limiter's ceiling sits this far under the true-peak limit (4x is an estimate)
TOLERANCE_LU = 0.1
PASSES = 4
SILENCE = -70.0  # LUFS: below the absolute gate nothing is measured


@dataclass(frozen=True)
class LoudnessReport:
    """What a normalisation did (every figure rounded to 0.01)."""

    target_lufs: float
    true_peak_limit: float
    before_lufs: float
    before_true_peak: float
    after_lufs: float
    after_true_peak: float
    gain_db: float
    limited: bool

    def to_json(self) -> dict:
        return asdict(self)


def _channels(block: np.ndarray) -> np.ndarray:
    """Mono or stereo as Studio writes it (more than two channels: their mean)."""
    if block.shape[1] > 2:
        return block.mean(axis=1, keepdims=True, dtype=np.float32)
    return block


class _Meter:
    """Streamed BS.1770-4 integrated loudness and 4x true peak of mono/stereo float blocks."""

    def __init__(self, rate: int, channels: int):
        import pyloudnorm
        import scipy.signal as ss
        import soxr

        self.rate, self.channels = rate, channels
        self._ss = ss
        # BS.1770's K-weighting, the two stages pyloudnorm's Meter builds (its public IIRfilter):
        # a +4 dB high shelf at 1.5 kHz, then a high pass at 38 Hz
        shelf = pyloudnorm.IIRfilter(4.0, 1 / math.sqrt(2), 1500.0, rate, "high_shelf")
        high_pass = pyloudnorm.IIRfilter(0.0, 0.5, 38.0, rate, "high_pass")
        self._stages = [(f.b, f.a) for f in (shelf, high_pass)]
        self._zi = [[ss.lfilter_zi(b, a) * 0.0 for _ in range(channels)] for b, a in self._stages]
        self._steps: list[float] = []  # the weighted sum of squares of every 100 ms step
        self._acc = 0.0
        self._pos = 0  # samples seen
        self._next = self._edge(1)
        self.samples = 0
        self._os = soxr.ResampleStream(rate, rate * OVERSAMPLE, channels, dtype="float32", quality="HQ")
        self.peak = 0.0

    def _edge(self, j: int) -> int:
        return int(0.1 * j * self.rate)  # pyloudnorm's block bounds (int(T_g * j * step * rate))

    def add(self, block: np.ndarray) -> None:
        x = np.asarray(block, np.float64)
        if not len(x):
            return
        self.peak = max(self.peak, float(np.abs(x).max()))
        os_block = self._os.resample_chunk(np.ascontiguousarray(block, np.float32))
        if len(os_block):
            self.peak = max(self.peak, float(np.abs(os_block).max()))
        y = np.empty_like(x)
        for c in range(self.channels):
            v = x[:, c]
            for s, (b, a) in enumerate(self._stages):
                v, self._zi[s][c] = self._ss.lfilter(b, a, v, zi=self._zi[s][c])
            y[:, c] = v
        sq = (y * y).sum(axis=1)  # channel weights 1.0 (mono, stereo)
        start = self._pos
        i = 0
        n = len(sq)
        while i < n:
            take = min(n - i, self._next - (start + i))
            self._acc += float(sq[i : i + take].sum())
            i += take
            if start + i == self._next:
                self._steps.append(self._acc)
                self._acc = 0.0
                self._next = self._edge(len(self._steps) + 1)
        self._pos += n

    def finish(self) -> tuple[float, float]:
        """(integrated loudness in LUFS, true peak in dBTP); -inf LUFS for silence."""
        tail = self._os.resample_chunk(np.zeros((0, self.channels), np.float32), last=True)
        if len(tail):
            self.peak = max(self.peak, float(np.abs(tail).max()))
        T = self._pos / self.rate
        if T < 0.4:
            raise AudioError("the voice-over is shorter than 0.4 s, too short to measure its loudness (BS.1770)")
        blocks = int(np.round((T - 0.4) / 0.1)) + 1
        steps = np.array(self._steps + [self._acc], np.float64)
        steps = np.pad(steps, (0, max(0, blocks + 3 - len(steps))))
        z = (steps[0:blocks] + steps[1 : blocks + 1] + steps[2 : blocks + 2] + steps[3 : blocks + 3]) / (
            0.4 * self.rate
        )
        with np.errstate(divide="ignore"):
            lj = -0.691 + 10.0 * np.log10(z)
        keep = lj >= SILENCE
        if not keep.any():
            lufs = float("-inf")
        else:
            rel = -0.691 + 10.0 * np.log10(z[keep].mean()) - 10.0
            gated = keep & (lj > rel)
            lufs = -0.691 + 10.0 * math.log10(z[gated].mean()) if gated.any() else float("-inf")
        tp = 20.0 * math.log10(self.peak) if self.peak > 0 else float("-inf")
        return lufs, tp


def measure(path) -> tuple[float, float]:
    """(integrated loudness LUFS, true peak dBTP) of an audio file, streamed in blocks (any voice-over
    Studio reads: ``audio.read_blocks``)."""
    from studio.core.media.audio import probe, read_blocks

    info = probe(path)
    meter = None
    for block in read_blocks(info, BLOCK):
        block = _channels(np.asarray(block, np.float32))
        if meter is None:
            meter = _Meter(info.source_rate, block.shape[1])
        meter.add(block)
    if meter is None:
        raise AudioError(f"{path}: contains no audio samples; export the voice-over again")
    return meter.finish()


def _limited(x: np.ndarray, gain: float, ceiling: float, lookahead: int):
    """``x * gain`` through the true-peak limiter (on a block with its context; see the module docstring):
    (samples, whether any gain under 1 was applied)."""
    import scipy.ndimage as nd
    import scipy.signal as ss

    y = x.astype(np.float64) * gain
    if not len(y):
        return y.astype(np.float32), False
    os_ = np.abs(ss.resample_poly(y, OVERSAMPLE, 1, axis=0)).max(axis=1)  # aligned: os[4n] is sample n
    n = len(y)
    os_ = np.pad(os_, (OVERSAMPLE, OVERSAMPLE * (n + 2) - len(os_) - OVERSAMPLE), mode="edge")
    groups = os_.reshape(-1, OVERSAMPLE)  # group k+1 holds os[4k .. 4k+3]
    peak = np.maximum(np.abs(y).max(axis=1), np.maximum(groups[1 : n + 1].max(axis=1), groups[:n].max(axis=1)))
    need = np.minimum(1.0, ceiling / np.maximum(peak, 1e-12))
    if need.min() >= 1.0:
        return y.astype(np.float32), False
    g = nd.minimum_filter1d(need, 2 * lookahead + 1, mode="nearest")
    g = nd.uniform_filter1d(g, lookahead + 1, mode="nearest")
    g = np.minimum(g, need)  # float rounding of the average never lets a peak through
    return (y * g[:, None]).astype(np.float32), True


def _apply(info, out: Path, gain: float, ceiling: float) -> bool:
    """Write ``info``'s audio times ``gain`` through the limiter to ``out`` (24-bit FLAC, its own rate,
    mono or stereo); whether the limiter engaged. Blocks overlap by the limiter's context, so the result
    is the whole-file one."""
    import soundfile as sf

    from studio.core.media.audio import read_blocks

    rate = info.source_rate
    look = max(1, int(LOOKAHEAD_S * rate))
    ctx = 4 * look + 64  # the min filter, the average and the oversampling filter's reach
    limited = False
    prev = None  # the block before, for the context on the left
    with sf.SoundFile(out, "w", rate, 2 if info.channels == 2 else 1, subtype="PCM_24", format="FLAC") as dst:
        blocks = (_channels(np.asarray(b, np.float32)) for b in read_blocks(info, BLOCK))
        cur = next(blocks, None)
        while cur is not None:
            nxt = next(blocks, None)
            left = prev[-ctx:] if prev is not None else np.zeros((0, cur.shape[1]), np.float32)
            right = nxt[:ctx] if nxt is not None else np.zeros((0, cur.shape[1]), np.float32)
            y, lim = _limited(np.concatenate([left, cur, right]), gain, ceiling, look)
            limited |= lim
            dst.write(y[len(left) : len(left) + len(cur)])
            prev, cur = cur, nxt
    return limited


@contextlib.contextmanager
def normalised(path, target_lufs: float, true_peak: float = -1.0, folder=None):
    """A temporary 24-bit FLAC of ``path`` at ``target_lufs`` with true peaks at most ``true_peak`` dBTP,
    and its ``LoudnessReport``; removed on leaving. A silent voice-over (below the -70 LUFS gate) is
    left as it is (gain 0, said in the report)."""
    import tempfile

    from studio.core.media.audio import probe

    if not (math.isfinite(target_lufs) and math.isfinite(true_peak)):
        raise AudioError("the loudness target and the true-peak limit must be numbers")
    info = probe(path)
    before, tp0 = measure(path)
    with tempfile.TemporaryDirectory(prefix="studio-loudness.", dir=folder) as tmp:
        out = Path(tmp) / "normalised.flac"
        if not math.isfinite(before):
            log.warning("%s is silent (below -70 LUFS): its loudness is left as it is", path)
            report = LoudnessReport(target_lufs, true_peak, SILENCE, tp0, SILENCE, tp0, 0.0, False)
            yield str(path), report
            return
        ceiling = 10 ** ((true_peak - MARGIN_DB) / 20.0)
        gain_db = target_lufs - before
        after, tp1, limited = before, tp0, False
        for _ in range(PASSES):
            limited = _apply(info, out, 10 ** (gain_db / 20.0), ceiling)
            after, tp1 = measure(out)
            if abs(after - target_lufs) <= TOLERANCE_LU or not limited:
                break
            gain_db += target_lufs - after  # the limiter took some loudness: ask for more
        if abs(after - target_lufs) > 0.5:
            log.warning(
                "%s: normalised to %.2f LUFS, not %.2f: its peaks leave no more room under %.1f dBTP",
                path,
                after,
                target_lufs,
                true_peak,
            )
        report = LoudnessReport(
            target_lufs=round(float(target_lufs), 2),
            true_peak_limit=round(float(true_peak), 2),
            before_lufs=round(before, 2),
            before_true_peak=round(tp0, 2),
            after_lufs=round(after, 2),
            after_true_peak=round(tp1, 2),
            gain_db=round(gain_db, 2),
            limited=bool(limited),
        )
        log.info("loudness of %s: %s", os.fspath(path), report)
        yield str(out), report


@contextlib.contextmanager
def delivered_audio(path, settings):
    """``(path, report)`` of the audio a render delivers: the voice-over itself and None, or in the
    delivery's audio format (``settings.audio_format``: ``delivery_audio.conformed``) and, with
    ``settings.loudness`` set, its normalised copy and the report as JSON (``RenderResult.loudness``)."""
    from studio.core.media.delivery_audio import conformed

    with conformed(path, getattr(settings, "audio_format", "source")) as source:
        if source is None or getattr(settings, "loudness", None) is None:
            yield source, None
            return
        with normalised(source, settings.loudness, settings.true_peak) as (out, report):
            yield out, report.to_json()

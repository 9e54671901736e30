"""Mouth shapes from the voice-over alone (no weights): acoustic features -> per-frame controls.

Every 10 ms (a 25 ms Hann window) the voice gives:

- **band levels** in dB: ``low`` 60-400 Hz (voicing, nasal murmur), ``mid`` 400-3000 Hz (where
  the first two formants of vowels carry their energy), ``high`` 3-8 kHz (frication, bursts);
- **formants** F1 and F2 from a 16th-order LPC fit (autocorrelation from the power spectrum,
  Levinson-Durbin, roots of the predictor as eigenvalues of its companion matrix; all frames at
  once). F1 tracks jaw opening (/a/ high, /i/ /u/ low), F2 tracks the tongue and lips (/i/ high
  = spread, /u/ /o/ low = rounded).

They are normalised over the clip (levels against its vowel level, formants against their own
spread: a deep and a high voice give the same shapes; ``ClipStats``) and mapped to the controls of
``MouthControls``. A clip longer than ``STATS_HOPS`` hops (5 minutes) takes those statistics from
``STATS_PIECES`` stretches of 5 s spread evenly over it (``sampled_stats``, read from the file
itself), so that an in/out range of a two-hour voice-over needs only its own stretch of audio and
still gets exactly the statistics, and so the mouth shapes, of the whole render:

- ``open`` 0..1: the jaw, from the mid-band level and F1;
- ``width`` -1..1: spread (+, /i/ /e/) or rounded (-, /u/ /o/ /w/), from F2 given F1;
- ``close`` 0..1: lips pressed together. Bilabial stops and nasals (/p/ /b/ /m/) are the
  moments in running speech where the formant band dips well below the syllable around it
  (8-14 dB) and below the clip's vowels (14-19 dB) while no frication fills the gap: a stop
  closure is quiet, a nasal murmur or a voice bar has its energy below 400 Hz. A voiced closure
  whose resonance sits above 1.5 kHz (/n/ /d/) closes half way; voiceless /t/ /k/ look like /p/
  to this measure and close too (the jaw is nearly shut for them anyway);
- ``teeth`` 0..1: fricatives (/s/ /f/ /v/ /th/ /sh/), frication energy above 3 kHz with a small
  opening; ``tuck`` 0..1 the weak, flat fricatives (/f/ /v/, also /th/): the lower lip up
  against the upper teeth.

Coarticulation: targets are smoothed with zero-phase Gaussians (the whole clip is known, so
there is no lag), first per hop, then per video frame; closures of at least 30 ms are then
imposed on the smoothed track (a 40-80 ms closure must survive smoothing). A frame's controls
are the loudness-weighted mean over the hops centred inside it (4 hops of its 40 ms at 25 fps; 3 or 4
at 29.97, 1 or 2 at 60), its closure the maximum; the smoothing per video frame keeps its width in
milliseconds at every rate. At the edges of
each phrase, where the renderer crossfades into the still avatar, every control is scaled by
the crossfade weight, so a half-faded open mouth never shows over the still one.

This is hand-written rather than taken from a library because the pieces a library would give
(MFCC, LPC) are a few lines of numpy each here, vectorised over the clip, and the mapping to
mouth shapes is the design itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from studio.core.constants import SAMPLE_RATE, SAMPLES_PER_FRAME
from studio.core.media.rates import DEFAULT_RATE

HOP = 160  # 10 ms
HOPS_PER_S = SAMPLE_RATE // HOP  # 100
WIN = 400  # 25 ms
NFFT = 512
LPC_ORDER = 16
PER_FRAME = SAMPLES_PER_FRAME // HOP  # 4 hops per video frame at 25 fps
STATS_HOPS = 30_000  # clips up to 5 minutes: the normalisation over every hop
STATS_PIECES = 30  # longer clips: over this many stretches of PIECE_FRAMES spread evenly
PIECE_FRAMES = 125  # 5 s
CONTEXT_FRAMES = 25  # a frame's controls depend on the audio within this many frames (1 s; about 0.5 s used)


@dataclass(frozen=True, eq=False)
class MouthControls:
    """Per-frame controls for one clip, each ``[T]`` float32 (see the module docstring)."""

    open: np.ndarray
    width: np.ndarray
    close: np.ndarray
    teeth: np.ndarray
    tuck: np.ndarray

    def __len__(self) -> int:
        return len(self.open)

    def placed(self, first: int, frames: int) -> MouthControls:
        """These controls (of frames ``first..``) inside a clip of ``frames`` frames: zeros elsewhere."""

        def put(x):
            out = np.zeros(frames, np.float32)
            out[first : first + len(x)] = x[: max(0, frames - first)]
            return out

        return MouthControls(*(put(x) for x in (self.open, self.width, self.close, self.teeth, self.tuck)))

    def rows(self, idx) -> np.ndarray:
        """``[B,5]`` float32: open, width, close, teeth, tuck for frames ``idx``."""
        return np.stack([self.open[idx], self.width[idx], self.close[idx], self.teeth[idx], self.tuck[idx]], 1).astype(
            np.float32
        )


@dataclass(frozen=True, eq=False)
class Features:
    """Per 10 ms hop: band levels (dB) and formants (Hz; NaN where unvoiced)."""

    low: np.ndarray
    mid: np.ndarray
    high: np.ndarray
    f1: np.ndarray
    f2: np.ndarray


@dataclass(frozen=True)
class ClipStats:
    """What the controls are normalised against: the clip's vowel level (dB) and its F1/F2 spread (Hz)."""

    ref: float
    lo1: float
    hi1: float
    lo2: float
    hi2: float


def first_hop(frame: int, rate=DEFAULT_RATE) -> int:
    """The first 10 ms hop whose centre ``(k + 0.5) * 10 ms`` falls in frame ``frame`` (at ``rate``)
    or after it: ``4 * frame`` at 25 fps; ``first_hop(T)`` hops cover a clip of ``T`` frames."""
    rate = Fraction(rate)
    num, den = rate.numerator, rate.denominator
    return max(0, -(-(2 * HOPS_PER_S * int(frame) * den - num) // (2 * num)))


def mouth_controls(
    samples: np.ndarray, frames: int, stats: ClipStats | None = None, rate=DEFAULT_RATE, first: int = 0
) -> MouthControls:
    """Per-frame controls for ``frames`` video frames (at ``rate``) of 16 kHz mono ``samples``
    (``stats``: the clip's, when ``samples`` are only a stretch of it; default: from these samples).
    ``first``: the frames are ``first ..`` of a clip and ``samples`` start at hop ``first_hop(first)``
    of it, so each frame gets the hops the whole clip gives it."""
    if frames <= 0:
        z = np.zeros(0, np.float32)
        return MouthControls(z, z, z, z, z)
    h0 = first_hop(first, rate)
    f = features(samples, first_hop(first + frames, rate) - h0)
    return controls_from_features(f, frames, stats, rate, first)


def clip_stats(f: Features) -> ClipStats:
    """The normalisation of ``hop_targets`` from the hops ``f`` holds."""
    mid = f.mid
    loudest = float(np.max(mid)) if len(mid) else 0.0
    live = mid > loudest - 50
    ref = float(np.percentile(mid[live], 95)) if live.any() else loudest
    voiced = np.isfinite(f.f1) & (mid - ref > -22)
    if voiced.sum() >= 10:
        lo1, hi1 = np.percentile(f.f1[voiced], [10, 90])
        lo2, hi2 = np.percentile(f.f2[voiced], [10, 90])
    else:
        lo1, hi1, lo2, hi2 = 300.0, 700.0, 1000.0, 2200.0
    lo1 = float(np.clip(lo1, 200, 450))
    hi1 = max(lo1 + 250.0, float(hi1))
    lo2 = float(np.clip(lo2, 700, 1400))
    hi2 = max(lo2 + 600.0, float(hi2))
    return ClipStats(ref, lo1, hi1, lo2, hi2)


def sampled_stats(info) -> ClipStats:
    """``clip_stats`` of ``STATS_PIECES`` stretches of 5 s spread evenly over the file ``info``
    describes (``studio.core.media.audio_info.AudioInfo``), each read by seeking: what a clip longer
    than ``STATS_HOPS`` hops is normalised against, whether it renders whole or in part."""
    from studio.core.media.audio import frame_start, read_frames

    T = info.frames
    parts = []
    for i in range(STATS_PIECES):
        first = frame_start(info, (2 * i + 1) * T // (2 * STATS_PIECES) - PIECE_FRAMES // 2)
        end = min(T, first + PIECE_FRAMES)
        parts.append(features(read_frames(info, first, end), (end - first) * PER_FRAME))
    return clip_stats(
        Features(*(np.concatenate([getattr(p, k) for p in parts]) for k in ("low", "mid", "high", "f1", "f2")))
    )


def features(samples: np.ndarray, hops: int) -> Features:
    """Band levels and formants for ``hops`` hops of 10 ms (hop ``k`` is centred on ``(k + 0.5) * 10 ms``)."""
    x = np.zeros(hops * HOP + WIN, np.float32)
    take = min(hops * HOP, len(samples))
    off = (WIN - HOP) // 2  # centre each window on its hop
    x[off : off + take] = np.asarray(samples[:take], np.float32)
    freqs = np.fft.rfftfreq(NFFT, 1 / SAMPLE_RATE)
    window = np.hanning(WIN).astype(np.float32)
    bands = {
        k: (freqs >= a) & (freqs < b)
        for k, (a, b) in {"low": (60, 400), "mid": (400, 3000), "high": (3000, 8000)}.items()
    }
    out = {k: np.zeros(hops, np.float32) for k in ("low", "mid", "high", "f1", "f2")}
    step = 2048  # blocks of hops bound the memory on long clips
    for a in range(0, hops, step):
        b = min(hops, a + step)
        idx = (np.arange(a, b) * HOP)[:, None] + np.arange(WIN)[None, :]
        seg = x[idx]
        spec = np.abs(np.fft.rfft(seg * window, NFFT, axis=1)) ** 2
        for k, m in bands.items():
            out[k][a:b] = 10 * np.log10(spec[:, m].sum(1) / NFFT + 1e-10)
        f1, f2 = _formants(seg, window)
        out["f1"][a:b], out["f2"][a:b] = f1, f2
    return Features(**out)


def _formants(seg: np.ndarray, window: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """F1, F2 (Hz) per row of ``seg`` from an LPC fit; NaN where no plausible pair is found."""
    n = len(seg)
    pre = np.concatenate([seg[:, :1], seg[:, 1:] - 0.94 * seg[:, :-1]], 1) * window
    spec = np.abs(np.fft.rfft(pre, 1024, axis=1)) ** 2
    r = np.fft.irfft(spec, axis=1)[:, : LPC_ORDER + 1]
    r[:, 0] *= 1.0001  # white-noise correction keeps the recursion stable
    r[:, 0] += 1e-9
    # Levinson-Durbin, vectorised over rows
    a = np.zeros((n, LPC_ORDER + 1))
    a[:, 0] = 1.0
    err = r[:, 0].astype(np.float64).copy()
    for i in range(1, LPC_ORDER + 1):
        acc = (a[:, :i] * r[:, i:0:-1]).sum(1)
        k = -acc / err
        a[:, 1 : i + 1] = a[:, 1 : i + 1] + k[:, None] * a[:, i - 1 :: -1][:, :i]
        err = err * (1 - k * k)
    comp = np.zeros((n, LPC_ORDER, LPC_ORDER))
    comp[:, 0, :] = -a[:, 1:]
    comp[:, np.arange(1, LPC_ORDER), np.arange(LPC_ORDER - 1)] = 1.0
    roots = np.linalg.eigvals(comp)
    freq = np.angle(roots) * SAMPLE_RATE / (2 * np.pi)
    bw = -np.log(np.abs(roots) + 1e-12) * SAMPLE_RATE / np.pi
    ok = (roots.imag > 0) & (freq > 200) & (freq < 3800) & (bw < 450)
    freq = np.where(ok, freq, np.inf)
    freq.sort(axis=1)
    f1 = freq[:, 0]
    f2 = freq[:, 1]
    bad = ~np.isfinite(f1) | (f1 > 1200) | ~np.isfinite(f2)
    f1 = np.where(bad, np.nan, f1)
    f2 = np.where(bad, np.nan, f2)
    return f1.astype(np.float32), f2.astype(np.float32)


def controls_from_features(
    f: Features, frames: int, stats: ClipStats | None = None, rate=DEFAULT_RATE, first: int = 0
) -> MouthControls:
    """The mapping of the module docstring, hop by hop, then per video frame (at ``rate``; the hops of
    ``f`` start at ``first_hop(first)``)."""
    t = hop_targets(f, stats)
    rate = Fraction(rate)
    per_f = HOPS_PER_S / rate
    if per_f.denominator == 1:  # whole hops per frame (4 at 25 fps): rows of the hop track
        per = int(per_f)
        n = frames * per

        def frame_mean(x, wts):
            x, wts = x[:n].reshape(frames, per), wts[:n].reshape(frames, per)
            return (x * wts).sum(1) / wts.sum(1)

        def frame_max(x):
            return x[:n].reshape(frames, per).max(1)

    else:  # hop k (centred on (k + 0.5) * 10 ms of the clip) belongs to the frame its centre falls in
        h0 = first_hop(first, rate)
        k = np.arange(len(t["open"]), dtype=np.int64)
        owner = ((2 * (k + h0) + 1) * rate.numerator) // (2 * HOPS_PER_S * rate.denominator) - first
        keep = (owner >= 0) & (owner < frames)
        owner, k = owner[keep], k[keep]

        def frame_mean(x, wts):
            num = np.bincount(owner, (x[k] * wts[k]).astype(np.float64), minlength=frames)
            den = np.bincount(owner, wts[k].astype(np.float64), minlength=frames)
            return num / np.maximum(den, 1e-12)

        def frame_max(x):
            out = np.zeros(frames, np.float64)
            np.maximum.at(out, owner, x[k])
            return out

    per_frame = float(rate / DEFAULT_RATE)  # the per-frame smoothing below keeps its width in ms

    wts = 0.2 + t["voice"]  # louder hops count more within a frame
    open_ = frame_mean(_gauss(t["open"], 1.5), wts)
    width = frame_mean(_gauss(t["width"], 2.0), wts)
    teeth = frame_mean(_gauss(t["teeth"], 1.0), wts)
    tuck = frame_mean(_gauss(t["tuck"], 1.0), wts)
    # closures: at least 3 hops (30 ms) long to count, then the frame's strongest
    c = _opening(t["close"], 3)
    close = frame_max(c)
    # coarticulation at the frame rate: neighbours pull on each frame (zero phase; sigmas in 25 fps frames)
    open_ = _gauss(open_, 0.7 * per_frame)
    width = _gauss(width, 1.0 * per_frame)
    teeth = _gauss(teeth, 0.6 * per_frame)
    tuck = _gauss(tuck, 0.6 * per_frame) * (1 - close)
    open_ = open_ * (1 - close) * (1 - 0.5 * tuck)
    teeth = teeth * (1 - close)
    # speech edges: the renderer crossfades the first and last frames of each phrase into the
    # avatar; the engine eases the mouth in and out by the plan's weights at generate time
    # (``ClassicEngine.generate``), so the crossfade never shows a half-faded open mouth (a ghost)
    f32 = lambda v: np.clip(v, -1, 1).astype(np.float32)  # noqa: E731
    return MouthControls(open=f32(open_), width=f32(width), close=f32(close), teeth=f32(teeth), tuck=f32(tuck))


def hop_targets(f: Features, stats: ClipStats | None = None) -> dict[str, np.ndarray]:
    """Per-hop targets (open, width, close, teeth, tuck, voice) from the features, normalised over
    the clip (``stats``; default: ``clip_stats(f)``)."""
    mid, high, low = f.mid, f.high, f.low
    st = clip_stats(f) if stats is None else stats
    ref, lo1, hi1, lo2, hi2 = st.ref, st.lo1, st.hi1, st.lo2, st.hi2
    rel_mid, rel_high, rel_low = mid - ref, high - ref, low - ref
    level = np.clip((rel_mid + 28.0) / 22.0, 0, 1)
    voiced = np.isfinite(f.f1) & (rel_mid > -22)
    f1 = _fill_gaps(np.where(voiced, f.f1, np.nan))
    f2 = _fill_gaps(np.where(voiced, f.f2, np.nan))
    f1n = np.clip((f1 - lo1) / (hi1 - lo1), 0, 1)
    f2n = np.clip((f2 - lo2) / (hi2 - lo2), 0, 1)
    open_ = level * (0.35 + 0.65 * f1n)
    spread = np.clip((f2n - 0.55) / 0.35, 0, 1)
    rnd = np.clip((0.45 - f2n) / 0.3, 0, 1) * np.sqrt(1 - f1n)
    width = (spread - rnd) * np.clip(level * 1.5, 0, 1)
    # closure: the formant band well below the vowels, and no frication filling the gap
    # a closure is also a dip: the band drops well below the syllables around it (a quiet vowel
    # such as /i/ is weak too, but it is the loudest thing in its own syllable)
    from numpy.lib.stride_tricks import sliding_window_view as win

    r = 12  # hops each side: about a syllable
    around = win(np.pad(mid, r, mode="edge"), 2 * r + 1).max(1)
    dip = np.clip((around - mid - 8.0) / 6.0, 0, 1)
    weak = np.clip((-14.0 - rel_mid) / 5.0, 0, 1) * dip
    # (frication only counts above the floor: a stop's silent closure has none)
    no_fric = 1 - np.clip(((high - mid) + 2.0) / 6.0, 0, 1) * np.clip((rel_high + 45.0) / 8.0, 0, 1)
    # a voiced closure (murmur, voice bar) whose resonance sits high is alveolar (/n/ /d/): half
    nasal_f2 = np.where(np.isfinite(f.f2) & (rel_low > -30), f.f2, np.nan)
    alveolar = np.clip((np.nan_to_num(nasal_f2, nan=0.0) - 1500.0) / 400.0, 0, 1)
    close = weak * no_fric * (1 - 0.5 * alveolar)
    # frication: energy above 3 kHz at or above the formant band's; strong = /s/ /sh/, weak and flat = /f/ /v/ /th/
    fric = np.clip(((high - mid) + 4.0) / 8.0, 0, 1) * np.clip((rel_high + 40.0) / 10.0, 0, 1)
    strong = np.clip((rel_high + 22.0) / 6.0, 0, 1)
    teeth = fric * strong
    tuck = np.clip(1.6 * fric * (1 - strong) * np.clip((-12.0 - rel_mid) / 8.0, 0, 1), 0, 1)
    open_ = open_ * (1 - 0.7 * teeth)
    return {"open": open_, "width": width, "close": close, "teeth": teeth, "tuck": tuck, "voice": level}


def _gauss(x: np.ndarray, sigma: float) -> np.ndarray:
    """Zero-phase Gaussian smoothing with edge replication."""
    r = int(np.ceil(3 * sigma))
    k = np.exp(-0.5 * (np.arange(-r, r + 1) / sigma) ** 2)
    k /= k.sum()
    return np.convolve(np.pad(x.astype(np.float64), r, mode="edge"), k, mode="valid")


def _opening(x: np.ndarray, n: int) -> np.ndarray:
    """Morphological opening (min then max over ``n`` samples): keeps plateaus at least ``n`` long."""
    from numpy.lib.stride_tricks import sliding_window_view as win

    lo = win(np.pad(x, (n - 1, 0), mode="edge"), n).min(1)
    return win(np.pad(lo, (0, n - 1), mode="edge"), n).max(1)


def _fill_gaps(x: np.ndarray) -> np.ndarray:
    """Linear interpolation over NaNs (constant at the ends); all-NaN gives a neutral 500 Hz."""
    ok = np.isfinite(x)
    if not ok.any():
        return np.full_like(x, 500.0)
    i = np.arange(len(x))
    return np.interp(i, i[ok], x[ok]).astype(np.float32)

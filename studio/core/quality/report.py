"""From per-frame measurements and the voice to the report: the figures, per-second figures, the
verdict and its one sentence (the ``--fail-under`` limits are ``studio.core.limits``).

    report = build_report(measurements, voice_env, speech, video=..., audio=...)
    report.verdict, report.reason, report.to_json()

The thresholds were measured on classic-engine renders of the demo avatar and voice-over and on
edited copies of them (docs/check.md has the figures).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

import numpy as np

from studio.core.quality import sync
from studio.core.quality.jitter import jitter as jitter_of
from studio.core.quality.mouth import Measurements

QUIET_MARGIN_S = 0.16  # silence this close to speech is left out of silence_motion (crossfades, anticipation)
MIN_SPEECH_S = 2.0  # less speech than this cannot be judged for sync
MIN_FACE_SHARE = 0.9  # frames with a face, below which the report says "check"
MIN_QUIET_FRAMES = 5  # silent frames needed for the video's own seam baseline
OPENING_FLOOR = 0.02  # eye distances: the smallest speech motion silence_motion is divided by


@dataclass(frozen=True)
class Thresholds:
    """Where each figure turns a verdict (see docs/check.md for how they were measured)."""

    max_offset: int = 1  # frames either way that still count as in sync (40 ms at 25 fps)
    min_confidence: float = 0.25  # below: the mouth does not follow this voice ("out of sync")
    weak_confidence: float = 0.40  # below: the sync is weak ("check")
    max_silence_motion: float = 0.35
    min_sharpness: float = 0.70
    max_seam: float = 5.0
    max_drift: float = 0.030

    def to_json(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


THRESHOLDS = Thresholds()


@dataclass(frozen=True)
class Issue:
    figure: str
    value: float
    limit: float
    worst_second: int | None
    text: str  # the clause for the sentence

    def to_json(self) -> dict:
        return {**{f.name: getattr(self, f.name) for f in fields(self)}, "value": _num(self.value)}


@dataclass(frozen=True, eq=False)
class Report:
    video: str
    audio: str
    reference: str
    reference_kind: str
    fps: float
    frames: int
    speech_s: float
    face_share: float
    offset_frames: int
    confidence: float
    peak: float
    curve: np.ndarray
    silence_motion: float
    sharpness: float
    seam: float
    drift: float
    drift_groups: dict[str, float]
    jitter: float  # mean per-frame jitter (% of the eye distance per frame^2; see ``jitter``)
    verdict: str
    reason: str
    issues: tuple[Issue, ...]
    worst_second: int | None
    per_second: tuple[dict, ...]
    notes: tuple[str, ...] = ()
    thresholds: Thresholds = THRESHOLDS
    seconds: float = 0.0  # how long the check took
    extra: dict = field(default_factory=dict)
    #: per frame, for the visual report (not in the JSON): "opening" (the mouth), "voice" (the
    #: envelope), "silent" (bool), "jitter"
    trace: dict = field(default_factory=dict)
    reference_frame: int | None = None  # the video's frame that is the reference (kind "video")

    @property
    def offset_ms(self) -> float:
        return self.offset_frames * 1000.0 / self.fps

    @property
    def ok(self) -> bool:
        return self.verdict == "ok"

    def to_json(self) -> dict:
        return {
            "video": self.video,
            "audio": self.audio,
            "reference": self.reference,
            "reference_kind": self.reference_kind,
            "fps": round(self.fps, 3),
            "frames": self.frames,
            "duration_s": round(self.frames / self.fps, 3),
            "speech_s": round(self.speech_s, 2),
            "face_share": round(self.face_share, 4),
            "offset_frames": self.offset_frames,
            "offset_ms": round(self.offset_ms, 1),
            "confidence": _num(self.confidence),
            "sync_peak": _num(self.peak),
            "correlation": [_num(v) for v in self.curve],
            "silence_motion": _num(self.silence_motion),
            "sharpness": _num(self.sharpness),
            "seam": _num(self.seam),
            "drift": _num(self.drift),
            "drift_groups": {k: _num(v) for k, v in self.drift_groups.items()},
            "jitter": _num(self.jitter),
            "verdict": self.verdict,
            "reason": self.reason,
            "issues": [i.to_json() for i in self.issues],
            "worst_second": self.worst_second,
            "per_second": list(self.per_second),
            "notes": list(self.notes),
            "thresholds": self.thresholds.to_json(),
            "check_seconds": round(self.seconds, 2),
            **self.extra,
        }

    def summary(self) -> dict:
        """The few fields a queue row, a job over HTTP or a render's result carries."""
        return {
            "verdict": self.verdict,
            "reason": self.reason,
            "offset_frames": self.offset_frames,
            "confidence": _num(self.confidence),
            "silence_motion": _num(self.silence_motion),
            "sharpness": _num(self.sharpness),
            "seam": _num(self.seam),
            "drift": _num(self.drift),
            "jitter": _num(self.jitter),
            "worst_second": self.worst_second,
        }


def _num(v: float | None, digits: int = 4):
    if v is None or not math.isfinite(float(v)):
        return None
    return round(float(v), digits)


def _nanmedian(x: np.ndarray) -> float:
    x = np.asarray(x, np.float64)
    x = x[np.isfinite(x)]
    return float(np.median(x)) if len(x) else float("nan")


def _nanmean(x: np.ndarray) -> float:
    x = np.asarray(x, np.float64)
    x = x[np.isfinite(x)]
    return float(np.mean(x)) if len(x) else float("nan")


def quiet_frames(silent: np.ndarray, fps: float) -> np.ndarray:
    """Silent frames at least ``QUIET_MARGIN_S`` away from any speech."""
    silent = np.asarray(silent, bool)
    margin = max(1, round(QUIET_MARGIN_S * fps))
    speech = ~silent
    near = speech.copy()
    for s in range(1, margin + 1):
        near[s:] |= speech[:-s]
        near[:-s] |= speech[s:]
    return silent & ~near


def build_report(
    m: Measurements,
    env: np.ndarray,
    silent: np.ndarray,
    *,
    video: str,
    audio: str,
    thresholds: Thresholds = THRESHOLDS,
    notes: tuple[str, ...] = (),
) -> Report:
    fps = m.fps
    T = m.frames
    env = np.asarray(env, np.float64)[:T]
    silent = np.asarray(silent, bool)[:T]
    if len(env) < T:
        env = np.concatenate([env, np.zeros(T - len(env))])
        silent = np.concatenate([silent, np.ones(T - len(silent), bool)])
    speech = ~silent
    face = m.face
    th = thresholds

    mouth_hp = sync.high_pass(m.opening, fps)
    voice_hp = sync.high_pass(env, fps)
    curve = sync.correlation(mouth_hp, voice_hp)
    offset, confidence, peak = sync.best_shift(curve)

    dev = np.abs(m.opening - m.rest)
    quiet = quiet_frames(silent, fps) & face
    talk = speech & face
    scale = max(_nanmean(dev[talk]) if talk.any() else float("nan"), OPENING_FLOOR)
    if not math.isfinite(scale):
        scale = OPENING_FLOOR
    silence_motion = _nanmean(dev[quiet]) / scale if quiet.any() else float("nan")
    sharp = np.sqrt(m.detail / np.where(m.detail_ref > 0, m.detail_ref, np.nan))
    sharpness = _nanmedian(sharp[talk])
    seam_t = m.seam
    if m.reference_kind == "video" and np.isfinite(m.seam[quiet]).sum() >= MIN_QUIET_FRAMES:
        # one frame of the video, moved onto each frame by a similarity, lines up less well than
        # the avatar's own frame does: what that leaves on the untouched (silent) frames is taken off
        seam_t = np.maximum(m.seam - _nanmedian(m.seam[quiet]), 0.0)
    seam = _nanmedian(seam_t[talk])
    drift = _nanmedian(m.drift[talk]) if talk.any() else _nanmedian(m.drift)
    groups = {g: _nanmedian(v[talk]) for g, v in m.drift_groups.items()}
    shake = jitter_of(m.lips, m.ref_lips, fps) if m.lips is not None else np.full(T, np.nan)
    jitter = _nanmean(shake[face])

    # per second
    seconds = math.ceil(T / fps)
    local = sync.local_sync(mouth_hp, voice_hp, offset, speech, fps)
    offs, offs_conf = sync.local_offsets(mouth_hp, voice_hp, speech, fps)
    per: list[dict] = []
    cols = {k: np.full(seconds, np.nan) for k in ("silence_motion", "sharpness", "seam", "drift", "jitter")}
    for k in range(seconds):
        a, b = round(k * fps), min(T, round((k + 1) * fps))
        sl = slice(a, b)
        q, s = quiet[sl], talk[sl]
        row = {
            "second": k,
            "speech": round(float(speech[sl].mean()), 3) if b > a else 0.0,
            "face": round(float(face[sl].mean()), 3) if b > a else 0.0,
            "sync": _num(local[k]) if k < len(local) else None,
            "offset": int(offs[k]) if k < len(offs) and np.isfinite(offs[k]) else None,
            "offset_confidence": _num(offs_conf[k]) if k < len(offs_conf) else None,
            "opening": _num(_nanmean(m.opening[sl]) if face[sl].any() else float("nan")),
            "voice": _num(_nanmean(env[sl]) if b > a else float("nan")),
        }
        vals = {
            "silence_motion": _nanmean(dev[sl][q]) / scale if q.any() else float("nan"),
            "sharpness": _nanmedian(sharp[sl][s]) if s.any() else float("nan"),
            "seam": _nanmedian(seam_t[sl][s]) if s.any() else float("nan"),
            "drift": _nanmedian(m.drift[sl][face[sl]]) if face[sl].any() else float("nan"),
            "jitter": _nanmean(shake[sl][face[sl]]) if face[sl].any() else float("nan"),
        }
        for name, v in vals.items():
            cols[name][k] = v
            row[name] = _num(v)
        per.append(row)

    def worst(name: str, high_is_bad: bool) -> int | None:
        v = cols.get(name, local)
        if not np.isfinite(v).any():
            return None
        return int(np.nanargmax(v) if high_is_bad else np.nanargmin(v))

    speech_s = float(speech.sum()) / fps
    face_share = float(face.mean()) if T else 0.0
    issues: list[Issue] = []
    verdict = "ok"
    late = "late" if offset > 0 else "early"
    fix = "delay" if offset > 0 else "advance"
    if speech_s < MIN_SPEECH_S:
        verdict = "check"
        issues.append(
            Issue(
                "speech_s",
                speech_s,
                MIN_SPEECH_S,
                None,
                f"there is too little speech ({speech_s:.1f} s) to judge the sync",
            )
        )
    elif confidence < th.min_confidence:
        verdict = "out of sync"
        issues.append(
            Issue(
                "confidence",
                confidence,
                th.min_confidence,
                worst("sync", False),
                f"the mouth does not follow this voice (confidence {confidence:.2f}, below "
                f"{th.min_confidence:.2f}): another voice-over, or a mouth that hardly moves",
            )
        )
    elif abs(offset) > th.max_offset:
        verdict = "out of sync"
        issues.append(
            Issue(
                "offset_frames",
                offset,
                th.max_offset,
                None,
                f"the video is {abs(offset)} frames ({abs(offset) * 1000 / fps:.0f} ms) {late}: "
                f"{fix} the audio by {abs(offset)} frames to align it",
            )
        )
    elif confidence < th.weak_confidence:
        verdict = "check"
        issues.append(
            Issue(
                "confidence",
                confidence,
                th.weak_confidence,
                worst("sync", False),
                f"the mouth follows the voice only weakly (confidence {confidence:.2f})",
            )
        )
    checks = [
        (
            "silence_motion",
            silence_motion,
            th.max_silence_motion,
            True,
            "the mouth moves during silences ({v:.2f} of its speech motion)",
        ),
        (
            "sharpness",
            sharpness,
            th.min_sharpness,
            False,
            "the mouth is blurrier than the reference ({v:.2f} of its detail)",
        ),
        (
            "seam",
            seam,
            th.max_seam,
            True,
            "the blend mask's border shows ({v:.1f} luma levels)",
        ),
        (
            "drift",
            drift,
            th.max_drift,
            True,
            "the face's geometry drifts from the reference ({p:.1f} % of the eye distance)",
        ),
    ]
    for name, v, limit, high_bad, text in checks:
        if not math.isfinite(v):
            continue
        if (v > limit) if high_bad else (v < limit):
            w = worst(name, high_bad)
            issues.append(Issue(name, v, limit, w, text.format(v=v, p=100 * v)))
            if verdict == "ok":
                verdict = "check"
    if face_share < MIN_FACE_SHARE:
        if verdict == "ok":
            verdict = "check"
        gone = [r["second"] for r in per if r["face"] < 0.5]
        issues.append(
            Issue(
                "face_share",
                face_share,
                MIN_FACE_SHARE,
                gone[0] if gone else None,
                f"a face is found in only {100 * face_share:.0f} % of the frames",
            )
        )
    worst_second = next((i.worst_second for i in issues if i.worst_second is not None), None)
    if worst_second is None:
        worst_second = worst("sync", False)
    reason = _sentence(verdict, issues, offset, confidence, fps, worst_second)
    return Report(
        video=video,
        audio=audio,
        reference=m.reference,
        reference_kind=m.reference_kind,
        fps=fps,
        frames=T,
        speech_s=speech_s,
        face_share=face_share,
        offset_frames=offset,
        confidence=confidence,
        peak=peak,
        curve=curve,
        silence_motion=silence_motion,
        sharpness=sharpness,
        seam=seam,
        drift=drift,
        drift_groups=groups,
        jitter=jitter,
        verdict=verdict,
        reason=reason,
        issues=tuple(issues),
        worst_second=worst_second,
        per_second=tuple(per),
        notes=tuple(notes),
        thresholds=th,
        trace={"opening": m.opening, "voice": env, "silent": silent, "jitter": shake},
        reference_frame=m.reference_frame,
    )


def _sentence(
    verdict: str,
    issues: list[Issue],
    offset: int,
    confidence: float,
    fps: float,
    worst_second: int | None,
) -> str:
    if verdict == "ok" and not issues:
        return (
            f"In sync (offset {offset:+d} frames, confidence {confidence:.2f}); the mouth rests in the "
            "silences and keeps the reference's detail, blend and geometry."
        )
    head = issues[0].text
    rest = [i.text for i in issues[1:]]
    text = head[0].upper() + head[1:]
    if rest:
        text += "; also " + ", ".join(rest)
    if issues[0].worst_second is not None:  # a whole-clip offset has no worst second of its own
        text += f" (worst at {_clock(issues[0].worst_second)})"
    return text + "."


def _clock(second: int) -> str:
    return f"{second // 60}:{second % 60:02d}"

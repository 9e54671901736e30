"""The limits a lip-sync check must meet: ``studio check --fail-under``, a render's ``check_gate``,
a delivery's and a watch folder's gate; one parser and one judge for all of them.

    lim = Limits.parse("ok,confidence=0.4,jitter=5")   # one sentence (InputError) if malformed
    lim.failures_of(report.to_json())                  # [] when met, else one clause per miss
    lim.failures_of(job.result["check"])               # a job's check summary, by the same rules
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from studio.core.errors import InputError

VERDICTS = ("ok", "check", "out of sync")


MIN_FIGURES = ("confidence", "sharpness")  # higher is better: the limit is a minimum
MAX_FIGURES = (
    "offset",
    "silence_motion",
    "seam",
    "drift",
    "jitter",
)  # lower is better: the limit is a maximum


_GATE_NAMES = "|".join(n for f in MIN_FIGURES + MAX_FIGURES + ("offset_frames",) for n in {f, f.replace("_", "-")})
_GATE_ITEM = rf"(ok|check|({_GATE_NAMES}) *= *[0-9]{{1,9}}([.][0-9]{{1,9}})?)"
#: what a gate may say, as a regular expression (the OpenAPI document's ``pattern``: a client or a fuzzer
#: sends only gates ``Limits.parse`` takes; the server holds requests to it too)
GATE_PATTERN = rf"^ *({_GATE_ITEM} *(, *{_GATE_ITEM} *)*)?$"


@dataclass(frozen=True)
class Limits:
    """What ``--fail-under`` asks for: a verdict at least as good as ``verdict`` (``ok`` or
    ``check``), and/or figures within limits (``confidence``/``sharpness`` at least the value;
    ``offset`` (frames either way), ``silence_motion``, ``seam``, ``drift``, ``jitter`` at most the value)."""

    verdict: str | None = None
    figures: tuple[tuple[str, float], ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> Limits:
        if text is None or not str(text).strip():
            return cls()
        verdict: str | None = None
        figs: list[tuple[str, float]] = []
        for part in str(text).split(","):
            part = part.strip()
            if not part:
                continue
            if part in ("ok", "check"):
                verdict = part
                continue
            name, sep, value = part.partition("=")
            name = name.strip().replace("-", "_")
            if name == "offset_frames":
                name = "offset"
            if not sep or name not in MIN_FIGURES + MAX_FIGURES:
                raise InputError(
                    f"--fail-under {part!r}: give ok, check, or NAME=VALUE with NAME one of "
                    f"{', '.join(MIN_FIGURES + MAX_FIGURES)} (e.g. confidence=0.4,seam=5)"
                )
            v = non_negative(value)
            if v is None:
                raise InputError(f"--fail-under {part!r}: the value must be a number of 0 or more")
            figs.append((name, v))
        return cls(verdict, tuple(figs))

    def failures(self, report) -> list[str]:
        """What a ``Report`` misses, one short clause each (empty: all met)."""
        return self.failures_of(report.summary())

    def failures_of(self, summary: dict) -> list[str]:
        """``failures`` of a report's JSON or its summary (a job's ``check``), by the same rules."""
        out = []
        verdict = summary.get("verdict")
        if self.verdict is not None and verdict in VERDICTS:
            if VERDICTS.index(verdict) > VERDICTS.index(self.verdict):
                out.append(f"the verdict is '{verdict}', not '{self.verdict}' or better")
        for name, limit in self.figures:
            v = summary.get("offset_frames") if name == "offset" else summary.get(name)
            v = abs(v) if name == "offset" and v is not None else v
            if v is None or not math.isfinite(float(v)):
                out.append(f"{name} could not be measured")
            elif name in MIN_FIGURES and v < limit:
                out.append(f"{name} {v:.3g} is under {limit:g}")
            elif name in MAX_FIGURES and v > limit:
                out.append(f"{name} {v:.3g} is over {limit:g}")
        return out

    def to_json(self) -> dict:
        return {"verdict": self.verdict, **dict(self.figures)}


def non_negative(text: str) -> float | None:
    """``text`` as a finite number of 0 or more (a limit's value, ``studio check --frames``' seconds);
    None when it is not one."""
    try:
        v = float(text)
    except ValueError:
        return None
    return v if math.isfinite(v) and v >= 0 else None

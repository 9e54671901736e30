"""What a render reports: ``RenderProgress`` (one a batch, and the final one) and ``RenderResult``
(the file, its frames and rate, the time each stage took), shared by the renderer and every
placement that spreads a clip (several GPUs, chunks, the farm) and read back from a job's JSON."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class RenderProgress:
    """Progress of any render, wherever it runs (one device, several GPUs, local chunks, a farm, a
    server): one batch done; the last has ``finished=True`` and the ``output``."""

    done: int
    total: int
    fps: float
    eta_s: float
    elapsed_s: float
    stage_ms: dict[str, float] = field(default_factory=dict)  # cumulative ms per stage
    preview: np.ndarray | None = None  # [H,W,3] uint8 RGB, now and then
    preview_index: int | None = None  # the preview's frame index in the whole clip
    finished: bool = False
    output: str | None = None
    workers: dict[str, float] = field(default_factory=dict)  # frames per second per worker (chunks, farm)
    chunks_done: int = 0
    chunks: int = 0
    retries: int = 0  # chunks tried again after their worker died (farm)

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 0.0

    @classmethod
    def measured(cls, done: int, total: int, elapsed_s: float, **kw: Any) -> RenderProgress:
        """``done`` of ``total`` frames after ``elapsed_s``: fps and ETA from them (the one rule)."""
        fps = done / elapsed_s if elapsed_s > 0 else 0.0
        return cls(
            done=min(done, total),
            total=total,
            fps=fps,
            eta_s=(total - done) / fps if fps else 0.0,
            elapsed_s=elapsed_s,
            **kw,
        )

    @classmethod
    def final(cls, result: RenderResult, elapsed_s: float, **kw: Any) -> RenderProgress:
        """The last progress of a render that made ``result``: every frame done, ``finished``."""
        return cls(
            done=result.frames,
            total=result.frames,
            fps=result.fps,
            eta_s=0.0,
            elapsed_s=elapsed_s,
            finished=True,
            output=result.output,
            **kw,
        )


@dataclass(frozen=True)
class RenderResult:
    """What a finished render made, wherever it ran (``measured`` builds one; ``from_json`` reads one back)."""

    output: str
    frames: int
    silent_frames: int
    engine: str
    engine_reason: str
    encoder: str
    seconds: float
    fps: float
    width: int
    height: int
    stage_ms: dict[str, float]
    finish_ms: dict[str, float] = field(default_factory=dict)  # the "finish" stage: encoder tail, join, file
    audio: str = ""  # the output's AAC track: "copied" (the voice-over's own), "cached" or "encoded"
    frame_rate: str = "25"  # the output's frame rate ("29.97" is 30000/1001 exactly; rates.parse_rate)
    loudness: dict[str, Any] = field(default_factory=dict)  # --loudness: loudness.LoudnessReport (before/after)
    alpha: str = ""  # codecs.alpha_of: "kept", "opaque" (an alpha codec, an avatar without), "dropped", ""
    notes: list[str] = field(default_factory=list)  # what the user should know (an upscale held back ...)
    files: dict[str, str] = field(default_factory=dict)  # every other file written: captions, otio ...

    @classmethod
    def measured(
        cls,
        *,
        output: str | Path,
        frames: int,
        silent_frames: int,
        engine: str,
        engine_reason: str,
        encoder: str,
        seconds: float,
        width: int,
        height: int,
        stage_ms: dict[str, float] | None = None,
        finish_ms: dict[str, float] | None = None,
        audio: str = "",
        frame_rate: str = "25",
        loudness: dict[str, Any] | None = None,
        alpha: str = "",
        notes: list[str] | None = None,
    ) -> RenderResult:
        """The one constructor of a render's result: fps from frames and seconds, times rounded."""
        return cls(
            output=str(output),
            frames=int(frames),
            silent_frames=int(silent_frames),
            engine=engine,
            engine_reason=engine_reason,
            encoder=encoder,
            seconds=round(seconds, 3),
            fps=round(frames / seconds, 2) if seconds else 0.0,
            width=int(width),
            height=int(height),
            stage_ms={k: round(v, 1) for k, v in (stage_ms or {}).items()},
            finish_ms={k: round(v, 1) for k, v in (finish_ms or {}).items()},
            audio=audio,
            frame_rate=frame_rate,
            loudness=dict(loudness or {}),
            alpha=alpha,
            notes=list(notes or []),
        )

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    @classmethod
    def from_json(cls, data: dict | None) -> RenderResult:
        """A result stored or sent as JSON (the job store, a server's answer): unknown keys are
        ignored, missing fields take their defaults (0, "" or {})."""
        data = data or {}
        kw: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.name in data:
                kw[f.name] = data[f.name]
            elif f.default is not dataclasses.MISSING:
                kw[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                kw[f.name] = f.default_factory()
            else:
                kw[f.name] = _EMPTY.get(str(f.type), 0)
        return cls(**kw)


_EMPTY: dict[str, Any] = {"str": "", "dict[str, float]": {}, "float": 0.0, "int": 0}

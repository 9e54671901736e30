"""The renderer: plan -> batches -> engine -> composite -> encoder, and the frame at any timestamp.

    r = Renderer(avatar, "voice.flac", RenderSettings(engine="auto"))
    for p in r.run("out.mp4"):          # one RenderProgress per batch; r.cancel() from any thread
        print(p.done, p.total, p.fps)
    img = r.frame_at(3.2)               # exactly the frame the render writes at floor(3.2 * 25)

Qt-free: the GUI drives it from a worker thread and turns progress into signals.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from studio.core.constants import DEFAULT_MIN_SILENCE_FRAMES, DEFAULT_SILENCE_THRESHOLD, FPS

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RenderSettings:
    engine: str = "auto"  # auto | classic | musetalk
    device: str | None = None  # None: cuda when available, else cpu
    precision: str = "auto"  # auto | fp32 | fp16 | bf16 (MuseTalk)
    decoder: str = "taesd"  # taesd | sd-vae (MuseTalk)
    batch: int = 0  # 0: the engine's preferred batch
    encoder: str = "auto"  # auto | x264 | x264-parallel | nvenc
    crf: int = 20
    preset: str = "veryfast"
    threshold: float = DEFAULT_SILENCE_THRESHOLD
    min_silence: int = DEFAULT_MIN_SILENCE_FRAMES
    crossfade: int = 3  # frames of crossfade at each speech/silence edge
    preview_interval_s: float = 0.25  # how often a progress carries a preview frame

    def with_(self, **kw) -> RenderSettings:
        return replace(self, **kw)


@dataclass(frozen=True)
class RenderProgress:
    done: int
    total: int
    fps: float
    eta_s: float
    elapsed_s: float
    stage_ms: dict[str, float] = field(default_factory=dict)  # cumulative ms per stage
    preview: np.ndarray | None = None  # [H,W,3] uint8 RGB, now and then
    preview_index: int | None = None
    finished: bool = False
    output: str | None = None


@dataclass(frozen=True)
class RenderResult:
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

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True, eq=False)
class RenderPlan:
    """Per output frame: which avatar frame, silent or not, face found, and the engine weight."""

    avatar_idx: np.ndarray  # [T] int
    silent: np.ndarray  # [T] bool (from the silence mask)
    face_ok: np.ndarray  # [T] bool
    weight: np.ndarray  # [T] float32: 0 = avatar frame as is, 1 = generated face; ramps at edges

    @property
    def frames(self) -> int:
        return len(self.avatar_idx)

    @property
    def engine_frames(self) -> np.ndarray:
        """Indices of frames that need the engine (weight > 0)."""
        return np.flatnonzero(self.weight > 0)


class Renderer:
    """Renders one avatar x one voice-over. Construct cheaply; the engine loads on first use."""

    def __init__(self, avatar, audio, settings: RenderSettings | None = None, engine=None):
        self.settings = settings or RenderSettings()
        self._avatar_arg = avatar
        self._audio_arg = audio
        self._engine = engine
        self._engine_reason = "given by the caller" if engine is not None else ""
        self._cancel = threading.Event()
        self._lock = threading.RLock()
        self.result: RenderResult | None = None
        raise NotImplementedError("the renderer lands with the render-pipeline issue")

    def cancel(self) -> None:
        self._cancel.set()

    def run(self, output: str | Path) -> Iterator[RenderProgress]:
        raise NotImplementedError

    def frame(self, index: int) -> np.ndarray:
        raise NotImplementedError

    def frame_at(self, seconds: float) -> np.ndarray:
        return self.frame(int(np.floor(seconds * FPS + 1e-9)))


_ = time  # used by the implementation

"""The renderer: plan -> batches -> engine -> composite -> encoder, and the frame at any timestamp.

    r = Renderer(avatar, "voice.flac", RenderSettings(engine="auto"))
    for p in r.run("out.mp4"):          # one RenderProgress per batch; r.cancel() from any thread
        bar.update(p.done, p.total, p.fps)
    img = r.frame_at(3.2)               # exactly the frame the render writes at floor(3.2 * 25)

Qt-free: the GUI drives it from a worker thread and turns progress into signals.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from studio.core.constants import FPS
from studio.core.render.plan import (
    RenderPlan,
    audio_range,
    batch_ranges,
    check_range,
    frame_index,
    make_plan,
    stripes,
)
from studio.core.settings import RenderSettings

log = logging.getLogger(__name__)


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
    finish_ms: dict[str, float] = field(default_factory=dict)  # the "finish" stage: encoder tail, join, file

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


class Renderer:
    """Renders one avatar x one voice-over. Construct cheaply; audio, avatar and engine load on first use.

    ``avatar`` is an ``AvatarAssets``, a library name or an image/video path; ``audio`` a file path.
    ``engine`` may be given to reuse a warm engine across renders (the GUI does).
    """

    def __init__(self, avatar, audio, settings: RenderSettings | None = None, engine=None):
        self.settings = settings or RenderSettings()
        self._avatar_arg = avatar
        self.audio_path = str(audio)
        self._engine = engine
        self._engine_reason = "given by the caller" if engine is not None else ""
        self._cancel = threading.Event()
        self._lock = threading.RLock()
        self._avatar = None
        self._wave = None
        self._plan = None
        self._features = None
        self._prepared = None
        self._compositor = None
        self._stage_ms: dict[str, float] = {}
        self.result: RenderResult | None = None
        #: held around each batch's engine work when the engine is shared (a warm engine that a
        #: scrub frame may use between two batches of a render): any context manager, or None
        self.engine_lock = None

    # -- lazily loaded parts ------------------------------------------------------------------

    @property
    def avatar(self):
        if self._avatar is None:
            from studio.core.avatars import library as avatar_mod

            a = self._avatar_arg
            self._avatar = a if hasattr(a, "frames") else avatar_mod.resolve(a)
        return self._avatar

    @property
    def wave(self):
        if self._wave is None:
            from studio.core.media.audio import load

            self._wave = load(self.audio_path)
        return self._wave

    @property
    def engine(self):
        if self._engine is None:
            from studio.core.engines import select_engine

            s = self.settings
            choice = select_engine(
                s.engine,
                device=s.device,
                precision=s.precision,
                decoder=s.decoder,
                batch=s.batch,
                runtime=s.runtime,
                **({"compile": True} if s.compile else {}),
            )
            self._engine, self._engine_reason = choice.engine, choice.reason
        return self._engine

    @property
    def engine_reason(self) -> str:
        _ = self.engine
        return self._engine_reason

    @property
    def plan(self) -> RenderPlan:
        if self._plan is None:
            self._plan = make_plan(self.wave, self.avatar, self.settings)
        return self._plan

    def _ready(self):
        """Load everything a frame needs (features, prepared avatar, compositor); idempotent."""
        with self._lock:
            engine = self.engine
            if engine.device.type == "cpu":
                from studio.core.engines.runtime_torch import limit_cpu_threads

                limit_cpu_threads()
            if self._features is None:
                t0 = time.perf_counter()
                self._features = engine.audio_features(self.wave)
                self._stage("features", t0)
            if self._prepared is None:
                t0 = time.perf_counter()
                self._prepared = engine.prepare(self.avatar)
                self._stage("prepare", t0)
            if self._compositor is None:
                from studio.core.render.composite import Compositor

                a = self.avatar
                self._compositor = Compositor(a.frames, a.boxes, a.masks, device=engine.device)
            engine.bind(self._features)
            return engine

    def _stage(self, name: str, t0: float) -> None:
        self._stage_ms[name] = self._stage_ms.get(name, 0.0) + (time.perf_counter() - t0) * 1e3

    # -- frames -------------------------------------------------------------------------------

    def frame(self, index: int) -> np.ndarray:
        """Exactly the frame the full render writes at ``index`` ([H,W,3] uint8 RGB, before encoding)."""
        T = self.plan.frames
        if not 0 <= index < T:
            from studio.core.errors import InputError

            raise InputError(f"frame {index} is outside the clip (0..{T - 1}, {T / FPS:.2f} s)")
        ((_, frames),) = self.iter_frames([(index, index + 1)])
        return frames[0].cpu().numpy()

    def frame_at(self, seconds: float) -> np.ndarray:
        """The frame shown at ``seconds``: index ``floor(seconds * 25)``."""
        return self.frame(frame_index(seconds))

    def iter_frames(self, ranges=None):
        """Yield ``(first_index, frames)`` per range; frames are torch uint8 ``[B,H,W,3]`` RGB on the engine device.

        Silent and face-less frames skip the engine and are the avatar frames, bit for bit.
        """
        if ranges is None:
            ranges = batch_ranges(self.plan.frames, self.batch_size)
        for idx, frames in self.iter_batches(np.arange(a, b) for a, b in ranges):
            yield int(idx[0]), frames

    def iter_batches(self, batches, nv12: bool = False):
        """Yield ``(indices, frames)`` for each array of frame indices (any order, e.g. ``stripes``).

        Each frame depends only on its index, so a frame is the same in every batch it appears in.
        ``nv12``: frames come as NV12 ``[B,H*3//2,W]`` instead, composited in NV12 (the avatar
        converted once, then only the face windows; equal to converting the RGB frames) where
        ``nv12_ready`` says so.
        """
        plan = self.plan
        engine = self._ready()
        comp = self._compositor
        if nv12 and not comp.nv12_ready:
            raise RuntimeError("this avatar cannot be composited in NV12 (see Renderer.nv12_ready)")
        for idx_f in batches:
            idx_f = np.asarray(idx_f, np.int64)
            idx = plan.avatar_idx[idx_f]
            weight = plan.weight[idx_f]
            active = np.flatnonzero(weight > 0)
            with self.engine_lock or contextlib.nullcontext():
                frames = self._batch(engine, comp, idx_f, idx, weight, active, nv12)
            yield idx_f, frames

    def _batch(self, engine, comp, idx_f, idx, weight, active, nv12):
        """One batch of frames: backgrounds, the engine's faces, blended in."""
        t0 = time.perf_counter()
        frames = comp.background_nv12(idx) if nv12 else comp.background(idx)
        self._stage("background", t0)
        if len(active):
            if getattr(engine, "features", None) is not self._features:  # a shared engine served another clip
                engine.bind(self._features)
            t0 = time.perf_counter()
            faces = engine.generate(self._prepared, idx[active], idx_f[active], weight[active])
            self._stage("engine", t0)
            t0 = time.perf_counter()
            if nv12:
                comp.paste_nv12(faces, idx[active], weight[active], frames, rows=active)
            elif len(active) == len(idx):  # all speech: blend in place, no second background
                comp.paste(faces, idx, weight, out=frames)
            else:
                frames[torch_index(active, frames.device)] = comp.paste(faces, idx[active], weight[active])
            self._stage("composite", t0)
        return frames

    @property
    def nv12_ready(self) -> bool:
        """Whether ``iter_batches(..., nv12=True)`` works: a CUDA engine, and an avatar that fits
        the device cache with an even frame size."""
        self._ready()
        return self.engine.device.type == "cuda" and self._compositor.nv12_ready

    @property
    def batch_size(self) -> int:
        return self.settings.batch or self.engine.preferred_batch()

    # -- the render ---------------------------------------------------------------------------

    def cancel(self) -> None:
        """Stop the running render after the current batch; nothing is written."""
        self._cancel.set()

    def run(self, output: str | Path, frames: tuple[int, int] | None = None) -> Iterator[RenderProgress]:
        """Render to ``output`` (MP4), yielding a ``RenderProgress`` per batch.

        ``frames=(start, end)`` renders only frames ``start <= t < end`` (an in/out range) with the
        matching stretch of the original audio; each frame is the one the whole render has there.
        On cancel raises ``Cancelled`` after removing every temporary file; an existing ``output``
        stays untouched. The last progress has ``finished=True``; ``self.result`` holds the summary.
        """
        from studio.core.media.hints import changing_region
        from studio.core.media.writer import open_video

        self._cancel.clear()
        self._stage_ms = {}
        t_start = time.perf_counter()
        output = Path(output)
        plan = self.plan
        self._stage("audio", t_start)  # read, analysed, planned (cached after the first use)
        a = self.avatar
        first, end = check_range(frames, plan.frames)
        T = end - first
        t0 = time.perf_counter()
        with contextlib.ExitStack() as stack:
            audio = self.audio_path
            if T != plan.frames:
                audio = stack.enter_context(audio_range(self.wave, self.audio_path, first, end))
            writer = open_video(
                output,
                a.width,
                a.height,
                audio=audio,
                encoder=self.settings.encoder,
                crf=self.settings.crf,
                preset=self.settings.preset,
                fps=FPS,
                total_frames=T,
                rolling=True,
                changing=changing_region(a),  # a photo's face, a video's moving parts
            )
            self._stage("open", t0)
            yield from self._run(writer, plan, first, T, t_start)

    def _run(self, writer, plan, first: int, T: int, t_start: float) -> Iterator[RenderProgress]:
        from studio.core.errors import Cancelled

        a = self.avatar
        with writer:
            engine_frames = plan.weight[first : first + T] > 0
            batches = [
                b + first
                for b in stripes(T, self.batch_size, writer.chunks, window=writer.window, engine=engine_frames)
            ]
            done = 0
            last_preview = -1e9
            pending = None  # (pinned host frame, event, index): a preview on its way to the host
            cuda = self.engine.device.type == "cuda"
            # CUDA: frames go to the writer as GPU tensors when its encoder processes take them
            # directly (one DMA per frame into their slots); otherwise through a copy thread.
            sink = None
            if cuda and not writer.takes_gpu_frames():
                from studio.core.media.hostcopy import CopyThread

                sink = CopyThread(writer, T)
            nv12 = cuda and self.nv12_ready  # composite straight into the encoder's format
            try:
                for idx, frames in self.iter_batches(batches, nv12=nv12):
                    if self._cancel.is_set():
                        raise Cancelled("render cancelled; nothing was written")
                    t0 = time.perf_counter()
                    if sink is not None:
                        sink.put(idx - first, frames)
                    else:
                        writer.write(frames, indices=idx - first)
                    self._stage("encode", t0)
                    done += len(frames)
                    now = time.perf_counter()
                    elapsed = now - t_start
                    fps = done / elapsed if elapsed > 0 else 0.0
                    preview = preview_index = None
                    if pending is None and now - last_preview >= self.settings.preview_interval_s:
                        # the last frame of the batch's first run: the earliest chunk, moving steadily
                        k = _first_run_end(idx)
                        if frames.is_cuda:  # copied behind the GPU work, picked up at a later batch
                            pending = _preview_copy(frames[k], int(idx[k]))
                        else:
                            preview, preview_index = frames[k].numpy(), int(idx[k])
                        last_preview = now
                    if pending is not None and (done == T or pending[1].query()):  # copied meanwhile
                        pending[1].synchronize()
                        preview, preview_index, pending = pending[0].numpy(), pending[2], None
                    yield RenderProgress(
                        done=done,
                        total=T,
                        fps=fps,
                        eta_s=(T - done) / fps if fps else 0.0,
                        elapsed_s=elapsed,
                        stage_ms=dict(self._stage_ms),
                        preview=preview,
                        preview_index=preview_index,
                    )
                if sink is not None:
                    t0 = time.perf_counter()
                    sink.join()
                    self._stage("encode", t0)
            finally:
                if sink is not None:
                    sink.stop()
            if self._cancel.is_set():
                raise Cancelled("render cancelled; nothing was written")
            t0 = time.perf_counter()
            path = writer.close()
            self._stage("finish", t0)
        seconds = time.perf_counter() - t_start
        self.result = RenderResult(
            output=str(path),
            frames=T,
            silent_frames=int(plan.silent[first : first + T].sum()),
            engine=self.engine.name,
            engine_reason=self._engine_reason,
            encoder=writer.name,
            seconds=round(seconds, 3),
            fps=round(T / seconds, 2) if seconds else 0.0,
            width=a.width,
            height=a.height,
            stage_ms={k: round(v, 1) for k, v in self._stage_ms.items()},
            finish_ms={k: round(v, 1) for k, v in writer.close_ms.items()},
        )
        yield RenderProgress(
            done=T,
            total=T,
            fps=self.result.fps,
            eta_s=0.0,
            elapsed_s=seconds,
            stage_ms=dict(self._stage_ms),
            finished=True,
            output=str(path),
        )

    def render(self, output: str | Path) -> RenderResult:
        """Run to completion (no progress)."""
        for _ in self.run(output):
            pass
        return self.result


def _preview_copy(frame, index: int):
    """Start copying a CUDA frame to pinned host memory without waiting: (host, event, index)."""
    import torch

    if frame.ndim == 2:  # NV12: an RGB preview
        from studio.core.render.composite import nv12_to_rgb

        frame = nv12_to_rgb(frame[None])[0]
    host = torch.empty(frame.shape, dtype=frame.dtype, pin_memory=True)
    host.copy_(frame, non_blocking=True)
    event = torch.cuda.Event()
    event.record()
    return host, event, index


def _first_run_end(idx: np.ndarray) -> int:
    """Position of the last frame of the first run of consecutive indices in ``idx``."""
    breaks = np.flatnonzero(np.diff(idx) != 1)
    return int(breaks[0]) if len(breaks) else len(idx) - 1


def torch_index(active: np.ndarray, device):
    from studio.core.devices import to_device

    return to_device(active, device)

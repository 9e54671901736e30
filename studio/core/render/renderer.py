"""The renderer: plan -> batches -> engine -> composite -> encoder, and the frame at any timestamp.

    r = Renderer(avatar, "voice.flac", RenderSettings(engine="auto"))
    for p in r.run("out.mp4"):          # one RenderProgress per batch; r.cancel() from any thread
        bar.update(p.done, p.total, p.fps)
    img = r.frame_at(3.2)               # exactly the frame the render writes at floor(3.2 * r.rate)

Qt-free: the GUI drives it from a worker thread and turns progress into signals.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from studio.core.hold import hold
from studio.core.media.codecs import alpha_of
from studio.core.media.rates import rate_text
from studio.core.render.canvas import with_alpha
from studio.core.render.clip import Clip
from studio.core.render.plan import (
    RenderPlan,
    audio_range,
    batch_ranges,
    check_range,
    frame_index,
    stripes,
)
from studio.core.render.results import RenderProgress, RenderResult
from studio.core.settings import RenderSettings

log = logging.getLogger(__name__)


class Renderer:
    """Renders one avatar x one voice-over. Construct cheaply; audio, avatar and engine load on first use.

    ``avatar`` is an ``AvatarAssets``, a library name or an image/video path; ``audio`` a file path.
    ``engine`` may be given to reuse a warm engine across renders (the GUI does), with the
    ``engine_reason`` it was chosen for. ``Renderer.for_clip`` makes renderers that share one
    loaded ``Clip`` (several devices of one render, the chunks of a farm job). ``frames``: the
    in/out range this renderer is for (``focus``): on a voice-over over 5 minutes only that stretch
    of the audio (and 30 s around it) is decoded and prepared.
    """

    def __init__(
        self,
        avatar: Any = None,
        audio: Any = None,
        settings: RenderSettings | None = None,
        engine: Any = None,
        *,
        engine_reason: str = "",
        clip: Clip | None = None,
        frames: tuple[int, int] | None = None,
    ):
        self.settings = settings or (clip.settings if clip is not None else RenderSettings())
        if clip is None:
            if avatar is None or audio is None:
                raise ValueError("Renderer needs an avatar and a voice-over (or a clip)")
            clip = Clip(avatar, audio, self.settings, frames=frames)
        elif not clip.fits(self.settings):
            raise ValueError("the clip was planned with other silence settings than this renderer's")
        self.clip = clip
        self._engine = engine
        self._engine_reason = engine_reason or ("given by the caller" if engine is not None else "")
        self._cancel = threading.Event()
        self._lock = threading.RLock()
        self._features: Any = None
        self._features_gen = -1  # the clip generation self._features belongs to
        self._prepared: Any = None
        self._compositor: Any = None
        self._delivered: Any = None  # canvas.Delivered: the canvas and burnt-in captions
        self._loudness: Any = None  # the last run's loudness.LoudnessReport (--loudness)
        self._stage_ms: dict[str, float] = {}
        self.result: RenderResult | None = None
        #: held around each batch's engine work when the engine is shared (a warm engine that a
        #: scrub frame may use between two batches of a render): any context manager, or None
        self.engine_lock: Any = None
        from studio.core.render.stagetrace import tracer

        self._trace = tracer()  # STUDIO_STAGE_TRACE: each stage's span into a file (benchmarks)
        if self._trace is not None:
            now = time.perf_counter()
            self._trace.cpu("made", now, now, id(self))

    @classmethod
    def for_clip(
        cls, clip: Clip, settings: RenderSettings | None = None, engine: Any = None, engine_reason: str = ""
    ) -> Renderer:
        """A renderer of ``clip`` (loaded once, shared): ``settings`` may differ in device and encoding."""
        return cls(settings=settings, engine=engine, engine_reason=engine_reason, clip=clip)

    # -- lazily loaded parts ------------------------------------------------------------------

    @property
    def audio_path(self) -> str:
        return self.clip.audio_path

    @property
    def avatar(self):
        return self.clip.avatar

    @property
    def rate(self) -> Fraction:
        """The output's frame rate, exact (``Fraction(30000, 1001)`` at 29.97): the ``fps`` setting,
        or for ``auto`` the video avatar's own rate (25 for a photo)."""
        return self.clip.rate

    @property
    def wave(self):
        """The voice-over on the output's frame grid (``wave.rate == self.rate``)."""
        return self.clip.wave

    @property
    def chosen_engine(self):
        """The engine once ``engine`` has chosen (and loaded) it, else None: reading it loads nothing."""
        return self._engine

    @property
    def engine(self):
        if self._engine is None:
            from studio.core.engines.selection import select_for

            choice = select_for(self.settings)
            self._engine, self._engine_reason = choice.engine, choice.reason
        return self._engine

    @property
    def engine_reason(self) -> str:
        _ = self.engine
        return self._engine_reason

    @property
    def plan(self) -> RenderPlan:
        return self.clip.plan

    def focus(self, frames: tuple[int, int] | None) -> None:
        """What the next frames come from: the range ``frames`` (None: the whole clip). What is
        prepared is kept when it covers it, else prepared again (``Clip.focus``)."""
        self.clip.focus(frames)

    @property
    def prepared(self) -> Any:
        """The engine's per-avatar state (``engine.prepare(avatar)``), made by ``ready``."""
        self.ready()
        return self._prepared

    @property
    def stage_ms(self) -> dict[str, float]:
        """Milliseconds per stage of the current (or last) render, cumulative."""
        return dict(self._stage_ms)

    def ready(self):
        """Load everything a frame needs (the clip's audio features, the engine's prepared avatar,
        the compositor) and bind the features; idempotent. Returns the engine."""
        with self._lock:
            engine = self.engine
            if engine.device.type == "cpu":
                from studio.core.engines.runtime_torch import limit_cpu_threads

                limit_cpu_threads()
            if self._features is None or self._features_gen != self.clip.generation:
                t0 = time.perf_counter()
                self._features_gen = self.clip.generation
                self._features = self.clip.features(engine)
                self._stage("features", t0)
            if self._prepared is None:
                t0 = time.perf_counter()
                self._prepared = engine.prepare(self.avatar)
                self._stage("prepare", t0)
            if self._compositor is None:
                from studio.core.render.composite import Compositor

                a = self.avatar
                self._compositor = Compositor(a.frames, a.boxes, a.masks, device=engine.device)
            if self._delivered is None:
                from studio.core.render.canvas import Delivered

                script = self.settings.script
                self._delivered = Delivered(self.settings, self.avatar, engine.device, lambda: self.clip.cues(script))
            engine.bind(self._features)
            return engine

    def _span(self, name: str, t0: float) -> float:
        """A span for the trace alone (not a stage of ``stage_ms``); the time now."""
        t1 = time.perf_counter()
        if self._trace is not None:
            self._trace.cpu(name, t0, t1, id(self))
        return t1

    def _stage(self, name: str, t0: float) -> None:
        t1 = time.perf_counter()
        self._stage_ms[name] = self._stage_ms.get(name, 0.0) + (t1 - t0) * 1e3
        if self._trace is not None:
            self._trace.cpu(name, t0, t1, id(self))

    # -- frames -------------------------------------------------------------------------------

    def frame(self, index: int) -> np.ndarray:
        """Exactly the frame the full render writes at ``index`` ([H,W,3] uint8 RGB, before encoding;
        ``[H,W,4]`` RGBA for a transparent avatar, its alpha as an alpha codec writes it)."""
        T = self.plan.frames
        if not 0 <= index < T:
            from studio.core.errors import OutsideClip

            raise OutsideClip(f"frame {index} is outside the clip (0..{T - 1}, {float(T / self.rate):.2f} s)")
        if not self.clip.covers(index):  # prepared for a range: a frame outside it prepares its own
            self.focus((index, index + 1))
        ((_, frames),) = self.iter_frames([(index, index + 1)])
        if self.avatar.alpha is not None and self._delivered.canvas is None:
            frames = with_alpha(frames, self.avatar.alpha, self.plan.avatar_idx[[index]])
        return frames[0].cpu().numpy()

    def frame_at(self, seconds: float) -> np.ndarray:
        """The frame shown at ``seconds``: index ``floor(seconds * rate)`` at the output's rate."""
        return self.frame(frame_index(seconds, self.rate))

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
        engine = self.ready()
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
            if self._delivered.active:  # on the canvas, captions burnt in
                frames = self._delivered.apply(frames, idx_f, idx, self.rate, self._stage)
            yield idx_f, frames

    @property
    def canvas(self):
        """The ``canvas.Canvas`` the frames are placed on (None: the avatar's own size)."""
        self.ready()
        return self._delivered.canvas

    @property
    def output_size(self) -> tuple[int, int]:
        """The written frames' (width, height)."""
        from studio.core.render.canvas import output_size

        return output_size(self.settings, self.avatar)

    def _batch(self, engine, comp, idx_f, idx, weight, active, nv12):
        """One batch of frames: backgrounds, the engine's faces, blended in."""
        trace = self._trace
        gb = trace.mark(comp.device) if trace is not None else None
        t0 = time.perf_counter()
        frames = comp.background_nv12(idx) if nv12 else comp.background(idx)
        self._stage("background", t0)
        g0 = trace.mark(comp.device) if trace is not None else None
        if trace is not None:
            trace.gpu("background", gb, g0, id(self), n=len(idx))
        if len(active):
            if getattr(engine, "features", None) is not self._features:  # a shared engine served another clip
                engine.bind(self._features)
            t0 = time.perf_counter()
            faces = engine.generate(self._prepared, idx[active], idx_f[active], weight[active])
            self._stage("engine", t0)
            g1 = trace.mark(comp.device) if trace is not None else None
            t0 = time.perf_counter()
            if nv12:
                comp.paste_nv12(faces, idx[active], weight[active], frames, rows=active)
            elif len(active) == len(idx):  # all speech: blend in place, no second background
                comp.paste(faces, idx, weight, out=frames)
            else:
                frames[torch_index(active, frames.device)] = comp.paste(faces, idx[active], weight[active])
            self._stage("composite", t0)
            if trace is not None:
                if not hasattr(engine, "base_engine"):  # a batcher's view: the batcher traces the merged call
                    trace.gpu("engine", g0, g1, id(self), n=len(active))
                trace.gpu("composite", g1, trace.mark(comp.device), id(self), n=len(active))
        return frames

    @property
    def nv12_ready(self) -> bool:
        """Whether ``iter_batches(..., nv12=True)`` works: a CUDA engine, and an avatar that fits
        the device cache with an even frame size."""
        self.ready()
        return self.engine.device.type == "cuda" and self._compositor.nv12_ready and not self._delivered.active

    @property
    def batch_size(self) -> int:
        return self.settings.batch or self.engine.preferred_batch()

    # -- the render ---------------------------------------------------------------------------

    def cancel(self) -> None:
        """Stop the running render after the current batch; nothing is written."""
        self._cancel.set()

    def run(
        self, output: str | Path, frames: tuple[int, int] | None = None, *, overwrite: bool = True
    ) -> Iterator[RenderProgress]:
        """Render to ``output`` (MP4), yielding a ``RenderProgress`` per batch.

        ``overwrite=False``: an existing file is never replaced; the name is claimed when the MP4
        is complete (a taken one gets the next number: ``result.output`` says which).

        ``frames=(start, end)`` renders only frames ``start <= t < end`` (an in/out range) with the
        matching stretch of the original audio; each frame is the one the whole render has there.
        On cancel raises ``Cancelled`` after removing every temporary file; an existing ``output``
        stays untouched. The last progress has ``finished=True``; ``self.result`` holds the summary.
        """
        from studio.core.render.outputs import open_video_for

        self._cancel.clear()
        self._stage_ms = {}
        if self._delivered is not None:
            self._delivered.gpu_ms()  # the canvas time of frames scrubbed before is not this render's
        t_start = time.perf_counter()
        output = Path(output)
        self.focus(frames)
        plan = self.plan
        self._stage("audio", t_start)  # read, analysed, planned (cached after the first use)
        if self._trace is not None:
            self._trace.write(k="run", r=id(self), out=output.name, frames=self.plan.frames, t=round(time.time(), 6))
        a = self.avatar
        first, end = check_range(frames, plan.frames, self.rate)
        T = end - first
        t0 = time.perf_counter()
        with contextlib.ExitStack() as stack:
            audio = self.audio_path
            if T != plan.frames:
                audio = stack.enter_context(audio_range(self.wave, self.audio_path, first, end))
            if self.settings.audio_format != "source":  # the delivery's audio format (rate, channels), with soxr
                from studio.core.media.delivery_audio import conformed

                audio = stack.enter_context(conformed(audio, self.settings.audio_format))
            self._loudness = None
            if self.settings.loudness is not None:  # the delivered audio: measured, normalised, limited
                from studio.core.media.loudness import normalised

                t1 = time.perf_counter()
                audio, self._loudness = stack.enter_context(
                    normalised(audio, self.settings.loudness, self.settings.true_peak)
                )
                self._stage("loudness", t1)
            from studio.core.render.markers import tags_context

            with tags_context(self.settings, plan, self.rate, first, end):  # timecode, chapters (as it opens)
                writer = open_video_for(
                    self.settings,
                    output,
                    a,
                    fps=self.rate,
                    size=self.output_size,
                    audio=audio,
                    total_frames=T,
                    rolling=True,
                    overwrite=overwrite,
                )
            self._stage("open", t0)
            yield from self._run(writer, plan, first, T, t_start)

    def write_batches(
        self,
        writer,
        batches: Iterable[np.ndarray],
        *,
        offset: int = 0,
        stop: Callable[[], bool] | None = None,
        host_copy: bool = True,
    ) -> Iterator[tuple[np.ndarray, Any]]:
        """The render loop every placement shares: each array of frame indices in ``batches``
        rendered (``iter_batches``) and handed to ``writer`` as frames ``index - offset``; yields
        ``(indices, frames)`` once a batch is handed over. A whole render (``run``), one device's
        part of a multi-GPU render and a chunk of a chunked or farm render all go through here.

        On CUDA frames are composited in NV12 where the avatar allows it, and go to the writer
        as GPU tensors when its encoders take them, else through a copy thread (``host_copy``;
        off for a writer fed by several devices at once, which takes them directly). ``stop()``
        (default: ``cancel()`` was called) is checked between batches and raises ``Cancelled``.
        The "encode" stage counts the time spent handing frames over.
        """
        from studio.core.errors import Cancelled

        stop = stop or self._cancel.is_set
        batches = list(batches)
        cuda = self.engine.device.type == "cuda"
        sink = None
        takes_nv12 = getattr(writer, "takes_nv12", True)  # H.264; the other codecs take RGB(A) frames
        if cuda and host_copy and takes_nv12 and not writer.takes_gpu_frames():
            from studio.core.media.hostcopy import CopyThread

            sink = CopyThread(writer, sum(len(b) for b in batches))
        nv12 = cuda and takes_nv12 and self.nv12_ready  # composite straight into the encoder's format
        alpha = self.avatar.alpha if getattr(writer, "alpha", False) else None  # a transparent presenter
        try:
            for k, (idx, frames) in enumerate(self.iter_batches(batches, nv12=nv12)):
                if k:  # the tests' hold (off unless $STUDIO_TEST_HOLD names a file): a job that stays running
                    hold(stop)
                if self._delivered.canvas is not None:  # placed: the channels the writer takes
                    frames = self._delivered.for_writer(frames, bool(getattr(writer, "alpha", False)))
                elif alpha is not None:
                    frames = with_alpha(frames, alpha, self.plan.avatar_idx[idx])
                if stop():
                    raise Cancelled("render cancelled; nothing was written")
                t0 = time.perf_counter()
                if sink is not None:
                    sink.put(idx - offset, frames)
                else:
                    writer.write(frames, indices=idx - offset)
                self._stage("encode", t0)
                yield idx, frames
            if sink is not None:
                t0 = time.perf_counter()
                sink.join()
                self._stage("encode", t0)
        finally:
            if sink is not None:
                sink.stop()

    def _run(self, writer, plan, first: int, T: int, t_start: float) -> Iterator[RenderProgress]:
        from studio.core.errors import Cancelled

        t_open = time.perf_counter()
        with writer:
            engine_frames = plan.weight[first : first + T] > 0
            batches = [
                b + first
                for b in stripes(T, self.batch_size, writer.chunks, window=writer.window, engine=engine_frames)
            ]
            done = 0
            last_preview = -1e9
            pending = None  # (pinned host frame, event, index): a preview on its way to the host
            self._span("start", t_open)  # the writer entered, the batches planned
            for idx, frames in self.write_batches(writer, batches, offset=first):
                done += len(frames)
                now = time.perf_counter()
                preview = preview_index = None
                if pending is None and now - last_preview >= self.settings.preview_interval_s:
                    # the last frame of the batch's first run: the earliest chunk, moving steadily
                    k = _first_run_end(idx)
                    if frames.is_cuda:  # copied behind the GPU work, picked up at a later batch
                        pending = _preview_copy(frames[k], int(idx[k]))
                    else:
                        preview, preview_index = frames[k].numpy(), int(idx[k])
                    last_preview = now
                if pending is not None and pending[1].query():  # copied meanwhile (never waited for:
                    # at the last batch that would hold the render, and a queue's next job, until the
                    # GPU caught up; a preview still on its way then is left out)
                    preview, preview_index, pending = pending[0].numpy(), pending[2], None
                t_yield = self._span("preview", now)
                yield RenderProgress.measured(
                    done,
                    T,
                    now - t_start,
                    stage_ms=dict(self._stage_ms),
                    preview=preview,
                    preview_index=preview_index,
                )
                self._span("consumer", t_yield)  # the caller's handling of the progress (a queue's store, events)
            hold(self._cancel.is_set, "finish")  # the tests' hold (off unless $STUDIO_TEST_HOLD is set)
            if self._cancel.is_set():
                raise Cancelled("render cancelled; nothing was written")
            t0 = time.perf_counter()
            path = writer.close()
            self._stage("finish", t0)
            if self._delivered is not None and (canvas_gpu := self._delivered.gpu_ms()):  # the canvas on a GPU
                self._stage_ms["canvas_gpu"] = canvas_gpu
            if self._trace is not None:
                self._trace.flush()
        seconds = time.perf_counter() - t_start
        self.result = RenderResult.measured(
            output=path,
            frames=T,
            silent_frames=int(plan.silent[first : first + T].sum()),
            engine=self.engine.name,
            engine_reason=self._engine_reason,
            encoder=writer.name,
            seconds=seconds,
            width=self.output_size[0],
            height=self.output_size[1],
            stage_ms=self._stage_ms,
            finish_ms=writer.close_ms,
            audio=writer.audio_how,
            frame_rate=rate_text(self.rate),
            loudness=None if self._loudness is None else self._loudness.to_json(),
            alpha=alpha_of(self.settings.codec, self.avatar.alpha is not None or self._delivered.transparent),
            notes=self._delivered.notes,
        )
        yield RenderProgress.final(self.result, seconds, stage_ms=dict(self._stage_ms))

    def render(self, output: str | Path) -> RenderResult:
        """Run to completion (no progress)."""
        for _ in self.run(output):
            pass
        if self.result is None:  # run() ends with a result or raises
            raise RuntimeError("the render ended without a result")
        return self.result


def _preview_copy(frame, index: int):
    """Start copying a CUDA frame to pinned host memory without waiting: (host, event, index)."""
    import torch

    if frame.ndim == 2:  # NV12: an RGB preview
        from studio.core.media.pixels import nv12_to_rgb

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

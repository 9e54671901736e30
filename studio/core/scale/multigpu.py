"""One clip on several GPUs of this machine: contiguous parts rendered in parallel, one mux.

    job = DeviceRender(avatar, "voice.wav", settings, devices=["cuda:0", "cuda:1"])
    for p in job.run("out.mp4"):
        bar.update(p.done, p.total, p.fps)
    job.result                                  # a RenderResult, as Renderer.result

The clip's frames are split into as many contiguous parts as there are devices, on the borders
of the parallel x264 writer's chunks: device k renders the chunks of part k (striped batches, as
a one-device render does) and feeds them to the same writer, whose encoder processes take the
frames of every device. So there is no segment file and no join step: the writer muxes the
chunks and the audio once, exactly as for a one-device render, and the output is the same file
(each frame depends only on its index). Each device runs in its own thread with its own warm
engine (``engines``, or one made per device from ``settings``); the devices' renderers share one
loaded ``Clip`` (the avatar, the voice-over and its plan are loaded once) and write through the
renderer's own loop (``Renderer.write_batches``).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from studio.core.errors import Cancelled, RenderError

if TYPE_CHECKING:
    from studio.core.render.results import RenderResult

log = logging.getLogger(__name__)


def cuda_devices() -> list[str]:
    """``["cuda:0", "cuda:1", ...]`` for the GPUs PyTorch sees (empty without CUDA)."""
    import torch

    return [f"cuda:{i}" for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []


def split_chunks(chunks: list[tuple[int, int]], parts: int) -> list[list[tuple[int, int]]]:
    """The writer's chunks in ``parts`` contiguous groups of near-equal frame counts."""
    total = chunks[-1][1] - chunks[0][0]
    groups: list[list[tuple[int, int]]] = [[] for _ in range(parts)]
    for a, b in chunks:
        k = min(parts - 1, int((a + b) / 2 * parts / total))  # the part holding the chunk's middle
        groups[k].append((a, b))
    return [g for g in groups if g]


class DeviceRender:
    """Render one clip on several devices at once, like ``Renderer`` on one.

    ``devices`` (default: every CUDA GPU) or ``engines`` (warm engines, one per device) choose
    the devices. ``run(output)`` yields ``RenderProgress`` (done, total, aggregate fps;
    ``stage_ms`` summed over the devices), the last with ``finished=True``; ``result`` then holds
    a ``RenderResult``. ``cancel()`` (any thread) stops every device after its current batch and
    ``run`` raises ``Cancelled``; nothing is written.
    """

    def __init__(self, avatar, audio, settings=None, *, devices=None, engines=None):
        from studio.core.engines.runtime_torch import resolve_device
        from studio.core.render.clip import Clip
        from studio.core.render.renderer import Renderer
        from studio.core.settings import RenderSettings

        self.settings = settings or RenderSettings()
        self.audio = str(audio)
        self.clip = Clip(avatar, audio, self.settings)  # loaded once, shared by every device
        if engines is None:
            devices = list(devices or cuda_devices())
            if not devices:
                raise RenderError("No GPU is visible to PyTorch: render on one device instead.")
            for d in devices:
                resolve_device(d)  # one sentence for a device that is not there
            self.renderers = [Renderer.for_clip(self.clip, self.settings.with_(device=d)) for d in devices]
        else:
            self.renderers = [Renderer.for_clip(self.clip, self.settings, engine=e) for e in engines]
        self._cancel = threading.Event()
        self.result: RenderResult | None = None

    @property
    def engine(self):
        """The first device's engine (the others run the same engine on their devices)."""
        return self.renderers[0].engine

    @property
    def engine_reason(self) -> str:
        return self.renderers[0].engine_reason

    def cancel(self) -> None:
        self._cancel.set()

    def render(self, output):
        """Run to completion (no progress); returns the ``RenderResult``."""
        for _ in self.run(output):
            pass
        return self.result

    def run(self, output, *, overwrite: bool = True) -> Iterator:
        from studio.core.media.loudness import delivered_audio

        self.result = None
        t_start = time.perf_counter()
        if any(r.engine.device.type == "cpu" for r in self.renderers):
            from studio.core.engines.runtime_torch import limit_cpu_threads

            limit_cpu_threads()  # here, before the device threads run CPU work
        sound = delivered_audio(self.audio, self.settings)  # --loudness: the normalised copy, left at the end
        audio, loud = sound.__enter__()
        try:
            yield from self._run(output, overwrite, audio, loud, t_start)
        finally:
            sound.__exit__(None, None, None)

    def _run(self, output, overwrite: bool, audio, loud, t_start: float) -> Iterator:
        from studio.core.media.codecs import alpha_of
        from studio.core.media.rates import rate_text
        from studio.core.render.outputs import open_video_for
        from studio.core.render.results import RenderProgress, RenderResult

        renderers = self.renderers
        first = renderers[0]
        plan = self.clip.plan
        T = plan.frames
        a = self.clip.avatar
        s = self.settings
        from studio.core.render.markers import tags_context

        with tags_context(s, plan, first.rate, 0, T):  # the timecode track and chapters (mux.delivery_tags)
            writer = open_video_for(
                s, output, a, fps=first.rate, size=first.output_size, audio=audio, total_frames=T, overwrite=overwrite
            )
        with writer:
            groups = split_chunks(writer.chunks, len(renderers))
            if len(groups) < len(renderers):
                log.info("%d chunk(s) for %d devices: using %d", len(writer.chunks), len(renderers), len(groups))
                renderers = renderers[: len(groups)]
            stop = threading.Event()
            events: queue.Queue = queue.Queue()
            threads = [
                threading.Thread(
                    target=_device_loop,
                    args=(r, g, writer, stop, events),
                    daemon=True,
                    name=f"render-{r.engine.device}",
                )
                for r, g in zip(renderers, groups)
            ]
            for t in threads:
                t.start()
            done, running = 0, len(threads)
            try:
                while running:
                    try:
                        kind, value = events.get(timeout=0.25)
                    except queue.Empty:
                        kind, value = None, None
                    if self._cancel.is_set():
                        raise Cancelled("render cancelled; nothing was written")
                    if kind == "error":
                        raise value
                    if kind == "end":
                        running -= 1
                        continue
                    if kind == "frames":
                        done += value
                    yield RenderProgress.measured(done, T, time.perf_counter() - t_start, stage_ms=_stages(renderers))
            finally:
                stop.set()
                for t in threads:
                    t.join()
            t0 = time.perf_counter()
            path = writer.close()
            finish_ms = (time.perf_counter() - t0) * 1e3
        seconds = time.perf_counter() - t_start
        stages = _stages(renderers)
        stages["finish"] = finish_ms
        self.result = RenderResult.measured(
            output=path,
            frames=T,
            silent_frames=int(plan.silent.sum()),
            engine=first.engine.name,
            engine_reason=f"{len(renderers)} devices ({', '.join(str(r.engine.device) for r in renderers)}): "
            f"{first.engine_reason}",
            encoder=writer.name,
            seconds=seconds,
            width=first.output_size[0],
            height=first.output_size[1],
            stage_ms=stages,
            finish_ms=writer.close_ms,
            audio=writer.audio_how,
            frame_rate=rate_text(first.rate),
            loudness=loud,
            alpha=alpha_of(s.codec, a.alpha is not None),
        )
        yield RenderProgress.final(self.result, seconds, stage_ms=stages)


def _device_loop(renderer, chunks, writer, stop: threading.Event, events: queue.Queue) -> None:
    """One device's part: striped batches over its chunks, written as they come."""
    from studio.core.render.plan import stripes

    try:
        dev = renderer.engine.device
        if dev.type == "cuda":
            import torch

            # this thread's streams, graphs and events live there ("cuda": the current GPU)
            torch.cuda.set_device(dev.index if dev.index is not None else torch.cuda.current_device())
        # the renderer's own loop; the shared writer takes every device's frames directly
        batches = stripes(0, renderer.batch_size, chunks)
        for idx, _ in renderer.write_batches(writer, batches, stop=stop.is_set, host_copy=False):
            events.put(("frames", len(idx)))
    except BaseException as exc:  # noqa: BLE001 - raised in the caller's thread
        events.put(("error", exc))
    finally:
        events.put(("end", None))


def _stages(renderers) -> dict[str, float]:
    out: dict[str, float] = {}
    for r in renderers:
        for k, v in r.stage_ms.items():
            out[k] = out.get(k, 0.0) + v
    return out

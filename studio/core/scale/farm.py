"""The render farm: one clip in chunks on the farm's replicas (the one dispatcher's, ``dispatch``).

    farm = Farm.connect()                     # a cluster started by `studio farm up`, else a local one
    for p in farm.render(avatar, "voice.wav", "out.mp4", RenderSettings(engine="classic")):
        bar.update(p.done, p.total, p.fps)     # p.workers: frames/s per replica
    farm.result                               # a RenderResult, as Renderer.result
    farm.cancel()                             # any thread: every chunk stops after its batch

A chunked render is one job of the dispatcher: the router reserves a slot on several replicas (one
per chunk at most), each chunk is a task sent to one of them (``TaskCall``: the replicas' one
protocol), its progress is what the controller last read from that replica, its segment comes back
to a registered temporary beside the output in checked pieces (size and SHA-256), and the segments
are joined here with the audio muxed once. A chunk whose replica dies (process killed, node lost, a
file that arrives damaged) is sent again to another replica (the controller starts a successor on
the dead one's node); after ``MAX_ATTEMPTS`` the job fails. ``cancel()`` sends the one cancel to
every running chunk; nothing is written.

``Farm.connect`` is what ``studio render --placement farm`` and the window's farm link (a child
process: ``service.farm_link``) use; ``studio serve --farm`` runs the same ``Farm`` on its own
dispatcher for a ``placement: farm`` job (``service.farm_chunks``). On a ``studio farm up`` cluster
the replicas are detached and named the same for every run, so they stay warm between commands.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from studio.core.errors import Cancelled, RenderError
from studio.core.scale.chunks import Segment, check_chunk_codec, join_segments, segment_suffix, segments_result, split
from studio.core.scale.cluster import init_ray
from studio.core.scale.dispatch import Dispatcher, Lost, TaskCall

if TYPE_CHECKING:
    from studio.core.render.results import RenderProgress, RenderResult

__all__ = ["Farm", "init_ray"]

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 3  # a chunk is tried this often before the job fails
STOP_WAIT_S = 30.0  # a cancel waits this long for the chunks to stop
DETACHED_PREFIX = "studio-farm"  # the warm replicas of a `studio farm up` cluster


class Farm:
    """Chunked renders on a dispatcher's replicas (see the module's docstring)."""

    def __init__(self, dispatcher: Dispatcher, *, job_id: int | None = None, owned: bool = False):
        """``job_id``: the job's id at the router (a queue's; default: a new negative one);
        ``owned``: ``shutdown`` closes the dispatcher."""
        self.dispatcher = dispatcher
        self.job_id = job_id if job_id is not None else -(uuid.uuid4().int % (1 << 40)) - 1
        self.owned = owned
        self.stopping = threading.Event()
        self.result: RenderResult | None = None
        self.retries = 0
        self.reserved: list[str] = []  # the replicas the last render held a slot on
        self._fps: dict[str, float] = {}  # frames/s per replica, as last read

    @classmethod
    def connect(cls, address: str | None = None, workers: int | None = None, **init_kw) -> Farm:
        """``address``: a Ray address, "auto" (the cluster `studio farm up` started here), or None:
        that cluster when there is one, else a local cluster on 127.0.0.1."""
        if address is None:
            try:
                init_ray("auto")
                detached = True
            except RenderError:
                init_ray(None, **init_kw)
                detached = False
        else:
            init_ray(address)
            detached = True
        return cls.attach(workers, detached=detached)

    @classmethod
    def attach(cls, workers: int | None = None, *, detached: bool = False) -> Farm:
        """On the cluster this process is connected to: a dispatcher of at most ``workers`` replicas."""
        d = Dispatcher(prefix=DETACHED_PREFIX if detached else "", detached=detached, limit=workers)
        d.attach(count=workers or 1 << 16)
        return cls(d, owned=True)

    def name_of(self, actor) -> str:
        """A replica as the progress and the window show it: its device label ("gpu0") on a one-node
        farm, else host/label."""
        nodes = {a.node for a in self.dispatcher.controller.live()}
        return actor.label if len(nodes) <= 1 else f"{actor.host or actor.node[:8]}/{actor.label}"

    @property
    def workers(self) -> list[str]:
        """The replicas that can take a chunk now."""
        return [self.name_of(a) for a in self.dispatcher.controller.usable()]

    @property
    def gpus(self) -> bool:
        return any(a.device == "cuda" for a in self.dispatcher.controller.live())

    @property
    def pids(self) -> dict[str, int]:
        return {self.name_of(a): a.pid for a in self.dispatcher.controller.usable()}

    def cancel(self) -> None:
        """Stop the running job: every chunk stops after its current batch; nothing is written."""
        self.stopping.set()

    def stats(self, timeout: float | None = None) -> dict[str, dict]:
        """Per replica: engines loaded, jobs, chunks, cancels and avatar fetches since its process
        started. ``timeout``: seconds to wait for every answer (Ray's ``GetTimeoutError`` after it)."""
        import ray

        actors = self.dispatcher.controller.usable()
        answers = ray.get([a.handle.stats.remote() for a in actors], timeout=timeout)
        return dict(zip([self.name_of(a) for a in actors], answers))

    def shutdown(self) -> None:
        """Leave the farm: a dispatcher made here ends its replicas (a detached pool stays warm)."""
        if self.owned:
            self.dispatcher.close()

    def render(
        self, avatar, audio, output, settings=None, *, chunks: int | None = None, overwrite: bool = True
    ) -> Iterator[RenderProgress]:
        """Render on the farm, yielding ``RenderProgress`` (with per-replica fps and chunk counts)
        about four times a second. ``chunks``: how many segments (default: one per replica
        reserved). The last progress has ``finished=True``; ``self.result`` then holds a ``RenderResult``."""
        from studio.core.media.writer import check_output
        from studio.core.render.clip import Clip
        from studio.core.settings import RenderSettings
        from studio.core.store.temps import release_temp, temp_dir

        settings = settings or RenderSettings()
        check_chunk_codec(settings.codec)  # before any work: the join takes these codecs
        self.stopping.clear()
        self.result = None
        self.retries = 0
        t0 = time.perf_counter()
        check_output(output)
        clip = Clip(avatar, audio, settings)
        d = self.dispatcher
        holders = d.router.reserve_many(self.job_id, clip.plan.frames, self.stopping, most=chunks)
        self.reserved = [self.name_of(a) for a in holders]
        folder = temp_dir(Path(output).parent, f".{Path(output).stem}.farm.")  # registered: gone even after a kill
        try:
            task = dict(d.inputs(clip.avatar, audio), settings=settings, job=uuid.uuid4().hex)
            segments = yield from self._chunks(clip, task, chunks or len(holders), folder, t0)
            from studio.core.media.loudness import delivered_audio

            with delivered_audio(audio, settings) as (sound, loud):
                path = join_segments(
                    segments,
                    output,
                    audio=sound,
                    fps=clip.rate,
                    overwrite=overwrite,
                    codec=settings.codec,
                    clip=clip,  # the timecode track and chapters of a one-process render
                )
        finally:
            d.router.release(self.job_id)
            import shutil

            shutil.rmtree(folder, ignore_errors=True)
            release_temp(folder)
        from studio.core.render.results import RenderProgress

        seconds = time.perf_counter() - t0
        self.result = segments_result(clip, segments, path, seconds, loud, farm=seconds * 1e3)
        n = len(segments)
        yield RenderProgress.final(
            self.result, seconds, workers=self._fps, chunks_done=n, chunks=n, retries=self.retries
        )

    def _chunks(self, clip, task: dict, n: int, folder: Path, t0: float):
        """Run every chunk on the reserved replicas (one at a time each); returns the segments."""
        from studio.core.render.results import RenderProgress

        d = self.dispatcher
        T = clip.plan.frames
        ranges = split(T, n)
        suffix = segment_suffix(task["settings"].codec)
        todo = deque((a, b, 1) for a, b in ranges)
        running: dict[str, tuple[TaskCall, int, int, int]] = {}  # replica name -> (call, a, b, attempt)
        segments: list[Segment] = []
        self._fps = {}
        try:
            while todo or running:
                if self.stopping.is_set():
                    raise Cancelled("render cancelled; nothing was written")
                idle = [a for a in d.router.holders(self.job_id) if a.name not in running]
                if todo and not idle and not running:  # every holder died: successors, else a new slot
                    idle = d.router.reserve_more(self.job_id, T) or [
                        d.router.wait_reserve(self.job_id, T, (), self.stopping)
                    ]
                while todo and idle:
                    actor = idle.pop(0)
                    a, b, attempt = todo.popleft()
                    running[actor.name] = (d.call(actor, self.job_id, dict(task, range=(a, b))), a, b, attempt)
                with d.controller.changed:  # notified at each progress read and when a replica dies
                    d.controller.changed.wait(0.25)
                for name, (call, a, b, attempt) in list(running.items()):
                    if not (call.lost or call.ended()):
                        continue
                    del running[name]
                    try:
                        g = self._collect(call, folder / f"seg{a:07d}{suffix}")
                        segments.append(g)
                        self._fps[self.name_of(call.actor)] = round((g.end - g.start) / max(1e-9, g.seconds), 2)
                    except Lost as exc:
                        self._lost(call, a, b, attempt, exc, todo)
                    finally:
                        call.close()
                done = sum(g.end - g.start for g in segments) + sum(c.progress()[0] for c, *_ in running.values())
                for c, *_ in running.values():
                    if c.progress()[2] > 0:
                        self._fps[self.name_of(c.actor)] = round(c.progress()[2], 2)
                yield RenderProgress.measured(
                    min(done, T),
                    T,
                    time.perf_counter() - t0,
                    workers=dict(self._fps),
                    chunks_done=len(segments),
                    chunks=len(ranges),
                    retries=self.retries,
                )
        except BaseException:  # an error, a cancel, Ctrl-C or the caller dropping the generator
            self._stop([c for c, *_ in running.values()])
            raise
        return segments

    def _collect(self, call: TaskCall, path: Path) -> Segment:
        """A finished chunk's segment, fetched in checked pieces (``Lost`` when its replica is gone)."""
        if call.lost and not call.ended(timeout=0):
            raise Lost("its node or process went away")
        out = call.outcome()
        call.fetch(out, path, self.stopping)
        return Segment(**out["segment"], path=str(path))

    def _lost(self, call: TaskCall, a: int, b: int, attempt: int, exc: Exception, todo: deque) -> None:
        self.retries += 1
        log.warning("farm: chunk %d..%d lost its replica %s (attempt %d): %s", a, b, call.actor.name, attempt, exc)
        if attempt >= MAX_ATTEMPTS:
            raise RenderError(f"Chunk {a}..{b} failed {attempt} times as its replicas died: check the farm's nodes.")
        self.dispatcher.router.release(self.job_id, call.actor)
        todo.appendleft((a, b, attempt + 1))  # the next free replica takes it (a successor joins the job)
        self.dispatcher.router.reserve_more(self.job_id, b - a)

    def _stop(self, calls: list[TaskCall]) -> None:
        """The one cancel to every running chunk, then wait (bounded) until they have stopped."""
        import ray

        for c in calls:
            c.cancel()
        refs = [c.ref for c in calls]
        t0 = time.monotonic()
        left = refs
        with contextlib.suppress(Exception):
            _, left = ray.wait(refs, num_returns=len(refs), timeout=STOP_WAIT_S)
        log.info("farm: %d chunk(s) stopped in %.2f s (%d not yet)", len(refs), time.monotonic() - t0, len(left))
        for c in calls:
            c.close()

"""One driver for every placement: ``Render`` (open -> render -> cancel -> progress -> result).

    r = Render(RenderRequest("anna", "voice.flac", "out.mp4", placement=Placement("gpus")))
    for p in r.run():            # one ``Progress`` type whatever the placement
        bar.update(p.done, p.total)
    r.result                     # one ``RenderResult`` type (core's), ``r.where`` says where it ran
    r.cancel()                   # any thread: every part stops after its batch, nothing is written

The placement strategies differ only in how the clip's frames are spread: ``local`` runs core's
``Renderer`` on a warm engine from the pool, ``gpus`` the same renderer on several devices feeding
one writer (``core.multigpu``), ``chunks`` local processes writing segments (``core.chunks``), and
``farm`` Ray workers (``core.farm``, or through a ``FarmLink`` child process when the caller must
survive the farm stopping: the window and the server). Everything else (checking the request
before any work, the output's same-file and folder checks, progress, cancel, the result's
fields, and where it ran) is here, once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from studio.core.errors import Cancelled, InputError
from studio.core.render.results import RenderProgress, RenderResult
from studio.service.preflight import check_request
from studio.service.request import WHERE_LOCAL, RenderRequest

log = logging.getLogger(__name__)


#: progress of any render, whatever the placement: core's one progress type
Progress = RenderProgress


class Render:
    """Runs one ``RenderRequest`` wherever its placement says."""

    def __init__(
        self, request: RenderRequest, pool=None, *, farm_link=None, in_process_farm: bool = True, dispatcher=None
    ):
        from studio.service.pool import default_pool

        self.request = request
        self.pool = pool if pool is not None else default_pool()
        self._farm_link: Any = farm_link  # a FarmLink to use (the app's warm one), or None
        self._in_process_farm = in_process_farm
        self._cancel = threading.Event()
        self._active: Any = None  # what cancel() reaches: a Renderer, DeviceRender, Farm or FarmLink
        self.result: RenderResult | None = None
        self.where = request.placement.label
        self.engine_name = ""
        self.engine_reason = ""
        self.on_started: Callable[[str], None] | None = (
            None  # callback(where) once the placement is known (before the first frame)
        )
        self.last: Progress | None = None  # the newest progress
        self.slot = 0  # which of the pool's engines of one device a local render uses (the queue sets it)
        #: ``studio serve --farm``: whole jobs run on the farm's actors (``farm_dispatch``), a ``farm``
        #: placement on them in chunks; ``job_id`` is the queue's (the dispatcher reserves by it)
        self.dispatcher = dispatcher
        self.job_id = 0
        self.ticket: Any = None  # whose work it is (``scheduler.Ticket``: the queue's lanes and shares), or None
        self.extra: dict = {}  # what the result row gets beside the RenderResult (where on the farm)
        #: a local render's ``Renderer`` made and made ready ahead (the queue's ``Prefetcher``), used
        #: instead of a new one (the engine's hold it took is released as a new one's would be)
        self.prepared: Any = None

    def cancel(self) -> None:
        self._cancel.set()
        a = self._active
        if a is not None:
            a.cancel()

    def engine_done(self) -> None:
        """Every frame has left the engine (what is left is the file): a batcher stops counting
        this job among those it waits for."""
        done = getattr(self.engine, "done", None)
        if done is not None:
            done()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    @property
    def engine(self):
        """The warm engine a local render ran on (None for other placements or before it starts)."""
        return getattr(self._active, "engine", None) if self.request.placement.kind == "local" else None

    def finished_result(self) -> RenderResult:
        """The result of a ``run()`` that went to its end (a ``RuntimeError`` before it did)."""
        if self.result is None:
            raise RuntimeError("the render has not finished")
        return self.result

    def run(self) -> Iterator[Progress]:
        """Yields ``Progress``; the last has ``finished=True`` and ``self.result`` is set. Raises
        ``Cancelled`` after a cancel (nothing is written) and a ``StudioError`` for bad input."""
        req = self.request
        self.result = None
        check_request(req)
        if req.placement.kind != "server":
            from studio.service.sidecars import check_captions

            check_captions(req)  # captions without a script to caption: one sentence before any work
        kind = req.placement.kind
        if self.dispatcher is not None and kind in ("local", "farm"):
            kind = "actor" if kind == "local" else "actor_chunks"
        strategy = {
            "actor": self._actor,
            "actor_chunks": self._actor_chunks,
            "local": self._local,
            "gpus": self._gpus,
            "chunks": self._chunks,
            "farm": self._farm,
            "server": self._server,
        }[kind]
        t0 = time.perf_counter()
        last = None
        for p in strategy():
            if self._cancel.is_set() and not p.finished:  # once the file is written, the job is done
                raise Cancelled("render cancelled; nothing was written")
            last = self.last = p
            yield p
        if last is None or not last.finished or self.result is None:
            raise Cancelled("render cancelled; nothing was written")
        if kind != "server":  # a server writes its own beside its output
            from studio.service.sidecars import write_sidecars

            self.result = write_sidecars(self.result, req)
        log.info("rendered %s (%s) in %.2f s", req.output, self.where, time.perf_counter() - t0)

    def _started(self, where: str, engine_name: str = "", engine_reason: str = "") -> None:
        self.where = where
        self.engine_name, self.engine_reason = engine_name or self.engine_name, engine_reason or self.engine_reason
        if self.on_started is not None:
            self.on_started(where)

    # ---- placements ---------------------------------------------------------------------

    def _local(self):
        req = self.request
        held = hasattr(self.pool, "release")  # the pool's bound never evicts the engine while it renders
        r, self.prepared = self.prepared, None
        if r is None:
            kw: dict[str, Any] = {"slot": self.slot, "hold": True} if held else {}
            if self.ticket is not None:
                kw["ticket"] = self.ticket
            r = self.pool.renderer(req.avatar, req.audio, req.render_settings, **kw)  # the rate resolved once
        self._active = r
        try:
            if self._cancel.is_set():
                r.cancel()
            from studio.core.cancel import stop_when

            with stop_when(self._cancel.is_set):  # preparing an hour of voice-over stops on a cancel too
                r.focus(req.frames)  # a range of a long clip prepares only its stretch
                _ = r.plan  # the voice-over decoded and checked (NaN samples, ...) before anything says it started
                self._started(WHERE_LOCAL, r.engine.name, r.engine_reason)
                yield from r.run(req.output, frames=req.frames, overwrite=req.overwrite)
            self.result = r.result
        finally:
            engine = r.engine
            if hasattr(engine, "done"):
                engine.done()  # a batcher's view: no more batches from this job
            if held:
                self.pool.release(engine)

    def _gpus(self):
        from studio.core.engines.runtime_torch import resolve_device
        from studio.core.scale.multigpu import DeviceRender, cuda_devices

        req = self.request
        devices = list(req.placement.devices) or cuda_devices()
        if not devices:
            raise InputError("No GPU is visible here: render on this computer instead.")
        have = cuda_devices()
        for d in devices:
            if str(d).startswith("cuda") and have and d not in have and d != "cuda":
                raise InputError(f"{d}: this machine has {len(have)} CUDA GPU(s) ({', '.join(have)})")
            resolve_device(d)
        _whole_clip(req)
        engines = []
        for d in devices:  # warm engines; a device named twice gets a second one of its own
            e, _ = self.pool.get(req.render_settings.with_(device=d))
            engines.append(e if e not in engines else self.pool.get(req.render_settings.with_(device=d), fresh=True)[0])
        r = DeviceRender(req.avatar, req.audio, req.render_settings, engines=engines)
        yield from self._whole(r, f"{len(engines)} GPUs here", r.engine.name, r.engine_reason)

    def _chunks(self):
        from studio.core.scale.chunks import ChunkedRender

        req = self.request
        _whole_clip(req)
        n = req.placement.chunks or 2
        r = ChunkedRender(req.avatar, req.audio, req.render_settings, chunks=n)
        yield from self._whole(r, f"{n} local processes", req.settings.engine)

    def _whole(self, r, where: str, engine_name: str, engine_reason: str = ""):
        """Run a render of the whole clip on several devices or processes here (``_gpus``, ``_chunks``)."""
        self._active = r
        if self._cancel.is_set():
            r.cancel()
        self._started(where, engine_name, engine_reason)
        yield from r.run(self.request.output, overwrite=self.request.overwrite)
        self.result = r.result

    def _farm(self):
        req = self.request
        _whole_clip(req)
        if self._farm_link is None and self._in_process_farm:
            from studio.core.scale.farm import Farm

            farm = Farm.connect(req.placement.farm or None)
            self._active = farm
            try:
                self._started(
                    f"farm ({len(farm.workers)} {'GPU ' if farm.gpus else ''}worker"
                    f"{'s' if len(farm.workers) != 1 else ''})",
                    req.settings.engine,
                )
                for p in farm_render(farm, req):
                    if self._cancel.is_set():
                        farm.cancel()
                    yield p
                self.result = farm.result
            finally:
                farm.shutdown()
            return
        from studio.service.farm_link import FarmLink, LinkLost

        for attempt in (1, 2):  # a link lost before the job made progress is opened again once
            link = (
                self._farm_link
                if self._farm_link is not None and self._farm_link.alive
                else FarmLink.open(req.placement.farm)
            )
            self._farm_link = link
            if self._cancel.is_set():
                raise Cancelled("render cancelled; nothing was written")
            self._active = link
            progressed = False
            try:
                self._started(link.where, req.settings.engine)
                for p in link.render(req.avatar, req.audio, req.output, req.render_settings, overwrite=req.overwrite):
                    if self._cancel.is_set():
                        link.cancel()
                    progressed = progressed or p.done > 0
                    yield p
                break
            except LinkLost:
                link.close()
                self._farm_link = None
                if progressed or attempt == 2 or self._cancel.is_set():
                    raise
                log.warning("the farm link was lost before the job started; connecting again")
        self.result = link.result  # the link stays in self.farm_link: the queue keeps it warm

    def _actor(self, chunked: bool = False):
        """A whole job on one of the farm's warm replicas (``studio serve --farm``), or one long clip in
        chunks over several of them (``chunked``: ``placement: farm`` there); the farm's one dispatcher."""
        d = self.dispatcher
        job = (d.chunked if chunked else d.job)(self.job_id, self.request, self._cancel)
        self._active = job
        yield from job.run(lambda where: self._started(where, self.request.settings.engine))
        self.result, self.extra = job.result, job.extra

    def _actor_chunks(self):
        if self.request.frames is not None:
            raise InputError("an in/out range renders whole; leave out the farm placement to render a range")
        yield from self._actor(chunked=True)

    def _server(self):
        from studio.service.remote import render_on_server

        self.result = yield from render_on_server(self.request, self._cancel, on_placed=self._started)

    @property
    def farm_link(self):
        """The ``FarmLink`` this render used (or was given), for the next farm job; None once lost."""
        return self._farm_link


def _whole_clip(req: RenderRequest) -> None:
    """Only this computer renders an in/out range (the other placements render the whole clip)."""
    if req.frames is not None:
        raise InputError(
            "an in/out range renders on this computer in one piece, not in chunks, on a farm or on several GPUs; "
            "leave out the range or the placement"
        )


def farm_render(farm, req: RenderRequest):
    """A core ``Farm``'s render of ``req`` (its chunks: the placement's, else one per worker)."""
    return farm.render(
        req.avatar,
        req.audio,
        req.output,
        req.render_settings,
        chunks=req.placement.chunks or None,
        overwrite=req.overwrite,
    )


def _is_path(avatar: str) -> bool:
    from pathlib import Path

    return ("/" in avatar or "." in Path(avatar).name) and Path(avatar).exists()

"""Running the queue's jobs: ``Runner`` (``start``/``stop``/``close``, ``run_next``, ``run_until_empty``)
and one job's run (``_run``), its progress persisted and told (``_consume``).

``QueueService`` owns one, built with the narrow things it needs: the store, the emitter, the check
runner, the retention sweeper, the engine pool, a way to count a job's frames (the estimates'), and
the settings (scheduler, farm dispatcher, devices, jobs per device, pipelined or not). The runner
owns its ``Slots`` (several jobs at once) and its ``Finisher`` (files finished off the render
thread): once a local job's last frame has left the engine, the rest of its render (the encoders'
drain, the file, its row) goes to a finishing worker while the next job's engine work starts (at
most ``capacity`` finishing at once; pipelined is the default, ``pipeline=False`` runs jobs strictly
one after another).

Threads: ``start`` runs ``_loop`` on ``studio-queue`` (one job at a time on it; with a scheduler,
several devices or jobs per device, ``Slots.loop`` claims jobs and each runs on ``studio-job-<id>``);
finishing runs on ``studio-finish-<id>``; events are emitted on whichever thread made them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from studio.core.errors import Cancelled, InputError, StudioError
from studio.core.store import jobs as J
from studio.service.driver import Progress, Render
from studio.service.finishing import Finisher
from studio.service.job_requests import file_identity, relative_paths, request_of
from studio.service.prefetch import Prefetcher, prefetch_limit
from studio.service.slots import DEADLINE_REASON, Slots

log = logging.getLogger("studio.service.queue")

STORE_PROGRESS_S = 1.0  # persisted progress at most this often
_HANDED = object()  # _consume: the job goes on on a finishing worker


class Runner:
    """Runs the queue's jobs: one at a time (pipelined), or several on ``slots``."""

    def __init__(
        self,
        store: J.JobStore,
        pool: Any,
        emitter: Any,
        checks: Any,
        sweeper: Any,
        *,
        frames_of: Callable[[J.Job], int | None] = lambda job: None,
        scheduler: Any = None,
        dispatcher: Any = None,
        devices: list[str] | None = None,
        jobs_per_device: int = 1,
        pipeline: bool = True,
        in_process_farm: bool = False,
    ):
        self.store = store
        self.pool = pool
        self._emitter = emitter
        self.checks = checks  # the CheckRunner: a done job's lip-sync check
        self._sweeper = sweeper
        self.scheduler = scheduler
        self.dispatcher = dispatcher
        self.pipeline = pipeline
        self.in_process_farm = in_process_farm
        self._wake = threading.Condition(threading.RLock())
        self._thread: threading.Thread | None = None
        self._stop = False
        self._interrupting = False
        self._current: tuple[int, Render] | None = None  # the job on the engine (one at a time)
        self._idle_engine: Any = None  # the last job's engine: it warms its other batch sizes when idle
        self._farm_link: Any = None  # kept warm between farm jobs
        self.last_progress: dict[int, Progress] = {}
        self.timings: dict[int, dict] = {}  # job id -> queue_s, first_frame_s (while it runs)
        #: where jobs run at once (``studio serve --gpus``; None: the job's own device setting) and how
        #: many on each; more than one in all: each job on its own thread, on the least busy device
        self.slots = Slots(
            store,
            emitter,
            self._wake,
            self._run,
            self.live,
            devices=list(devices) if devices else [None],
            jobs_per_device=jobs_per_device,
            scheduler=scheduler,
            dispatcher=dispatcher,
            sweeper=sweeper,
            frames_of=frames_of,
        )
        self.finisher = Finisher(limit=self.slots.capacity)
        #: the next jobs prepared while the current batches run (the slot runner on one device)
        self.prefetch: Prefetcher | None = None
        limit = prefetch_limit()
        if limit and self.uses_slots and dispatcher is None and len(self.slots.devices) == 1:
            self.prefetch = Prefetcher(pool, self._upcoming, self._request_here, self._ticket, limit=limit)

    @property
    def capacity(self) -> int:
        return self.slots.capacity

    @property
    def uses_slots(self) -> bool:
        """Jobs run on ``slots`` (several at once, or a scheduler's order), not one at a time on the loop."""
        return self.capacity > 1 or self.dispatcher is not None or self.scheduler is not None

    def _upcoming(self, n: int) -> tuple[list[J.Job], int]:
        """The queued jobs claimed next, in that order: those a free slot takes at once (``k``), then
        ``n`` more; and ``k``."""
        k = self.slots.free_now()
        return self.slots.order(self.store.list((J.QUEUED,)))[: k + n], k

    def _request_here(self, job: J.Job, slot: int | None = 0):
        """``job``'s request as it runs here (on ``slot``'s device when it names none)."""
        req = request_of(job)
        device = self.slots.devices[slot] if slot is not None else None
        if device is not None and req.placement.kind == "local" and req.settings.device in (None, "", "auto"):
            req = req.with_(settings=req.settings.with_(device=device))
        return req

    def _ticket(self, job: J.Job):
        if self.scheduler is None:
            return None
        from studio.service.scheduler import ticket_of

        return ticket_of(job)

    def progress_of(self, job_id: int) -> Progress | None:
        return self.last_progress.get(job_id)

    def forget(self, job_id: int) -> None:
        self.last_progress.pop(job_id, None)

    @property
    def farm_link(self):
        """The link to the Ray farm (a child process), while a farm job runs and kept between them."""
        with self._wake:
            cur = self._current
        return cur[1].farm_link if cur is not None and cur[1].farm_link is not None else self._farm_link

    @property
    def running_job_id(self) -> int | None:
        """The job the engine works on (else one finishing its file)."""
        with self._wake:
            if self._current is not None:
                return self._current[0]
            ids = self.finisher.job_ids() + self.slots.job_ids()
        return ids[0] if ids else None

    @property
    def running_job_ids(self) -> list[int]:
        """Every running job: those finishing their file, the one on the engine, those on a slot."""
        with self._wake:
            ids = self.finisher.job_ids() + ([self._current[0]] if self._current else []) + self.slots.job_ids()
        return list(dict.fromkeys(ids))

    def live(self) -> list[tuple[int, Render]]:
        """(job id, render) of every job running now: on the engine, finishing, or on a slot."""
        with self._wake:
            cur = [self._current] if self._current is not None else []
            return cur + self.finisher.renders() + self.slots.renders()

    def cancel(self, job_id: int) -> bool:
        """Stop ``job_id`` within one batch if it runs here (nothing is written); False: it does not."""
        found = False
        for i, render in self.live():
            if i == job_id:
                render.cancel()
                found = True
        return found

    def poke(self) -> None:
        """Something changed (a job queued or resumed, an actor freed): look at the queue now."""
        with self._wake:
            self._wake.notify_all()
        if self.prefetch is not None:
            self.prefetch.poke()

    # ---- running ------------------------------------------------------------------------

    def run_next(self) -> J.Job | None:
        """Claim and run the next queued job in this thread; None when nothing is queued. A
        pipelined job is answered (still ``running``) once its frames have left the engine: its
        file is finished on a finishing worker (``wait_drained``)."""
        job = self.store.claim_next()
        if job is None:
            return None
        self._emitter.emit("state", job.id, job)
        return self._run(job)

    def run_until_empty(self) -> list[J.Job]:
        """Run queued jobs in this thread until none is left; the finished jobs."""
        self._sweeper.maybe()
        out = []
        while not self._stop and (job := self.run_next()) is not None:
            out.append(job)
        self.wait_drained()
        self.checks.wait()  # the checks of the finished jobs, before the caller (a command) ends
        return [f for j in out if (f := self._fresh(j)) is not None]  # a job removed meanwhile is left out

    def wait_drained(self, timeout: float | None = None) -> None:
        """Wait until no job is finishing its file."""
        self.finisher.wait(timeout)

    def start(self) -> None:
        """Run queued jobs on a background thread until ``stop`` (jobs added later run too). The
        encoder processes start meanwhile, so the first job does not wait for them."""
        with self._wake:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stop = self._interrupting = False
            self._thread = threading.Thread(target=self._loop, name="studio-queue", daemon=True)
            self._thread.start()
        if self.prefetch is not None:
            self.prefetch.start()
        threading.Thread(target=_prestart_encoders, name="studio-encoders-start", daemon=True).start()

    @property
    def started(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and not self._stop

    @property
    def thread(self) -> threading.Thread | None:
        """The runner's thread (None before ``start``)."""
        return self._thread

    def stop(self, interrupt: bool = False, timeout: float | None = 30.0) -> None:
        """Stop the runner after the running job (``pause``), or stop that job now (``interrupt``):
        it stops within one batch, writes nothing, and is marked ``interrupted`` (Retry runs it)."""
        with self._wake:
            self._stop = True
            self._interrupting = interrupt
            live = self.live()
            workers = self.slots.threads()
            self._wake.notify_all()
        if self.prefetch is not None:
            self.prefetch.stop()  # what was prepared ahead is dropped (its memory released)
        if interrupt:
            for _, render in live:
                render.cancel()
        t = self._thread
        if timeout is not None and t is not None and t is not threading.current_thread():
            t.join(timeout)  # timeout None: do not wait (a pause lets the running job finish)
        for w in workers if timeout is not None else ():
            if w is not threading.current_thread():
                w.join(timeout)
        if timeout is not None:
            self.wait_drained(timeout)

    def close(self, timeout: float = 30.0) -> None:
        """Stop now (a running job is interrupted) and leave the farm. ``timeout``: how long to wait
        for the runner (a server waits less: a step that cannot be cut short, such as a cold import
        of the engine's libraries, must not keep it past a container's stop deadline; a job left
        running is marked interrupted when the queue opens next)."""
        self.stop(interrupt=True, timeout=timeout)
        if self.dispatcher is not None:
            self.dispatcher.close()
        link, self._farm_link = self._farm_link, None
        if link is not None:
            link.close()
        self.checks.close()

    def _fresh(self, job: J.Job | None) -> J.Job | None:
        try:
            return self.store.get(job.id) if job is not None else None
        except InputError:  # removed meanwhile
            return job

    def _stopped(self) -> bool:
        return self._stop

    def _loop(self) -> None:
        if self.uses_slots:
            return self.slots.loop(self._stopped)
        while True:
            with self._wake:
                if self._stop:
                    return
            self._sweeper.maybe()
            try:
                job = self.run_next()
            except Exception:
                log.exception("queue runner: could not take the next job")
                job = None
            if job is not None:
                self._sweeper.again()  # a new file: retention looks again before the next job
            if job is None:
                self._warm_idle()
                with self._wake:
                    if self._stop:
                        return
                    self._wake.wait(1.0)  # also picks up jobs queued by another process

    def _warm_idle(self) -> None:
        """Nothing queued: let the last job's engine capture its other batch sizes now (a warm
        server's short jobs then pay no capture), one at a time under its lock."""
        engine, self._idle_engine = self._idle_engine, None
        warm = getattr(engine, "warm_buckets", None)
        if warm is None:
            return
        try:
            lock = self.pool.lock_for(engine) if hasattr(self.pool, "lock_for") else None
            got = warm(lock=lock)
            if got:
                log.info("engine warmed while idle: CUDA graphs for batches %s", got)
        except Exception:
            log.warning("warming the engine's other batch sizes failed", exc_info=True)

    def _run(self, job: J.Job, slot: int | None = None, ended: Callable[[], None] | None = None) -> J.Job | None:
        """Run ``job`` (``slot``: on the slots' device ``slot``, else the one-at-a-time loop's);
        ``ended()`` once it has ended, here or on the finishing worker that finished its file."""
        handed = False
        try:
            relative = relative_paths(job)
            if relative:
                return self._finish(
                    job.id,
                    J.FAILED,
                    f"this job names {relative[0]} without its folder (queued by an earlier Studio), so which file "
                    "it means depends on where Studio runs; queue it again",
                )
            try:
                req = self._request_here(job, slot)
            except StudioError as exc:
                return self._finish(job.id, J.FAILED, str(exc))
            render = Render(
                req,
                self.pool,
                farm_link=self._farm_link,
                in_process_farm=self.in_process_farm,
                dispatcher=self.dispatcher,
            )
            render.slot, render.job_id = slot or 0, job.id
            self.timings[job.id] = {"queue_s": round(max(0.0, time.time() - job.created), 4)}
            render.ticket = self._ticket(job)
            render.on_started = lambda where: self._emitter.emit("placed", job.id, self.store.get(job.id), where=where)
            with self._wake:
                if slot is None:
                    self._current = (job.id, render)
                if self._interrupting:  # stop(interrupt=True) came while this job was being claimed
                    render.cancel()
            if slot is not None:
                self.slots.placed(job.id, render)
            if self.prefetch is not None:
                self.prefetch.poke()  # this job is no longer queued: the one after it is prepared next
                render.prepared, waited = self.prefetch.take(job.id, req, lambda: render.cancelled)
                self.timings[job.id].update(prepared_ahead=render.prepared is not None, prepare_wait_s=waited)
            try:
                # a farm actor's job (``studio serve --farm``) finishes on the actor: its thread waits for it
                hand_off = self.pipeline and self.dispatcher is None
                out = self._consume(job, render, render.run(), [0.0], hand_off, slot, ended)
                handed = out is _HANDED
                return self.store.get(job.id) if handed else out
            finally:
                if render.prepared is not None and self.prefetch is not None:  # refused before it ran
                    self.prefetch.release(render.prepared)
                    render.prepared = None
                if not handed:
                    self._farm_link = render.farm_link  # kept warm for the next farm job (None once lost)
                with self._wake:
                    if self._current is not None and self._current[0] == job.id:
                        self._current = None
        finally:
            if not handed and ended is not None:
                ended()

    def _consume(
        self, job: J.Job, render: Render, gen, last_store: list, may_hand_off: bool, slot=None, ended=None
    ) -> Any:
        """Run ``gen`` (the render's progress) to its end: the job's final row. With ``may_hand_off``,
        a local render whose last frame has left the engine goes on on a finishing worker instead
        (``_HANDED``): its encoders drain while this thread takes the next job."""
        try:
            for p in gen:
                self.last_progress[job.id] = replace(p, preview=None)  # kept per job: no frames
                timing = self.timings.get(job.id)
                if timing is not None and p.done > 0 and "first_frame_s" not in timing:
                    timing["first_frame_s"] = round(max(0.0, time.time() - job.created), 4)
                now = time.monotonic()
                if now - last_store[0] >= STORE_PROGRESS_S or p.finished:
                    last_store[0] = now
                    self.store.set_progress(job.id, p.fraction)
                    if self.store.get(job.id).state != J.RUNNING:  # cancelled by another process's view
                        render.cancel()
                self._emitter.emit("progress", job.id, progress=p, where=render.where)
                if may_hand_off and _engine_done(render, p):
                    self._hand_off(job, render, gen, last_store, slot, ended)
                    return _HANDED
            return self._done(job, render)
        except Cancelled:
            return self._cancelled(job.id)
        except StudioError as exc:
            if render.cancelled:
                return self._cancelled(job.id)
            return self._finish(job.id, J.FAILED, str(exc))
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                self._finish(job.id, J.CANCELLED, "cancelled by the user")
                raise
            log.error("job %d failed", job.id, exc_info=True)
            from studio.core.env import log_file

            return self._finish(
                job.id, J.FAILED, f"internal error ({type(exc).__name__}: {exc}); the details are in {log_file()}"
            )

    def _done(self, job: J.Job, render: Render) -> J.Job:
        """The render is written: its result into the job's row, told, and its check queued."""
        r = render.result
        data = r.to_json() if r is not None else {}
        data.update(ran_on=render.where, engine_reason=render.engine_reason or data.get("engine_reason", ""))
        data.update(render.extra)  # where on a farm, and how the file came back
        data.update(self.timings.pop(job.id, {}))  # queue_s, first_frame_s
        if job.settings.get("deadline"):
            data["deadline_met"] = time.time() <= float(job.settings["deadline"])
        if data.get("output"):
            data["output"] = os.path.abspath(data["output"])
            with contextlib.suppress(OSError):
                data["output_id"] = file_identity(data["output"])  # owned_output checks it
        req = render.request
        if req.settings.checked:
            data["check"] = {"state": "pending"}
        done = self.store.finish(job.id, output=data.get("output"), result=data)
        self._emitter.emit("state", job.id, done, where=render.where)
        if req.settings.checked and done.state == J.DONE:
            self.checks.submit(job.id, req, done.output)
        if self.scheduler is None and self.capacity == 1 and self.dispatcher is None:
            # the one-job loop warms it when idle; a slot runner keeps no engine (an evicted one's
            # memory must go back to the device)
            self._idle_engine = render.engine or self._idle_engine
        return done

    def _hand_off(self, job: J.Job, render: Render, gen, last_store: list, slot: int | None, ended) -> None:
        """Finish ``job`` on a finishing worker (waits while ``capacity`` are finishing); its slot
        is free once it is handed over."""

        def finish() -> None:
            try:
                self._consume(job, render, gen, last_store, False)
            finally:
                if ended is not None:
                    ended()
                self.poke()

        render.engine_done()  # the batcher no longer waits for this job's batches
        self.finisher.take(job.id, render, finish)
        with self._wake:
            if self._current is not None and self._current[0] == job.id:
                self._current = None
        if slot is not None:
            self.slots.left_engine(job.id)

    def _cancelled(self, job_id: int) -> J.Job | None:
        if self._interrupting:
            return self._finish(job_id, J.INTERRUPTED_STATE, J.INTERRUPTED)
        if self.slots.missed_deadline(job_id):
            return self._finish(job_id, J.CANCELLED, DEADLINE_REASON)
        return self._finish(job_id, J.CANCELLED, "cancelled by the user")

    def _finish(self, job_id: int, state: str, reason: str) -> J.Job | None:
        self.timings.pop(job_id, None)
        try:
            if state in (J.CANCELLED, J.INTERRUPTED_STATE):
                job = self.store.get(job_id)
                if job.state == J.RUNNING:
                    job = self.store.cancel(job_id, reason) if state == J.CANCELLED else self.store.interrupt(job_id)
            else:
                job = self.store.fail(job_id, reason)
        except InputError:  # removed meanwhile
            return self.store.get(job_id) if any(j.id == job_id for j in self.store.list()) else None
        self._emitter.emit("state", job_id, job)
        return job


def _engine_done(render: Render, p: Progress) -> bool:
    """Every frame has left the engine; what is left is the encoders' drain and the file."""
    return render.request.placement.kind == "local" and not p.finished and 0 < p.total <= p.done


def _prestart_encoders() -> None:
    """Start the parallel x264 encoder processes (one per core) and the audio one, where renders
    use them (4 cores or more)."""
    from studio.core import env

    cores = os.cpu_count() or 1
    if cores < 4 or env.get("STUDIO_X264_PROCESSES") == "0":
        return
    try:
        from studio.core.media.x264_pool import prestart

        prestart(env.get_int("STUDIO_X264_WORKERS") or cores)
    except Exception:
        log.warning("starting the encoder processes ahead failed", exc_info=True)

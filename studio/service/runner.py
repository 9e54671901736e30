"""Running the queue's jobs: ``QueueService``'s runner (``start``/``stop``/``close``, ``run_next``,
``run_until_empty``) and one job's run (``_run``), its progress persisted and told (``_consume``), and
the pipelined hand-off: once a local job's last frame has left the engine, its encoders drain and its
file is finished on a drain thread while the next job's engine work starts (at most one drains while
one renders). A mixin of ``QueueService`` (its attributes are the queue's); several jobs at once are
``Slots``'."""

from __future__ import annotations

import builtins  # QueueService.list shadows list in its annotations
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from studio.core.errors import Cancelled, InputError, StudioError
from studio.core.store import jobs as J
from studio.service.driver import Progress, Render
from studio.service.job_requests import file_identity, relative_paths, request_of
from studio.service.slots import Slots

if TYPE_CHECKING:
    from studio.service.queue import QueueEvent

log = logging.getLogger("studio.service.queue")

STORE_PROGRESS_S = 1.0  # persisted progress at most this often
_HANDED = object()  # _consume: the job goes on in the drain thread


class Runner(Slots):
    """The part of ``QueueService`` that runs its jobs (one at a time, pipelined; ``Slots``: several)."""

    store: J.JobStore
    pool: Any
    pipeline: bool
    in_process_farm: bool
    checks: Any  # the CheckRunner
    last_progress: dict[int, Progress]
    _thread: threading.Thread | None
    _interrupting: bool
    _current: tuple[int, Render] | None
    _draining: tuple[int, Render, threading.Thread] | None
    _idle_engine: Any
    _farm_link: Any
    _swept: float
    timings: dict[int, dict]
    subscribe: Callable[..., Callable[[], None]]  # the queue's own

    @property
    def farm_link(self):
        """The link to the Ray farm (a child process), while a farm job runs and kept between them."""
        with self._lock:
            cur = self._current
        return cur[1].farm_link if cur is not None and cur[1].farm_link is not None else self._farm_link

    @property
    def running_job_id(self) -> int | None:
        """The job the engine works on (else the one finishing its file)."""
        with self._lock:
            cur = self._current or self._draining
            return cur[0] if cur else next(iter(self._workers), None)

    @property
    def running_job_ids(self) -> builtins.list[int]:
        """Every running job: the one on the engine and the one whose encoders drain."""
        with self._lock:
            return [c[0] for c in (self._draining, self._current) if c is not None] + list(self._workers)

    def _live(self) -> builtins.list[tuple[int, Render]]:
        """(job id, render) of every job running now: on the engine, draining, or on a slot (with the lock)."""
        live = [(c[0], c[1]) for c in (self._current, self._draining) if c is not None]
        return live + [(i, w[0]) for i, w in self._workers.items() if w[0] is not None]

    # ---- running ------------------------------------------------------------------------

    def run_next(self) -> J.Job | None:
        """Claim and run the next queued job in this thread; None when nothing is queued. A
        pipelined job is answered (still ``running``) once its frames have left the engine: its
        file is finished on the drain thread (``wait_drained``)."""
        job = self.store.claim_next()
        if job is None:
            return None
        self._emit("state", job.id, job)
        return self._run(job)

    def run_until_empty(self, on_event: Callable[[QueueEvent], None] | None = None) -> builtins.list[J.Job]:
        """Run queued jobs in this thread until none is left; the finished jobs."""
        unsub = self.subscribe(on_event) if on_event else None
        self._maybe_sweep()
        try:
            out = []
            while not self._stop and (job := self.run_next()) is not None:
                out.append(job)
            self.wait_drained()
            self.checks.wait()  # the checks of the finished jobs, before the caller (a command) ends
            return [f for j in out if (f := self._fresh(j)) is not None]  # a job removed meanwhile is left out
        finally:
            if unsub:
                unsub()

    def wait_drained(self, timeout: float | None = None) -> None:
        """Wait until no job is finishing its file on the drain thread."""
        with self._lock:
            d = self._draining
        if d is not None and d[2] is not threading.current_thread():
            d[2].join(timeout)

    def start(self) -> None:
        """Run queued jobs on a background thread until ``stop`` (jobs added later run too). The
        encoder processes start meanwhile, so the first job does not wait for them."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stop = self._interrupting = False
            self._thread = threading.Thread(target=self._loop, name="studio-queue", daemon=True)
            self._thread.start()
        threading.Thread(target=_prestart_encoders, name="studio-encoders-start", daemon=True).start()

    @property
    def started(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and not self._stop

    def stop(self, interrupt: bool = False, timeout: float | None = 30.0) -> None:
        """Stop the runner after the running job (``pause``), or stop that job now (``interrupt``):
        it stops within one batch, writes nothing, and is marked ``interrupted`` (Retry runs it)."""
        with self._lock:
            self._stop = True
            self._interrupting = interrupt
            live = self._live()
            workers = [w[2] for w in self._workers.values()]
            self._wake.notify_all()
        if interrupt:
            for cur in live:
                cur[1].cancel()
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

    def _loop(self) -> None:
        if self.capacity > 1 or self.dispatcher is not None or self.scheduler is not None:
            return self._loop_many()
        while True:
            with self._lock:
                if self._stop:
                    return
            self._maybe_sweep()
            try:
                job = self.run_next()
            except Exception:
                log.exception("queue runner: could not take the next job")
                job = None
            if job is not None:
                self._swept = float("-inf")  # a new file: retention looks again before the next job
            if job is None:
                self._warm_idle()
                with self._lock:
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

    def _run(self, job: J.Job, slot: int | None = None) -> J.Job | None:
        relative = relative_paths(job)
        if relative:
            return self._finish(
                job.id,
                J.FAILED,
                f"this job names {relative[0]} without its folder (queued by an earlier Studio), so which file it "
                "means depends on where Studio runs; queue it again",
            )
        try:
            req = request_of(job)
        except StudioError as exc:
            return self._finish(job.id, J.FAILED, str(exc))
        device = self.devices[slot] if slot is not None else None
        if device is not None and req.placement.kind == "local" and req.settings.device in (None, "", "auto"):
            req = req.with_(settings=req.settings.with_(device=device))
        render = Render(
            req, self.pool, farm_link=self._farm_link, in_process_farm=self.in_process_farm, dispatcher=self.dispatcher
        )
        render.slot, render.job_id = slot or 0, job.id
        self.timings[job.id] = {"queue_s": round(max(0.0, time.time() - job.created), 4)}
        if self.scheduler is not None:
            from studio.service.scheduler import ticket_of

            render.ticket = ticket_of(job)
        render.on_started = lambda where: self._emit("placed", job.id, self.store.get(job.id), where=where)
        with self._lock:
            if slot is None:
                self._current = (job.id, render)
            else:
                self._workers[job.id] = (render, slot, self._workers[job.id][2])
            if self._interrupting:  # stop(interrupt=True) came while this job was being claimed
                render.cancel()
        handed = False
        try:
            out = self._consume(job, render, render.run(), [0.0], may_hand_off=self.pipeline and slot is None)
            handed = out is _HANDED
            return self.store.get(job.id) if handed else out
        finally:
            if not handed:
                self._farm_link = render.farm_link  # kept warm for the next farm job (None once lost)
            with self._lock:
                if self._current is not None and self._current[0] == job.id:
                    self._current = None

    def _consume(self, job: J.Job, render: Render, gen, last_store: builtins.list, may_hand_off: bool):
        """Run ``gen`` (the render's progress) to its end: the job's final row. With
        ``may_hand_off``, a local render whose last frame has left the engine goes on in a drain
        thread instead (``_HANDED``): its encoders drain while the runner takes the next job."""
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
                self._emit("progress", job.id, progress=p, where=render.where)
                if may_hand_off and self._engine_done(render, p):
                    self._hand_off(job, render, gen, last_store)
                    return _HANDED
                if self.scheduler is not None and job.id not in self._finishing and self._engine_near_done(render, p):
                    with self._lock:  # its slot goes to the next job while this thread finishes the file
                        self._finishing.add(job.id)
                        self._wake.notify_all()
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
            self._emit("state", job.id, done, where=render.where)
            if req.settings.checked and done.state == J.DONE:
                self.checks.submit(job.id, req, done.output)
            if self.scheduler is None and self.capacity == 1 and self.dispatcher is None:
                # the one-job loop warms it when idle; a slot runner keeps no engine (an evicted one's
                # memory must go back to the device)
                self._idle_engine = render.engine or self._idle_engine
            return done
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

    @staticmethod
    def _engine_done(render: Render, p: Progress) -> bool:
        """Every frame has left the engine; what is left is the encoders' drain and the file."""
        return render.request.placement.kind == "local" and not p.finished and 0 < p.total <= p.done

    @staticmethod
    def _engine_near_done(render: Render, p: Progress) -> bool:
        """A slot job's frames have all left the engine, or all but ``STUDIO_PREFETCH_FRAMES``: its
        slot goes to the next job, which opens (its voice-over read, its audio features, its writer)
        while this one's last batches run."""
        from studio.core import env

        if render.request.placement.kind != "local" or p.finished or p.total <= 0:
            return False
        return p.total - p.done <= max(0, env.get_int("STUDIO_PREFETCH_FRAMES"))

    def _hand_off(self, job: J.Job, render: Render, gen, last_store: builtins.list) -> None:
        """Finish ``job`` on a drain thread (after the previous one: at most one drains)."""
        self.wait_drained()
        t = threading.Thread(
            target=self._drain, args=(job, render, gen, last_store), name=f"studio-queue-drain-{job.id}", daemon=True
        )
        with self._lock:
            self._draining = (job.id, render, t)
            if self._current is not None and self._current[0] == job.id:
                self._current = None
        t.start()

    def _drain(self, job: J.Job, render: Render, gen, last_store: builtins.list) -> None:
        try:
            self._consume(job, render, gen, last_store, may_hand_off=False)
        finally:
            with self._lock:
                if self._draining is not None and self._draining[0] == job.id:
                    self._draining = None
                self._wake.notify_all()

    def _cancelled(self, job_id: int) -> J.Job | None:
        if self._interrupting:
            return self._finish(job_id, J.INTERRUPTED_STATE, J.INTERRUPTED)
        if job_id in self._deadline_missed:
            from studio.service.slots import DEADLINE_REASON

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
        self._emit("state", job_id, job)
        return job


def _prestart_encoders() -> None:
    """Start the parallel x264 encoder processes (one per core) and the audio one, where renders
    use them (4 cores or more)."""
    import os

    from studio.core import env

    cores = os.cpu_count() or 1
    if cores < 4 or env.get("STUDIO_X264_PROCESSES") == "0":
        return
    try:
        from studio.core.media.x264_pool import prestart

        prestart(env.get_int("STUDIO_X264_WORKERS") or cores)
    except Exception:
        log.warning("starting the encoder processes ahead failed", exc_info=True)

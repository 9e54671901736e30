"""The app's link to a Ray render farm: the Ray driver runs in a child process, never in the app.

Ray ends a driver's process when the Ray node it runs on stops (`studio farm down`, a crashed
raylet): that must fail the job, not close the app. So one child process connects to the farm
(``studio.core.scale.farm.Farm.connect``), keeps it (and the farm's warm workers) between jobs, and
streams each job's ``RenderProgress`` back through a pipe.

    link = FarmLink.open("10.0.0.5:6379")     # "" : the farm `studio farm up` started here
    for p in link.render("anna", "voice.wav", "out.mp4", settings):   # RenderProgress
        ...
    link.result                               # a RenderResult
    link.cancel()                             # thread-safe: every chunk stops, nothing is written
    link.close()

Every failure is a ``StudioError`` with one sentence; a child that died is ``LinkLost``.
No Qt here: the child imports only this module and the core.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections.abc import Iterator

from studio.core.errors import RenderError

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 180.0  # starting a local cluster on a loaded 2-core machine takes ~10 s
POLL_S = 0.25
STOP_WAIT_S = 60.0  # a job dropped early: how long to wait for the child to stop it


class LinkLost(RenderError):
    """The farm's child process ended (its Ray node stopped, or it was killed), or Ray itself failed
    (a node or the farm's bookkeeping actor gone): the link is not to be reused."""


class FarmLink:
    """A child process connected to the farm at ``address``, serving one job at a time."""

    def __init__(self, address: str, process, conn, cancel_event, workers: list[str], gpus: bool):
        self.address, self.workers, self.gpus = address, workers, gpus
        self._proc, self._conn, self._cancel = process, conn, cancel_event
        self._jobs = itertools.count(1)
        self.result = None

    @classmethod
    def open(cls, address: str = "") -> FarmLink:
        """Connect (in a new child process); raises a one-sentence ``StudioError`` when it cannot."""
        import importlib.util
        import multiprocessing

        address = (address or "").strip()
        if importlib.util.find_spec("ray") is None:  # the child checks it fully (``farm.ray_available``)
            raise RenderError("The render farm needs Ray: ray is not installed; pip install 'studio[farm]'.")
        check_address(address)
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        cancel = ctx.Event()
        proc = ctx.Process(target=serve, args=(child, address, cancel), name="studio-farm-link", daemon=True)
        try:
            proc.start()
        except Exception as exc:  # e.g. a script without the ``if __name__ == "__main__"`` guard spawn needs
            raise RenderError(f"Could not start the farm connection process ({_one_line(exc)}).") from exc
        finally:
            child.close()
        link = cls(address, proc, parent, cancel, [], False)
        try:
            _, _, workers, gpus = link.receive(0, timeout=CONNECT_TIMEOUT_S)
        except BaseException:
            link.close()
            raise
        link.workers, link.gpus = workers, gpus
        return link

    @property
    def alive(self) -> bool:
        return self._proc.is_alive()

    @property
    def pid(self) -> int | None:
        """The child process's id (the Ray driver; a watchdog or a test may signal it)."""
        return self._proc.pid

    @property
    def where(self) -> str:
        n = len(self.workers)
        return f"farm ({n} {'GPU ' if self.gpus else ''}worker{'s' if n != 1 else ''})"

    def render(self, avatar, audio, output, settings, *, overwrite: bool = True) -> Iterator:
        """Run one job on the farm, yielding its ``RenderProgress``; ``self.result`` at the end."""
        job = next(self._jobs)
        self.result = None
        self._cancel.clear()
        self._send(("render", job, str(avatar), str(audio), str(output), settings, bool(overwrite)))
        finished = False
        try:
            while True:
                msg = self.receive(job)
                if msg[0] == "done":
                    self.result, finished = msg[2], True
                    return
                yield msg[2]
        finally:
            if not finished and self.alive:  # dropped early: stop the job and wait until the child has
                self._cancel.set()  # cleaned up (its segments' folder gone), within a bound
                with contextlib.suppress(Exception):
                    while self.receive(job, timeout=STOP_WAIT_S)[0] != "done":
                        pass

    def cancel(self) -> None:
        """Thread-safe: the running job stops after each chunk's current batch; nothing is written."""
        self._cancel.set()

    def stats(self) -> dict:
        """Per farm worker: engines loaded, jobs, chunks, avatar fetches (``Farm.stats``)."""
        job = next(self._jobs)
        self._send(("stats", job))
        return self.receive(job, timeout=60)[2]

    def close(self, timeout: float = 10.0) -> None:
        """Leave the farm: the child disconnects (a local cluster it started stops with it)."""
        self._cancel.set()
        try:
            self._conn.send(("quit", 0))
        except (OSError, ValueError):
            pass
        self._proc.join(timeout)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(5)
        self._conn.close()

    # ---- helpers ------------------------------------------------------------------------

    def _send(self, msg) -> None:
        try:
            self._conn.send(msg)
        except (OSError, ValueError) as exc:
            raise self._lost(exc) from None

    def receive(self, job: int, timeout: float | None = None):
        """The next message of ``job`` (older jobs' late messages are skipped); errors re-raised."""
        import time

        from studio.core import errors

        t0 = time.monotonic()
        while True:
            try:
                ready = self._conn.poll(POLL_S)
                msg = self._conn.recv() if ready else None
            except (EOFError, OSError) as exc:
                raise self._lost(exc) from None
            if msg is None:
                if not self._proc.is_alive():
                    raise self._lost(None)
                if timeout is not None and time.monotonic() - t0 > timeout:
                    raise RenderError(
                        f"The farm at {self.address or 'this machine'} did not answer within "
                        f"{timeout:.0f} s: check it with `studio farm status`."
                    )
                continue
            if msg[1] != job:
                continue
            if msg[0] == "error":
                kind = LinkLost if msg[2] == "LinkLost" else getattr(errors, msg[2], None)
                if not (isinstance(kind, type) and issubclass(kind, errors.StudioError)):
                    kind = RenderError
                raise kind(msg[3])
            return msg

    def _lost(self, exc) -> LinkLost:
        self._proc.join(1)
        code = self._proc.exitcode
        why = f"exit code {code}" if code is not None else type(exc).__name__ if exc else "no answer"
        return LinkLost(
            f"The connection to the farm at {self.address or 'this machine'} was lost ({why}; did its "
            "Ray node stop?): check `studio farm status` and render again."
        )


def check_address(address: str) -> None:
    """ "" (the farm started here), "auto" or HOST:PORT; anything else is an ``InputError``."""
    from studio.core.errors import InputError

    if not address or address == "auto":
        return
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InputError(
            f"The farm address {address!r} is not HOST:PORT (e.g. 10.0.0.5:6379): fix it in "
            "Render on, or leave it empty for the farm started here."
        )


# --------------------------------------------------------------------------------------------
# The child process


def serve(conn, address: str, cancel) -> None:
    """Child process: connect, answer "ready", then run jobs until "quit" or the app goes away."""
    try:
        from studio.core.scale.farm import Farm

        farm = Farm.connect(address or None)  # init_ray sends this host's token to HOST:PORT farms
    except BaseException as exc:  # noqa: BLE001 - every failure goes back as one sentence
        conn.send(("error", 0, *_describe(exc)))
        return
    try:
        conn.send(("ready", 0, farm.workers, farm.gpus))
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):  # the app is gone
                return
            kind, job = msg[0], msg[1]
            if kind == "quit":
                return
            try:
                if kind == "stats":
                    conn.send(("stats", job, farm.stats()))
                elif kind == "render":
                    for p in farm.render(*msg[2:6], overwrite=msg[6] if len(msg) > 6 else True):
                        if cancel.is_set():
                            farm.cancel()
                        conn.send(("progress", job, p))
                    conn.send(("done", job, farm.result))
            except Exception as exc:  # noqa: BLE001
                conn.send(("error", job, *_describe(exc)))
                if not farm.workers:  # every worker died: the next job opens a new link (and farm)
                    return
    finally:
        import ray

        ray.shutdown()


def _describe(exc: BaseException) -> tuple[str, str]:
    """(StudioError class name, one line) for the app."""
    from studio.core.errors import StudioError

    if isinstance(exc, StudioError):
        return type(exc).__name__, " ".join(str(exc).split())
    log.error("farm link: unexpected error", exc_info=(type(exc), exc, exc.__traceback__))
    return (
        "LinkLost",
        f"The farm failed during the job ({_one_line(exc)}): check `studio farm status` and render again.",
    )


def _one_line(exc: BaseException, limit: int = 120) -> str:
    """``Type: the exception's last non-empty line``, shortened (Ray's task errors carry a traceback)."""
    lines = [x.strip() for x in str(exc).splitlines() if x.strip()]
    text = lines[-1] if lines else ""
    return f"{type(exc).__name__}: {text if len(text) <= limit else text[: limit - 1].rstrip() + '…'}"

"""One way to stop: SIGINT, SIGTERM and SIGHUP all cancel like Ctrl-C, and workers die with us.

``handle_stop_signals()`` (the ``studio`` command calls it first) turns each of those signals into
an ``Interrupted`` exception in the main thread. ``Interrupted`` is a ``KeyboardInterrupt``, so
every cleanup path written for Ctrl-C (``atomic_path``, ``VideoWriter.abort``, the chunk pool's
shutdown) runs for the other signals too, and the command exits ``128 + signal number``
(130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP: the shell's convention). A second signal while
that cleanup runs does not interrupt the cleanup half-way: it runs the forced-exit hooks (the store
registers the removal of this process's temporaries with ``on_forced_exit``; this module imports
nothing of Studio's, so it sits at the bottom of the core) and exits at once.

``die_with_parent(parent_pid)`` is called first thing in worker processes (chunk workers, x264
encoders): on Linux the kernel kills the worker when its parent dies (``prctl(PR_SET_PDEATHSIG)``),
and everywhere a daemon thread checks every half second that the parent is still the same
process (``getppid``), so a SIGKILL'd render never leaves workers rendering into the void.
Hand-written: the standard library has neither (``multiprocessing`` workers block forever on
their queue once the parent is gone).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

STOP_SIGNALS = tuple(s for s in (getattr(signal, n, None) for n in ("SIGINT", "SIGTERM", "SIGHUP")) if s)
PR_SET_PDEATHSIG = 1
PARENT_ENV = "STUDIO_PARENT_PID"


class Interrupted(KeyboardInterrupt):
    """A stop signal arrived: cancel, clean up, exit ``128 + signo``."""

    def __init__(self, signo: int):
        super().__init__(signo)
        self.signo = int(signo)

    @property
    def exit_code(self) -> int:
        return 128 + self.signo

    @property
    def name(self) -> str:
        try:
            return signal.Signals(self.signo).name
        except ValueError:
            return f"signal {self.signo}"


def exit_code_of(exc: BaseException) -> int:
    """130 for a plain KeyboardInterrupt, ``128 + signo`` for ``Interrupted``."""
    return exc.exit_code if isinstance(exc, Interrupted) else 128 + int(signal.SIGINT)


_state: dict[str, int | None] = {"fired": None, "defer": 0, "held": None}
_FORCED_EXIT: list[Callable[[], object]] = []


def on_forced_exit(fn: Callable[[], object]) -> Callable[[], object]:
    """Run ``fn`` (no arguments) when a second stop signal ends the process at once: ``os._exit``
    skips the ``atexit`` handlers, so what must not outlive the process (the store's registered
    temporaries: ``studio.core.store.temps``) registers here. Once per function; returns it."""
    if fn not in _FORCED_EXIT:
        _FORCED_EXIT.append(fn)
    return fn


def handle_stop_signals() -> bool:
    """Make SIGINT/SIGTERM/SIGHUP raise ``Interrupted`` in the main thread; False elsewhere."""
    if threading.current_thread() is not threading.main_thread():
        return False
    _state["fired"] = None
    for s in STOP_SIGNALS:
        with contextlib.suppress(OSError, ValueError):
            if s == getattr(signal, "SIGHUP", None) and signal.getsignal(s) == signal.SIG_IGN:
                continue  # started under nohup: keep ignoring hang-ups
            signal.signal(s, _on_signal)
    return True


@contextlib.contextmanager
def deferred():
    """Hold a stop signal back until the block ends, then raise it (``Interrupted``): for steps that
    must not be cut in half, such as handing a spawned worker its start-up data (a worker given half
    of it printed a multiprocessing traceback). A second signal still stops at once."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _state["defer"] = _state.get("defer", 0) + 1
    try:
        yield
    finally:
        _state["defer"] -= 1
        held = _state.get("held")
        if held is not None and not _state["defer"]:
            _state["held"] = None
            raise Interrupted(held)


def _on_signal(signo, frame) -> None:
    if _state.get("defer") and _state["fired"] is None:
        _state["fired"] = _state["held"] = int(signo)  # raised when the deferred block ends
        return
    if _state["fired"] is not None:  # a second signal while cleaning up: finish now
        for hook in list(_FORCED_EXIT):
            with contextlib.suppress(BaseException):
                hook()
        with contextlib.suppress(BaseException):
            log.warning("stopped at once (a second signal); nothing was written")
        os._exit(128 + int(signo))
    _state["fired"] = int(signo)
    raise Interrupted(signo)


# ------------------------------------------------------------------------------------------------
# Workers die with their parent


def die_with_parent(parent_pid: int | None = None, poll_s: float = 0.5, pdeathsig: bool = True) -> None:
    """Kill this (worker) process when ``parent_pid`` (default ``$STUDIO_PARENT_PID``, else the
    current parent) is gone: PDEATHSIG on Linux, plus a watchdog thread everywhere.

    ``pdeathsig=False`` for workers that outlive the thread that started them (the kernel sends
    PDEATHSIG when the creating *thread* exits, not the process): the watchdog alone then."""
    if parent_pid is None:
        from studio.core import env as environment

        env = environment.get(PARENT_ENV)
        parent_pid = int(env) if env.isdigit() else os.getppid()
    if pdeathsig and sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before the prctl
        os._exit(1)

    def watch() -> None:
        ev = threading.Event()
        while not ev.wait(poll_s):
            if os.getppid() != parent_pid:
                os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def quick_exit(rc: int) -> int:
    """End the process without the interpreter's teardown: the exit handlers run (logging,
    temporaries, encoder workers), stdout and stderr are flushed, then ``os._exit``. Freeing
    torch's and every module's objects one by one took 0.4-0.9 s after a cold render on the
    2-core machine, all of it after the MP4 was complete. Returns (a normal exit follows) where
    a non-daemon thread is still running, or flushing fails."""
    import atexit

    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        return rc
    try:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:  # noqa: BLE001 - e.g. a closed pipe: the normal exit reports it
        return rc
    os._exit(rc)

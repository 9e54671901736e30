"""The ``studio`` command: the GUI with no arguments, sub-commands otherwise.

Each sub-command lives in a module of this package that defines ``register(subparsers)``, listed
in ``build_parser`` (ordinary imports: lint-imports and grimp see them). They import heavy
libraries (torch, Qt, PyAV) only inside their run functions, so ``studio --help`` and
``studio --version`` stay instant.
"""

from __future__ import annotations

import argparse
import logging
import sys
import traceback

from studio import __version__

log = logging.getLogger("studio")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="studio",
        description="Lip-synced presenter video: an avatar and a voice-over in, an MP4 out. "
        "With no command, opens the studio window.",
    )
    parser.add_argument("--version", action="version", version=f"studio {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages to stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    from studio.cli import (
        analyze,
        avatar,
        bench,
        check,
        delivery,
        doctor,
        engines,
        farm,
        features,
        gui,
        live,
        models,
        queue,
        remote,
        render,
        rewrap,
        serve,
        speak,
        watch,
    )

    commands = (analyze, avatar, bench, check, delivery, doctor, engines, farm, features, gui, live, models, queue)
    for module in (*commands, remote, render, rewrap, serve, speak, watch):
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """The command line. From a real command line (``argv`` None) a command other than the
    window ends with ``quick_exit``; called with ``argv`` (tests) it returns the exit code."""
    rc = _main(argv)
    if argv is None and _QUICK_EXIT[0]:
        from studio.core.signals import quick_exit

        quick_exit(rc)
    return rc


_QUICK_EXIT = [False]  # set once a command (not the window) has run


def _main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    if args_in[:1] == ["__studio_x264_worker__"]:  # a frozen app re-launched as an encoder worker
        from studio.core.media.x264_worker import run_worker

        run_worker(int(args_in[1]))
        return 0
    parser = build_parser()
    args = parser.parse_args(argv)
    from studio.core.errors import StudioError

    try:  # a STUDIO_* value Studio cannot use, a STUDIO_HOME that is a file: one sentence, before anything
        from studio.core.env import check_environment

        check_environment()
    except StudioError as exc:
        _say(f"studio: error: {exc}")
        return exc.exit_code
    _setup_logging(args.verbose)
    from studio.core.store.temps import sweep_dead_temps

    sweep_dead_temps()  # temporaries of runs that were killed (SIGKILL, power cut): one listing
    if not getattr(args, "command", None):
        from studio.cli.gui import open_window

        return open_window()
    from studio.core.signals import exit_code_of, handle_stop_signals

    handle_stop_signals()  # SIGTERM and SIGHUP cancel like Ctrl-C (exit 128 + signal number)
    _QUICK_EXIT[0] = True
    from studio.core.store.fsutil import protect_inputs

    # every file an option names, but the output, is an input: nothing this command writes replaces it
    protect_inputs({_option(k): v for k, v in vars(args).items() if k not in OUTPUT_DESTS})
    try:
        try:
            return int(args.func(args) or 0)
        finally:
            _stop_workers()
            from studio.core.store.fsutil import clear_inputs

            clear_inputs()  # main() called again in this process (tests, the window's own calls) starts afresh
    except StudioError as exc:
        _say(f"studio: error: {exc}")
        return exc.exit_code
    except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM, SIGHUP (studio.core.signals.Interrupted)
        name = getattr(exc, "name", "")
        _say(f"studio: cancelled{f' ({name})' if name and name != 'SIGINT' else ''}; nothing was written")
        return exit_code_of(exc)
    except BrokenPipeError:
        if _stdout_gone():  # `studio analyze --json x.wav | head -c 10`: the reader left
            return 0
        path = _log_traceback()
        _say(f"studio: internal error ({sys.exc_info()[1]!r}); the traceback is in {path}. Please report it.")
        return 1
    except OSError as exc:
        from studio.core.env import READ_ONLY_ERRNOS, read_only_error

        if exc.errno in READ_ONLY_ERRNOS and exc.filename:  # a read-only data or output folder: not a bug
            _say(f"studio: error: {read_only_error(exc.filename, exc)}")
            return 2
        path = _log_traceback()
        _say(f"studio: internal error ({exc!r}); the traceback is in {path}. Please report it.")
        return 1
    except Exception:  # noqa: BLE001 - an internal bug: one line on stderr, the traceback in the log
        path = _log_traceback()
        _say(f"studio: internal error ({sys.exc_info()[1]!r}); the traceback is in {path}. Please report it.")
        return 1


OUTPUT_DESTS = ("output", "report", "overlay", "json", "out", "func")  # options naming what a command writes


def _option(dest: str) -> str:
    return "--" + {"script_file": "script"}.get(dest, dest).replace("_", "-")


def _stop_workers() -> None:
    """Encoder processes and this run's leftover temporaries go before the exit message."""
    if "studio.core.media.x264_pool" in sys.modules:
        sys.modules["studio.core.media.x264_pool"].shutdown_pool()
    from studio.core.store.temps import remove_own_temps

    remove_own_temps()


def _stdout_gone() -> bool:
    """Whether stdout's reader went away (then it is pointed at /dev/null so the exit is quiet).
    A broken pipe to anything else (an encoder process) is an error, not a quiet exit 0."""
    import os
    import select

    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        gone = any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))
    except (OSError, ValueError, AttributeError):
        return False
    if gone:
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), fd)
        except OSError:
            pass
    return gone


def _say(line: str) -> None:
    """One line on stderr; a terminal that hung up (SIGHUP) must not turn into a traceback."""
    try:
        print(line, file=sys.stderr)
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _setup_logging(verbose: bool) -> None:
    from studio.core.errors import StudioError
    from studio.core.logs import SafeFormatter, log_file_handler

    root = logging.getLogger()
    if root.handlers:
        return
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    err = logging.StreamHandler()
    err.setLevel(logging.DEBUG if verbose else logging.WARNING)
    err.setFormatter(SafeFormatter("studio: %(levelname)s: %(message)s"))  # one escaped line a message
    root.addHandler(err)
    try:
        from studio.core.env import log_file

        root.addHandler(log_file_handler(log_file(), logging.DEBUG if verbose else logging.INFO))  # rotated
    except (OSError, StudioError):  # a read-only data folder: the command that writes there says so
        pass


def _log_traceback() -> str:
    """Where the traceback went: the log file, else a temporary file (never raises)."""
    text = "".join(traceback.format_exc())
    try:
        from studio.core.env import log_file

        path = log_file()
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(text)
        return str(path)
    except Exception:  # noqa: BLE001 - the data folder itself may be what failed
        import tempfile

        try:
            fd, name = tempfile.mkstemp(prefix="studio-traceback-", suffix=".txt")
            with open(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            return name
        except OSError:
            return "nowhere (no folder could take it)"

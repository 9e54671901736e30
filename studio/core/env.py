"""Every ``STUDIO_*`` environment variable Studio reads, in one place, with its default and meaning;
and the folders they name: the data folder (``data_dir``: ``$STUDIO_HOME``, else the platform's
user data folder), its sub-folders and the shipped ``resources/``.

    from studio.core import env
    env.get("STUDIO_CPU_THREADS")        # "" when unset (the default), else the value
    env.get_int("STUDIO_X264_WORKERS")   # 0 when unset or not a number
    env.flag("STUDIO_VIDEO_HINTS")       # True unless set to 0 / false / no / off

Code reads these through this module (``tests/test_env.py`` fails on a ``STUDIO_*`` name that is not
listed here); the table in ``docs/environment.md`` is ``table()``'s output (the same test checks it).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from studio.core.errors import InputError


@dataclass(frozen=True)
class Knob:
    name: str
    help: str
    default: str = ""  # what ``get`` answers while it is unset ("": the code's own default, said in ``help``)
    group: str = "run time"

    @classmethod
    def switch(cls, name: str, off: str, group: str = "run time") -> Knob:
        """A switch: on unless set to 0 (``flag``); ``off`` says what 0 does."""
        return cls(name, "0: " + off, "1", group)

    @classmethod
    def grouped(cls, group: str, *knobs: tuple[str, str]) -> tuple[Knob, ...]:
        """Knobs of one group (``table()`` lists each group apart), each ``(name, help)``: the group named once."""
        return tuple(cls(name, help, group=group) for name, help in knobs)


KNOBS: dict[str, Knob] = {
    k.name: k
    for k in (
        Knob(
            "STUDIO_HOME",
            "the data folder (avatars, models, engines, jobs.sqlite, settings, logs); "
            "default: the platform's user data folder (~/.local/share/studio)",
        ),
        Knob(
            "STUDIO_CPU_THREADS",
            "PyTorch threads of a CPU render (default: a quarter of the cores; OMP_NUM_THREADS also counts)",
        ),
        Knob(
            "STUDIO_MAX_AUDIO_MINUTES",
            "the longest voice-over a command accepts, checked from the file's header before decoding "
            "(default 240; `studio serve` has --max-audio-minutes)",
        ),
        Knob("STUDIO_AVATAR_MAX_GB", "the largest avatar cache `avatar add` writes (default: the module's limit)"),
        Knob("STUDIO_ENGINE_CACHE", "where built TensorRT engines are kept (default: <data>/engines)"),
        Knob.switch(
            "STUDIO_BACKGROUND_LOAD",
            "MuseTalk loads its networks in the calling thread, not in the "
            "background while the audio and the encoders get ready",
        ),
        Knob("STUDIO_X264_WORKERS", "parallel x264 chunk encoders (default: one per core)"),
        Knob.switch(
            "STUDIO_QUEUE_PIPELINE",
            "queued jobs run strictly one after another (by default the next job's engine work "
            "starts while the previous job's encoders drain)",
        ),
        Knob.switch(
            "STUDIO_LOCAL_SERVER",
            "studio render always renders in its own process (by default it hands the job to a studio serve "
            "running on the same data folder, which has its engine warm)",
        ),
        Knob.switch(
            "STUDIO_PRELOAD",
            "a cold studio render imports PyTorch and creates the CUDA context only when the engine needs "
            "them (by default it starts at once on a thread, while the command reads its inputs)",
        ),
        Knob(
            "STUDIO_MAX_ENGINES",
            "warm engines a process keeps at most (the least recently used is evicted first)",
            default="2",
        ),
        Knob(
            "STUDIO_MAX_ENGINE_MEMORY",
            "no new engine is loaded while more than this share of the device's memory is in use "
            "(the least recently used engines are evicted first)",
            default="0.6",
        ),
        Knob(
            "STUDIO_JOBS_PER_DEVICE",
            "jobs studio serve renders at once on each device, their frames sharing the engine's batches "
            "(default: 1; 2 or more lets a short job finish beside a long one)",
        ),
        Knob.switch(
            "STUDIO_CROSS_JOB_BATCHING",
            "jobs running at once on one device call the engine in turn instead of sharing its batches",
        ),
        Knob(
            "STUDIO_PREFETCH_JOBS",
            "studio serve: queued jobs prepared ahead while the current batches run (voice-over decoded, audio "
            "features, avatar on the device), at most this many (0: off)",
            default="2",
        ),
        Knob(
            "STUDIO_QUEUE_GATE",
            "a file: the queue runner of studio serve claims no job until it exists (tests queue every job "
            "first, then let them contend from one instant)",
        ),
        Knob(
            "STUDIO_WARM_RENDER",
            "short: studio serve's warm-up renders 1.5 s of 16 kHz mono once, as before (benchmarks' comparison)",
        ),
        Knob(
            "STUDIO_STAGE_TRACE",
            "a file: every render's stage spans (host and GPU) are appended to it as JSON lines (benchmarks)",
        ),
        Knob(
            "STUDIO_FARM_DISCOVER_S",
            "`studio serve --farm`: how often (seconds) the head looks for nodes that joined or left the Ray "
            "cluster (a joining node gets render actors without a restart)",
            default="5",
        ),
        Knob.switch("STUDIO_X264_PROCESSES", "parallel x264 chunks run in threads of this process"),
        Knob("STUDIO_X264_NICE", "the CPU priority (nice) of x264 encoder processes", default="5"),
        Knob(
            "STUDIO_SPILL_DIR",
            "where encoded chunks wait for the mux (default: /dev/shm when it has room, else beside the output)",
        ),
        Knob(
            "STUDIO_SHM_DIR",
            "the memory folder of the encoders' frame rings and small spill folders (default: /dev/shm; "
            "a ring that does not fit there is file-backed in the temporary folder, then made smaller)",
        ),
        Knob.switch("STUDIO_GPU_DIRECT", "CUDA frames reach the encoder processes through a host copy thread"),
        Knob.switch("STUDIO_VIDEO_HINTS", "do not tell x264 which macroblocks of a photo avatar cannot change"),
        Knob.switch(
            "STUDIO_FAST_COPIES",
            "half-precision GPU loads read the official weight files instead of the fast layout "
            "`studio models import` writes (fp16 safetensors, memory-mapped)",
        ),
        Knob("STUDIO_SERVER", "`studio live`: the `studio serve` it talks to (default http://127.0.0.1:8321)"),
        Knob(
            "STUDIO_SERVER_TOKEN",
            "the bearer token of `studio serve` (server side) and of a server the "
            "window or `studio render --server` renders on (client side); kept out of `ps` and the queue",
        ),
        Knob(
            "STUDIO_KEEP_RENDERS",
            "retention: renders in <data>/renders and uploads older than this (7d, 12h, 30m) are removed, "
            "their jobs kept as expired (the window, `studio queue` and `studio serve`; default: kept forever)",
        ),
        Knob(
            "STUDIO_MAX_STORAGE_GB",
            "retention: the oldest renders and uploads in the data folder go while they hold more than this",
        ),
        Knob(
            "STUDIO_WEBHOOK_SECRET",
            "`studio serve`: the key webhooks are signed with (X-Studio-Signature: t=TIME,sha256=HMAC of TIME.body)",
        ),
        Knob("STUDIO_READ_TOKEN", "`studio serve`: a second, read-only bearer token (GET only: dashboards, metrics)"),
        Knob(
            "STUDIO_LOG_MAX_MB",
            "logs/studio.log is rotated at this size (studio.log.1 ...; every message is one escaped line)",
            default="10",
        ),
        Knob("STUDIO_LOG_BACKUPS", "rotated logs kept beside logs/studio.log (the oldest is dropped)", default="5"),
        Knob(
            "STUDIO_PARENT_PID",
            "set by Studio for its encoder workers: they exit when that process is gone",
            group="internal",
        ),
        Knob(
            "STUDIO_COMPILE",
            "1: MuseTalk's networks run through torch.compile (default mode) under the CUDA "
            "graphs; the first load compiles for about a minute, then UNet + TAESD ran 1.75x and UNet + SD-VAE "
            "2.1x faster on an H200",
            default="0",
        ),
        *Knob.grouped(
            "diagnostics",
            ("STUDIO_TRACE", "a JSON file that receives per-frame encoder timestamps of one render"),
            ("STUDIO_TRACE_DIR", "`studio bench`: one trace per timed run in this folder"),
            (
                "STUDIO_STACKS",
                "`studio bench`: sample the render thread's stack every 5 ms and add the top "
                "stacks of each timed run to its result (where the render thread waits)",
            ),
        ),
        *Knob.grouped(
            "tests",
            ("STUDIO_QUIT_AFTER_MS", "the window closes itself after this many ms (smoke tests)"),
            ("STUDIO_SMOKE_GUI_MS", "packaging/smoke_test.sh: how long the frozen window stays open"),
            ("STUDIO_PACKAGING_TEST", "1: `./dev test` also builds and smoke-tests the desktop app (CI sets it)"),
            (
                "STUDIO_TEST_HOLD",
                "a file: while it exists, every render holds before writing its second batch (FILE.finish: "
                "after its last frame, before its file is finished; FILE.build: an avatar build after its "
                "first frame) until the file goes or the render is cancelled, and creates FILE.held "
                "(FILE.finish.held, FILE.build.held) first; tests keep a job running with it instead of "
                "betting on how long a render takes",
            ),
        ),
        *Knob.grouped(
            "build",
            ("STUDIO_VENV", "the venv `./dev` and packaging/build.sh use (default: .venv)"),
            ("STUDIO_TORCH", "the torch requirement `./dev setup` installs (default: the CPU build torch==2.13.0)"),
        ),
    )
}

_OFF = ("0", "false", "no", "off")

#: what a set value must be, checked before any work (``check_environment``: the ``studio`` command
#: calls it first) and by ``get_int``/``get_float``: ``(kind, low, high)`` for numbers ("0" means
#: the default where the low end is 0), ``("folder",)`` for an existing, writable folder
LIMITS: dict[str, tuple] = {
    "STUDIO_CPU_THREADS": ("int", 0, 1024),
    "STUDIO_X264_WORKERS": ("int", 0, 256),
    "STUDIO_X264_NICE": ("int", -20, 19),
    "STUDIO_AVATAR_MAX_GB": ("float", 0.001, 1e6),
    "STUDIO_MAX_AUDIO_MINUTES": ("float", 0.01, 1e6),
    "STUDIO_QUIT_AFTER_MS": ("int", 0, 10**9),
    "STUDIO_SMOKE_GUI_MS": ("int", 0, 10**9),
    "STUDIO_SPILL_DIR": ("folder",),
    "STUDIO_LOG_MAX_MB": ("float", 0.001, 1e6),
    "STUDIO_LOG_BACKUPS": ("int", 1, 1000),
    "STUDIO_PREFETCH_JOBS": ("int", 0, 64),
    "STUDIO_SHM_DIR": ("folder",),
}


def problem(name: str) -> str | None:
    """One sentence when ``name`` is set to a value Studio cannot use, else None."""
    raw = os.environ.get(name)
    rule = LIMITS.get(name)
    if raw is None or rule is None or raw.strip() == "":
        return None
    text = raw.strip()
    if rule[0] == "folder":
        if not os.path.isdir(text):
            what = "is not a folder" if os.path.exists(text) else "no such folder"
            return f"{name}={text}: {what}; create it, or unset {name} for the default"
        if not os.access(text, os.W_OK | os.X_OK):
            return f"{name}={text}: the folder is not writable; choose another, or unset {name}"
        return None
    kind, lo, hi = rule
    try:
        value = int(text) if kind == "int" else float(text)
        ok = lo <= value <= hi and value == value  # not NaN
    except ValueError:
        ok = False
    if ok:
        return None
    what = "a whole number" if kind == "int" else "a number"
    hint = " (0: the default)" if lo == 0 else ""
    return f"{name}={text}: give {what} from {lo:g} to {hi:g}{hint}, or unset it"


def check_environment() -> None:
    """Raise ``InputError`` (one sentence, exit 2) for the first ``STUDIO_*`` variable set to a value
    Studio cannot use, and for a ``STUDIO_HOME`` that cannot be the data folder."""
    from studio.core.errors import InputError

    for name in LIMITS:
        why = problem(name)
        if why:
            raise InputError(why)
    home = os.environ.get("STUDIO_HOME", "").strip()
    if home:
        data_dir()  # its own sentence for a file, a device or a folder that cannot be made


def _knob(name: str) -> Knob:
    try:
        return KNOBS[name]
    except KeyError:
        raise KeyError(f"{name} is not a known STUDIO_* variable; list it in studio/core/env.py") from None


def get(name: str) -> str:
    """The variable's value, or its default when unset or empty (a string; "" when it has none)."""
    return os.environ.get(name) or _knob(name).default or ""


def get_int(name: str, default: int = 0) -> int:
    """The variable as a whole number; ``default`` when unset or not a number (the ``studio``
    command has refused a value outside ``LIMITS`` before any work: ``check_environment``)."""
    try:
        return int(get(name) or default)
    except ValueError:
        return default


def get_float(name: str, default: float) -> float:
    try:
        return float(get(name) or default)
    except ValueError:
        return default


def flag(name: str) -> bool:
    """True unless the variable (or its default) is 0 / false / no / off / empty."""
    v = get(name).strip().lower()
    return bool(v) and v not in _OFF


# ------------------------------------------------------------------------------------------------
# Other programs' variables, child processes, and setting a variable here. Only this module touches
# os.environ (tests/test_env.py checks it), so every read of the environment is listed above or here.


def other(name: str, default: str = "") -> str:
    """A variable that is not Studio's (``OMP_NUM_THREADS``, ``PULSE_SERVER``, ``RAY_AUTH_TOKEN`` ...):
    its value, or ``default`` when unset."""
    if name.startswith("STUDIO_"):
        raise KeyError(f"{name} is Studio's own: read it with env.get (and list it in KNOBS)")
    return os.environ.get(name, default)


def child(**overrides: str | None) -> dict[str, str]:
    """The environment for a child process: this process's, with ``overrides`` (None removes a name)."""
    out = dict(os.environ)
    for name, value in overrides.items():
        if value is None:
            out.pop(name, None)
        else:
            out[name] = value
    return out


def put(name: str, value: str | None) -> None:
    """Set ``name`` in this process (and the children it starts); None removes it."""
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def set_default(name: str, value: str) -> str:
    """Set ``name`` unless it is set already; its value."""
    return os.environ.setdefault(name, value)


@contextmanager
def scoped(name: str, value: str | None) -> Iterator[None]:
    """``name`` set to ``value`` (None: removed) inside the block, as it was after."""
    old = os.environ.get(name)
    put(name, value)
    try:
        yield
    finally:
        put(name, old)


def table() -> str:
    """The knobs as a Markdown table (``docs/environment.md``)."""
    lines = ["| variable | default | what it does |", "|---|---|---|"]
    for k in KNOBS.values():
        lines.append(f"| `{k.name}` | {('`' + k.default + '`') if k.default else '—'} | {k.help} |")
    return "\n".join(lines)


def write_page(path: str) -> None:
    """Replace the table in the Markdown page at ``path`` (from its ``| variable |`` line on) with ``table()``."""
    page = Path(path)
    text = page.read_text()
    start = text.index("| variable |")
    page.write_text(text[:start] + table().strip() + "\n")


# ------------------------------------------------------------------------------------------------
# The folders


def data_dir() -> Path:
    """Return (and create) the data folder that holds avatars, models, engines, jobs and logs."""
    home = get("STUDIO_HOME")
    if home:
        path = Path(home).expanduser()
    else:
        import platformdirs

        path = Path(platformdirs.user_data_dir("studio", appauthor=False))
    try:
        path.mkdir(parents=True, exist_ok=True)
        if not path.is_dir():
            raise NotADirectoryError(path)
    except OSError as exc:
        from studio.core.errors import InputError

        name = f"STUDIO_HOME={home}" if home else f"the data folder {path}"
        if path.exists() and not path.is_dir():
            raise InputError(
                f"{name}: is not a folder; point STUDIO_HOME at a folder (it is made if missing)"
            ) from None
        why = exc.strerror or type(exc).__name__
        raise InputError(
            f"{name}: the data folder cannot be made there ({why}); point STUDIO_HOME at another folder"
        ) from None
    return path


def sub_dir(name: str) -> Path:
    path = data_dir() / name
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        if exc.errno in READ_ONLY_ERRNOS:
            raise read_only_error(path, exc) from None
        raise
    return path


#: what a write answers on a read-only mount (EROFS) or a folder this user may not write (EACCES, EPERM)
READ_ONLY_ERRNOS = (30, 13, 1)


def is_read_only(path: Path) -> bool:
    """Whether ``path`` (or the folder it would be made in) cannot be written: a read-only mount or
    a folder this user may not write."""
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        if os.statvfs(p).f_flag & os.ST_RDONLY:
            return True
    except OSError:
        return False
    return not os.access(p, os.W_OK)


class ReadOnlyDataFolder(InputError, OSError):
    """A data folder Studio cannot write: an ``InputError`` (one sentence, exit 2) that is also an
    ``OSError``, so code that goes on without an optional cache (``except OSError``) still does."""


def read_only_error(path: Path, exc: OSError | None = None):
    """The ``InputError`` for a data folder (or a file in it) Studio cannot write: it says read-only,
    never "damaged", since nothing is wrong with what is there."""
    import errno

    if exc is not None:
        rofs = exc.errno == errno.EROFS
    else:
        p = Path(path)
        while not p.exists() and p != p.parent:
            p = p.parent
        try:
            rofs = bool(os.statvfs(p).f_flag & os.ST_RDONLY)
        except OSError:
            rofs = False
    why = "a read-only file system" if rofs else "no permission to write"
    home = get("STUDIO_HOME")
    folder = Path(home).expanduser() if home else None
    if folder is None:
        import platformdirs

        folder = Path(platformdirs.user_data_dir("studio", appauthor=False))
    if Path(path) == folder or Path(path).is_relative_to(folder):
        return ReadOnlyDataFolder(
            f"The data folder {folder} is read-only ({why}: {path} cannot be written); make it writable, or "
            "point STUDIO_HOME at a writable folder (nothing in it was changed)"
        )
    return InputError(f"{path} cannot be written ({why}); choose a writable folder")


def log_file() -> Path:
    return sub_dir("logs") / "studio.log"


def repo_resources() -> Path:
    """The ``resources/`` folder shipped beside the package (demo assets, icons, style sheet)."""
    # Frozen desktop app (packaging/studio.spec): PyInstaller unpacks ``resources/`` into the
    # bundle's folder, sys._MEIPASS (dist/studio/_internal/).
    frozen_root = getattr(sys, "_MEIPASS", None)
    if getattr(sys, "frozen", False) and frozen_root:
        return Path(frozen_root) / "resources"
    package = Path(__file__).resolve().parents[1]  # studio/ (this file is studio/core/env.py)
    here = package.parent / "resources"
    if here.is_dir():
        return here
    # Frozen/installed layouts put resources next to the package.
    return package / "resources"


if __name__ == "__main__":  # python -m studio.core.env docs/environment.md
    write_page(sys.argv[1])

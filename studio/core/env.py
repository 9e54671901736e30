"""Every ``STUDIO_*`` environment variable Studio reads, in one place, with its default and meaning.

    from studio.core import env
    env.get("STUDIO_CPU_THREADS")        # "" when unset (the default), else the value
    env.get_int("STUDIO_X264_WORKERS")   # 0 when unset or not a number
    env.flag("STUDIO_VIDEO_HINTS")       # True unless set to 0 / false / no / off

Code reads these through this module (``tests/test_env.py`` fails on a ``STUDIO_*`` name that is not
listed here); the table in ``docs/environment.md`` is ``table()``'s output (the same test checks it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Knob:
    name: str
    default: str
    help: str
    group: str = "run time"


KNOBS: dict[str, Knob] = {
    k.name: k
    for k in (
        Knob(
            "STUDIO_HOME",
            "",
            "the data folder (avatars, models, engines, jobs.sqlite, settings, logs); "
            "default: the platform's user data folder (~/.local/share/studio)",
        ),
        Knob(
            "STUDIO_CPU_THREADS",
            "",
            "PyTorch threads of a CPU render (default: a quarter of the cores; OMP_NUM_THREADS also counts)",
        ),
        Knob(
            "STUDIO_MAX_AUDIO_MINUTES",
            "",
            "the longest voice-over a command accepts, checked from the file's header before decoding "
            "(default 240; `studio serve` has --max-audio-minutes)",
        ),
        Knob("STUDIO_AVATAR_MAX_GB", "", "the largest avatar cache `avatar add` writes (default: the module's limit)"),
        Knob("STUDIO_ENGINE_CACHE", "", "where built TensorRT engines are kept (default: <data>/engines)"),
        Knob(
            "STUDIO_BACKGROUND_LOAD",
            "1",
            "0: MuseTalk loads its networks in the calling thread, not in the "
            "background while the audio and the encoders get ready",
        ),
        Knob("STUDIO_X264_WORKERS", "", "parallel x264 chunk encoders (default: one per core)"),
        Knob(
            "STUDIO_QUEUE_PIPELINE",
            "1",
            "0: queued jobs run strictly one after another (by default the next job's engine work "
            "starts while the previous job's encoders drain)",
        ),
        Knob(
            "STUDIO_LOCAL_SERVER",
            "1",
            "0: studio render always renders in its own process (by default it hands the job to a studio serve "
            "running on the same data folder, which has its engine warm)",
        ),
        Knob(
            "STUDIO_MAX_ENGINES",
            "2",
            "warm engines a process keeps at most (the least recently used is evicted first)",
        ),
        Knob(
            "STUDIO_MAX_ENGINE_MEMORY",
            "0.6",
            "no new engine is loaded while more than this share of the device's memory is in use "
            "(the least recently used engines are evicted first)",
        ),
        Knob(
            "STUDIO_JOBS_PER_DEVICE",
            "",
            "jobs studio serve renders at once on each device, their frames sharing the engine's batches "
            "(default: 1; 2 or more lets a short job finish beside a long one)",
        ),
        Knob(
            "STUDIO_CROSS_JOB_BATCHING",
            "1",
            "0: jobs running at once on one device call the engine in turn instead of sharing its batches",
        ),
        Knob("STUDIO_X264_PROCESSES", "1", "0: parallel x264 chunks run in threads of this process"),
        Knob("STUDIO_X264_NICE", "5", "the CPU priority (nice) of x264 encoder processes"),
        Knob(
            "STUDIO_SPILL_DIR",
            "",
            "where encoded chunks wait for the mux (default: /dev/shm when it has room, else beside the output)",
        ),
        Knob("STUDIO_GPU_DIRECT", "1", "0: CUDA frames reach the encoder processes through a host copy thread"),
        Knob("STUDIO_VIDEO_HINTS", "1", "0: do not tell x264 which macroblocks of a photo avatar cannot change"),
        Knob(
            "STUDIO_FAST_COPIES",
            "1",
            "0: half-precision GPU loads read the official weight files instead of the fast layout "
            "`studio models import` writes (fp16 safetensors, memory-mapped)",
        ),
        Knob(
            "STUDIO_SERVER_TOKEN",
            "",
            "the bearer token of `studio serve` (server side) and of a server the "
            "window or `studio render --server` renders on (client side); kept out of `ps` and the queue",
        ),
        Knob(
            "STUDIO_KEEP_RENDERS",
            "",
            "retention: renders in <data>/renders and uploads older than this (7d, 12h, 30m) are removed, "
            "their jobs kept as expired (the window, `studio queue` and `studio serve`; default: kept forever)",
        ),
        Knob(
            "STUDIO_MAX_STORAGE_GB",
            "",
            "retention: the oldest renders and uploads in the data folder go while they hold more than this",
        ),
        Knob(
            "STUDIO_WEBHOOK_SECRET",
            "",
            "`studio serve`: the key webhooks are signed with (X-Studio-Signature: sha256=HMAC of the body)",
        ),
        Knob(
            "STUDIO_READ_TOKEN",
            "",
            "`studio serve`: a second, read-only bearer token (GET only: dashboards, metrics)",
        ),
        Knob(
            "STUDIO_PARENT_PID",
            "",
            "set by Studio for its encoder workers: they exit when that process is gone",
            "internal",
        ),
        Knob(
            "STUDIO_COMPILE",
            "0",
            "1: MuseTalk's networks run through torch.compile (default mode) under the CUDA "
            "graphs; the first load compiles for about a minute, then UNet + TAESD ran 1.75x and UNet + SD-VAE "
            "2.1x faster on an H200",
        ),
        Knob("STUDIO_TRACE", "", "a JSON file that receives per-frame encoder timestamps of one render", "diagnostics"),
        Knob("STUDIO_TRACE_DIR", "", "`studio bench`: one trace per timed run in this folder", "diagnostics"),
        Knob(
            "STUDIO_STACKS",
            "",
            "`studio bench`: sample the render thread's stack every 5 ms and add the top "
            "stacks of each timed run to its result (where the render thread waits)",
            "diagnostics",
        ),
        Knob("STUDIO_QUIT_AFTER_MS", "", "the window closes itself after this many ms (smoke tests)", "tests"),
        Knob("STUDIO_SMOKE_GUI_MS", "", "packaging/smoke_test.sh: how long the frozen window stays open", "tests"),
        Knob(
            "STUDIO_PACKAGING_TEST",
            "",
            "1: `./dev test` also builds and smoke-tests the desktop app (CI sets it)",
            "tests",
        ),
        Knob("STUDIO_VENV", "", "the venv `./dev` and packaging/build.sh use (default: .venv)", "build"),
        Knob(
            "STUDIO_TORCH",
            "",
            "the torch requirement `./dev setup` installs (default: the CPU build torch==2.13.0)",
            "build",
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
        from studio.core.store.paths import data_dir

        data_dir()  # its own sentence for a file, a device or a folder that cannot be made


def _knob(name: str) -> Knob:
    try:
        return KNOBS[name]
    except KeyError:
        raise KeyError(f"{name} is not a known STUDIO_* variable; list it in studio/core/env.py") from None


def get(name: str) -> str:
    """The variable's value, or its default (a string; "" when it has none)."""
    return os.environ.get(name, _knob(name).default) or ""


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


def table() -> str:
    """The knobs as a Markdown table (``docs/environment.md``)."""
    lines = ["| variable | default | what it does |", "|---|---|---|"]
    for k in KNOBS.values():
        lines.append(f"| `{k.name}` | {('`' + k.default + '`') if k.default else '—'} | {k.help} |")
    return "\n".join(lines)


def write_page(path: str) -> None:
    """Replace the table in the Markdown page at ``path`` (from its ``| variable |`` line on) with ``table()``."""
    from pathlib import Path

    page = Path(path)
    text = page.read_text()
    start = text.index("| variable |")
    page.write_text(text[:start] + table().strip() + "\n")


if __name__ == "__main__":  # python -m studio.core.env docs/environment.md
    import sys

    write_page(sys.argv[1])

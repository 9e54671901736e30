"""``studio doctor``: what this machine can do, and how to fix what it cannot.

    for c in run_checks():
        show(c.name, c.status, c.detail, c.hint)   # the CLI and the Doctor panel decide how

Each check is independent and never raises: a failure becomes a ``Check`` with a fix hint.
Heavy imports (torch, tensorrt, the encoders) happen inside the checks. Qt-free.
"""

from __future__ import annotations

import importlib
import logging
import os
import platform
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass

from studio.core import env

log = logging.getLogger(__name__)

OK, WARN, FAIL, INFO = "ok", "warn", "fail", "info"
CUDA_TORCH = "pip install torch --index-url https://download.pytorch.org/whl/cu128"  # a CUDA build of PyTorch


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # ok | warn | fail | info
    detail: str
    hint: str = ""

    def to_json(self) -> dict:
        return asdict(self)


def run_checks(include_gui: bool = True) -> list[Check]:
    """Run every check in order; a check that crashes is reported as failed, never raised."""
    checks: list[Callable[[], Check]] = [
        check_python,
        check_gpu,
        check_cuda,
        check_nvenc,
        check_tensorrt,
        check_weights,
        check_engine_cache,
        check_engine,
        check_data_folder,
        check_voice,
        check_espeak,
        check_bmx,
    ]
    if include_gui:
        checks += [check_qt, check_multimedia, check_audio_output]
    out = []
    for fn in checks:
        try:
            out.append(fn())
        except Exception as exc:  # a doctor must survive a broken environment
            log.debug("doctor check %s crashed", fn.__name__, exc_info=True)
            name = fn.__name__.removeprefix("check_").replace("_", " ")
            out.append(
                Check(name, FAIL, f"the check itself failed: {exc!r}", "report this with `studio doctor --json`")
            )
    return out


def report(include_gui: bool = True) -> dict:
    checks = run_checks(include_gui)
    return {
        "ok": all(c.status != FAIL for c in checks),
        "checks": [c.to_json() for c in checks],
    }


# --------------------------------------------------------------------------------------------
# The checks


def check_python() -> Check:
    from studio import __version__

    return Check(
        "studio",
        INFO,
        f"studio {__version__}, Python {platform.python_version()} on {platform.system()} {platform.machine()}",
    )


def check_gpu() -> Check:
    torch = _try_import("torch")
    if torch is None:
        return Check("GPU", FAIL, "PyTorch is not installed", "pip install torch (a CUDA build for NVIDIA GPUs)")
    if torch.cuda.is_available():
        n = torch.cuda.device_count()
        names = []
        for i in range(n):
            p = torch.cuda.get_device_properties(i)
            names.append(f"{p.name} ({p.total_memory / 2**30:.0f} GiB, sm_{p.major}{p.minor})")
        return Check("GPU", OK, f"{n} CUDA device(s): " + "; ".join(names))
    smi = shutil.which("nvidia-smi")
    if smi:
        return Check(
            "GPU",
            WARN,
            "an NVIDIA driver is present (nvidia-smi) but PyTorch cannot use the GPU",
            f"install a CUDA build of PyTorch: {CUDA_TORCH}",
        )
    return Check(
        "GPU",
        WARN,
        "no CUDA GPU: renders run on the CPU with the classic engine",
        "on a machine with an NVIDIA GPU, install the NVIDIA driver and a CUDA build of PyTorch",
    )


def check_cuda() -> Check:
    torch = _try_import("torch")
    if torch is None:
        return Check("CUDA", FAIL, "PyTorch is not installed", "pip install torch")
    built = torch.version.cuda
    if not built:
        return Check(
            "CUDA",
            WARN,
            f"PyTorch {torch.__version__} is a CPU-only build",
            f"for GPU renders: {CUDA_TORCH}",
        )
    if not torch.cuda.is_available():
        return Check(
            "CUDA",
            WARN,
            f"PyTorch built for CUDA {built}, but no usable device (driver missing or too old)",
            "install or update the NVIDIA driver (nvidia-smi must list the GPU)",
        )
    return Check("CUDA", OK, f"CUDA {built}, PyTorch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}")


def check_nvenc() -> Check:
    try:
        from studio.core.media.writer import probe_nvenc
    except ImportError as exc:
        return Check("NVENC", WARN, f"the encoder module is not available ({exc})", "update Studio")
    ok, reason = probe_nvenc()
    if ok:
        return Check("NVENC", OK, f"an NVENC session opened: {reason}")
    return Check(
        "NVENC",
        WARN,
        f"no NVENC session ({reason}); renders encode with libx264 on the CPU",
        "on an NVIDIA GPU: pip install 'studio[nvidia]' (PyNvVideoCodec) and keep the driver current",
    )


def check_tensorrt() -> Check:
    try:
        trt = importlib.import_module("tensorrt")
    except Exception as exc:  # noqa: BLE001 - ImportError, or OSError when libnvinfer is missing
        from studio.core.engines.runtime_tensorrt import INSTALL  # the engine builder says the same (require_tensorrt)

        return Check("TensorRT", WARN, f"not importable ({_short(exc)}); MuseTalk runs on PyTorch instead", INSTALL)
    return Check("TensorRT", OK, f"TensorRT {getattr(trt, '__version__', '?')} is importable")


def check_engine_cache() -> Check:
    """TensorRT engines for the imported weights on this GPU: valid, stale or missing."""
    try:
        importlib.import_module("tensorrt")
    except Exception:  # noqa: BLE001 - deliberate: any failure here is reported, not fatal
        return Check("engine cache", INFO, "no TensorRT here: MuseTalk runs on PyTorch (CUDA graphs)")
    from studio.core.engines import runtime_tensorrt as rt

    engines = rt.list_engines()
    valid = [e for e in engines if e.get("status") == "valid"]
    stale = [e for e in engines if e.get("status") == "stale"]
    if valid and not stale:
        return Check("engine cache", OK, f"{len(valid)} valid engine(s) in {rt.cache_dir()}")
    detail = f"{len(valid)} valid, {len(stale)} stale engine(s) in {rt.cache_dir()}"
    return Check("engine cache", WARN, detail, "studio engines build (or Build TensorRT engines in the Doctor panel)")


def check_weights() -> Check:
    try:
        from studio.core.engines import weights
    except ImportError as exc:
        return Check("weights", WARN, f"the model store is not available ({exc})", "update Studio")
    from studio.core.errors import StudioError

    try:
        found = weights.list_models()
    except StudioError as exc:
        return Check("weights", FAIL, str(exc), "re-run: studio models import DIR")
    status = weights.availability()
    if not found:
        return Check(
            "weights",
            WARN,
            "no MuseTalk weights imported: the classic engine is used",
            "download the official MuseTalk models/ folder, then run: studio models import DIR",
        )
    names = ", ".join(sorted(found))
    if status.ready:
        return Check("weights", OK, f"imported: {names} ({status.reason})")
    return Check(
        "weights", WARN, f"imported: {names}; {status}", "run: studio models verify, then studio models import DIR"
    )


def check_engine() -> Check:
    from studio.core.engines import auto_engine, engine_status

    status = engine_status()
    lines = "; ".join(f"{k}: {v}" for k, v in status.items())
    if auto_engine(status) == "musetalk":
        return Check("engine", OK, f"auto selects musetalk ({lines})")
    return Check(
        "engine",
        INFO,
        f"auto selects classic because MuseTalk is not ready ({lines})",
        "import MuseTalk weights with `studio models import DIR` to use the MuseTalk engine",
    )


def check_bmx() -> Check:
    """bmx (the BBC's MXF tools): an optional strict RDD9 / AS-11 re-wrap of the MXF deliveries."""
    import shutil
    import subprocess

    tool = shutil.which("bmxtranswrap")
    if not tool:
        return Check(
            "bmx",
            INFO,
            "bmxtranswrap is not installed: the MXF deliveries (XDCAM HD422, AVC-Intra 100) are written by "
            "FFmpeg's muxer; bmx is only needed to re-wrap them where a play-out asks strict RDD9 / AS-11",
            "build bmx from github.com/bbc/bmx and put bmxtranswrap on the PATH (optional)",
        )
    try:
        out = subprocess.run([tool, "-v"], capture_output=True, text=True, timeout=10)
        version = (out.stdout or out.stderr).strip().splitlines()[0] if (out.stdout or out.stderr).strip() else "?"
    except (OSError, subprocess.SubprocessError) as exc:
        return Check("bmx", WARN, f"{tool} does not run ({exc})", "reinstall bmx or take it off the PATH")
    return Check("bmx", OK, f"{tool}: {version} (an optional RDD9 / AS-11 re-wrap of the MXF deliveries)")


def check_data_folder() -> Check:
    from studio.core.env import data_dir

    try:
        path = data_dir()
        probe = path / ".doctor-write-test"
        probe.write_bytes(b"ok")
        probe.unlink()
    except OSError as exc:
        return Check("data folder", FAIL, f"not writable: {exc}", "set STUDIO_HOME to a writable folder")
    free = shutil.disk_usage(path).free / 2**30
    if free < 2:
        return Check(
            "data folder", WARN, f"{path}: only {free:.1f} GiB free", "free some disk space for renders and caches"
        )
    return Check("data folder", OK, f"{path} ({free:.0f} GiB free)")


def check_voice() -> Check:
    """Piper and its joe voice: the natural voice of 'speak this text' (espeak-ng stands in without it)."""
    from studio.core.media import speech

    if speech.piper_ready():
        return Check("voice", OK, f"Piper with {', '.join(v for v in speech.voices() if v != 'espeak')}")
    return Check(
        "voice",
        WARN if shutil.which("espeak-ng") else INFO,
        "Piper is not installed: text is spoken by espeak-ng (a robotic voice)",
        "pip install 'studio[voice]'",
    )


def check_espeak() -> Check:
    exe = shutil.which("espeak-ng")
    if exe:
        return Check("espeak-ng", OK, f"{exe}: 'speak this text' is available")
    return Check(
        "espeak-ng", INFO, "not installed: 'speak this text' is hidden", "sudo apt install espeak-ng (optional)"
    )


def check_qt() -> Check:
    try:
        qtcore = importlib.import_module("PySide6.QtCore")
        importlib.import_module("pyqtgraph")
    except Exception as exc:  # noqa: BLE001 - deliberate: any failure here is reported, not fatal
        return Check("Qt", FAIL, f"the window cannot open ({_short(exc)})", "pip install 'studio[gui]'")
    return Check("Qt", OK, f"PySide6 {qtcore.qVersion()}")


def check_multimedia() -> Check:
    # Qt logs two harmless lines when PipeWire is absent; PulseAudio is used instead.
    env.set_default("QT_LOGGING_RULES", "qt.multimedia.symbolsresolver=false")
    try:
        importlib.import_module("PySide6.QtMultimedia")
    except Exception as exc:  # noqa: BLE001 - deliberate: any failure here is reported, not fatal
        hint = "pip install pyside6-addons"
        if "libpulse" in str(exc):
            hint = "sudo apt install libpulse0"
        return Check("playback", WARN, f"QtMultimedia unavailable ({_short(exc)}); no in-app playback", hint)
    return Check("playback", OK, "QtMultimedia is available for in-app playback")


def audio_output() -> str | None:
    """Where in-app sound would go, or None when this machine has no audio output.

    Qt-free and without opening a device: on Linux, Qt plays through a PulseAudio or PipeWire
    server, so the server's socket is looked for (``PULSE_SERVER``, ``$XDG_RUNTIME_DIR/pulse/native``,
    ``$XDG_RUNTIME_DIR/pipewire-0``, the system-wide PulseAudio socket). Asking Qt itself
    (QMediaDevices) from the GUI can hang while other threads import (Qt logs from its audio
    thread). Other systems always have a default output.
    """
    if platform.system() != "Linux":
        return "the system's default output"
    if env.other("PULSE_SERVER"):
        return f"PulseAudio at {env.other('PULSE_SERVER')}"
    runtime = env.other("XDG_RUNTIME_DIR") or f"/run/user/{os.getuid()}"
    for path, what in (
        (os.path.join(runtime, "pulse", "native"), "PulseAudio"),
        (os.path.join(runtime, "pipewire-0"), "PipeWire"),
        ("/var/run/pulse/native", "PulseAudio (system)"),
        ("/run/pulse/native", "PulseAudio (system)"),
    ):
        if os.path.exists(path):
            return f"{what} ({path})"
    return None


def check_audio_output() -> Check:
    where = audio_output()
    if where:
        return Check("audio output device", OK, f"sound plays through {where}")
    cards = ""
    try:
        with open("/proc/asound/cards", encoding="utf-8") as fh:
            cards = fh.read().strip()
    except OSError:
        pass
    detail = "no PulseAudio or PipeWire server: playback in the app is silent"
    if cards and "no soundcards" not in cards:
        detail += " (a sound card is present)"
    return Check(
        "audio output device",
        WARN,
        detail,
        "start PulseAudio or PipeWire (e.g. `pulseaudio --start`), or connect a sound device; "
        "rendering is not affected",
    )


def _try_import(name: str):
    try:
        return importlib.import_module(name)
    except Exception:  # noqa: BLE001 - deliberate: any failure here is reported, not fatal
        return None


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:160]

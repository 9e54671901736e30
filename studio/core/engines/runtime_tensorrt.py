"""TensorRT for MuseTalk: what names, checks and keeps an engine (the contract the build and the
runner share), the engine cache, and the tool's entry points.

    list_engines()                                   # every cached engine: valid / stale / unchecked, why
    tensorrt_build.build(["unet", "taesd"], "fp16", load_profile("1,32,64"))   # export + build + validate
    tensorrt_runner.engine_functions(paths, "taesd", torch.float16, device, (torch_unet, torch_decode))

Exported graphs (``tensorrt_build``): the UNet with the folded t = 0 embedding (the positional
encoding is already in the audio tokens); TAESD ``decode(lat)`` and SD-VAE ``decode(lat /
scaling_factor)``, both to an image ``[B,3,256,256]`` in [-1,1]. The batch axis is dynamic; fp16
precision exports an fp16 graph (TensorRT 11 takes precision from the ONNX; TensorRT 10 also gets
``BuilderFlag.FP16``). FP8 quantizes the UNet's linear layers with NVIDIA ModelOpt and is accepted
only when it stays within ``FP8_BOUND`` of PyTorch fp16 (``compare``, a pure function).

Engines are named from everything that invalidates them (``EngineKey``) and carry a JSON sidecar.
Every engine is checked against PyTorch when built and again when loaded (``tensorrt_runner``); one
that disagrees is rejected with the numbers (peers shipped dynamic-shape engines that drew grey
faces). ``import tensorrt`` happens only inside functions. The TensorRT calls follow the documented
Python API (10.x and 11.x) and cannot run on the development machines (no GPU, no TensorRT);
everything up to the build is tested there.
"""

from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from studio.core.engines import weights
from studio.core.errors import StudioError

log = logging.getLogger(__name__)

COMPONENTS = ("unet", "taesd", "sd-vae")
PRECISIONS = ("fp32", "fp16", "fp8")
EXPORT_FORMAT = 1  # bump when the exported graphs change: it is part of every engine name
OPSET = 17
EXTERNAL_DATA_BYTES = 1 << 30  # protobuf stops at 2 GB: larger graphs keep weights beside the .onnx
DEFAULT_PROFILE = (1, 32, 64)
INSTALL = (
    "install TensorRT on a machine with an NVIDIA GPU: "
    "pip install 'studio[tensorrt]' --extra-index-url https://pypi.nvidia.com"
)
ENGINES_DIR = Path(__file__).resolve().parents[3] / "engines"  # the dev checkout's engines/ folder


# --------------------------------------------------------------------------------------------
# Profiles, targets and cache keys


@dataclass(frozen=True)
class Profile:
    """The optimization profile's batch sizes."""

    min: int = DEFAULT_PROFILE[0]
    opt: int = DEFAULT_PROFILE[1]
    max: int = DEFAULT_PROFILE[2]

    def __post_init__(self):
        if not 1 <= self.min <= self.opt <= self.max:
            raise StudioError(f"profile {self.min},{self.opt},{self.max}: need 1 <= min <= opt <= max, e.g. 1,32,64")

    @property
    def label(self) -> str:
        return f"b{self.min}-{self.opt}-{self.max}"


def load_profile(spec: str | None = None, path: Path | None = None) -> Profile:
    """``"1,32,64"``, a profile name from ``engines/profiles.json``, or None for its default."""
    if spec and re.fullmatch(r"\s*\d+\s*,\s*\d+\s*,\s*\d+\s*", spec):
        return Profile(*(int(v) for v in spec.split(",")))
    path = path or ENGINES_DIR / "profiles.json"
    table = {}
    if path.is_file():
        try:
            table = json.loads(path.read_text("utf-8"))["profiles"]
        except (OSError, ValueError, KeyError) as exc:
            raise StudioError(f"{path}: unreadable engine profiles ({exc}); fix the JSON or delete the file") from None
    name = spec or "default"
    if name not in table:
        if spec is None:
            return Profile()
        raise StudioError(
            f"unknown engine profile {spec!r}; give min,opt,max (e.g. 1,32,64) or one of: "
            f"{', '.join(sorted(table)) or 'none defined'}"
        )
    p = table[name]
    return Profile(int(p["min"]), int(p["opt"]), int(p["max"]))


@dataclass(frozen=True)
class Target:
    """What a serialized engine is tied to: the GPU model, its compute capability, TensorRT."""

    gpu: str
    capability: str  # "8.9"
    tensorrt: str


def current_target(device=None) -> Target:
    """This machine's target; raises ``StudioError`` (why + what to install) without TensorRT or CUDA."""
    trt = require_tensorrt()
    import torch

    if not torch.cuda.is_available():
        raise StudioError(
            f"TensorRT {trt.__version__} is installed but PyTorch sees no CUDA GPU; "
            "install a CUDA build of PyTorch and the NVIDIA driver"
        )
    dev = torch.device(device or "cuda")
    major, minor = torch.cuda.get_device_capability(dev)
    return Target(torch.cuda.get_device_name(dev), f"{major}.{minor}", str(trt.__version__))


def require_tensorrt():
    """The ``tensorrt`` module, or ``StudioError`` with one line saying why and what to install."""
    try:
        import tensorrt
    except Exception as exc:  # noqa: BLE001 - ImportError, or OSError when libnvinfer is missing
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise StudioError(f"TensorRT cannot be imported ({first}); {INSTALL}") from None
    return tensorrt


@dataclass(frozen=True)
class EngineKey:
    """Everything that invalidates an engine; ``name`` is its file name in the cache."""

    component: str  # unet | taesd | sd-vae
    model: str  # the store component (musetalkV15, sd-vae, ...)
    model_sha256: str
    precision: str
    profile: Profile
    gpu: str
    capability: str
    tensorrt: str
    export: int = EXPORT_FORMAT

    @property
    def name(self) -> str:
        return (
            f"{self.component}-{self.model}-{self.model_sha256[:16]}-{self.precision}-{self.profile.label}"
            f"-{self.target_label}-x{self.export}.plan"
        )

    @property
    def target_label(self) -> str:
        """``nvidia-h200-sm90-trt10.13.0``: also names the timing cache (shared by all engines)."""
        gpu = re.sub(r"[^a-z0-9]+", "-", self.gpu.lower()).strip("-")
        return f"{gpu}-sm{self.capability.replace('.', '')}-trt{self.tensorrt}"

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> EngineKey:
        return cls(**{**d, "profile": Profile(**d["profile"])})


def engine_key(component: str, precision: str, profile: Profile, target: Target, paths=None) -> EngineKey:
    model, sha = model_identity(component, paths or weights.resolve())
    return EngineKey(component, model, sha, precision, profile, target.gpu, target.capability, target.tensorrt)


def model_identity(component: str, paths) -> tuple[str, str]:
    """(store component name, SHA-256 over its weight and config files from the manifest)."""
    import hashlib

    folder = {"unet": paths.unet, "taesd": paths.taesd, "sd-vae": paths.vae}[component]
    if folder is None:
        raise StudioError(f"the {component} weights are not imported; run studio models import DIR first")
    name = paths.manifest_name(folder)
    rec = paths.manifest.get("components", {}).get(name)
    if rec:
        files = sorted((f, info["sha256"]) for f, info in rec["files"].items())
    else:  # an official folder outside the store: path, size and mtime
        from studio.core.store.fsutil import quick_file_key

        files = [(p.name, quick_file_key(p)) for p in sorted(folder.iterdir()) if p.is_file()]
    return name, hashlib.sha256(json.dumps(files).encode()).hexdigest()


def cache_dir() -> Path:
    """``$STUDIO_ENGINE_CACHE``, else ``engines/cache`` in a dev checkout, else ``data_dir()/engines``."""
    from studio.core import env
    from studio.core.env import sub_dir

    cache = env.get("STUDIO_ENGINE_CACHE")
    if cache:
        path = Path(cache).expanduser()
    elif ENGINES_DIR.is_dir() and (ENGINES_DIR.parent / "pyproject.toml").is_file():
        path = ENGINES_DIR / "cache"
    else:
        return sub_dir("engines")
    path.mkdir(parents=True, exist_ok=True)
    return path


# --------------------------------------------------------------------------------------------
# Acceptance: pure functions on arrays


@dataclass(frozen=True)
class Bound:
    """How close a candidate must stay to its reference (peak-to-peak of the reference as peak)."""

    min_psnr: float
    max_abs: float  # as a fraction of the reference's peak-to-peak range
    std_ratio: tuple[float, float] = (0.8, 1.25)  # a collapsed (grey) output has a tiny spread


# fp16 TensorRT vs fp16 PyTorch differ by rounding (> 50 dB); grey faces fail the spread at once
LOAD_BOUND = Bound(min_psnr=35.0, max_abs=0.1)
FP8_BOUND = Bound(min_psnr=30.0, max_abs=0.25)  # FP8 UNet vs PyTorch fp16: visibly the same face


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str
    psnr: float
    max_abs: float
    std_ratio: float


def compare(reference, candidate, bound: Bound) -> Verdict:
    """Accept ``candidate`` as a stand-in for ``reference`` (same shape) within ``bound``."""
    ref = np.asarray(reference, np.float64)
    out = np.asarray(candidate, np.float64)
    if ref.shape != out.shape:
        return Verdict(False, f"shape {out.shape} differs from the reference {ref.shape}", 0.0, np.inf, 0.0)
    if not np.isfinite(out).all():
        return Verdict(False, f"{int((~np.isfinite(out)).sum())} non-finite values (NaN/Inf)", 0.0, np.inf, 0.0)
    peak = float(ref.max() - ref.min()) or 1.0
    err = out - ref
    mse = float(np.mean(err**2))
    psnr = float("inf") if mse == 0 else 10 * np.log10(peak**2 / mse)
    max_abs = float(np.abs(err).max()) / peak
    ratio = float(out.std() / ref.std()) if ref.std() > 0 else 1.0
    facts = f"PSNR {psnr:.1f} dB, max error {max_abs:.3f} of range, spread ratio {ratio:.2f}"
    if not bound.std_ratio[0] <= ratio <= bound.std_ratio[1]:
        return Verdict(
            False,
            f"output spread is {ratio:.2f}x the reference's (a washed-out or grey result); {facts}",
            psnr,
            max_abs,
            ratio,
        )
    if psnr < bound.min_psnr:
        return Verdict(False, f"PSNR {psnr:.1f} dB is below {bound.min_psnr} dB; {facts}", psnr, max_abs, ratio)
    if max_abs > bound.max_abs:
        return Verdict(
            False, f"max error {max_abs:.3f} of range exceeds {bound.max_abs}; {facts}", psnr, max_abs, ratio
        )
    return Verdict(True, facts, psnr, max_abs, ratio)


# --------------------------------------------------------------------------------------------
# ONNX export


# --------------------------------------------------------------------------------------------
# Build, list, clean


def list_engines(target: Target | None = None, paths=None) -> list[dict]:
    """Every plan in the cache with ``status`` valid / stale / unchecked and the reasons.

    ``target`` defaults to this machine's (when TensorRT and a GPU are here); without one the GPU
    and TensorRT fields cannot be checked and otherwise-fine engines are ``unchecked``.
    """
    cache, note = cache_dir(), ""
    if target is None:
        try:
            target = current_target()
        except StudioError as exc:
            note = str(exc)
    paths = paths or weights.resolve()
    rows = []
    for plan in sorted(cache.glob("*.plan")):
        side = plan.with_suffix(".json")
        row = {"file": plan.name, "size": plan.stat().st_size, "status": "stale", "reasons": []}
        try:
            meta = json.loads(side.read_text("utf-8"))
            key = EngineKey.from_json(meta["key"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            row["reasons"] = [f"no readable sidecar {side.name} ({type(exc).__name__})"]
            rows.append(row)
            continue
        row.update(
            component=key.component,
            precision=key.precision,
            profile=key.profile.label,
            gpu=key.gpu,
            capability=key.capability,
            tensorrt=key.tensorrt,
            built=meta.get("built"),
        )
        reasons = sidecar_problems(plan, key, meta)
        try:
            current = model_identity(key.component, paths)
            if current != (key.model, key.model_sha256):
                reasons.append(
                    f"the {key.component} weights changed since the build ({key.model} "
                    f"{key.model_sha256[:12]} -> {current[0]} {current[1][:12]})"
                )
        except StudioError:
            reasons.append(f"the {key.component} weights are no longer imported")
        if target is not None:
            for field, label in (("gpu", "GPU"), ("capability", "compute capability"), ("tensorrt", "TensorRT")):
                if getattr(key, field) != getattr(target, field):
                    reasons.append(
                        f"built for {label} {getattr(key, field)}, this machine has {getattr(target, field)}"
                    )
        row["reasons"] = reasons
        row["status"] = "stale" if reasons else ("valid" if target is not None else "unchecked")
        if not reasons and target is None:
            row["reasons"] = [f"GPU and TensorRT version not checked here: {note}"]
        rows.append(row)
    return rows


def clean(everything: bool = False, target: Target | None = None) -> list[str]:
    """Delete stale plans (and their sidecars, leftover ONNX); ``everything`` empties the cache."""
    import shutil

    cache = cache_dir()
    doomed = [cache / r["file"] for r in list_engines(target) if everything or r["status"] == "stale"]
    removed = []
    for plan in doomed:
        for p in (plan, plan.with_suffix(".json")):
            if p.exists():
                p.unlink()
                removed.append(p.name)
    if everything:
        for p in cache.glob("timing-*.cache"):
            p.unlink()
            removed.append(p.name)
    if (cache / "onnx").is_dir():  # exports are intermediates: never needed after a build
        removed += [p.name for p in (cache / "onnx").iterdir()]
        shutil.rmtree(cache / "onnx")
    return removed


# --------------------------------------------------------------------------------------------
# Runner and the MuseTalk hook


# --------------------------------------------------------------------------------------------
# Helpers


def valid_plan(component: str, precision: str, target: Target, paths) -> tuple[Path, EngineKey] | None:
    cache = cache_dir()
    for plan in cache.glob(f"{component}-*-{precision}-*.plan"):
        try:
            key = EngineKey.from_json(json.loads(plan.with_suffix(".json").read_text("utf-8"))["key"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        want = engine_key(component, precision, key.profile, target, paths)
        if key == want and not sidecar_problems(plan, key):
            return plan, key
    return None


def sidecar_problems(plan: Path, key: EngineKey, meta: dict | None = None) -> list[str]:
    reasons = []
    if meta is None:
        try:
            meta = json.loads(plan.with_suffix(".json").read_text("utf-8"))
        except (OSError, ValueError):
            return ["no readable sidecar"]
    if key.name != plan.name:
        reasons.append(f"the file name does not match its sidecar's key ({key.name})")
    if key.export != EXPORT_FORMAT:
        reasons.append(f"exported by an older Studio (format {key.export}, now {EXPORT_FORMAT})")
    if meta.get("plan_bytes") != plan.stat().st_size:
        reasons.append(
            f"the plan is {plan.stat().st_size} bytes, the sidecar says {meta.get('plan_bytes')} (truncated?)"
        )
    return reasons


def write_sidecar(plan: Path, key: EngineKey, **extra) -> None:
    from studio.core.store.fsutil import atomic_write_bytes

    meta = {
        "key": key.to_json(),
        "plan_bytes": plan.stat().st_size,
        "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "opset": OPSET,
        **extra,
    }
    atomic_write_bytes(plan.with_suffix(".json"), json.dumps(meta, indent=1, sort_keys=True).encode())

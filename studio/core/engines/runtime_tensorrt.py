"""TensorRT for MuseTalk: ONNX export, engine build, the engine cache, and a runner on torch tensors.

    export_onnx("unet", weights.resolve(), out)      # latents [B,8,32,32] + audio [B,50,W] -> [B,4,32,32]
    build(["unet", "taesd"], "fp16", load_profile("1,32,64"))   # export + build + validate + cache
    list_engines()                                   # every cached engine: valid / stale / unchecked, why
    fns, why = engine_functions(paths, "taesd", torch.float16, device, (torch_unet, torch_decode))

Exported graphs: the UNet with the folded t = 0 embedding (the positional encoding is already in
the audio tokens); TAESD ``decode(lat)`` and SD-VAE ``decode(lat / scaling_factor)``, both to an
image ``[B,3,256,256]`` in [-1,1]. The batch axis is dynamic; fp16 precision exports an fp16
graph (TensorRT 11 takes precision from the ONNX; TensorRT 10 also gets ``BuilderFlag.FP16``).
FP8 quantizes the UNet's linear layers with NVIDIA ModelOpt and is accepted only when it stays
within ``FP8_BOUND`` of PyTorch fp16 (``compare``, a pure function).

Engines are named from everything that invalidates them (``EngineKey``) and carry a JSON sidecar.
Every engine is checked against PyTorch when built and again when loaded; one that disagrees is
rejected with the numbers (peers shipped dynamic-shape engines that drew grey faces).
``import tensorrt`` happens only inside functions. The TensorRT calls follow the documented
Python API (10.x and 11.x) and cannot run on the development machines (no GPU, no TensorRT);
everything up to the build is tested there. Over 400 lines: export, cache and runner share the
key and the bounds, and splitting them would scatter one contract over three files.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from studio.core.constants import FACE_SIZE
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


def reference_module(component: str, paths, device="cpu", dtype=None):
    """A torch module whose ``forward`` is exactly the graph exported for ``component``."""
    import torch

    from studio.core.engines import runtime_torch as rt

    dtype = dtype or torch.float32
    if component == "unet":
        unet = weights.load_module("unet", paths.unet, paths.weight_file(paths.unet), device, dtype)
        rt.fold_time_embedding(unet)
        layers = 4  # whisper-tiny; the tokens are 10 steps x (layers + 1) hidden states
        if paths.whisper is not None:
            layers = int(weights.read_config(paths.whisper / "config.json").get("encoder_layers", layers))
        return _graphs()["unet"](unet, 10 * (layers + 1)).eval()
    if component == "taesd":
        net = weights.load_module("taesd", paths.taesd, paths.weight_file(paths.taesd), device, dtype)
        return _graphs()["decoder"](net, 1.0).eval()
    if component == "sd-vae":
        net = weights.load_module("vae", paths.vae, paths.weight_file(paths.vae), device, dtype)
        return _graphs()["decoder"](net, float(net.config.scaling_factor)).eval()
    raise StudioError(f"unknown engine component {component!r}; use one of {', '.join(COMPONENTS)}")


def example_inputs(component: str, module, batch: int = 2, seed: int = 0) -> dict:
    """Seeded inputs of the graph's shapes (latents ~ N(0,1), the scale of MuseTalk's latents)."""
    import torch

    p = next(module.parameters())
    g = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=g).to(p.device, p.dtype)

    side = FACE_SIZE // 8  # 32x32 latents of 256x256 faces (the UNet config's sample_size is 64)
    if component == "unet":
        c = module.unet.config
        return {
            "latents": randn(batch, c.in_channels, side, side),
            "audio": randn(batch, module.tokens, c.cross_attention_dim),
        }
    return {"latents": randn(batch, module.net.config.latent_channels, side, side)}


def export_onnx(
    component: str,
    paths,
    out: Path,
    precision: str = "fp32",
    device="cpu",
    external_data_bytes: int = EXTERNAL_DATA_BYTES,
) -> Path:
    """Write ``component`` to ``out`` (.onnx) with a dynamic batch axis; fp16 weights for fp16/fp8."""
    import torch

    dtype = torch.float32 if precision == "fp32" else torch.float16
    module = reference_module(component, paths, device, dtype)
    return export_module(module, example_inputs(component, module), out, external_data_bytes)


def export_module(module, inputs: dict, out: Path, external_data_bytes: int = EXTERNAL_DATA_BYTES) -> Path:
    """``torch.onnx.export`` (TorchScript exporter, opset 17) with dim 0 of every input/output dynamic.

    Graphs whose weights exceed ``external_data_bytes`` keep them in one ``<out>.data`` file beside
    the .onnx (the real fp32 UNet is 3.4 GB; protobuf stops at 2 GB).
    """
    import tempfile
    import warnings

    import onnx
    import torch

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    names = list(inputs)
    axes = {n: {0: "batch"} for n in [*names, "output"]}
    weight_bytes = sum(t.numel() * t.element_size() for t in module.state_dict().values())
    with (
        tempfile.TemporaryDirectory(dir=out.parent, prefix=".export-") as tmp,
        torch.inference_mode(),
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("ignore")  # tracer warnings about Python control flow on shapes
        raw = Path(tmp) / "graph.onnx"
        torch.onnx.export(
            module,
            tuple(inputs.values()),
            str(raw),
            dynamo=False,
            opset_version=OPSET,
            input_names=names,
            output_names=["output"],
            dynamic_axes=axes,
            do_constant_folding=True,
        )
        graph = onnx.load(str(raw))  # pulls in external tensors the exporter may have split out
        data = out.with_name(out.name + ".data")
        data.unlink(missing_ok=True)
        if weight_bytes > external_data_bytes:
            onnx.save_model(
                graph,
                str(out),
                save_as_external_data=True,
                all_tensors_to_one_file=True,
                location=data.name,
                size_threshold=1024,
            )
        else:
            onnx.save_model(graph, str(out))
    log.info("exported %s (%.1f MB of weights) -> %s", type(module).__name__, weight_bytes / 1e6, out)
    return out


# --------------------------------------------------------------------------------------------
# Build, list, clean


def build(
    components=("unet", "taesd"),
    precision: str = "fp16",
    profile: Profile | None = None,
    force: bool = False,
    progress=None,
) -> list[dict]:
    """Export, build, validate and cache engines; one ``{component, status, file, reason}`` each.

    ``fp8`` applies to the UNet (ModelOpt, linears only); the decoders are convolutional and stay fp16.
    """
    import torch

    if precision not in PRECISIONS:
        raise StudioError(f"unknown precision {precision!r}; use fp16, fp8 or fp32")
    target = current_target()  # refuses first: no TensorRT or no GPU
    if precision == "fp8":
        _require_modelopt()
    profile = profile or load_profile()
    paths, cache, say = weights.resolve(), cache_dir(), progress or (lambda msg: None)
    results = []
    for comp in components:
        prec = "fp16" if precision == "fp8" and comp != "unet" else precision
        key = engine_key(comp, prec, profile, target, paths)
        plan = cache / key.name
        if plan.is_file() and not force and _sidecar_problems(plan, key) == []:
            results.append({"component": comp, "status": "cached", "file": str(plan), "reason": "already built"})
            continue
        dtype = torch.float32 if prec == "fp32" else torch.float16
        module = reference_module(comp, paths, "cuda", dtype)
        onnx_path = cache / "onnx" / key.name.replace(".plan", ".onnx")
        say(f"{comp}: exporting ONNX ({prec})")
        if prec == "fp8":
            _quantize_fp8(module, example_inputs(comp, module, batch=8, seed=1))
        export_module(module, example_inputs(comp, module), onnx_path)
        say(f"{comp}: building the TensorRT engine (minutes; timing cache in {cache})")
        t0 = time.monotonic()
        build_plan(onnx_path, plan, profile, prec, cache / f"timing-{key.target_label}.cache")
        seconds = time.monotonic() - t0
        say(f"{comp}: validating against PyTorch")
        if prec == "fp8":  # accepted only within FP8_BOUND of PyTorch fp16
            module = reference_module(comp, paths, "cuda", torch.float16)
        verdict = validate(EngineRunner(plan), module, comp, FP8_BOUND if prec == "fp8" else LOAD_BOUND)
        for p in (onnx_path, onnx_path.with_name(onnx_path.name + ".data")):
            p.unlink(missing_ok=True)
        if not verdict.ok:
            plan.unlink(missing_ok=True)
            results.append({"component": comp, "status": "rejected", "file": str(plan), "reason": verdict.reason})
            continue
        _write_sidecar(plan, key, seconds=round(seconds, 1), validation=verdict.reason)
        results.append({"component": comp, "status": "built", "file": str(plan), "reason": verdict.reason})
        torch.cuda.empty_cache()
    return results


def build_plan(onnx_path: Path, plan: Path, profile: Profile, precision: str, timing_cache: Path) -> None:
    """Parse the ONNX and serialize an engine with one optimization profile (TensorRT 10 or 11)."""
    from studio.core.store.fsutil import atomic_write_bytes

    trt = require_tensorrt()
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    major = int(str(trt.__version__).split(".")[0])
    # TensorRT 11 has no precision flags: networks are strongly typed (precision from the ONNX).
    # TensorRT 10 builds fp16 with BuilderFlag.FP16, and FP8 Q/DQ graphs strongly typed.
    strong = major >= 11 or precision == "fp8"
    flag = getattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED", None)
    network = builder.create_network((1 << int(flag)) if strong and flag is not None else 0)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):  # finds <onnx>.data beside it
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise StudioError(f"TensorRT could not parse {onnx_path.name}: {errors}")
    config = builder.create_builder_config()
    if not strong and precision == "fp16":
        config.set_flag(trt.BuilderFlag.FP16)
    opt = builder.create_optimization_profile()
    for i in range(network.num_inputs):
        inp = network.get_input(i)
        rest = tuple(inp.shape)[1:]
        opt.set_shape(inp.name, (profile.min, *rest), (profile.opt, *rest), (profile.max, *rest))
    config.add_optimization_profile(opt)
    cache = config.create_timing_cache(timing_cache.read_bytes() if timing_cache.is_file() else b"")
    config.set_timing_cache(cache, ignore_mismatch=False)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise StudioError(f"TensorRT failed to build {plan.name}; run with -v and see the log for the builder's errors")
    atomic_write_bytes(plan, bytes(serialized))
    atomic_write_bytes(timing_cache, bytes(config.get_timing_cache().serialize()))


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
        reasons = _sidecar_problems(plan, key, meta)
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


class EngineRunner:
    """Runs one serialized engine on torch CUDA tensors, asynchronously on the current torch stream.

    ``runner(*inputs) -> output``: inputs are cast to the engine's I/O types and made contiguous,
    their addresses bound with ``set_tensor_address``; batches above the profile's max run in pieces.
    """

    def __init__(self, plan: Path, device="cuda"):
        import torch

        trt = require_tensorrt()
        self.plan = Path(plan)
        self.device = torch.device(device)
        self.engine = trt.Runtime(trt.Logger(trt.Logger.WARNING)).deserialize_cuda_engine(self.plan.read_bytes())
        if self.engine is None:
            raise StudioError(
                f"{self.plan.name}: TensorRT could not load this engine; "
                "run studio engines clean, then studio engines build"
            )
        self.context = self.engine.create_execution_context()
        names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        self.inputs = [n for n in names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        self.outputs = [n for n in names if n not in self.inputs]
        self.dtypes = {n: _torch_dtype(trt, self.engine.get_tensor_dtype(n)) for n in names}
        self.shapes = {n: tuple(self.engine.get_tensor_shape(n)) for n in self.inputs}
        lo, _, hi = self.engine.get_tensor_profile_shape(self.inputs[0], 0)
        self.min_batch, self.max_batch = int(lo[0]), int(hi[0])

    def __call__(self, *inputs):
        import torch

        n = int(inputs[0].shape[0])
        if n > self.max_batch:
            return torch.cat([self(*(x[i : i + self.max_batch] for x in inputs)) for i in range(0, n, self.max_batch)])
        if n < self.min_batch:  # a profile that starts above 1: pad with the last row, drop it after
            pad = [torch.cat([x, x[-1:].expand(self.min_batch - n, *x.shape[1:])]) for x in inputs]
            return self(*pad)[:n]
        keep = []  # alive until enqueued; the caching allocator orders reuse on this stream
        for name, x in zip(self.inputs, inputs, strict=True):
            x = x.to(self.device, self.dtypes[name]).contiguous()
            keep.append(x)
            self.context.set_input_shape(name, tuple(x.shape))
            self.context.set_tensor_address(name, x.data_ptr())
        outs = []
        for name in self.outputs:
            y = torch.empty(tuple(self.context.get_tensor_shape(name)), dtype=self.dtypes[name], device=self.device)
            self.context.set_tensor_address(name, y.data_ptr())
            outs.append(y)
        if not self.context.execute_async_v3(torch.cuda.current_stream(self.device).cuda_stream):
            raise RuntimeError(f"TensorRT execution failed for {self.plan.name}")
        return outs[0] if len(outs) == 1 else outs


def validate(runner, reference, component: str, bound: Bound, batch: int = 3) -> Verdict:
    """Run the engine and its PyTorch reference module on the same seeded inputs and compare."""
    import torch

    inputs = example_inputs(component, reference, batch=batch, seed=7)
    with torch.inference_mode():
        ref = reference(*inputs.values()).float().cpu().numpy()
        out = runner(*inputs.values()).float().cpu().numpy()
    return compare(ref, out, bound)


def engine_functions(paths, decoder: str, dtype, device, reference, required: bool = False):
    """``((unet_fn, decode_fn), reason)`` when valid engines for these weights load and agree with
    ``reference`` = (torch_unet(lat, audio), torch_decode(pred)); else ``(None, reason)`` (or
    ``StudioError`` when ``required``). The reason is one line for ``describe()``.
    """
    import torch

    try:
        if torch.device(device).type != "cuda":
            raise StudioError(f"TensorRT needs a CUDA GPU (the device is {device})")
        if dtype == torch.bfloat16:
            raise StudioError("no TensorRT engines are built for bf16; use fp16")
        target = current_target(device)
        unet_precs = ("fp32",) if dtype == torch.float32 else ("fp8", "fp16")
        dec_prec = "fp32" if dtype == torch.float32 else "fp16"
        unet_plan = next((p for p in (_valid_plan("unet", pr, target, paths) for pr in unet_precs) if p), None)
        dec_plan = _valid_plan(decoder, dec_prec, target, paths)
        if unet_plan is None or dec_plan is None:
            raise StudioError(
                f"no valid TensorRT engines for these weights on {target.gpu} "
                f"({'UNet' if unet_plan is None else decoder}); run studio engines build"
            )
        unet_rt, dec_rt = EngineRunner(unet_plan[0], device), EngineRunner(dec_plan[0], device)
        unet_prec = unet_plan[1].precision
        verdict = _check_pipeline(
            (unet_rt, dec_rt), reference, unet_rt.shapes, device, dtype, FP8_BOUND if unet_prec == "fp8" else LOAD_BOUND
        )
        if not verdict.ok:
            raise StudioError(f"TensorRT engines rejected, they disagree with PyTorch: {verdict.reason}")
    except Exception as exc:  # auto mode never fails a render over TensorRT: PyTorch takes over
        if required:
            raise
        if not isinstance(exc, StudioError):
            log.warning("TensorRT runtime failed to start; using PyTorch", exc_info=True)
            return None, f"PyTorch runtime: TensorRT failed to start ({type(exc).__name__}: {exc})"
        return None, f"PyTorch runtime: {exc}"
    return (unet_rt, dec_rt), (
        f"TensorRT {target.tensorrt}: {unet_prec} UNet + {decoder} engines, checked against PyTorch ({verdict.reason})"
    )


def runtime_note(device=None, runtime: str = "auto") -> str:
    """Cheap one line for auto-selection: which MuseTalk runtime is expected here and why."""
    import importlib.util

    import torch

    if runtime == "torch":
        return "PyTorch runtime (chosen explicitly)"
    if not torch.cuda.is_available() or (device and torch.device(device).type != "cuda"):
        return "PyTorch runtime (TensorRT needs a CUDA GPU)"
    if importlib.util.find_spec("tensorrt") is None:
        return "PyTorch runtime (TensorRT is not installed)"
    plans = list(cache_dir().glob("*.plan"))
    if not plans:
        return "PyTorch runtime (no TensorRT engines built: studio engines build)"
    return f"TensorRT runtime when its engines validate ({len(plans)} cached), else PyTorch"


# --------------------------------------------------------------------------------------------
# Helpers


@functools.cache
def _graphs() -> dict:
    """The two exported graphs as ``torch.nn.Module`` classes (defined on first use: torch is lazy)."""
    import torch

    class UNetGraph(torch.nn.Module):
        """``(latents, audio) -> unet(latents, t=0, audio)``; the time embedding is folded."""

        def __init__(self, unet, tokens: int):
            super().__init__()
            self.unet, self.tokens = unet, tokens
            self.register_buffer("t", torch.zeros((), dtype=torch.long), persistent=False)

        def forward(self, latents, audio):
            return self.unet(latents, self.t, encoder_hidden_states=audio, return_dict=False)[0]

    class DecoderGraph(torch.nn.Module):
        """``latents -> decode(latents / divide)`` in [-1, 1] (TAESD: divide 1; SD-VAE: 0.18215)."""

        def __init__(self, net, divide: float):
            super().__init__()
            self.net, self.divide = net, float(divide)

        def forward(self, latents):
            return self.net.decode(latents / self.divide, return_dict=False)[0]

    return {"unet": UNetGraph, "decoder": DecoderGraph}


def _check_pipeline(runners, reference, shapes, device, dtype, bound: Bound) -> Verdict:
    """Both engines in a row vs the PyTorch UNet + decoder, on seeded inputs, as images."""
    import torch

    g = torch.Generator().manual_seed(7)
    lat = torch.randn(3, *shapes["latents"][1:], generator=g).to(device, dtype)
    audio = torch.randn(3, *shapes["audio"][1:], generator=g).to(device, dtype)
    with torch.inference_mode():
        ref = reference[1](reference[0](lat, audio)).float().cpu().numpy()
        out = runners[1](runners[0](lat, audio)).float().cpu().numpy()
    return compare(ref, out, bound)


def _valid_plan(component: str, precision: str, target: Target, paths) -> tuple[Path, EngineKey] | None:
    cache = cache_dir()
    for plan in cache.glob(f"{component}-*-{precision}-*.plan"):
        try:
            key = EngineKey.from_json(json.loads(plan.with_suffix(".json").read_text("utf-8"))["key"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        want = engine_key(component, precision, key.profile, target, paths)
        if key == want and not _sidecar_problems(plan, key):
            return plan, key
    return None


def _sidecar_problems(plan: Path, key: EngineKey, meta: dict | None = None) -> list[str]:
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


def _write_sidecar(plan: Path, key: EngineKey, **extra) -> None:
    from studio.core.store.fsutil import atomic_write_bytes

    meta = {
        "key": key.to_json(),
        "plan_bytes": plan.stat().st_size,
        "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "opset": OPSET,
        **extra,
    }
    atomic_write_bytes(plan.with_suffix(".json"), json.dumps(meta, indent=1, sort_keys=True).encode())


def _require_modelopt():
    try:
        import modelopt.torch.quantization as mtq
    except Exception as exc:  # noqa: BLE001 - not installed, or a broken install: one sentence
        raise StudioError(
            f"fp8 needs NVIDIA ModelOpt ({type(exc).__name__}: {exc}); "
            "pip install nvidia-modelopt[torch], or build --precision fp16"
        ) from None
    return mtq


def _quantize_fp8(module, calib: dict) -> None:
    """FP8 (E4M3) Q/DQ on the UNet's linear layers only, calibrated on ``calib`` (ModelOpt)."""
    import copy

    import torch

    mtq = _require_modelopt()
    linear = {n for n, m in module.named_modules() if isinstance(m, torch.nn.Linear)}  # before conversion
    with torch.no_grad():
        mtq.quantize(module, copy.deepcopy(mtq.FP8_DEFAULT_CFG), forward_loop=lambda m: m(*calib.values()))
    # convolutions stay fp16: disable every quantizer whose owner is not a Linear
    mtq.disable_quantizer(module, lambda q: q.rsplit(".", 1)[0] not in linear)


def _torch_dtype(trt, dt):
    import torch

    table = {
        "FLOAT": torch.float32,
        "HALF": torch.float16,
        "BF16": torch.bfloat16,
        "INT32": torch.int32,
        "INT64": torch.int64,
        "BOOL": torch.bool,
        "INT8": torch.int8,
        "UINT8": torch.uint8,
    }
    for name, tdt in table.items():
        if getattr(trt.DataType, name, None) == dt:
            return tdt
    raise StudioError(f"TensorRT tensor type {dt} is not supported by the runner")

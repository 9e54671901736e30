"""TensorRT for MuseTalk, the build: the PyTorch reference modules, their ONNX export (the graphs
below), the engine build with one optimization profile, FP8 quantization (NVIDIA ModelOpt) and the
check of a new engine against PyTorch before it is cached (``runtime_tensorrt``'s keys, bounds and
sidecars).

    export_onnx("unet", weights.resolve(), out)      # latents [B,8,32,32] + audio [B,50,W] -> [B,4,32,32]
    build(["unet", "taesd"], "fp16", load_profile("1,32,64"))   # export + build + validate + cache
"""

from __future__ import annotations

import functools
import logging
import time
from pathlib import Path

from studio.core.constants import FACE_SIZE
from studio.core.engines import weights
from studio.core.engines.runtime_tensorrt import (
    COMPONENTS,
    EXTERNAL_DATA_BYTES,
    FP8_BOUND,
    LOAD_BOUND,
    OPSET,
    PRECISIONS,
    Bound,
    Profile,
    Verdict,
    cache_dir,
    compare,
    current_target,
    engine_key,
    load_profile,
    require_tensorrt,
    sidecar_problems,
    write_sidecar,
)
from studio.core.engines.tensorrt_runner import EngineRunner
from studio.core.errors import StudioError

log = logging.getLogger(__name__)


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
        return graphs()["unet"](unet, 10 * (layers + 1)).eval()
    if component == "taesd":
        net = weights.load_module("taesd", paths.taesd, paths.weight_file(paths.taesd), device, dtype)
        return graphs()["decoder"](net, 1.0).eval()
    if component == "sd-vae":
        net = weights.load_module("vae", paths.vae, paths.weight_file(paths.vae), device, dtype)
        return graphs()["decoder"](net, float(net.config.scaling_factor)).eval()
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
        require_modelopt()
    profile = profile or load_profile()
    paths, cache, say = weights.resolve(), cache_dir(), progress or (lambda msg: None)
    results = []
    for comp in components:
        prec = "fp16" if precision == "fp8" and comp != "unet" else precision
        key = engine_key(comp, prec, profile, target, paths)
        plan = cache / key.name
        if plan.is_file() and not force and sidecar_problems(plan, key) == []:
            results.append({"component": comp, "status": "cached", "file": str(plan), "reason": "already built"})
            continue
        dtype = torch.float32 if prec == "fp32" else torch.float16
        module = reference_module(comp, paths, "cuda", dtype)
        onnx_path = cache / "onnx" / key.name.replace(".plan", ".onnx")
        say(f"{comp}: exporting ONNX ({prec})")
        if prec == "fp8":
            quantize_fp8(module, example_inputs(comp, module, batch=8, seed=1))
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
        write_sidecar(plan, key, seconds=round(seconds, 1), validation=verdict.reason)
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


def validate(runner, reference, component: str, bound: Bound, batch: int = 3) -> Verdict:
    """Run the engine and its PyTorch reference module on the same seeded inputs and compare."""
    import torch

    inputs = example_inputs(component, reference, batch=batch, seed=7)
    with torch.inference_mode():
        ref = reference(*inputs.values()).float().cpu().numpy()
        out = runner(*inputs.values()).float().cpu().numpy()
    return compare(ref, out, bound)


@functools.cache
def graphs() -> dict:
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


def require_modelopt():
    try:
        import modelopt.torch.quantization as mtq
    except Exception as exc:  # noqa: BLE001 - not installed, or a broken install: one sentence
        raise StudioError(
            f"fp8 needs NVIDIA ModelOpt ({type(exc).__name__}: {exc}); "
            "pip install nvidia-modelopt[torch], or build --precision fp16"
        ) from None
    return mtq


def quantize_fp8(module, calib: dict) -> None:
    """FP8 (E4M3) Q/DQ on the UNet's linear layers only, calibrated on ``calib`` (ModelOpt)."""
    import copy

    import torch

    mtq = require_modelopt()
    linear = {n for n, m in module.named_modules() if isinstance(m, torch.nn.Linear)}  # before conversion
    with torch.no_grad():
        mtq.quantize(module, copy.deepcopy(mtq.FP8_DEFAULT_CFG), forward_loop=lambda m: m(*calib.values()))
    # convolutions stay fp16: disable every quantizer whose owner is not a Linear
    mtq.disable_quantizer(module, lambda q: q.rsplit(".", 1)[0] not in linear)

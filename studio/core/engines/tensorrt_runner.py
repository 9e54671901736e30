"""TensorRT for MuseTalk, at render time: ``EngineRunner`` runs a cached engine on torch tensors,
``engine_functions`` loads the UNet and decoder engines for the weights in use and accepts them only
when they agree with PyTorch (``runtime_tensorrt.LOAD_BOUND``), ``runtime_note`` says cheaply which
runtime to expect.

    fns, why = engine_functions(paths, "taesd", torch.float16, device, (torch_unet, torch_decode))
"""

from __future__ import annotations

import logging
from pathlib import Path

from studio.core.engines.runtime_tensorrt import (
    FP8_BOUND,
    LOAD_BOUND,
    Bound,
    Verdict,
    cache_dir,
    compare,
    current_target,
    require_tensorrt,
    valid_plan,
)
from studio.core.errors import StudioError

log = logging.getLogger(__name__)


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
        self.dtypes = {n: torch_dtype(trt, self.engine.get_tensor_dtype(n)) for n in names}
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
        unet_plan = next((p for p in (valid_plan("unet", pr, target, paths) for pr in unet_precs) if p), None)
        dec_plan = valid_plan(decoder, dec_prec, target, paths)
        if unet_plan is None or dec_plan is None:
            raise StudioError(
                f"no valid TensorRT engines for these weights on {target.gpu} "
                f"({'UNet' if unet_plan is None else decoder}); run studio engines build"
            )
        unet_rt, dec_rt = EngineRunner(unet_plan[0], device), EngineRunner(dec_plan[0], device)
        unet_prec = unet_plan[1].precision
        verdict = check_pipeline(
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


def check_pipeline(runners, reference, shapes, device, dtype, bound: Bound) -> Verdict:
    """Both engines in a row vs the PyTorch UNet + decoder, on seeded inputs, as images."""
    import torch

    g = torch.Generator().manual_seed(7)
    lat = torch.randn(3, *shapes["latents"][1:], generator=g).to(device, dtype)
    audio = torch.randn(3, *shapes["audio"][1:], generator=g).to(device, dtype)
    with torch.inference_mode():
        ref = reference[1](reference[0](lat, audio)).float().cpu().numpy()
        out = runners[1](runners[0](lat, audio)).float().cpu().numpy()
    return compare(ref, out, bound)


def torch_dtype(trt, dt):
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

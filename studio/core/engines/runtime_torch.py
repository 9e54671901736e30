"""PyTorch executors for the MuseTalk networks: device and precision choice, the folded t = 0 time
embedding, CUDA graphs per batch-size bucket, optional ``torch.compile``, and a VRAM budget.

    device = resolve_device(None)                    # cuda when available, else cpu
    dtype = resolve_dtype(device, "auto")            # fp32 on CPU, fp16 on CUDA
    fold_time_embedding(unet)                        # t = 0 is a constant: compute its embedding once
    run = GraphRunner(fn, device)                    # run(latents, audio) -> fn's output, graphed on CUDA
    batch = vram_batch(per_frame_bytes, device)      # the largest bucket that fits the budget

Everything CUDA-specific is reached only when the device is CUDA; on CPU these are plain calls.
This module imports torch at the top: only the MuseTalk engine imports it, when it loads.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

import torch

log = logging.getLogger(__name__)

BUCKETS = (1, 2, 4, 8, 16, 32, 64)
PRECISIONS = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
CPU_BATCH = 4


def resolve_device(device=None):
    import torch

    if device is None or str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        from studio.core.errors import StudioError

        raise StudioError(f"device {device} was asked for but PyTorch sees no CUDA GPU; use --device cpu")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        from studio.core.errors import StudioError

        raise StudioError(
            f"device {device} was asked for but this machine has {torch.cuda.device_count()} CUDA GPU(s) (cuda:0 ...)"
        )
    return dev


def limit_cpu_threads() -> int:
    """Cap PyTorch's CPU threads for rendering (once per process; OMP_NUM_THREADS or
    STUDIO_CPU_THREADS set by the user win): a quarter of the cores, at least one.

    OpenMP threads spin while they wait for work, taking cores from the encoders (x264 threads or
    processes) and from anything else running. The classic demo render (`studio demo`, 706 frames)
    on the 2-core CPU machine: quiet, 14.3-15.1 s with one thread against 16.3-16.8 s with two;
    beside another busy process, 17.3 s against 37.5 s.
    """
    import os

    global _CPU_THREADS
    with _CPU_THREADS_LOCK:  # once, before any thread of a render runs CPU work
        if _CPU_THREADS is None:
            from studio.core import env

            if env.other("OMP_NUM_THREADS"):
                _CPU_THREADS = torch.get_num_threads()
            else:
                n = env.get_int("STUDIO_CPU_THREADS") or max(1, (os.cpu_count() or 1) // 4)
                torch.set_num_threads(n)
                _CPU_THREADS = n
                log.info("PyTorch CPU threads: %d", n)
    return _CPU_THREADS


_CPU_THREADS: int | None = None
_CPU_THREADS_LOCK = threading.Lock()


def on_device(device):
    """A context making ``device`` the current CUDA device (streams, graphs and new tensors of
    this thread go there); a no-op for the CPU and for plain "cuda"."""
    import contextlib

    import torch

    device = torch.device(device)
    if device.type == "cuda" and device.index is not None:
        return torch.cuda.device(device)
    return contextlib.nullcontext()


def resolve_dtype(device, precision: str = "auto"):
    """fp32 on CPU (half precision there is slower and less exact); fp16 by default on CUDA."""
    import torch

    if precision not in ("auto", *PRECISIONS):
        from studio.core.errors import StudioError

        raise StudioError(f"unknown precision {precision!r}; use auto, fp32, fp16 or bf16")
    if torch.device(device).type != "cuda":
        if precision not in ("auto", "fp32"):
            log.warning("precision %s is for CUDA; running fp32 on %s", precision, device)
        return torch.float32
    if precision == "auto":
        return torch.float16  # what the official realtime loop runs (spec §1.7)
    return getattr(torch, PRECISIONS[precision])


def bucket_for(n: int, buckets=BUCKETS) -> int:
    """The smallest bucket >= n (n <= the largest bucket)."""
    return next(b for b in buckets if b >= n)


def fold_time_embedding(unet) -> None:
    """Replace ``unet.time_embedding`` by its constant output at t = 0.

    MuseTalk always runs timestep 0, so ``time_embedding(time_proj(0))`` is one fixed vector
    ([1, 1280] for the real UNet). It is computed once here, in float32, with the loaded weights,
    and stored as a buffer of a module that returns it expanded to the batch; the UNet is then
    called as usual with ``timestep=0`` (its sinusoid still runs but is ignored; it is a handful of
    element-wise ops). Call after the weights are loaded; ``unet.state_dict()`` no longer holds
    the two time-embedding linears afterwards.
    """
    import torch

    if isinstance(unet.time_embedding, ConstantEmbedding):
        return
    module = unet.time_embedding
    p = next(module.parameters())
    dtype, device = p.dtype, p.device  # read first: .float() below converts p in place
    with torch.no_grad():
        t_emb = unet.time_proj(torch.zeros(1, device=device)).to(torch.float32)
        emb = module.float()(t_emb)
    unet.time_embedding = ConstantEmbedding(emb.to(dtype))


class ConstantEmbedding(torch.nn.Module):
    """``forward(sample, condition=None) -> emb.expand(batch, -1)``: a folded time embedding."""

    def __init__(self, emb):
        super().__init__()
        self.register_buffer("emb", emb.detach().clone(), persistent=False)

    def forward(self, sample, condition=None):
        return self.emb.to(sample.dtype).expand(sample.shape[0], -1)


def maybe_compile(module, enabled: bool):
    """``torch.compile`` in its default mode (never max-autotune: it tunes for > 10 minutes)."""
    if not enabled:
        return module
    import torch

    log.info("torch.compile (default mode) on %s; the first batch of each size compiles", type(module).__name__)
    return torch.compile(module)


def vram_batch(per_frame_bytes: int, device, fixed_bytes: int = 0, fraction: float = 0.6, buckets=BUCKETS) -> int:
    """The largest bucket whose working memory fits ``fraction`` of the free VRAM; CPU: small."""
    import torch

    device = torch.device(device)
    if device.type != "cuda":
        return CPU_BATCH
    free, _total = torch.cuda.mem_get_info(device)
    budget = free * fraction - fixed_bytes
    fits = [b for b in buckets if b * per_frame_bytes <= budget]
    batch = fits[-1] if fits else buckets[0]
    log.info("VRAM budget: %.1f GiB free -> batch %d", free / 2**30, batch)
    return batch


@dataclass
class _Graph:
    graph: object
    inputs: list
    output: object


@dataclass
class GraphRunner:
    """Calls ``fn(*inputs)``; on CUDA through one captured CUDA graph per batch bucket (captured
    on first use, after ``capture_after`` eager uses, or by ``warm_up``).

    A batch is copied into the bucket's static inputs (rows past the batch keep earlier data,
    which only costs the padded rows' compute), the graph is replayed, and the first B rows of
    the static output are returned: a view that the next call overwrites, so consume or copy it
    first. Batches larger than the largest bucket run in bucket-sized pieces. If a capture fails
    (an op that cannot be captured), that bucket runs eagerly and a warning is logged once.
    All buckets share one memory pool.
    """

    fn: Any
    device: object
    enabled: bool = True
    buckets: tuple = BUCKETS
    #: a bucket runs eagerly this many times before it is captured (``warm_up`` captures at once).
    #: 0, the default: on the H200 a capture on the second use moved the last short batch's
    #: capture into the next render (1.07 s against 0.10 s of engine time for 672 frames)
    capture_after: int = 0
    _graphs: dict = field(default_factory=dict)
    _uses: dict = field(default_factory=dict)
    _pool: Any = None
    _stream: Any = None

    def __post_init__(self):
        import torch

        self.enabled = bool(self.enabled) and torch.device(self.device).type == "cuda"

    def captured(self) -> dict[int, bool]:
        """Each batch size tried so far: True when it replays a captured graph, False when its
        capture failed (it runs eagerly)."""
        return {b: g is not False for b, g in self._graphs.items()}

    def __call__(self, *inputs):
        import torch

        n = inputs[0].shape[0]
        top = self.buckets[-1]
        if n > top:
            parts = [self(*(x[i : i + top] for x in inputs)).clone() for i in range(0, n, top)]
            return torch.cat(parts)
        if not self.enabled:
            return self.fn(*inputs)
        b = bucket_for(n, self.buckets)
        g = self._graphs.get(b)
        if g is None:
            self._uses[b] = self._uses.get(b, 0) + 1
            if self._uses[b] <= self.capture_after:
                return self.fn(*inputs)
            g = self._graphs[b] = self._capture(b, inputs)
        if g is False:
            return self.fn(*inputs)
        for static, x in zip(g.inputs, inputs):
            static[:n].copy_(x)
        g.graph.replay()
        return g.output[:n]

    def warm_up(self, *example):
        """Capture (and run once) the graph for the example's batch bucket."""
        b = bucket_for(min(example[0].shape[0], self.buckets[-1]), self.buckets)
        self._uses[b] = max(self._uses.get(b, 0), self.capture_after)
        return self(*example)

    def _capture(self, b: int, inputs):
        import torch

        try:
            dev = inputs[0].device
            reps = torch.arange(b, device=dev) % inputs[0].shape[0]
            static = [_empty_like(x, b).copy_(x[reps]) for x in inputs]  # real data in every row
            if self._pool is None:
                self._pool = torch.cuda.graph_pool_handle()
                # streams of this runner's own GPU (torch.cuda.graph's shared default capture
                # stream belongs to whichever GPU captured first)
                self._stream = torch.cuda.Stream(device=dev)
            side = torch.cuda.Stream(device=dev)
            side.wait_stream(torch.cuda.current_stream(dev))
            with torch.cuda.stream(side):
                for _ in range(2):  # warm-up: allocator, cuDNN/cuBLAS plans, compile
                    self.fn(*static)
            torch.cuda.current_stream(dev).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            # thread_local: CUDA work on other threads (compositing, decoding) may go on meanwhile
            with torch.cuda.graph(graph, pool=self._pool, stream=self._stream, capture_error_mode="thread_local"):
                out = self.fn(*static)
            log.debug("captured a CUDA graph for batch %d", b)
            return _Graph(graph, static, out)
        except Exception as exc:  # noqa: BLE001 - depends on the GPU stack: run it eagerly
            log.warning("CUDA graph capture failed for batch %d (%s); running it eagerly", b, exc)
            torch.cuda.synchronize()
            return False


def _empty_like(x, rows: int):
    """An uninitialised ``[rows, *x.shape[1:]]`` tensor in ``x``'s dtype, device and layout."""
    fmt = torch.contiguous_format
    if x.dim() == 4 and not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last):
        fmt = torch.channels_last
    return torch.empty((rows, *x.shape[1:]), dtype=x.dtype, device=x.device, memory_format=fmt)

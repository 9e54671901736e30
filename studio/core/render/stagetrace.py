"""Where a render's time goes, span by span: a JSON-lines trace for the benchmarks (off by default).

    STUDIO_STAGE_TRACE=/tmp/trace.jsonl studio serve ...     # every render of the process traced
    tests/benchmarks/trace_service.py /tmp/trace.jsonl        # per job, per thread, the GPU's busy time

``Renderer._stage`` already sums each stage's milliseconds; with the variable set each span is also
written as one line, ``{"k": "cpu", "s": stage, "t0": epoch s, "t1": ..., "th": thread, "r": render}``
(``r``: the renderer's id, ``out``: its file in the ``run`` line), so a server's concurrent jobs can be
laid out on one time line, thread by thread. On CUDA the GPU's own time of each batch is traced too:
CUDA events recorded around the engine call and the compositing (no synchronisation: they are read
once the render has finished) and placed on the host clock by a reference event that was recorded on
an idle device, so the union of the batches' GPU spans over a burst of jobs is the fraction of the time
the GPU was busy with them. Written here because a profiler (torch.profiler, Nsight) does not know a
job from a batch and costs more than the work it would time.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

_EPOCH = time.time() - time.perf_counter()  # perf_counter -> epoch seconds


def epoch(perf: float) -> float:
    return _EPOCH + perf


class Tracer:
    """Appends spans to one file; thread-safe; GPU spans are read at ``flush``."""

    def __init__(self, path: str):
        self.path = path
        self._lock = threading.Lock()
        self._fh = open(path, "a", buffering=1)
        self._ref: dict[int, tuple[Any, float]] = {}  # device index -> (reference event, its host time)
        self._pending: list[tuple[dict, Any, Any]] = []  # (line, start mark, end mark)

    def close(self) -> None:
        """Close the file (the process's tracer stays open until the process ends)."""
        with self._lock:
            self._fh.close()

    def write(self, **line: Any) -> None:
        text = json.dumps(line, separators=(",", ":"))
        with self._lock:
            self._fh.write(text + "\n")

    def cpu(self, stage: str, t0: float, t1: float, render: int, **kw: Any) -> None:
        """A span of host time (``perf_counter`` values) on this thread."""
        self.write(
            k="cpu", s=stage, t0=round(epoch(t0), 6), t1=round(epoch(t1), 6), th=threading.current_thread().name,
            r=render, **kw,
        )  # fmt: skip

    def mark(self, device) -> Any:
        """A CUDA event recorded now on the current stream of ``device`` (None off CUDA)."""
        if getattr(device, "type", str(device)) != "cuda":
            return None
        import torch

        key = self._reference()
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        return key, e

    def gpu(self, stage: str, start: Any, end: Any, render: int, **kw: Any) -> None:
        """A span of GPU time between two ``mark`` events: its times are read at ``flush``."""
        if start is None or end is None:
            return
        line = dict(k="gpu", s=stage, r=render, th=threading.current_thread().name, **kw)
        with self._lock:
            self._pending.append((line, start, end))

    def flush(self) -> None:
        """Write the GPU spans whose events have completed (the others wait for a later flush)."""
        with self._lock:
            pending, self._pending = self._pending, []
        keep = []
        for line, start, end in pending:
            if not end[1].query():
                keep.append((line, start, end))
                continue
            ref, t_ref = self._ref[start[0]]
            line.update(
                t0=round(t_ref + ref.elapsed_time(start[1]) / 1e3, 6),
                t1=round(t_ref + ref.elapsed_time(end[1]) / 1e3, 6),
            )
            self.write(**line)
        with self._lock:
            self._pending[:0] = keep

    def _reference(self) -> int:
        """The current device's reference event (recorded once, on an idle device); its index."""
        import torch

        key = torch.cuda.current_device()
        if key not in self._ref:
            torch.cuda.synchronize()  # once per device: the device idle, so the event runs now
            ref = torch.cuda.Event(enable_timing=True)
            ref.record()
            ref.synchronize()
            self._ref[key] = (ref, time.time())
        return key


_tracer: Tracer | None = None
_checked = False
_init = threading.Lock()


def tracer() -> Tracer | None:
    """The process's tracer when ``STUDIO_STAGE_TRACE`` names a file, else None (the default)."""
    global _tracer, _checked
    if _checked:
        return _tracer
    with _init:
        if not _checked:
            from studio.core import env

            path = env.get("STUDIO_STAGE_TRACE")
            _tracer = Tracer(path) if path else None
            _checked = True
    return _tracer


def reset() -> None:
    """Forget the process's tracer (closing its file): the next ``tracer()`` reads
    ``STUDIO_STAGE_TRACE`` again (the tests trace one render each)."""
    global _tracer, _checked
    with _init:
        if _tracer is not None:
            _tracer.close()
        _tracer, _checked = None, False

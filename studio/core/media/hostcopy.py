"""CUDA frames to the encoders through pinned host memory, off the render thread (the path for
writers whose encoders cannot take GPU frames directly: one libx264 in process, NVENC).

    sink = CopyThread(writer, total_frames)
    sink.put(indices, frames)      # RGB [B,H,W,3] or NV12 [B,H*3//2,W] CUDA tensors
    sink.join()                    # everything handed to the writer; sink.stop() on errors
"""

from __future__ import annotations

import contextlib
import threading


class CopyThread:
    """GPU frames -> NV12 on the GPU -> pinned host slots -> encoder, off the render thread.

    The render thread converts a batch to NV12 on the GPU, records an event and goes on with the
    next batch. This thread waits for the event, copies each frame into a free slot of a pinned
    host pool on its own stream (pageable copies are ~30x slower here, and fresh host memory
    costs page faults) and hands the slots to the writer, which gives each slot back once its
    encoder has taken the frame. The pool bounds the frames in flight (backpressure).
    """

    POOL_BYTES = 2_500_000_000  # pinned host memory for frames waiting to be encoded

    def __init__(self, writer, total: int, depth: int = 3):
        import queue

        import torch

        self.writer = writer
        self.q: queue.Queue = queue.Queue(maxsize=depth)
        self.error: BaseException | None = None
        shape = (writer.enc_height * 3 // 2, writer.enc_width)
        slots = max(64, min(total, self.POOL_BYTES // (shape[0] * shape[1])))
        self.pool = _pinned_pool(shape, slots)
        self.pool_np = self.pool.numpy()
        self.free: queue.Queue = queue.Queue()
        for i in range(len(self.pool)):
            self.free.put(i)
        self.stream = torch.cuda.Stream()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="render-copy", daemon=True)
        self.thread.start()

    def put(self, indices, frames) -> None:
        import queue

        import torch

        from studio.core.media.pixels import pad_even, rgb_to_nv12

        self._raise()
        nv12 = frames if frames.ndim == 3 else rgb_to_nv12(pad_even(frames))
        event = torch.cuda.Event()
        event.record()
        while True:
            self._raise()
            try:
                self.q.put((indices, nv12, event), timeout=0.2)
                return
            except queue.Full:
                continue

    def join(self) -> None:
        self.q.put(None)
        self.thread.join()
        self._raise()

    def stop(self) -> None:
        self.stopping.set()
        if self.thread.is_alive():
            with contextlib.suppress(Exception):
                while True:
                    self.q.get_nowait()
            with contextlib.suppress(Exception):
                self.q.put_nowait(None)
            self.thread.join(timeout=30)

    def _raise(self) -> None:
        if self.error is not None:
            raise self.error

    def _slot(self) -> int:
        import queue

        while True:
            self.writer.raise_if_failed()
            if self.stopping.is_set():
                raise RuntimeError("render stopped")
            try:
                return self.free.get(timeout=0.2)
            except queue.Empty:
                continue

    def _loop(self) -> None:
        import torch

        from studio.core.media.x264_pool import wait_blocking

        try:
            while (item := self.q.get()) is not None:
                indices, nv12, event = item
                ids = [self._slot() for _ in range(len(nv12))]
                with torch.cuda.stream(self.stream):
                    self.stream.wait_event(event)
                    for k, i in enumerate(ids):
                        self.pool[i].copy_(nv12[k], non_blocking=True)
                wait_blocking(self.stream)
                del nv12  # safe: the copies that read it have finished
                self.writer.write(
                    [self.pool_np[i] for i in ids], indices=indices, release=lambda k, ids=ids: self.free.put(ids[k])
                )
        except BaseException as exc:  # noqa: BLE001 - re-raised in the render thread
            self.error = exc


_PINNED: dict = {}


def _pinned_pool(shape, slots: int):
    """A pinned host tensor ``[slots, *shape]`` kept for later renders (allocation is slow)."""
    import torch

    key = tuple(shape)
    pool = _PINNED.get(key)
    if pool is None or len(pool) < slots:
        _PINNED.clear()
        pool = torch.empty((slots, *shape), dtype=torch.uint8, pin_memory=True)
        pool.fill_(0)  # touch every page now, not during the render
        _PINNED[key] = pool
    return pool

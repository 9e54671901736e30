"""Small device helpers shared by the core (lazy torch)."""

from __future__ import annotations

import numpy as np


def to_device(array, device, dtype=None):
    """A numpy array as a torch tensor on ``device`` without stalling the GPU stream.

    A copy from pageable host memory makes the host wait until the GPU has finished everything
    queued before it; a copy from pinned memory with ``non_blocking`` does not, so the render
    loop can queue the next batch while the GPU works on this one.
    """
    import torch

    t = torch.from_numpy(np.ascontiguousarray(array))
    if dtype is not None and t.dtype != dtype:
        t = t.to(dtype)
    if torch.device(device).type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t

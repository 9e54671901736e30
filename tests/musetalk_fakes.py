"""Fake official MuseTalk ``models/`` folders for tests: random weights, official names and formats.

Real-size UNets are 3.4 GB, so the folders hold small configs of the same classes; the store
reads each architecture from the folder's own config. The real configs (spec §1) live in
``studio.core.engines.random_models`` for key/shape checks on ``torch.device("meta")``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from studio.core.engines import random_models as rm
from studio.core.engines.random_models import (  # noqa: F401  (re-exported for the tests)
    MUSETALK_UNET_CONFIG,
    SD_VAE_CONFIG,
    TAESD_CONFIG,
    TAESD_TINY,
    UNET_TINY,
    VAE_TINY,
    WHISPER_TINY,
    WHISPER_TINY_CONFIG,
    WIDTH,
)


def write_official_models(
    root: Path, v15: bool = True, v10: bool = False, vae_folder: str = "sd-vae", seed: int = 0
) -> Path:
    return rm.write_official_models(root, v15, v10, vae_folder, seed, tiny=True)


def write_official_and_taesd(root: Path, v10: bool = False) -> tuple[Path, Path]:
    """A fake official models/ folder under ``root`` plus ``root/taesd``: (models, taesd)."""
    folder = write_official_models(root, v10=v10)
    write_taesd(root / "taesd")
    return folder, root / "taesd"


def write_unet(folder: Path, weights: str = "unet.pth", config: dict | None = None, seed: int = 0) -> Path:
    return rm.write_unet(folder, weights, config or UNET_TINY, seed)


def write_vae(folder: Path, seed: int = 0, config: dict | None = None) -> Path:
    return rm.write_vae(folder, seed, config or VAE_TINY)


def write_whisper(folder: Path, seed: int = 0, config: dict | None = None) -> Path:
    return rm.write_whisper(folder, seed, config or WHISPER_TINY)


def write_taesd(folder: Path, seed: int = 0) -> Path:
    return rm.write_taesd(folder, seed, TAESD_TINY)


class FakeAvatar:
    """The avatar contract the engine needs: ``crops`` [N,256,256,3] uint8 RGB, ``N``, ``engine_dir``."""

    def __init__(self, root: Path, n: int = 3, seed: int = 0):
        rng = np.random.default_rng(seed)
        yy, xx = np.mgrid[0:256, 0:256]
        base = np.stack([xx, yy, (xx + yy) // 2], -1).astype(np.float32)
        self.crops = np.stack(
            [np.clip(base + rng.normal(0, 20, base.shape), 0, 255).astype(np.uint8) for _ in range(n)]
        )
        self.N = n
        self.root = Path(root)

    def engine_dir(self, key: str) -> Path:
        p = self.root / "engines" / key
        p.mkdir(parents=True, exist_ok=True)
        return p

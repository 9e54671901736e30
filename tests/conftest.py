"""Shared fixtures: an isolated data folder per test and real audio files made in the test."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


def _patient_httpx() -> None:
    """httpx's module-level calls (``httpx.get(url)``...) wait up to 60 s here unless the test gives a
    timeout: httpx's own default of 5 s is a bet on speed (a server building /openapi.json on a loaded
    2-core machine took longer, and the test failed with ReadTimeout). A guard against a hang only; a
    test that expects a timeout passes its own."""
    try:
        import httpx
    except ImportError:
        return
    for name in ("request", "stream", "get", "options", "head", "post", "put", "patch", "delete"):
        call = getattr(httpx, name)

        @functools.wraps(call)
        def patient(*args, _call=call, **kwargs):
            kwargs.setdefault("timeout", 60)
            return _call(*args, **kwargs)

        setattr(httpx, name, patient)


_patient_httpx()

ROOT = Path(__file__).resolve().parent.parent
RESOURCES = ROOT / "resources"
DEMO_AUDIO = RESOURCES / "demo" / "voiceover.flac"
DEMO_AVATAR = RESOURCES / "demo" / "astronaut.png"


@pytest.fixture(autouse=True)
def studio_home(tmp_path_factory, monkeypatch) -> Path:
    home = tmp_path_factory.mktemp("studio_home")
    monkeypatch.setenv("STUDIO_HOME", str(home))
    return home


def tone(seconds: float, rate: int, freq: float = 220.0, amp: float = 0.3) -> np.ndarray:
    t = np.arange(int(round(seconds * rate))) / rate
    return (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def speechlike(seconds: float, rate: int, seed: int = 0) -> np.ndarray:
    """A voiced buzz with a syllable-rate envelope: loud enough to be speech everywhere."""
    rng = np.random.default_rng(seed)
    n = int(round(seconds * rate))
    t = np.arange(n) / rate
    carrier = np.sin(2 * np.pi * 140 * t) + 0.5 * np.sin(2 * np.pi * 280 * t) + 0.1 * rng.standard_normal(n)
    env = 0.6 + 0.4 * np.abs(np.sin(2 * np.pi * 4 * t))
    return (0.2 * carrier * env).astype(np.float32)


@pytest.fixture
def tone_silence_noise(tmp_path) -> tuple[Path, list[tuple[float, float]]]:
    """16-bit 16 kHz WAV: 1 s tone, 1 s silence, 1 s noise, 0.5 s silence, 0.5 s tone.

    Returns the path and the silent spans in seconds.
    """
    import soundfile as sf

    rate = 16_000
    rng = np.random.default_rng(1)
    parts = [
        tone(1.0, rate),
        np.zeros(rate, np.float32),
        (0.2 * rng.standard_normal(rate)).astype(np.float32),
        np.zeros(rate // 2, np.float32),
        tone(0.5, rate, 330.0),
    ]
    path = tmp_path / "tsn.wav"
    sf.write(path, np.concatenate(parts), rate, subtype="PCM_16")
    return path, [(1.0, 2.0), (3.0, 3.5)]


def prepare_demo_avatar(home: Path, name: str = "astro"):
    """The demo photo prepared into the data folder ``home`` (for module-scoped fixtures)."""
    from studio.core.avatars import library as avatar_mod

    old = os.environ.get("STUDIO_HOME")
    os.environ["STUDIO_HOME"] = str(home)
    try:
        return avatar_mod.prepare(name, DEMO_AVATAR)
    finally:
        if old is None:
            os.environ.pop("STUDIO_HOME", None)
        else:
            os.environ["STUDIO_HOME"] = old


def speech_pause_speech(path: Path, first: float, pause: float, second: float, rate: int = 16_000) -> Path:
    """A 16-bit WAV: speech-like sound, a silent pause, speech again (seconds each)."""
    import soundfile as sf

    x = np.concatenate(
        [speechlike(first, rate, 1), np.zeros(int(pause * rate), np.float32), speechlike(second, rate, 2)]
    )
    sf.write(path, x, rate, subtype="PCM_16")
    return path


@pytest.fixture(scope="module")
def one_torch_thread():
    """One intra-op thread for a module's renders: on a shared 2-core machine torch's thread pool is
    ~8x slower here (modules ask for it with ``pytest.mark.usefixtures("one_torch_thread")``)."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


SLOW_LIST = Path(__file__).resolve().parent / "slow.txt"


def pytest_collection_modifyitems(config, items) -> None:
    """Mark ``slow`` the tests ``tests/slow.txt`` names (node ids or their prefixes: a module, a test
    with all its parameters), as measured by ``./dev test``'s durations: ``./dev test --fast`` leaves them out."""
    if not SLOW_LIST.exists():
        return
    prefixes = tuple(
        line.split("#", 1)[0].strip() for line in SLOW_LIST.read_text().splitlines() if line.split("#", 1)[0].strip()
    )
    if not prefixes:
        return
    for item in items:
        if item.nodeid.startswith(prefixes):
            item.add_marker(pytest.mark.slow)

"""Helpers for the window tests (pytest-qt, offscreen): a window that closes itself, demo loading."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import DEMO_AUDIO, DEMO_AVATAR

pytest.importorskip("pytestqt")


@pytest.fixture
def window(qtbot):
    from studio.ui.app import create_app
    from studio.ui.main_window import MainWindow

    create_app([])
    w = MainWindow()
    qtbot.addWidget(w)  # closed at teardown: the worker thread stops, settings are saved
    w.show()
    qtbot.waitExposed(w)
    yield w
    w._close_confirmed = True  # a render still running at teardown: close without asking


def load_demo(window, qtbot, audio=DEMO_AUDIO, avatar=DEMO_AVATAR):
    """Import the demo avatar and a voice-over through the window, and wait until both are shown."""
    with qtbot.waitSignal(window.avatarLoaded, timeout=90_000):
        window.load_avatar(str(avatar), "astronaut")
    with qtbot.waitSignal(window.analysisReady, timeout=30_000):
        window.load_script(str(audio))
    return window


def clip(tmp_path, seconds: float, name: str = "clip.wav"):
    """The first ``seconds`` of the demo voice-over as a WAV (real speech with a pause)."""
    import soundfile as sf

    x, rate = sf.read(DEMO_AUDIO, dtype="float32")
    path = tmp_path / name
    sf.write(path, x[: int(seconds * rate)], rate)
    return path


def decode(path):
    """(video frames, audio seconds, first frame RGB) of an MP4, decoded with PyAV."""
    import av

    with av.open(str(path)) as c:
        frames = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
    with av.open(str(path)) as c:
        audio = sum(f.samples for f in c.decode(audio=0)) / c.streams.audio[0].rate
    return len(frames), audio, np.asarray(frames[0]) if frames else None

"""Helpers for the window tests (pytest-qt, offscreen): a window that closes itself, demo loading,
a library of prepared avatars.

Waits follow events (``waitSignal``, ``waitUntil``) with generous timeouts: the suite runs on busy
two-core machines where a background import can take half a minute; nothing waits for a fixed time
as synchronisation.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import DEMO_AUDIO, DEMO_AVATAR

pytest.importorskip("pytestqt")

#: a generous timeout (ms) for work on background threads (imports, analysis, preparation, renders)
SLOW = 240_000
#: for a reaction on the GUI thread (a click, a key, a timer)
QUICK = 30_000


def focus_window(window, qtbot) -> None:
    """Make ``window`` the active window (window-wide keys reach it) and wait until it is."""
    window.raise_()
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=QUICK)


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
    w.close_confirmed = True  # a render still running at teardown: close without asking


def load_demo(window, qtbot, audio=DEMO_AUDIO, avatar=DEMO_AVATAR):
    """Import the demo avatar and a voice-over through the window, and wait until both are shown."""
    with qtbot.waitSignal(window.avatarLoaded, timeout=SLOW):
        window.load_avatar(str(avatar), "astronaut")
    with qtbot.waitSignal(window.analysisReady, timeout=SLOW):
        window.load_script(str(audio))
    return window


@pytest.fixture(scope="session")
def prepared_avatars(tmp_path_factory) -> Path:
    """The demo photo prepared once as avatars "anna" and "bob" (a library folder to copy)."""
    from conftest import prepare_demo_avatar

    home = tmp_path_factory.mktemp("prepared")
    for name in ("anna", "bob"):
        prepare_demo_avatar(home, name)
    return home / "avatars"


@pytest.fixture
def library_window(qtbot, studio_home, prepared_avatars):
    """A window whose library already holds the avatars "anna" and "bob" (copied, not prepared)."""
    shutil.copytree(prepared_avatars, Path(studio_home) / "avatars", dirs_exist_ok=True)
    from studio.ui.app import create_app
    from studio.ui.main_window import MainWindow

    create_app([])
    w = MainWindow()
    qtbot.addWidget(w)
    w.show()
    qtbot.waitExposed(w)
    yield w
    w.close_confirmed = True


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

"""The render ``studio check``'s tests measure, made once per test module that imports these fixtures
(``from check_render import astro, home, render, voice, work``): 10 s of the demo avatar speaking the
first 10 s of the demo voice-over, rendered by the classic engine on the CPU."""

from __future__ import annotations

import check_cases as cc
import pytest
from conftest import DEMO_AUDIO, prepare_demo_avatar

SECONDS = 10.0


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    return tmp_path_factory.mktemp("check_home")


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("check_work")


@pytest.fixture(scope="module")
def astro(home):
    return prepare_demo_avatar(home, "astro")


@pytest.fixture(scope="module")
def voice(work):
    """(the samples at 16 kHz, the WAV file)."""
    from studio.core.media.audio import load

    samples = load(DEMO_AUDIO).samples[: int(SECONDS * 16_000)]
    return samples, cc.write_wav(work / "voice.wav", samples)


@pytest.fixture(scope="module")
def render(work, astro, voice):
    from studio.core.render.renderer import Renderer
    from studio.core.settings import RenderSettings

    out = work / "render.mp4"
    for _ in Renderer(astro, voice[1], RenderSettings(engine="classic", device="cpu")).run(out):
        pass
    return out

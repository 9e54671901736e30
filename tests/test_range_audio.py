"""A range render's audio keeps the voice-over's depth: muxed as PCM (ProRes, DNxHR) a range of a
24-bit voice-over is 24-bit, as the whole render is (it was 16-bit: FLAC's default)."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from studio.core.media.codecs import PlainAudio
from studio.core.render.plan import audio_range


@pytest.mark.parametrize(
    ("subtype", "codec"), [("PCM_24", "pcm_s24le"), ("PCM_16", "pcm_s16le"), ("FLOAT", "pcm_s24le")]
)
def test_a_range_is_muxed_at_the_depth_of_the_whole(tmp_path, subtype, codec):
    rate = 48_000
    x = (0.3 * np.sin(np.arange(rate * 4) * 2 * np.pi * 440 / rate)).astype(np.float32)
    src = tmp_path / "take.wav"
    sf.write(src, x, rate, subtype=subtype)
    whole = PlainAudio(src, "pcm")
    with audio_range(None, str(src), 25, 75) as part:
        ranged = PlainAudio(part, "pcm")
        assert sf.info(part).frames == rate * 2  # frames 25..75 at 25 fps: 2 s
    assert whole.codec == ranged.codec == codec

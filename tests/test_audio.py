"""studio.core.media.audio on real files written in the test."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
import soundfile as sf
from conftest import DEMO_AUDIO, speechlike, tone

from studio.core.constants import SAMPLES_PER_FRAME
from studio.core.errors import AudioError
from studio.core.media import analysis, audio


def test_frame_grid_is_ceil_of_duration_times_25(tone_silence_noise):
    path, _ = tone_silence_noise
    wave = audio.load(path)
    assert wave.info.duration_s == pytest.approx(4.0)
    assert wave.frames == 100
    assert wave.samples.dtype == np.float32
    assert len(wave.samples) == 64_000


def test_partial_last_frame_is_zero_padded(tmp_path):
    # 1.01 s: 25.25 frames -> 26 frames, the last holds 160 real samples
    path = tmp_path / "odd.wav"
    sf.write(path, tone(1.01, 16_000), 16_000)
    wave = audio.load(path)
    assert wave.frames == 26 == math.ceil(1.01 * 25)
    last = wave.frame_samples(25)
    assert np.count_nonzero(last[160:]) == 0
    assert np.abs(last[:160]).max() > 0.1
    rms = analysis.frame_rms(wave.samples, wave.frames)
    assert rms.shape == (26,)
    assert rms[25] == pytest.approx(np.sqrt(np.mean(last.astype(np.float64) ** 2)), rel=1e-5)


def test_silence_mask_finds_the_known_silences(tone_silence_noise):
    path, silences = tone_silence_noise
    result = analysis.analyze(path)
    spans = analysis.runs(result.mask())
    assert spans == [(int(a * 25), int(b * 25)) for a, b in silences]  # [(25, 50), (75, 87)]


def test_threshold_moves_the_mask(tmp_path):
    rate = 16_000
    quiet = 0.01 * np.sin(2 * np.pi * 200 * np.arange(rate) / rate)  # RMS ~0.0071
    path = tmp_path / "quiet.wav"
    sf.write(path, np.concatenate([tone(1, rate), quiet, tone(1, rate)]).astype(np.float32), rate, subtype="FLOAT")
    result = analysis.analyze(path)
    assert result.mask(threshold=0.008).sum() == 25  # the quiet second is silence
    assert result.mask(threshold=0.005).sum() == 0  # below it, nothing is
    assert result.mask(threshold=1.0).sum() == 75  # everything is


def test_short_dips_are_not_silence():
    rms = np.array([0.1, 0.1, 0.0, 0.0, 0.1, 0.0, 0.0, 0.0, 0.1], np.float32)
    assert analysis.silence_mask(rms, 0.008, 3).tolist() == [0, 0, 0, 0, 0, 1, 1, 1, 0]
    assert analysis.silence_mask(rms, 0.008, 2).tolist() == [0, 0, 1, 1, 0, 1, 1, 1, 0]
    assert analysis.silence_mask(rms, 0.008, 1).tolist() == [0, 0, 1, 1, 0, 1, 1, 1, 0]


def test_stereo_44k1_mp3_is_downmixed_and_resampled(tmp_path):
    rate = 44_100
    left = np.concatenate([speechlike(1.5, rate), np.zeros(int(1.0 * rate), np.float32), speechlike(1.5, rate, 2)])
    stereo = np.stack([left, 0.5 * left], axis=1)
    path = tmp_path / "stereo.mp3"
    sf.write(path, stereo, rate, format="MP3")
    wave = audio.load(path)
    assert wave.info.channels == 2 and wave.info.source_rate == rate
    # MP3 adds encoder padding: the grid follows the decoded length, within a frame or two of 4 s
    assert abs(wave.frames - 100) <= 3
    assert len(wave.samples) == math.ceil(wave.info.source_frames * 16_000 / rate)
    mask = analysis.silence_mask(analysis.frame_rms(wave.samples, wave.frames))
    assert mask[40:60].all()  # 1.6..2.4 s is inside the pause
    assert not mask[5:35].any() and not mask[65:95].any()


def test_8k_mono_wav_and_resampler_quality(tmp_path):
    rate = 8_000
    path = tmp_path / "eight.wav"
    sf.write(path, tone(2.0, rate, 440.0, 0.5), rate, subtype="PCM_U8")
    wave = audio.load(path)
    assert wave.frames == 50
    assert len(wave.samples) == 32_000
    # a proper resampler keeps a 440 Hz tone a 440 Hz tone at the same level
    mid = wave.samples[8000:24000]
    spectrum = np.abs(np.fft.rfft(mid))
    assert np.argmax(spectrum) * 16_000 / len(mid) == pytest.approx(440, abs=2)
    assert np.sqrt(np.mean(mid**2)) == pytest.approx(0.5 / np.sqrt(2), rel=0.05)


def test_float32_and_24bit_files_load(tmp_path):
    for subtype in ("FLOAT", "PCM_24", "PCM_32"):
        path = tmp_path / f"f_{subtype}.wav"
        sf.write(path, tone(0.5, 22_050), 22_050, subtype=subtype)
        wave = audio.load(path)
        assert wave.frames == 13  # ceil(12.5)
        assert np.abs(wave.samples).max() == pytest.approx(0.3, abs=0.02)


def test_envelope_brackets_the_samples():
    x = np.sin(np.linspace(0, 60, 16_123)).astype(np.float32)
    mins, maxs = analysis.envelope(x, 160)
    assert len(mins) == len(maxs) == math.ceil(16_123 / 160)
    assert mins[3] == x[480:640].min() and maxs[3] == x[480:640].max()
    assert (mins <= maxs).all()


def test_analysis_is_cached_and_reused(tone_silence_noise, studio_home):
    path, _ = tone_silence_noise
    first = analysis.analyze(path)
    assert not first.from_cache
    assert list((studio_home / "cache" / "audio").glob("*.npz"))
    second = analysis.analyze(path)
    assert second.from_cache
    assert np.array_equal(first.rms, second.rms) and np.array_equal(first.env_max, second.env_max)


def test_damaged_cache_is_rebuilt(tone_silence_noise, studio_home):
    path, _ = tone_silence_noise
    analysis.analyze(path)
    (cache,) = (studio_home / "cache" / "audio").glob("*.npz")
    cache.write_bytes(b"garbage")
    again = analysis.analyze(path)
    assert not again.from_cache and again.frames == 100


def test_long_file_streams_in_blocks(tmp_path):
    """Ten minutes at 48 kHz stereo: the reader never holds more than a block of the source."""
    import tracemalloc

    rate = 48_000
    path = tmp_path / "long.wav"
    with sf.SoundFile(path, "w", rate, 2, "PCM_16") as fh:
        block = np.stack([tone(10.0, rate), tone(10.0, rate)], 1)
        for _ in range(60):
            fh.write(block)
    tracemalloc.start()
    wave = audio.load(path)
    rms = analysis.frame_rms(wave.samples, wave.frames)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    out_bytes = wave.samples.nbytes  # 600 s x 16 kHz x 4 B = 38.4 MB
    assert wave.frames == 15_000 and rms.shape == (15_000,)
    assert peak - out_bytes < 40e6, f"peak {peak / 1e6:.1f} MB beyond the output array"


def _write(path, data: bytes):
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    "make, expect",
    [
        (lambda p: p / "missing.wav", "no such file"),
        (lambda p: p, "is a folder"),
        (lambda p: _write(p / "empty.wav", b""), "empty"),
        (lambda p: _write(p / "notes.wav", b"this is not audio\n" * 50), "not an audio file"),
    ],
    ids=["missing", "directory", "empty-bytes", "text"],
)
def test_bad_inputs_raise_one_clear_error(tmp_path, make, expect):
    with pytest.raises(AudioError, match=expect):
        audio.load(make(tmp_path))


def test_zero_sample_wav_is_refused(tmp_path):
    path = tmp_path / "zero.wav"
    sf.write(path, np.zeros(0, np.float32), 16_000)
    with pytest.raises(AudioError, match="no audio samples"):
        audio.load(path)


def test_demo_voiceover_has_its_three_pauses():
    result = analysis.analyze(DEMO_AUDIO)
    assert result.frames == math.ceil(result.info.duration_s * 25)
    assert 20 <= result.info.duration_s <= 30
    long_pauses = [(a, b) for a, b in analysis.runs(result.mask()) if b - a >= 20 and a > 0 and b < result.frames]
    assert len(long_pauses) == 3, long_pauses
    assert SAMPLES_PER_FRAME == 640


# ------------------------------------------------------------------------------------------------
# Hostile inputs: one sentence each, no decoder noise, never a hang


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_or_inf_samples_are_refused_with_their_count(tmp_path, studio_home, bad):
    x = tone(2.0, 16_000)
    x[100:112] = bad
    x[5000] = bad
    path = tmp_path / "damaged.wav"
    sf.write(path, x, 16_000, subtype="FLOAT")
    with pytest.raises(AudioError, match=r"13 of 32000 samples are not numbers \(NaN or infinite\)"):
        audio.load(path)
    with pytest.raises(AudioError, match="not numbers"):  # analyze used to say "0 % silent"
        analysis.analyze(path)


def test_a_text_file_named_mp3_is_named_as_text_without_decoder_noise(tmp_path, capfd):
    path = _write(tmp_path / "voice.mp3", b"Good evening, here is the news.\nLine two\n" * 3)
    with pytest.raises(AudioError) as err:
        audio.probe(path)
    assert str(err.value) == (
        f"{path}: not an audio file (it looks like a text file); give the path of a {audio.SUPPORTED} file"
    )
    assert capfd.readouterr().err == ""


def test_garbage_named_mp3_says_unrecognised_without_decoder_noise(tmp_path, capfd):
    rng = np.random.default_rng(3)
    data = rng.integers(0, 256, 3000, dtype=np.uint8).tobytes()
    path = _write(tmp_path / "voice.mp3", b"\x00" + data)
    with pytest.raises(AudioError, match="format is not recognised, or it is damaged") as err:
        audio.probe(path)
    assert "possibly a pipe" not in str(err.value)
    assert capfd.readouterr().err == ""  # mpg123's "Note: Illegal Audio-MPEG-Header" went to the log


def test_an_image_named_wav_is_named(tmp_path):
    path = _write(tmp_path / "voice.wav", b"\x89PNG\r\n\x1a\n" + bytes(200))
    with pytest.raises(AudioError, match="looks like a PNG image"):
        audio.probe(path)


def test_a_fifo_is_refused_at_once_not_read_as_empty(tmp_path):
    import threading

    fifo = tmp_path / "voice.wav"
    os.mkfifo(fifo)
    result = {}

    def run():
        try:
            audio.probe(fifo)
        except AudioError as exc:
            result["msg"] = str(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive(), "probe blocked on the FIFO"
    assert "is a pipe (FIFO), not a regular file" in result["msg"]
    assert "empty" not in result["msg"]


def test_a_device_is_not_a_voice_over():
    with pytest.raises(AudioError, match="not a regular file"):
        audio.probe("/dev/null")

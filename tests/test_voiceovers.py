"""Any voice-over FFmpeg reads, and its AAC track (issue 26): M4A/AAC and a video's sound are read,
an AAC voice-over's packets go into the output unchanged, a track is encoded once per content
(a bounded, damage-safe cache), and a worker prepares it from the moment the writer opens."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import av
import numpy as np
import pytest
import soundfile as sf
from conftest import speechlike
from test_encode import H, W, talking_frames

from studio.core.errors import AudioError
from studio.core.media import aac_cache, analysis, audio
from studio.core.media.writer import open_video
from studio.core.render.plan import stripes

SECONDS = 2.4  # 60 frames


def _voice(rate: int, channels: int, seconds: float = SECONDS, seed: int = 0) -> np.ndarray:
    mono = speechlike(seconds, rate, seed)
    mono[int(0.9 * rate) : int(1.5 * rate)] = 0.0  # a pause: 0.9..1.5 s
    return np.stack([mono * (1.0 - 0.3 * c) for c in range(channels)], axis=1)


def write_aac(path: Path, samples: np.ndarray, rate: int, video: bool = False, fmt: str | None = None) -> Path:
    """An M4A (or, ``video``: an MP4 with an H.264 stream too) holding ``samples`` as AAC."""
    layout = "mono" if samples.shape[1] == 1 else "stereo"
    with av.open(str(path), "w", format=fmt) as c:
        vs = None
        if video:
            vs = c.add_stream("libx264", rate=25)
            vs.width, vs.height, vs.pix_fmt = 64, 48, "yuv420p"
        a = c.add_stream("aac", rate=rate, layout=layout)
        for s in range(0, len(samples), 1024):
            f = av.AudioFrame.from_ndarray(np.ascontiguousarray(samples[s : s + 1024].T), format="fltp", layout=layout)
            f.sample_rate, f.pts = rate, s
            c.mux(a.encode(f))
        c.mux(a.encode(None))
        if vs is not None:
            for i in range(int(len(samples) / rate * 25)):
                img = np.full((48, 64, 3), i * 4 % 256, np.uint8)
                fr = av.VideoFrame.from_ndarray(img, format="rgb24")
                fr.pts = i
                c.mux(vs.encode(fr))
            c.mux(vs.encode(None))
    return path


def audio_packets(path: Path) -> list[bytes]:
    with av.open(str(path)) as c:
        return [bytes(p) for p in c.demux(c.streams.audio[0]) if p.size]


def _render(out: Path, voice: Path, encoder: str = "x264", frames: int = 60, wait_audio: bool = False):
    """Write ``frames`` talking frames with ``voice`` through a real writer; the writer (closed)."""
    with open_video(out, W, H, audio=voice, encoder=encoder, workers=2, total_frames=frames, rolling=True) as w:
        batches = list(stripes(frames, 6, w.chunks, window=w.window))
        video = talking_frames(0, frames)
        for k, idx in enumerate(batches):
            if wait_audio and k == len(batches) - 1:
                assert w.audio_ready(60), "the AAC track was not ready while frames were still coming"
            w.write(video[idx], indices=idx)
    return w


@pytest.fixture(scope="module")
def voices(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("voices")
    out = {}
    out["wav48"] = d / "voice48.wav"
    sf.write(out["wav48"], _voice(48_000, 2), 48_000, subtype="PCM_16")
    out["m4a"] = write_aac(d / "voice.m4a", _voice(44_100, 2), 44_100)
    out["mp4"] = write_aac(d / "clip.mp4", _voice(48_000, 1), 48_000, video=True)
    out["mkv"] = write_aac(d / "clip.mkv", _voice(48_000, 2), 48_000, fmt="matroska")
    out["mp3"] = d / "voice.mp3"
    sf.write(out["mp3"], _voice(44_100, 2), 44_100, format="MP3")
    return out


# ------------------------------------------------------------------------------------------------
# Reading


@pytest.mark.parametrize("kind", ["m4a", "mp4", "mkv"])
def test_m4a_and_a_video_files_sound_are_voice_overs(voices, kind):
    info = audio.probe(voices[kind])
    assert info.decoder == "ffmpeg" and info.subtype == "AAC"
    assert info.source_rate == (44_100 if kind == "m4a" else 48_000)
    assert info.channels == (1 if kind == "mp4" else 2)
    assert abs(info.duration_s - SECONDS) < 0.03
    wave = audio.load(voices[kind])
    assert wave.frames == math.ceil(info.source_frames * 25 / info.source_rate)
    assert len(wave.samples) == math.ceil(info.source_frames * 16_000 / info.source_rate)
    mask = analysis.silence_mask(analysis.frame_rms(wave.samples, wave.frames))
    assert mask[25:36].all() and not mask[3:20].any() and not mask[40:58].any()  # the pause, and speech around it


def test_a_decoded_m4a_matches_the_wav_it_was_made_from(tmp_path):
    x = _voice(16_000, 1)
    sf.write(tmp_path / "v.wav", x, 16_000, subtype="FLOAT")
    a = audio.load(tmp_path / "v.wav").samples
    b = audio.load(write_aac(tmp_path / "v.m4a", x, 16_000)).samples
    assert len(a) == len(b)
    corr = float(np.dot(a, b) / np.sqrt(np.dot(a, a) * np.dot(b, b)))
    assert corr > 0.99  # the same voice, through a lossy codec, on the same sample grid


def test_a_text_file_renamed_m4a_gets_one_clear_sentence(tmp_path):
    path = tmp_path / "voice.m4a"
    path.write_text("Good evening, here is the news.\n" * 5)
    with pytest.raises(AudioError) as err:
        audio.probe(path)
    assert str(err.value) == (
        f"{path}: not an audio file (it looks like a text file); give the path of a {audio.SUPPORTED} file"
    )
    r = subprocess.run([sys.executable, "-m", "studio", "analyze", str(path)], capture_output=True, text=True)
    assert r.returncode == 2
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "it looks like a text file" in lines[0], r.stderr


def test_a_video_without_sound_and_a_damaged_m4a_are_named(tmp_path, voices):
    silent = tmp_path / "silent.mp4"
    with av.open(str(silent), "w") as c:
        s = c.add_stream("libx264", rate=25)
        s.width, s.height, s.pix_fmt = 64, 48, "yuv420p"
        for i in range(5):
            fr = av.VideoFrame.from_ndarray(np.zeros((48, 64, 3), np.uint8), format="rgb24")
            fr.pts = i
            c.mux(s.encode(fr))
        c.mux(s.encode(None))
    with pytest.raises(AudioError, match="it is a video file without sound; give the voice-over itself"):
        audio.probe(silent)
    cut = tmp_path / "cut.m4a"
    cut.write_bytes(voices["m4a"].read_bytes()[:600])  # the header only: no index, no samples
    with pytest.raises(AudioError, match="not an audio file Studio can read"):
        audio.probe(cut)


# ------------------------------------------------------------------------------------------------
# The output's AAC track


@pytest.mark.parametrize("encoder", ["x264", "x264-parallel"])
def test_an_aac_voice_overs_packets_appear_unchanged_in_the_output(tmp_path, voices, encoder):
    w = _render(tmp_path / "out.mp4", voices["m4a"], encoder)
    assert w.audio_how == "copied"
    src, got = audio_packets(voices["m4a"]), audio_packets(tmp_path / "out.mp4")
    assert len(src) > 50 and got == src
    with av.open(str(tmp_path / "out.mp4")) as c:
        a = c.streams.audio[0]
        assert a.codec_context.name == "aac" and a.sample_rate == 44_100 and a.channels == 2
        assert abs(float(a.duration * a.time_base) - SECONDS) < 0.01
    assert list(aac_cache.default_root().iterdir()) == []  # nothing encoded, nothing cached


def test_a_video_files_aac_track_is_copied_too(tmp_path, voices):
    w = _render(tmp_path / "out.mp4", voices["mp4"])
    assert w.audio_how == "copied" and audio_packets(tmp_path / "out.mp4") == audio_packets(voices["mp4"])
    with av.open(str(tmp_path / "out.mp4")) as c:
        assert c.streams.video[0].codec_context.width == W  # our video, their sound


@pytest.mark.parametrize("encoder", ["x264", "x264-parallel"])
def test_the_same_voice_over_is_encoded_once(tmp_path, voices, encoder):
    first = _render(tmp_path / "a.mp4", voices["wav48"], encoder)
    copy = tmp_path / "renamed copy.wav"  # the content counts, not the name
    copy.write_bytes(voices["wav48"].read_bytes())
    second = _render(tmp_path / "b.mp4", copy, encoder)
    assert (first.audio_how, second.audio_how) == ("encoded", "cached")
    a, b = audio_packets(tmp_path / "a.mp4"), audio_packets(tmp_path / "b.mp4")
    assert len(a) > 100 and a == b
    assert len(list(aac_cache.default_root().glob("*.aac.rec"))) == 1
    with av.open(str(tmp_path / "b.mp4")) as c:
        assert c.streams.audio[0].sample_rate == 48_000 and c.streams.audio[0].channels == 2


def test_a_damaged_cache_entry_is_encoded_again_never_used(tmp_path, voices):
    _render(tmp_path / "a.mp4", voices["mp3"])
    (entry,) = aac_cache.default_root().glob("*.aac.rec")
    data = bytearray(entry.read_bytes())
    data[len(data) // 2] ^= 0xFF
    entry.write_bytes(bytes(data))
    again = _render(tmp_path / "b.mp4", voices["mp3"], "x264-parallel")
    assert again.audio_how == "encoded"
    assert audio_packets(tmp_path / "b.mp4") == audio_packets(tmp_path / "a.mp4")
    assert _render(tmp_path / "c.mp4", voices["mp3"]).audio_how == "cached"  # repaired by that encode
    entry.write_bytes(entry.read_bytes()[:100])  # truncated
    assert aac_cache.lookup(entry.name.removesuffix(aac_cache.SUFFIX)) is None and not entry.exists()


def test_the_cache_stays_under_its_bound_dropping_the_oldest(tmp_path):
    root = tmp_path / "cache"
    rec = tmp_path / "r.rec"
    rec.write_bytes(b"\0" * 1000)
    for k in range(5):
        aac_cache.store(f"k{k}", rec, root)
    import os

    for k, p in enumerate(sorted(root.glob("*.aac.rec"))):
        os.utime(p, ns=(k * 10**9, k * 10**9))  # k0 oldest
    aac_cache.lookup("k0", root)  # used now: kept
    removed = aac_cache.evict(root, max_bytes=3 * (1000 + aac_cache.TRAILER.size))
    assert sorted(p.name for p in removed) == ["k1.aac.rec", "k2.aac.rec"]
    assert sorted(p.name for p in root.glob("*.aac.rec")) == ["k0.aac.rec", "k3.aac.rec", "k4.aac.rec"]


def test_the_aac_track_is_ready_before_the_last_frame_and_the_finish_waits_for_none(tmp_path, voices):
    """48 kHz stereo, parallel writer: the worker prepares the track from the writer's open, so it
    completes while frames are still coming (the test holds back the last batch until it has,
    without closing the writer); the finish then never waits for audio."""
    fresh = tmp_path / "fresh.wav"  # content no test cached: really encoded
    sf.write(fresh, _voice(48_000, 2, seed=7), 48_000, subtype="PCM_16")
    w = _render(tmp_path / "out.mp4", fresh, "x264-parallel", wait_audio=True)
    assert w.audio_how == "encoded"
    assert w.close_ms["audio_after_close"] == 0.0 and w.close_ms["audio_wait_finish"] == 0.0
    assert 0.0 < w.close_ms["audio_ready"]
    with av.open(str(tmp_path / "out.mp4")) as c:
        a = c.streams.audio[0]
        assert a.sample_rate == 48_000 and a.channels == 2
        assert abs(float(a.duration * a.time_base) - SECONDS) < 0.03
        assert c.streams.video[0].frames == 60


def test_a_range_render_of_an_m4a_takes_its_stretch(tmp_path, voices):
    from studio.core.render.plan import audio_range

    with audio_range(None, str(voices["m4a"]), 25, 50) as part:
        info = audio.probe(part)
        assert info.source_rate == 44_100 and info.channels == 2
        assert info.source_frames == round(25 / 25 * 44_100)
        whole = audio.load(voices["m4a"]).samples[16_000:32_000]
        got = audio.load(part).samples
        assert len(got) == 16_000 and np.abs(got - whole).max() < 0.02


def test_the_in_process_and_worker_encodes_give_the_same_track(tmp_path, voices):
    """The cache is filled by whichever path encoded first: both must make the same bytes."""
    from studio.core.media.encoders import AREC, AudioSource, encode_aac_file

    root_a = tmp_path / "a"

    n, how = encode_aac_file(str(voices["wav48"]), str(tmp_path / "w.rec"), str(root_a))
    assert how == "encoded" and n > 100
    assert encode_aac_file(str(voices["wav48"]), str(tmp_path / "w2.rec"), str(root_a))[1] == "cached"
    assert (tmp_path / "w2.rec").read_bytes() == (tmp_path / "w.rec").read_bytes()

    def records(path):
        data, out, pos = path.read_bytes(), [], 0
        while pos < len(data):
            pts, dts, size, dur = AREC.unpack_from(data, pos)
            out.append(data[pos + AREC.size : pos + AREC.size + size])
            pos += AREC.size + size
        return out

    worker_packets = records(tmp_path / "w.rec")
    with av.open(str(tmp_path / "ref.mp4"), "w") as c:
        src = AudioSource(voices["wav48"], cache=False)
        src.add_stream(c)
        c.start_encoding()
        src.mux_until(c, None)
        src.close()
    assert audio_packets(tmp_path / "ref.mp4") == worker_packets


def test_an_adts_aac_file_is_read_and_its_track_encoded(tmp_path):
    """A raw ``.aac`` (ADTS: no container, no length in a header) is decoded; its configuration is in
    every packet header, not where an MP4 keeps it, so the output's track is encoded."""
    path = write_aac(tmp_path / "voice.aac", _voice(48_000, 2), 48_000, fmt="adts")
    info = audio.probe(path)
    assert info.decoder == "ffmpeg" and info.format == "AAC" and abs(info.duration_s - SECONDS) < 0.1
    assert not audio.aac_copyable(path)
    w = _render(tmp_path / "out.mp4", path)
    assert w.audio_how == "encoded"
    with av.open(str(tmp_path / "out.mp4")) as c:
        assert c.streams.audio[0].sample_rate == 48_000 and c.streams.audio[0].channels == 2

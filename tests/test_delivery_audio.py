"""Issue 44, items 3 and 4: the delivery names its audio (read back with PyAV and ffprobe), and the sidecars
follow the clip (OpenTimelineIO's ranges at the file's timecode, captions cut to the clip read with pysubs2,
chapters on the nearest frame of the output rate)."""

from __future__ import annotations

import json
import shutil
import subprocess
from fractions import Fraction

import numpy as np
import pytest
import soundfile as sf
from conftest import DEMO_AVATAR, speechlike

from studio.core.settings import from_dict

FAST = {"engine": "classic", "device": "cpu"}


@pytest.fixture(scope="module")
def piper_like(tmp_path_factory):
    """A 22.05 kHz mono 16-bit voice-over (Piper's format): speech 0-1.5 s, a 1.2 s pause, speech to 5 s."""
    rate = 22_050
    x = np.concatenate([speechlike(1.5, rate, 1), np.zeros(int(1.2 * rate), np.float32), speechlike(2.3, rate, 2)])
    path = tmp_path_factory.mktemp("piper") / "voice.wav"
    sf.write(str(path), x, rate, subtype="PCM_16")
    return path


def _render(voice, out, values, explicit=(), frames=None):
    from studio.service.driver import Render
    from studio.service.request import RenderRequest

    values = {**FAST, **values}
    s = from_dict(values, explicit=set(explicit) | set(FAST) | {k for k in values if k != "delivery"})
    render = Render(RenderRequest(str(DEMO_AVATAR), str(voice), str(out), s, frames=frames))
    for _ in render.run():
        pass
    return render.result


def _ffprobe_audio(path) -> dict:
    out = subprocess.run(
        [shutil.which("ffprobe") or "ffprobe", "-v", "error", "-select_streams", "a", "-show_streams", "-of", "json",
         str(path)],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    return json.loads(out)["streams"][0]


@pytest.mark.parametrize(
    "delivery, suffix, codec, rate, channels",
    [
        ("", ".mov", "pcm_s16le", 22_050, 1),  # no delivery: the voice-over's own format stays
        ("", ".mp4", "aac", 22_050, 1),
        ("broadcast-hd", ".mov", "pcm_s24le", 48_000, 2),
        ("web-1080p", ".mp4", "aac", 48_000, 2),
    ],
)
def test_the_delivery_names_its_audio(piper_like, tmp_path, delivery, suffix, codec, rate, channels):
    import av

    values = {"codec": "prores" if suffix == ".mov" else "h264", "canvas": "avatar", "fps": "25"}
    if delivery:
        values["delivery"] = delivery
    res = _render(piper_like, tmp_path / f"out{suffix}", values, frames=(0, 40))
    with av.open(res.output) as c:
        a = c.streams.audio[0]
        assert (a.codec_context.name, a.rate, a.channels) == (codec, rate, channels)
        if codec == "aac":
            assert a.codec_context.profile == "LC"
    probe = _ffprobe_audio(res.output)
    assert (probe["codec_name"], int(probe["sample_rate"]), int(probe["channels"])) == (codec, rate, channels)
    if delivery == "web-1080p":
        assert int(probe["bit_rate"]) == pytest.approx(192_000, rel=0.1)
    if delivery:  # the mono voice-over on both channels, resampled (soxr): the same samples left and right
        with av.open(res.output) as c:
            pcm = np.concatenate(
                [
                    f.to_ndarray().reshape(-1, channels) if f.format.is_packed else f.to_ndarray().T
                    for f in c.decode(audio=0)
                ]
            ).astype(np.float64)
        assert np.abs(pcm).max() > 0
        assert np.allclose(pcm[:, 0], pcm[:, 1], atol=np.abs(pcm).max() * 1e-3)


def test_sidecars_follow_a_range_otio_at_the_files_timecode_and_captions_inside_the_clip(piper_like, tmp_path):
    import av
    import opentimelineio as otio
    import pysubs2

    script = "Good evening. The first story is about rain. Then the weather, and the sport at the end."
    values = {"delivery": "broadcast-hd", "canvas": "avatar", "codec": "prores", "otio": True, "captions": "srt"}
    res = _render(piper_like, tmp_path / "range.mov", {**values, "script": script}, frames=(25, 100))  # 1.0-4.0 s
    with av.open(res.output) as c:
        tc = c.streams.video[0].metadata.get("timecode") or next(
            st.metadata["timecode"] for st in c.streams if "timecode" in st.metadata
        )
    assert tc == "10:00:01:00"
    tl = otio.adapters.read_from_file(res.files["otio"])
    rate = 25.0
    assert otio.opentime.to_timecode(tl.global_start_time, rate) == tc
    v1 = tl.tracks[0][0]
    assert otio.opentime.to_timecode(v1.source_range.start_time, rate) == tc
    assert otio.opentime.to_timecode(v1.media_reference.available_range.start_time, rate) == tc
    assert v1.source_range.duration.value == 75
    subs = pysubs2.load(res.files["captions"])
    assert len(subs) >= 1
    clip_ms = 75 / rate * 1000
    for ev in subs:
        assert 0 <= ev.start < ev.end <= clip_ms + 1, (ev.start, ev.end, ev.text)


def test_chapters_sit_on_the_nearest_frame_of_the_output_rate(piper_like, tmp_path):
    import av

    res = _render(piper_like, tmp_path / "ch.mp4", {"fps": "30", "markers": "3.333=Weather"})
    with av.open(res.output) as c:
        starts = {ch["metadata"]["title"]: Fraction(ch["start"]) * ch["time_base"] for ch in c.chapters()}
    assert float(starts["Weather"]) == pytest.approx(100 / 30, abs=0.0011)  # frame 100, not 99 (3.300 s)


def test_scc_captions_are_timed_to_the_clips_timecode_within_a_frame(piper_like, tmp_path):
    """--captions scc of an in/out range (1.0-4.0 s) in broadcast-hd (10:00:00:00): pycaption's SCC reader
    finds every cue of the clip at the clip's timecode of its start (36001 s + the cue's time in the clip)."""
    from pycaption import SCCReader

    from studio.core.captions import clip_cues, make_cues, script_sentences

    script = "Good evening. The first story is about rain. Then the weather, and the sport at the end."
    values = {"delivery": "broadcast-hd", "canvas": "avatar", "codec": "prores", "captions": "scc", "script": script}
    res = _render(piper_like, tmp_path / "cc.mov", values, frames=(25, 100))
    path = res.files["captions"]
    assert path.endswith(".scc")
    text = open(path, encoding="utf-8").read()
    assert text.startswith("Scenarist_SCC V1.0")
    got = SCCReader().read(text).get_captions("en-US")
    want = clip_cues(make_cues(script_sentences(str(piper_like), script)), 1.0, 3.0)
    assert len(got) == len(want) >= 1
    frame_us = 1e6 * 1001 / 30000  # one frame of CEA-608's 29.97
    for g, w in zip(got, want):
        assert abs(g.start - (36001 + w.start_s) * 1e6) <= frame_us + 1, (g.start, w)
        assert abs(g.end - (36001 + w.end_s) * 1e6) <= frame_us + 1, (g.end, w)
        assert g.get_text().split() == " ".join(w.lines).split()

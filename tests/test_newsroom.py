"""Issue 49: the newsroom's MXF deliveries (XDCAM HD422 at 25 and 29.97, its progressive variant, AVC-Intra
100), each read back by MediaInfo (pymediainfo), ffprobe and a walk over every GOP (``mxf_check``)."""

from __future__ import annotations

import os
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest
import soundfile as sf
from conftest import DEMO_AVATAR, speechlike
from mxf_check import gops, read_mxf

from studio.core.settings import from_dict


@pytest.fixture(scope="module")
def voice(tmp_path_factory):
    """A 22.05 kHz mono voice-over: speech 0-1.2 s, 0.5 s pause, speech to 2.4 s."""
    rate = 22_050
    x = np.concatenate([speechlike(1.2, rate, 1), np.zeros(int(0.5 * rate), np.float32), speechlike(0.7, rate, 2)])
    path = tmp_path_factory.mktemp("newsroom") / "voice.wav"
    sf.write(str(path), x, rate, subtype="PCM_16")
    return path


def _tracks(path) -> np.ndarray:
    """Every audio track's samples, [n, tracks] float (PyAV's decoder)."""
    import av

    with av.open(str(path)) as c:
        out = []
        for k in range(len(c.streams.audio)):
            c.seek(0)
            out.append(np.concatenate([f.to_ndarray().reshape(-1) for f in c.decode(audio=k)]))
    n = min(len(a) for a in out)
    return np.stack([a[:n] for a in out], axis=1).astype(np.float64) / 2**31


def _check_common(info, *, commercial, n_tracks=8):
    g, v = info["general"], info["video"]
    assert g["format"] == "MXF" and g["format_profile"] == "OP-1a"
    assert g["commercial_name"] in (commercial, f"MXF {commercial}") and v["commercial_name"] == commercial
    assert (v["width"], v["height"], v["chroma_subsampling"]) == (1920, 1080, "4:2:2")
    assert v["bit_rate_mode"] == "CBR"
    assert len(info["audio"]) == n_tracks
    for a in info["audio"]:
        assert (a["format"], a["channel_s"], a["sampling_rate"], a["bit_depth"]) == ("PCM", 1, 48000, 24)
    streams = info["ffprobe"]["streams"]
    audio = [s for s in streams if s["codec_type"] == "audio"]
    assert [(s["codec_name"], s["sample_rate"], s["channels"]) for s in audio] == [("pcm_s24le", "48000", 1)] * 8


def _check_interlaced(info, interlaced: bool):
    v = info["video"]
    video = next(s for s in info["ffprobe"]["streams"] if s["codec_type"] == "video")
    if interlaced:
        assert v["scan_order"] == "TFF" and v.get("scan_type") in ("Interlaced", "MBAFF")
        assert video["field_order"] == "tt"
        assert all(f["interlaced_frame"] == 1 and f["top_field_first"] == 1 for f in info["frames"])
    else:
        assert v.get("scan_type", "Progressive") == "Progressive"
        assert video.get("field_order", "progressive") == "progressive"
        assert not any(f["interlaced_frame"] for f in info["frames"])


def _timecodes(info) -> set[str]:
    return {o.get("time_code_of_first_frame") for o in info["other"]}


def test_xdcam_hd422_render_reads_back_as_rdd9(voice, tmp_path):
    """A whole render (classic engine, CPU) in the xdcam-hd422 delivery, with its AAF for Avid."""
    from pyloudnorm import Meter

    from studio.service.driver import Render
    from studio.service.request import RenderRequest

    s = from_dict(
        {"engine": "classic", "device": "cpu", "delivery": "xdcam-hd422", "aaf": True},
        explicit={"engine", "device", "aaf"},
    )
    render = Render(RenderRequest(str(DEMO_AVATAR), str(voice), str(tmp_path / "news.mxf"), s))
    for _ in render.run():
        pass
    res = render.result
    info = read_mxf(res.output)
    _check_common(info, commercial="XDCAM HD422")
    v = info["video"]
    assert v["format_profile"] == "4:2:2@High" and v["bit_rate"] == 50_000_000
    assert v["format_settings__gop"] == "M=3, N=12" and v["gop__open_closed"] == "Closed"
    every = gops(res.output)
    assert len(every) == -(-res.frames // 12)
    assert all(closed for closed, _ in every)
    assert [n for _, n in every[:-1]] == [12] * (len(every) - 1) and 0 < every[-1][1] <= 12
    _check_interlaced(info, True)
    assert v["time_code_of_first_frame"] == "10:00:00:00"  # the GOP headers
    assert {"10:00:00:00"} <= _timecodes(info)
    assert any(o.get("time_code_settings") == "Material Package" for o in info["other"])
    assert any(o.get("muxing_mode") == "SDTI" for o in info["other"])  # the system item's timecode
    # the voice on tracks 1 and 2, silence on 3-8; the pair at -23 LUFS (R128) by pyloudnorm
    pcm = _tracks(res.output)
    assert np.array_equal(pcm[:, 0], pcm[:, 1]) and np.abs(pcm[:, 0]).max() > 0.01
    assert not pcm[:, 2:].any()
    assert Meter(48_000).integrated_loudness(pcm[:, :2]) == pytest.approx(-23.0, abs=0.3)
    _check_aaf(res, info)


def _write(path, codec, fps, scan, start_tc, voice, frames):
    """Moving synthetic frames through the writer a render uses, inside the render's timecode context."""
    from studio.core.media.delivery_audio import conformed
    from studio.core.media.mux import delivery_tags
    from studio.core.media.writer import open_video

    with conformed(voice, "8-mono-48k") as audio, delivery_tags(start_tc=start_tc):
        w = open_video(path, 1920, 1080, codec=codec, fps=fps, audio=audio, total_frames=frames, scan=scan)
        x = np.arange(1920)
        for t in range(frames):
            f = np.zeros((1, 1080, 1920, 3), np.uint8)
            f[0, :, :, 0] = ((x + 23 * t) % 256).astype(np.uint8)
            f[0, 200 + 7 * t : 400 + 7 * t, 300:900, 1] = 220
            w.write(f, indices=np.array([t]))
        return w.close()


@pytest.mark.parametrize(
    "codec, fps, scan, tc, commercial, n, frames",
    [  # MediaInfo names XDCAM HD422 only once it has parsed about five GOPs
        ("xdcam-hd422", "30000/1001", "interlaced", "01:00:00;00", "XDCAM HD422", 15, 77),
        ("xdcam-hd422", "25", "progressive", "10:00:00:00", "XDCAM HD422", 12, 64),
        ("avc-intra-100", "25", "interlaced", "10:00:00:00", "AVC-Intra 100", 1, 30),
    ],
)
def test_each_mxf_delivery_reads_back(voice, tmp_path, codec, fps, scan, tc, commercial, n, frames):
    out = _write(tmp_path / "clip.mxf", codec, Fraction(fps), scan, tc, voice, frames)
    info = read_mxf(out)
    _check_common(info, commercial=commercial)
    _check_interlaced(info, scan == "interlaced")
    assert tc in _timecodes(info)
    v = info["video"]
    if codec == "xdcam-hd422":
        every = gops(out)
        assert all(closed for closed, _ in every)
        assert [k for _, k in every] == [n] * (frames // n) + ([frames % n] if frames % n else [])
        assert v["bit_rate"] == 50_000_000
    else:
        assert v["format"] == "AVC" and v["bit_depth"] == 10 and v["format_settings__gop"] == "N=1"
        assert v["format_profile_original"].startswith("High 4:2:2 Intra")
        assert v["bit_rate"] == pytest.approx(113_000_000, rel=0.06)  # class 100 at 1080i25
    pcm = _tracks(out)
    assert np.array_equal(pcm[:, 0], pcm[:, 1]) and not pcm[:, 2:].any()


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--delivery", "xdcam-hd422", "--canvas", "1280x720"], "is 1920x1080 and the frames are 1280x720"),
        (["--codec", "h264", "--scan", "interlaced"], "interlaced frames are written by --codec xdcam-hd422"),
        (["--delivery", "xdcam-hd422", "--fps", "50"], "at 25 or 29.97 frames a second"),
        (["--codec", "h264", "--aaf"], "--aaf links an MXF"),
    ],
)
def test_bad_newsroom_inputs_get_one_sentence(argv, says, voice, tmp_path):
    out = tmp_path / ("o.mp4" if "h264" in argv else "o.mxf")
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.run(
        [sys.executable, "-m", "studio", "render", "--avatar", str(DEMO_AVATAR), "--audio", str(voice), "-o",
         str(out), "--engine", "classic", "--device", "cpu", *argv],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert says.lower() in proc.stderr.lower() and "engine:" not in proc.stderr, proc.stderr
    assert not out.exists() and not list(tmp_path.glob(".*o.mxf*"))


def _check_aaf(res, info):
    """pyaaf2 opens the AAF; its file source mob is the MXF's file package (the UMID ffprobe reads), its
    locator resolves to the MXF, and the master mob's slots reach the picture and the 8 sound tracks."""
    from urllib.parse import urlparse
    from urllib.request import url2pathname

    import aaf2

    umid = next(
        s["tags"]["file_package_umid"] for s in info["ffprobe"]["streams"] if "file_package_umid" in s.get("tags", {})
    )
    with aaf2.open(res.files["aaf"], "r") as f:
        master = next(f.content.mastermobs())
        assert master.name == "news"
        kinds = [s.media_kind for s in master.slots]
        assert kinds == ["Picture"] + ["Sound"] * 8
        src = master.slots[0].segment.mob
        assert src is not None and src.mob_id.urn.replace(".", "").lower().endswith(umid.lower()[-64:])
        url = src.descriptor["Locator"].value[0]["URLString"].value
        assert os.path.samefile(url2pathname(urlparse(url).path), res.output)
        tc = next(s.segment for s in src.slots if s.media_kind == "Timecode")
        assert (tc.start, tc.fps) == (10 * 3600 * 25, 25)

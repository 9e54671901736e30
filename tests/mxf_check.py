"""An MXF read back by readers that are not Studio's writer: MediaInfo (``pymediainfo``), ffprobe (Debian's
FFmpeg, a separate build from PyAV's) and a walk over the MPEG-2 elementary stream's own headers.

    info = read_mxf("news.mxf")
    info["general"]["commercial_name"], info["video"]["format_settings__gop"], info["audio"] (a list)
    info["ffprobe"]["streams"], info["frames"] (ffprobe's per-frame field flags)
    gops("news.mxf") -> [(closed, pictures), ...]     # every GOP of the MPEG-2 video, not the first only
"""

from __future__ import annotations

import json
import shutil
import subprocess


def read_mxf(path) -> dict:
    from pymediainfo import MediaInfo

    mi = MediaInfo.parse(str(path))
    general = next(t.to_data() for t in mi.tracks if t.track_type == "General")
    video = next(t.to_data() for t in mi.tracks if t.track_type == "Video")
    audio = [t.to_data() for t in mi.tracks if t.track_type == "Audio"]
    other = [t.to_data() for t in mi.tracks if t.track_type == "Other"]
    ffprobe = shutil.which("ffprobe")
    assert ffprobe, "ffprobe (Debian's ffmpeg package) is needed to read the MXF back"
    streams = json.loads(
        subprocess.run(
            [ffprobe, "-v", "error", "-show_streams", "-show_format", "-of", "json", str(path)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    frames = json.loads(
        subprocess.run(
            [ffprobe, "-v", "error", "-select_streams", "v:0", "-show_entries",
             "frame=pict_type,interlaced_frame,top_field_first,key_frame", "-of", "json", str(path)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )["frames"]  # fmt: skip
    return {"general": general, "video": video, "audio": audio, "other": other, "ffprobe": streams, "frames": frames}


def gops(path) -> list[tuple[bool, int]]:
    """Each GOP of the file's MPEG-2 video: (closed_gop flag, pictures in it), from the stream's own
    GOP (00 00 01 B8) and picture (00 00 01 00) start codes, packet by packet."""
    import av

    out: list[list] = []
    with av.open(str(path)) as c:
        for pkt in c.demux(c.streams.video[0]):
            data = bytes(pkt)
            k = 0
            while True:
                k = data.find(b"\x00\x00\x01", k)
                if k < 0 or k + 7 >= len(data):
                    break
                code = data[k + 3]
                if code == 0xB8:  # group_of_pictures_header: 25 bits of time code, then closed_gop
                    bits = int.from_bytes(data[k + 4 : k + 8], "big")
                    out.append([bool((bits >> 6) & 1), 0])
                elif code == 0x00 and out:
                    out[-1][1] += 1
                k += 3
    return [(closed, n) for closed, n in out]

"""Check a rendered MP4 with PyAV: ``python packaging/check_mp4.py OUT.mp4 [--frames N]``.

Exits 0 and prints one summary line when the file has an H.264 video stream with exactly N
decodable frames (default 706, the demo clip) and an AAC audio stream; exits 1 saying what is
wrong otherwise. Used by packaging/smoke_test.sh (run with the build venv's Python).
"""

from __future__ import annotations

import argparse
import sys


def check(path: str, frames: int) -> str:
    """The summary line; raises ValueError naming the first thing that is wrong."""
    import av

    with av.open(path) as box:
        video = [s for s in box.streams if s.type == "video"]
        audio = [s for s in box.streams if s.type == "audio"]
        if len(video) != 1 or video[0].codec_context.name != "h264":
            raise ValueError(f"{path}: expected one h264 video stream, found {[s.codec_context.name for s in video]}")
        if len(audio) != 1 or audio[0].codec_context.name != "aac":
            raise ValueError(f"{path}: expected one aac audio stream, found {[s.codec_context.name for s in audio]}")
        v = video[0]
        size = (v.codec_context.width, v.codec_context.height)
        fps = v.average_rate
        decoded = sum(1 for _ in box.decode(video=0))
    if decoded != frames:
        raise ValueError(f"{path}: {decoded} video frames decoded, expected {frames}")
    return f"{path}: {decoded} frames h264 {size[0]}x{size[1]} @ {fps} fps + aac"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mp4")
    ap.add_argument("--frames", type=int, default=706, help="expected video frames (default 706, the demo)")
    args = ap.parse_args(argv)
    try:
        print(check(args.mp4, args.frames))
    except (ValueError, OSError) as exc:
        print(f"check_mp4: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

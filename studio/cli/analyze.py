"""``studio analyze AUDIO``: duration, frames and the silence mask of a voice-over."""

from __future__ import annotations

from studio.core.constants import DEFAULT_MIN_SILENCE_FRAMES, DEFAULT_SILENCE_THRESHOLD


def register(sub) -> None:
    p = sub.add_parser("analyze", help="analyse a voice-over: its frames at a frame rate and its silences")
    p.add_argument("audio", help="WAV, FLAC, OGG or MP3 file")
    p.add_argument(
        "--threshold",
        type=float,
        default=DEFAULT_SILENCE_THRESHOLD,
        help=f"RMS below which a frame is silent (default {DEFAULT_SILENCE_THRESHOLD})",
    )
    p.add_argument(
        "--min-silence",
        type=int,
        default=DEFAULT_MIN_SILENCE_FRAMES,
        metavar="N",
        help=f"shortest silent run in frames (default {DEFAULT_MIN_SILENCE_FRAMES})",
    )
    from studio.core.media.rates import RATES

    p.add_argument(
        "--fps", default="25", choices=list(RATES), help="the frame grid (default 25; a render's --fps or its avatar's)"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--no-cache", action="store_true", help="do not read or write the analysis cache")
    p.set_defaults(func=run)


def run(args) -> int:
    from studio.cli._common import emit_json, fmt_seconds
    from studio.core.errors import InputError
    from studio.core.media.analysis import analyze

    if args.threshold < 0:
        raise InputError("--threshold must be 0 or more (an RMS level such as 0.008)")
    if args.min_silence < 1:
        raise InputError("--min-silence must be at least 1 frame")
    from studio.core.media.rates import parse_rate

    result = analyze(args.audio, use_cache=not args.no_cache, rate=parse_rate(args.fps))
    s = result.summary(args.threshold, args.min_silence)
    if args.json:
        emit_json(s)
        return 0
    print(f"file:            {s['path']}")
    print(f"format:          {s['format']} {s['subtype']}, {s['sample_rate']} Hz, {s['channels']} channel(s)")
    print(f"duration:        {fmt_seconds(s['duration_s'])} ({s['duration_s']:.3f} s)")
    print(f"frames:          {s['frames']} at {s['fps']} fps")
    print(
        f"silent frames:   {s['silent_frames']} ({s['silent_percent']:.1f} %), "
        f"threshold {s['silence_threshold']}, runs of >= {s['min_silence_frames']}"
    )
    print(f"silent spans:    {len(s['silent_spans'])}")
    print(f"longest silence: {s['longest_silence_frames']} frames ({s['longest_silence_s']:.2f} s)")
    return 0

"""``studio check VIDEO``: the lip-sync quality report of a render (or any presenter video)."""

from __future__ import annotations

import sys

from studio.core.constants import DEFAULT_MIN_SILENCE_FRAMES, DEFAULT_SILENCE_THRESHOLD

FAIL_EXIT = 3  # --fail-under not met (0: met, 2: bad input)


def register(sub) -> None:
    p = sub.add_parser(
        "check",
        help="measure a render's lip sync and mouth quality (offset, silence motion, sharpness, seam, drift)",
        description="Measure a lip-synced video offline: the audio offset that best aligns the mouth with the voice "
        "and its confidence, mouth motion during silences, the mouth's sharpness, the blend seam and face drift, "
        "with a verdict (ok, check, out of sync). Exit code 0, 3 when --fail-under is not met, 2 on bad input.",
    )
    p.add_argument("video", help="the video to check (MP4, MOV, MKV, WebM)")
    p.add_argument(
        "--audio",
        metavar="VOICE",
        default=None,
        help="the voice-over to check against (default: the video's own audio track)",
    )
    p.add_argument(
        "--avatar",
        metavar="NAME|PATH",
        default=None,
        help="the avatar the video was rendered from (library name or image/video path): sharpness, "
        "seam and drift are then measured against its frames (default: the video's own rest frame)",
    )
    p.add_argument("--json", action="store_true", help="print the whole report as one JSON object")
    p.add_argument(
        "--fail-under",
        metavar="LIMITS",
        default=None,
        help="exit 3 unless the report meets these: 'ok' or 'check' (the verdict at least that good), "
        "and/or NAME=VALUE,... with confidence/sharpness as minimums and offset (frames either way), "
        "silence_motion, seam, drift, jitter as maximums; e.g. --fail-under ok,confidence=0.4,jitter=6",
    )
    p.add_argument(
        "--report",
        metavar="FILE",
        action="append",
        default=[],
        help="also write the visual report: FILE.html (one self-contained page: the per-second strip and the "
        "mouth beside the reference) or FILE.png (a one-page sheet); may be given twice",
    )
    p.add_argument(
        "--frames",
        metavar="S,S,...",
        default=None,
        help="seconds whose mouth the report shows beside the reference's, besides the worst second "
        "(e.g. --frames 2,6,12)",
    )
    p.add_argument(
        "--lse",
        action="store_true",
        help="also give LSE-C and LSE-D, SyncNet's published scores, computed as its evaluation code does "
        "(needs `studio models import-syncnet syncnet_v2.model`; without it the report says how to get them)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing report file (default: keep it and write NAME_002 ...)",
    )
    p.add_argument(
        "--threshold",
        type=float,
        default=DEFAULT_SILENCE_THRESHOLD,
        help=f"silence RMS threshold, as the render's (default {DEFAULT_SILENCE_THRESHOLD})",
    )
    p.add_argument(
        "--min-silence",
        type=int,
        default=DEFAULT_MIN_SILENCE_FRAMES,
        metavar="N",
        help=f"shortest silence in frames, as the render's (default {DEFAULT_MIN_SILENCE_FRAMES})",
    )
    p.add_argument(
        "--first-frame",
        type=int,
        default=0,
        metavar="N",
        help="the avatar frame the video starts at (a render of an --in/--out range: its first frame; default 0)",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    import math

    from studio.cli._common import ProgressBar, emit_json
    from studio.core.errors import InputError
    from studio.core.limits import Limits
    from studio.core.quality import check_video

    if not math.isfinite(args.threshold) or args.threshold < 0:
        raise InputError("--threshold must be 0 or more (an RMS level such as 0.008)")
    if args.min_silence < 1:
        raise InputError("--min-silence must be at least 1 frame")
    if args.first_frame < 0:
        raise InputError("--first-frame must be 0 or more")
    limits = Limits.parse(args.fail_under)  # a bad limit is said before any work
    at_seconds = parse_seconds(args.frames)
    for path in args.report:
        check_report_path(path)
    from studio.core import env

    if env.get("STUDIO_PARENT_PID"):  # run by a render queue: end with it
        from studio.core.signals import die_with_parent

        die_with_parent(pdeathsig=False)
    bar = ProgressBar("check")
    try:
        report = check_video(
            args.video,
            args.audio,
            args.avatar,
            threshold=args.threshold,
            min_silence=args.min_silence,
            avatar_start=args.first_frame,
            progress=lambda d, t: bar.update(d, t),
        )
    finally:
        bar.close()
    failed = limits.failures(report)
    lse = published_scores(args) if args.lse else None
    written = write_reports(report, args, at_seconds, lse)
    if args.json:
        out = report.to_json()
        if args.fail_under is not None:
            out["fail_under"] = {
                "limits": limits.to_json(),
                "met": not failed,
                "failures": failed,
            }
        if written:
            out["report_files"] = written
        if lse is not None:
            out["lse"] = lse
        emit_json(out)
    else:
        print_report(report)
        if lse is not None and lse.get("lse_c") is not None:
            print(
                f"LSE-C / LSE-D:   {lse['lse_c']:.3f} / {lse['lse_d']:.3f}   (SyncNet offset {lse['offset_frames']:+d})"
            )
            print(f"note: {lse['note']}")
        elif lse is not None:
            print(f"note: {lse['note']}")
        for path in written:
            print(f"report:          {path}")
    if failed:
        print(f"studio: check: --fail-under not met: {'; '.join(failed)}", file=sys.stderr)
        return FAIL_EXIT
    return 0


def print_report(r) -> None:
    import math

    th = r.thresholds

    def f(v, fmt):
        return "n/a" if v is None or not math.isfinite(v) else format(v, fmt)

    print(f"{r.verdict}: {r.reason}")
    print(f"offset:          {r.offset_frames:+d} frames ({r.offset_ms:+.0f} ms; + = the video is late)")
    print(
        f"confidence:      {f(r.confidence, '.2f')}   (out of sync under {th.min_confidence:.2f}, "
        f"weak under {th.weak_confidence:.2f})"
    )
    print(f"silence motion:  {f(r.silence_motion, '.2f')}   (check over {th.max_silence_motion:.2f})")
    print(f"sharpness:       {f(r.sharpness, '.2f')}   (check under {th.min_sharpness:.2f})")
    print(f"seam:            {f(r.seam, '.1f')} luma levels   (check over {th.max_seam:.1f})")
    print(f"drift:           {f(100 * r.drift, '.1f')} % of the eye distance   (check over {100 * th.max_drift:.1f} %)")
    print(
        f"jitter:          {f(r.jitter, '.2f')} % of the eye distance per frame²   (limit with --fail-under jitter=N)"
    )
    print(f"reference:       {r.reference}")
    if r.worst_second is not None:
        print(f"worst second:    {r.worst_second // 60}:{r.worst_second % 60:02d}")
    for note in r.notes:
        print(f"note: {note}")


def parse_seconds(text: str | None) -> tuple[float, ...]:
    """``--frames 2,6,12``: seconds (one sentence when one is not a number of 0 or more)."""
    from studio.core.errors import InputError
    from studio.core.limits import non_negative

    if text is None or not text.strip():
        return ()
    out = []
    for part in text.split(","):
        v = non_negative(part)
        if v is None:
            raise InputError(f"--frames {part.strip()!r}: give seconds as numbers of 0 or more, e.g. --frames 2,6,12")
        out.append(v)
    return tuple(out)


def check_report_path(path: str) -> None:
    from pathlib import Path

    from studio.core.errors import InputError
    from studio.core.quality.sheet import SUFFIXES

    p = Path(path)
    if p.suffix.lower() not in SUFFIXES:
        raise InputError(f"--report {path}: give a file ending in .html or .png")
    if not p.parent.is_dir():
        raise InputError(f"--report {path}: the folder {p.parent} does not exist")
    if p.is_dir():
        raise InputError(f"--report {path}: that is a folder; give a file name ending in .html or .png")


def write_reports(report, args, at_seconds: tuple[float, ...], lse: dict | None = None) -> list[str]:
    """The ``--report`` files, written atomically; their paths."""
    if not args.report:
        return []
    from studio.core.quality.sheet import pictures, write_report

    pics = pictures(report, args.video, args.avatar, at_seconds, args.first_frame)
    return [str(write_report(report, path, pics, overwrite=args.overwrite, lse=lse)) for path in args.report]


def published_scores(args) -> dict:
    """``--lse``: SyncNet's LSE-C/LSE-D (on the GPU when there is one), or how to get its weights."""
    from studio.core.quality.syncnet import lse_of_video, weights_file

    device = "cpu"
    if weights_file() is not None:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    return lse_of_video(args.video, args.audio, device=device)

"""``studio avatar add|list|show|rm``: the avatar library (photos and videos prepared once)."""

from __future__ import annotations

import sys


def register(sub) -> None:
    from studio.cli._common import runs

    p = sub.add_parser("avatar", help="prepare, list, inspect and remove avatars (photos or videos)")
    cmds = p.add_subparsers(dest="avatar_command", metavar="ACTION")
    cmds.required = True

    a = cmds.add_parser("add", help="prepare an image or video as a library avatar")
    a.add_argument("name", help="library name (letters, digits, '.', '_', '-')")
    a.add_argument("source", help="PNG/JPEG/WebP photo or a video file")
    a.add_argument(
        "--bbox-shift",
        type=int,
        default=0,
        metavar="N",
        help="move the mask's top (the nose-bridge line) down (+) or up (-) in pixels (default 0)",
    )
    a.add_argument(
        "--extra-margin",
        type=int,
        default=10,
        metavar="N",
        help="pixels added below the chin (MuseTalk v1.5 rule, default 10)",
    )
    a.add_argument(
        "--cheek-width",
        type=int,
        default=90,
        metavar="N",
        help="jaw mode: half-width of the central band, MuseTalk units (default 90)",
    )
    a.add_argument(
        "--feather",
        type=float,
        default=24.0,
        metavar="N",
        help="soft-edge width of the blend mask in 256-crop pixels (default 24)",
    )
    a.add_argument(
        "--mask-mode",
        choices=["jaw", "raw"],
        default="jaw",
        help="jaw: lower face with the cheek edges kept (default); raw: the whole lower face",
    )
    a.add_argument(
        "--smooth",
        type=float,
        default=0.5,
        metavar="X",
        help="temporal smoothing of the face track for videos, 0..1 (default 0.5)",
    )
    a.add_argument("--trim-start", type=float, default=None, metavar="S", help="video: start at S seconds")
    a.add_argument("--trim-end", type=float, default=None, metavar="S", help="video: end at S seconds")
    a.add_argument(
        "--face",
        type=int,
        default=None,
        metavar="N",
        help="several faces in the picture: use the N-th from the left (default: the largest)",
    )
    a.add_argument(
        "--matte",
        default=None,
        metavar="MASK.png",
        help="a photo's transparency from this image (white: the presenter, black: transparent; or its own "
        "alpha): render it with --codec prores4444 or vp9 to place it over your graphics",
    )
    a.add_argument("--force", action="store_true", help="replace an avatar of that name (reuses what still fits)")
    runs(a, run_add)

    runs(cmds.add_parser("list", help="list the library"), run_list, json="print a JSON array")

    s = cmds.add_parser("show", help="describe an avatar; optionally write a debug overlay image")
    s.add_argument("name", help="library name, or an image/video path")
    s.add_argument("--overlay", metavar="OUT.png", help="write the frame with box and mask drawn on it")
    s.add_argument("--frame", type=int, default=0, metavar="I", help="frame for --overlay (default 0)")
    runs(s, run_show)

    r = cmds.add_parser("rm", help="remove an avatar from the library")
    r.add_argument("name", help="library name")
    r.set_defaults(func=run_rm)


def run_add(args) -> int:
    from studio.cli._common import ProgressBar
    from studio.core.avatars import library as avatar

    params = avatar.AvatarParams.taken_from(args)
    bar = ProgressBar(f"avatar {args.name}")
    stage_seen = [""]

    def progress(done, total, stage):
        if stage != stage_seen[0]:
            if stage_seen[0]:
                bar.close()
            stage_seen[0] = stage
            bar.label = stage
        bar.update(done, total or done, "" if total else "(length unknown)")

    meta = avatar.library_dir() / args.name / "meta.json"
    before = _stamp(meta)
    try:
        a = avatar.prepare(args.name, args.source, params, force=args.force, progress=progress)
    finally:
        if stage_seen[0]:
            bar.close()
    title = f"added avatar '{a.name}'"
    if before is not None:  # --force on an existing avatar: say whether anything was made again
        title = (
            f"avatar '{a.name}' was already prepared from this source with these settings (every stage checked "
            "and kept, nothing rebuilt; `studio avatar rm` it first to prepare it from scratch)"
            if _stamp(meta) == before
            else f"replaced avatar '{a.name}' (the stages this source and these settings change were rebuilt)"
        )
    return _answer(args, _summary(a), title)


def _stamp(path):
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def run_list(args) -> int:
    from studio.cli._common import emit_json
    from studio.core.avatars import library as avatar

    rows = avatar.list_avatars()
    if args.json:
        emit_json(rows)
        return 0
    if not rows:
        print("no avatars yet; add one with `studio avatar add NAME IMAGE_OR_VIDEO`")
        return 0
    print(f"{'NAME':<20} {'KIND':<6} {'FRAMES':>6} {'SIZE':>11} {'NO FACE':>7}  SOURCE")
    for r in rows:
        if r.get("damaged"):
            print(f"{r['name']:<20} damaged: {r['problem']}; {r['fix']}")
            continue
        size = f"{r['width']}x{r['height']}"
        print(f"{r['name']:<20} {r['kind']:<6} {r['frames']:>6} {size:>11} {r['faceless_frames']:>7}  {r['source']}")
    return 0


def run_show(args) -> int:
    from pathlib import Path

    from studio.core.avatars import library as avatar
    from studio.core.errors import InputError

    out = Path(args.overlay) if args.overlay else None
    if out is not None:
        if out.suffix.lower() != ".png":
            raise InputError(f"--overlay {out}: the overlay is written as PNG; give a path ending in .png")
        if not out.parent.is_dir():
            raise InputError(f"--overlay {out}: the folder {out.parent} does not exist")
    a = avatar.resolve(args.name)
    info = _summary(a)
    if out is not None:
        from PIL import Image

        from studio.core.store.fsutil import atomic_path

        img = avatar.overlay(a, args.frame)
        with atomic_path(out) as tmp:
            Image.fromarray(img).save(tmp, format="PNG")
        info["overlay"] = str(out)
        info["overlay_frame"] = args.frame
    return _answer(args, info, f"avatar '{a.name}'")


def run_rm(args) -> int:
    from studio.core.avatars import library as avatar

    note = avatar.remove(args.name)
    print(f"removed avatar '{args.name}'" + (f" ({note})" if note else ""))
    return 0


def _answer(args, info: dict, title: str) -> int:
    """An avatar's summary: one JSON object with --json, else ``title`` and its lines."""
    from studio.cli._common import emit_json

    if args.json:
        emit_json(info)
    else:
        _print_summary(info, title)
    return 0


def _summary(a) -> dict:
    from studio.core.media.rates import rate_number

    m = a.meta
    return {
        "name": a.name,
        "kind": m["kind"],
        "frames": a.N,
        "width": a.width,
        "height": a.height,
        "fps": rate_number(a.fps),
        "faceless_frames": int(m["faceless_frames"]),
        "box": [int(v) for v in a.boxes[0]],
        "source": m["source"],
        "source_fps": m.get("source_fps"),
        "duration_s": m.get("duration_s"),
        "params": m["params"],
        "bbox_shift_range": m.get("bbox_shift_range"),
        "rebuilt": m.get("rebuilt"),
        "folder": str(a.folder),
        "faces_found": m.get("faces_found", 1),
        "face": m.get("face", 1),
        "downscaled_from": m.get("downscaled_from"),
        "alpha": m.get("alpha") if a.has_alpha else None,  # "source" (its own) or "matte" (--matte)
    }


def _print_summary(info: dict, title: str) -> None:
    out = sys.stdout
    out.write(f"{title}\n")
    out.write(
        f"  kind:          {info['kind']} ({info['frames']} frame(s) at {info['fps']} fps, "
        f"{info['width']}x{info['height']})\n"
    )
    src_fps = info.get("source_fps")
    if info["kind"] == "video" and src_fps and abs(float(src_fps) / float(info["fps"]) - 1) > 0.002:
        out.write(
            f"  resampled:     from the video's {float(src_fps):g} fps to {info['fps']} fps (not a listed rate)\n"
        )
    if info.get("alpha"):
        how = "from --matte" if info["alpha"] == "matte" else "the source's own"
        out.write(f"  alpha:         {how} (render with --codec prores4444 or vp9 to keep it)\n")
    if info.get("downscaled_from"):
        out.write(f"  downscaled:    from {info['downscaled_from'][0]}x{info['downscaled_from'][1]}\n")
    if info.get("faces_found", 1) > 1:
        out.write(f"  face:          {info['face']} of {info['faces_found']} from the left (--face N to change)\n")
    out.write(f"  face-less:     {info['faceless_frames']} frame(s)\n")
    out.write(f"  box (frame 0): x1,y1,x2,y2 = {','.join(map(str, info['box']))}\n")
    lo, hi = info.get("bbox_shift_range") or (None, None)
    if lo is not None:
        out.write(f"  bbox_shift:    {info['params']['bbox_shift']} (useful range {lo}..{hi})\n")
    out.write(f"  source:        {info['source']}\n")
    out.write(f"  cache:         {info['folder']}\n")
    if "overlay" in info:
        out.write(f"  overlay:       {info['overlay']} (frame {info['overlay_frame']})\n")

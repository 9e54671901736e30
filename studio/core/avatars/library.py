"""Avatars: a photo or a video ingested once into a pre-stacked, memory-mapped cache.

    a = prepare("anna", "anna.mp4", AvatarParams(feather=30))   # decode, track, crop, mask; cached
    a = load("anna")                    # < 10 ms: plain .npy files opened with mmap
    a = resolve("clip.mp4")             # a library name, or a path prepared on the fly and cached
    a.frames[i], a.boxes[i], a.crops[i], a.masks[i], a.cycle_index(t)
    avatar_rate("clip.mp4")             # the rate its frames have (or will have once prepared), cheaply

One folder per avatar (``<data>/avatars/<name>/``; path avatars under ``<data>/cache/avatars/``):
``meta.json`` (schema version, source and its SHA-256, parameters, sizes, per-stage keys, per-file
shape/size/checksums) and one ``.npy`` per array. Three stages, each keyed by what it depends on:

    frames  frames, face_ok, raw_landmarks      <- source bytes, trim          (decode + tracking)
    crops   landmarks, boxes, crops, crop_lm    <- + smooth, bbox_shift, extra_margin
    masks   masks                               <- + cheek_width, feather, mask_mode

A changed key or a damaged file rebuilds that stage and the ones after it, nothing before it
(a new feather recomputes masks only). Rebuilt crops also clear ``engines/`` (per-engine arrays
such as MuseTalk latents depend on them). New files are written beside the old ones and renamed
in just before ``meta.json``; a failed or cancelled build leaves the previous avatar intact.

Integrity: ``load()`` checks meta.json's structure, each file's size, header and head/tail CRC
(small files: every byte); every array bigger than 64 KiB is opened as a ``CheckedArray``
(``avatar_check``) whose per-block CRC-32s are verified the first time the render reads each
block. A damaged block, or a meta.json that contradicts itself, rebuilds what it belongs to
from the source, and only when the source still has the SHA-256 recorded at ``add`` time;
otherwise one sentence says what to do. Rebuilds of one folder are serialised across processes
(``flock`` on the folder).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from pathlib import Path

import numpy as np

from studio.core.avatars import faces
from studio.core.avatars.assets import HEX64, NAME_RE, AvatarAssets, AvatarParams, Progress, library_dir
from studio.core.avatars.builder import build, load_folder, rebuild
from studio.core.avatars.cache import Damaged, fix_hint, meta_problem, open_assets, read_meta
from studio.core.avatars.sources import SOURCE_HELP
from studio.core.errors import AvatarError

log = logging.getLogger(__name__)


def prepare(
    name: str,
    source: str | os.PathLike,
    params: AvatarParams = AvatarParams(),
    *,
    force: bool = False,
    progress: Progress | None = None,
) -> AvatarAssets:
    """Ingest ``source`` as library avatar ``name``. An existing name needs ``force=True``, and then
    only what the new source/parameters change is recomputed."""
    _check_name(name)
    params.check()
    src = _check_source(source)
    folder = library_dir() / name
    if (folder / "meta.json").exists() and not force:
        raise AvatarError(f"an avatar named '{name}' already exists; pick another name or pass --force to replace it")
    from studio.core.store.fsutil import file_sha256, quick_file_key

    return build(folder, name, src, file_sha256(src), quick_file_key(src), params, progress)


def load(name: str) -> AvatarAssets:
    """Open library avatar ``name`` (< 10 ms); a damaged cache is rebuilt from its source (with a
    warning), now or when the render first reads a damaged block."""
    _check_name(name)
    folder = library_dir() / name
    if not folder.is_dir():
        raise AvatarError(
            f"no avatar named '{name}' in the library; see `studio avatar list` or add it "
            f"with `studio avatar add {name} IMAGE_OR_VIDEO`"
        )
    return load_folder(folder, name)


def resolve(
    name_or_path: str | os.PathLike, params: AvatarParams | None = None, progress: Progress | None = None
) -> AvatarAssets:
    """A library name, or an image/video path prepared on the fly and cached (reused while the
    source and the parameters are unchanged). ``params`` for a library name re-prepares it when
    they differ from its own."""
    text = str(name_or_path)
    is_name = not isinstance(name_or_path, os.PathLike) and NAME_RE.match(text)
    if is_name and (library_dir() / text / "meta.json").exists():
        assets = load(text)
        if params is None or params == assets.params:
            return assets
        return rebuild(assets.folder, text, assets.meta, params.check(), progress)
    path = Path(text).expanduser()
    if not path.exists() and NAME_RE.match(text) and not path.suffix:
        raise AvatarError(f"no avatar named '{text}' in the library and no such file; see `studio avatar list`")
    src = _check_source(path)
    params = (params or AvatarParams()).check()
    from studio.core.store.fsutil import file_sha256, quick_file_key

    stem, folder = _cache_folder(src)
    old = read_meta(folder)
    qkey = quick_file_key(src)
    known = old.get("source_sha256") if old and old.get("source_key") == qkey else None
    sha = known if isinstance(known, str) and HEX64.match(known) else file_sha256(src)
    return build(folder, stem, src, sha, qkey, params, progress)


def _cache_folder(src: Path) -> tuple[str, Path]:
    """A path avatar's name and cache folder (``<data>/cache/avatars/STEM-HASH``)."""
    import hashlib

    from studio.core.env import sub_dir

    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", src.stem)[:40] or "avatar"
    return stem, sub_dir("cache/avatars") / f"{stem}-{hashlib.sha256(str(src).encode()).hexdigest()[:12]}"


def avatar_size(name_or_path: str | os.PathLike | AvatarAssets) -> tuple[int, int]:
    """The (width, height) of an avatar's frames without preparing it: a library avatar's recorded
    size, a prepared path's, else the source's header (a photo's EXIF turn applied; above 4K the
    size it is scaled down to). What a render's frame size and enlargement follow."""
    if hasattr(name_or_path, "width"):
        return int(name_or_path.width), int(name_or_path.height)
    text = str(name_or_path)
    is_name = not isinstance(name_or_path, os.PathLike) and NAME_RE.match(text)
    if is_name and (library_dir() / text / "meta.json").exists():
        meta = read_meta(library_dir() / text) or {}
        return int(meta["width"]), int(meta["height"])
    src = _check_source(Path(text).expanduser())
    from studio.core.store.fsutil import quick_file_key

    meta = read_meta(_cache_folder(src)[1])
    if meta and meta.get("source_key") == quick_file_key(src) and meta.get("width"):
        return int(meta["width"]), int(meta["height"])
    from studio.core.avatars.sources import fitted_size, source_kind

    if source_kind(src) == "photo":
        from PIL import Image

        with Image.open(src) as im:
            w, h = im.size
            if im.getexif().get(0x0112, 1) in (5, 6, 7, 8):  # EXIF orientation: turned a quarter
                w, h = h, w
    else:
        import av

        try:
            with av.open(str(src)) as c:
                s = c.streams.video[0]
                w, h = int(s.codec_context.width), int(s.codec_context.height)
        except Exception as exc:  # noqa: BLE001 - deliberate: any failure here is reported, not fatal
            raise AvatarError(f"{src}: the video cannot be opened ({exc}); re-encode it as H.264 MP4") from None
    return fitted_size(w, h)


def avatar_rate(name_or_path: str | os.PathLike | AvatarAssets):
    """The rate of an avatar's frames (a Fraction) without preparing it: a library avatar's recorded
    rate; a photo's 25; a video file's own rate when listed, else the listed rate it is resampled to
    (what ``prepare`` will give). What the ``auto`` output rate follows."""
    from studio.core.media.rates import DEFAULT_RATE, listed, nearest

    if hasattr(name_or_path, "fps"):
        return name_or_path.fps if name_or_path.kind == "video" else DEFAULT_RATE
    text = str(name_or_path)
    is_name = not isinstance(name_or_path, os.PathLike) and NAME_RE.match(text)
    if is_name and (library_dir() / text / "meta.json").exists():
        meta = read_meta(library_dir() / text) or {}
        if meta.get("kind") != "video":
            return DEFAULT_RATE
        from studio.core.media.rates import parse_rate

        try:
            return parse_rate(meta.get("rate") or meta.get("fps") or DEFAULT_RATE)
        except (TypeError, ValueError):
            return DEFAULT_RATE
    src = _check_source(Path(text).expanduser())
    from studio.core.avatars.sources import VideoReader, source_kind

    if source_kind(src) == "photo":
        return DEFAULT_RATE
    own = VideoReader(src, None, None).source_fps
    return listed(own) or nearest(own)


#: the largest video frame a face check decodes (an 8K frame): a 294 KB upload of 9984x9984 frames
#: cost 1.3 GB of server memory per request before this was read from the header
MAX_CHECK_FRAME_PIXELS = 7680 * 4320
#: pixels a face check decodes at most (about 1900 frames of 1080p): seeking to each sampled moment
#: decodes a keyframe interval at most; a video whose keyframes are too far apart stops here
CHECK_BUDGET_PIXELS = 4_000_000_000


def check_video_faces(source: str | os.PathLike, samples: int = 8) -> int:
    """A quick look at a video avatar before it is prepared (what a server does before it accepts
    a render of an uploaded video, whose full tracking can take minutes): it opens and decodes, and
    a face is found in one of up to ``samples`` moments spread across it. Returns the frame where the
    first face was found; one sentence (``AvatarError``) otherwise.

    Its cost is bounded before decoding, from the header: a frame over ``MAX_CHECK_FRAME_PIXELS`` is
    refused unread, each sampled moment is reached by seeking (only the frames from the keyframe
    before it are decoded), and no more than ``CHECK_BUDGET_PIXELS`` are decoded in all. It stops at
    the first sampled frame with a face (a presenter video: its first sample). Stricter than
    preparation, which accepts a video with a face in any one frame."""
    import av

    from studio.core.avatars.sources import over_grey, stream_has_alpha
    from studio.core.media.rates import DEFAULT_RATE

    src = _check_source(source)
    try:
        c = av.open(str(src))
    except Exception as exc:  # noqa: BLE001 - any demuxer failure gets the same sentence
        raise AvatarError(f"{src}: the video cannot be opened ({str(exc)[:120]}); re-encode it as H.264 MP4") from None
    with c:
        if not c.streams.video:
            raise AvatarError(f"{src}: has no video stream; give {SOURCE_HELP}")
        s = c.streams.video[0]
        w, h = int(s.codec_context.width or 0), int(s.codec_context.height or 0)
        if w * h > MAX_CHECK_FRAME_PIXELS:
            raise AvatarError(
                f"{src}: the video's frames are {w}x{h} ({w * h / 1e6:.0f} megapixels), over the "
                f"{MAX_CHECK_FRAME_PIXELS / 1e6:.0f} megapixels of an 8K frame; scale it down (3840x2160 is the "
                "most an avatar uses) and add it again"
            )
        alpha = stream_has_alpha(s)
        tb = s.time_base
        duration = float(s.duration * tb) if s.duration and tb else (c.duration / 1e6 if c.duration else None)
        rate = float(s.average_rate or s.guessed_rate or 25)
        origin = float(s.start_time * tb) if s.start_time is not None and tb else 0.0
        budget = CHECK_BUDGET_PIXELS // max(1, w * h)  # frames we may decode in all
        grid = float(DEFAULT_RATE)  # frame k is the one shown at k / 25 s, as the avatar will have them
        total = int(np.ceil(duration * grid - 1e-6)) if duration else 0
        every = max(1, (total or samples) // samples)  # frames 0, every, 2 * every ... (as a full pass sampled)
        moments = [k * every / grid for k in range(samples)] if total else [0.0]
        looked = 0
        with faces.FaceTracker(video=False, max_faces=1) as finder:
            for t in moments:
                frame, used = frame_near(c, s, origin + t, budget, 1.0 / rate - 1e-6)  # the one shown at t
                budget -= used
                if frame is None:
                    if budget <= 0:
                        break
                    continue
                rgb = frame.to_ndarray(format="rgba" if alpha else "rgb24")
                rot = getattr(frame, "rotation", 0) or 0
                if rot % 360:
                    rgb = np.ascontiguousarray(np.rot90(rgb, k=int(round(rot / 90)) % 4))
                rgb = over_grey(rgb[..., :3], rgb[..., 3]) if rgb.shape[2] == 4 else rgb
                looked += 1
                if finder(rgb) is not None:
                    return int(round(t * grid))
    if looked == 0:
        raise AvatarError(f"{src}: no video frames decode; re-encode it as H.264 MP4")
    raise AvatarError(
        f"{src}: no face found in {looked} frame(s) sampled across the video; use a video where the face is "
        "clearly visible, frontal and not too small"
    )


def frame_near(container, stream, t: float, budget: int, slack: float = 1e-3):
    """``(frame, decoded)``: the first frame at or after ``t`` seconds, less ``slack`` (seeking to the
    keyframe before it), or None when the stream ends or ``budget`` frames were decoded first."""
    used = 0
    try:
        if t > 0 and stream.time_base:
            container.seek(int(t / stream.time_base), stream=stream, backward=True)
        for frame in container.decode(stream):
            used += 1
            if frame.time is None or frame.time >= t - slack:
                return frame, used
            if used >= budget:
                return None, used
    except Exception as exc:  # noqa: BLE001 - a damaged stretch: that sample is skipped
        log.debug("face check: no frame at %.2f s (%s)", t, exc)
    return None, used


def output_rate_for(setting, avatar):
    """The output rate of a render of ``avatar`` (a name, a path or an ``AvatarAssets``) with the
    ``fps`` setting ``setting`` (``"auto"``: the avatar's rate, 25 for a photo)."""
    from studio.core.media.rates import parse_rate

    if setting not in (None, "", "auto"):
        return parse_rate(setting)
    return avatar_rate(avatar)


def list_avatars() -> list[dict]:
    """The library, sorted by name (damaged entries are listed with ``"damaged": True``)."""
    out = []
    for folder in sorted(library_dir().iterdir()):
        if not folder.is_dir() or not (folder / "meta.json").exists():
            continue
        meta = read_meta(folder)
        problem = meta_problem(meta)
        if problem is None:
            try:  # the quick checks of load(): sizes, headers, head/tail checksums
                open_assets(folder, meta, wrap=False)
            except Damaged as exc:
                problem = str(exc)
        if problem is not None:
            out.append(
                {
                    "name": folder.name,
                    "damaged": True,
                    "problem": problem,
                    "fix": fix_hint(folder.name, folder, meta),
                    "folder": str(folder),
                    "source": meta.get("source") if isinstance(meta, dict) else None,
                }
            )
            continue
        thumb = folder / "thumbnail.png"
        out.append(
            {
                "name": folder.name,
                "kind": meta.get("kind"),
                "frames": meta.get("frames"),
                "width": meta.get("width"),
                "height": meta.get("height"),
                "fps": meta.get("fps"),
                "faceless_frames": meta.get("faceless_frames"),
                "duration_s": meta.get("duration_s"),
                "source": meta.get("source"),
                "params": meta.get("params"),
                "size_bytes": sum(f.get("bytes", 0) for f in meta["files"].values()),
                "thumbnail": str(thumb) if thumb.exists() else None,
                "folder": str(folder),
                "damaged": False,
            }
        )
    return out


def remove(name: str) -> str:
    """Remove library avatar ``name``; "" or a note on what was kept. An avatar folder that is a
    symbolic link loses the link only: the folder it points to was not made by Studio, so it stays."""
    _check_name(name)
    folder = library_dir() / name
    if folder.is_symlink():
        target = os.readlink(folder)
        folder.unlink()
        log.info("removed avatar %s (a link to %s; that folder is kept)", name, target)
        return f"a link to {target}; that folder is kept"
    if not folder.is_dir():
        raise AvatarError(f"no avatar named '{name}' in the library; see `studio avatar list`")
    try:
        shutil.rmtree(folder)
    except OSError as exc:
        raise AvatarError(
            f"avatar '{name}' could not be removed completely ({exc.strerror or exc}: {exc.filename or folder}); "
            "check the folder's permissions and remove it again"
        ) from None
    log.info("removed avatar %s", name)
    return ""


def rename(name: str, new: str) -> None:
    """Rename library avatar ``name`` to ``new``: one ``rename`` of its folder (its files stay as they
    are), then its meta.json's name. Refused, changing nothing, when ``new`` is invalid or taken."""
    import json

    from studio.core.store.fsutil import atomic_write_bytes

    _check_name(name)
    _check_name(new)
    folder, target = library_dir() / name, library_dir() / new
    if not (folder / "meta.json").exists():
        raise AvatarError(f"no avatar named '{name}' in the library; see `studio avatar list`")
    if new == name:
        return
    if target.exists() or target.is_symlink():
        raise AvatarError(f"an avatar named '{new}' already exists; pick another name or remove that one first")
    os.rename(folder, target)  # atomic on one file system: readers see the old name or the new one
    meta = read_meta(target)
    if meta is not None and meta.get("name") != new:
        atomic_write_bytes(target / "meta.json", json.dumps({**meta, "name": new}, indent=1).encode())
    log.info("renamed avatar %s to %s", name, new)


def overlay(assets: AvatarAssets, index: int = 0) -> np.ndarray:
    """RGB debug picture of frame ``index``: the box, the tinted mask and the mouth/jaw landmarks."""
    if not 0 <= index < assets.N:
        raise AvatarError(f"frame {index} is out of range; avatar '{assets.name}' has frames 0..{assets.N - 1}")
    return faces.overlay_image(
        assets.frames[index],
        assets.boxes[index],
        assets.masks[index],
        assets.landmarks[index],
        bool(assets.face_ok[index]),
    )


def _check_name(name: str) -> None:
    if not NAME_RE.match(str(name)):
        raise AvatarError(f"'{name}' is not a valid avatar name; use up to 64 letters, digits, '.', '_' or '-'")


def _check_source(source: str | os.PathLike) -> Path:
    p = Path(source).expanduser()
    if not p.exists():
        raise AvatarError(f"{p}: no such file; give {SOURCE_HELP}")
    if p.is_dir():
        raise AvatarError(f"{p}: is a folder; give {SOURCE_HELP}")
    if p.stat().st_size == 0:
        raise AvatarError(f"{p}: the file is empty (0 bytes); give {SOURCE_HELP}")
    return p.resolve()

"""Avatars: a photo or a video ingested once into a pre-stacked, memory-mapped cache.

    a = prepare("anna", "anna.mp4", AvatarParams(feather=30))   # decode, track, crop, mask; cached
    a = load("anna")                    # < 10 ms: plain .npy files opened with mmap
    a = resolve("clip.mp4")             # a library name, or a path prepared on the fly and cached
    a.frames[i], a.boxes[i], a.crops[i], a.masks[i], a.cycle_index(t)

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

import errno
import json
import logging
import os
import re
import shutil
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np

from studio.core.avatars import faces
from studio.core.avatars.checksums import CheckedArray, block_spec, decode_sums
from studio.core.avatars.sources import SOURCE_HELP, VideoReader, fit_photo, read_image, source_kind
from studio.core.constants import FACE_SIZE, FPS
from studio.core.errors import AvatarError

log = logging.getLogger(__name__)

SCHEMA_VERSION = 2  # 2: per-block checksums (schema 1 caches are upgraded in place)
KEY_VERSION = 1  # in the stage keys: bumping it rebuilds every cache from its source
MAX_CACHE_GB = 24.0  # refuse bigger caches (override with $STUDIO_AVATAR_MAX_GB)
DISK_RESERVE = 512 << 20  # bytes left free on the disk after the cache
STAGES = (
    ("frames", ("frames", "face_ok", "raw_landmarks")),
    ("crops", ("landmarks", "boxes", "crops", "crop_landmarks")),
    ("masks", ("masks",)),
)
FULL_CHECKSUM_BYTES = 64 << 10  # files up to this size get a CRC of every byte at load; bigger: head +
# tail at load, then per-block CRCs as the arrays are read (avatar_check)
SAMPLE_BYTES = 32 << 10
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")

Progress = Callable[[int, "int | None", str], None]


@dataclass(frozen=True)
class AvatarParams:
    """How an avatar is prepared. Units are MuseTalk's where MuseTalk has the parameter."""

    bbox_shift: int = 0  # pixels: moves the box's mirror line (nose bridge) down (+) or up (-)
    extra_margin: int = 10  # pixels added below the chin (v1.5 rule: added to y2)
    cheek_width: int = 90  # jaw mode: half-width of the central band, MuseTalk's 512-parsing pixels
    feather: float = 24.0  # width in 256-crop pixels of the mask's soft edge (0 = hard edge)
    mask_mode: str = "jaw"  # "jaw" (v1.5) | "raw" (the silhouette's lower half)
    smooth: float = 0.5  # temporal smoothing 0..1 of landmarks/boxes (video avatars)
    trim_start: float | None = None  # seconds into a video
    trim_end: float | None = None
    face: int | None = None  # photos/videos with several faces: the N-th from the left (1-based)

    def __post_init__(self):  # one canonical type per field, so cache keys do not depend on 24 vs 24.0
        try:
            for name, kind in (
                ("bbox_shift", int),
                ("extra_margin", int),
                ("cheek_width", int),
                ("feather", float),
                ("smooth", float),
                ("mask_mode", str),
            ):
                object.__setattr__(self, name, kind(getattr(self, name)))
            for name in ("trim_start", "trim_end"):
                v = getattr(self, name)
                object.__setattr__(self, name, None if v is None else float(v))
            if self.face is not None:
                object.__setattr__(self, "face", int(self.face))
        except (TypeError, ValueError) as exc:
            raise AvatarError(f"invalid avatar parameter ({exc}); use numbers for sizes and times") from None

    def check(self) -> AvatarParams:
        """Return self, or raise ``AvatarError`` naming the bad parameter."""
        if abs(int(self.bbox_shift)) > 1000:
            raise AvatarError("--bbox-shift must be between -1000 and 1000 pixels")
        if self.extra_margin < 0:
            raise AvatarError("--extra-margin must be 0 or more pixels")
        if not 0 <= self.cheek_width <= 512:
            raise AvatarError("--cheek-width must be between 0 and 512")
        if not 0 <= self.feather <= 128:
            raise AvatarError("--feather must be between 0 and 128 crop pixels")
        if self.mask_mode not in faces.MASK_MODES:
            raise AvatarError(f"--mask-mode must be one of {', '.join(faces.MASK_MODES)}")
        if not 0.0 <= self.smooth <= 1.0:
            raise AvatarError("--smooth must be between 0 and 1")
        if self.trim_start is not None and self.trim_start < 0:
            raise AvatarError("--trim-start must be 0 or more seconds")
        if self.trim_end is not None and self.trim_end <= (self.trim_start or 0.0):
            raise AvatarError("--trim-end must be later than --trim-start (seconds into the video)")
        if self.face is not None and not 1 <= self.face <= faces.MAX_FACES:
            raise AvatarError(f"--face must be between 1 and {faces.MAX_FACES} (faces are numbered from the left)")
        return self

    @classmethod
    def from_json(cls, d: dict) -> AvatarParams:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclass(frozen=True, eq=False)
class AvatarAssets:
    """A prepared avatar: metadata plus stacked arrays (memory-mapped, read-only)."""

    name: str
    folder: Path
    meta: dict
    frames: np.ndarray  # [N,H,W,3] uint8 RGB
    boxes: np.ndarray  # [N,4] int32 x1,y1,x2,y2 (face-less frames: the nearest valid box)
    crops: np.ndarray  # [N,256,256,3] uint8 RGB
    masks: np.ndarray  # [N,256,256] uint8, 255 = take the generated face
    landmarks: np.ndarray  # [N,478,2] float32 frame pixels (smoothed)
    crop_landmarks: np.ndarray  # [N,478,2] float32 crop pixels
    face_ok: np.ndarray  # [N] bool
    raw_landmarks: np.ndarray | None = field(default=None, repr=False)  # [N,478,2] as tracked

    @property
    def N(self) -> int:  # noqa: N802 (the contract's name)
        return int(self.frames.shape[0])

    @property
    def width(self) -> int:
        return int(self.frames.shape[2])

    @property
    def height(self) -> int:
        return int(self.frames.shape[1])

    @property
    def fps(self) -> int:
        return FPS

    @property
    def kind(self) -> str:
        return self.meta["kind"]

    @property
    def params(self) -> AvatarParams:
        return AvatarParams.from_json(self.meta["params"])

    def cycle_index(self, t):
        """Avatar frame for output frame ``t``: ping-pong over frames + reversed(frames)."""
        n = self.N
        if n <= 1:
            return 0 if np.isscalar(t) else np.zeros_like(np.asarray(t))
        i = np.asarray(t) % (2 * n)
        out = np.where(i < n, i, 2 * n - 1 - i)
        return int(out) if np.isscalar(t) else out

    def engine_dir(self, key: str) -> Path:
        """``<folder>/engines/<key>/`` for per-engine arrays; emptied whenever the crops change."""
        if not _KEY_RE.match(key):
            raise ValueError(f"engine key {key!r} must be letters, digits, '.', '_' or '-'")
        path = self.folder / "engines" / key
        path.mkdir(parents=True, exist_ok=True)
        return path


# --------------------------------------------------------------------------------------------
# Public API


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

    return _build(folder, name, src, file_sha256(src), quick_file_key(src), params, progress)


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
    return _load_folder(folder, name)


def resolve(
    name_or_path: str | os.PathLike, params: AvatarParams | None = None, progress: Progress | None = None
) -> AvatarAssets:
    """A library name, or an image/video path prepared on the fly and cached (reused while the
    source and the parameters are unchanged). ``params`` for a library name re-prepares it when
    they differ from its own."""
    text = str(name_or_path)
    is_name = not isinstance(name_or_path, os.PathLike) and _NAME_RE.match(text)
    if is_name and (library_dir() / text / "meta.json").exists():
        assets = load(text)
        if params is None or params == assets.params:
            return assets
        params.check()
        src = Path(assets.meta["source"])
        return _build(
            assets.folder,
            text,
            src if src.is_file() else None,
            assets.meta["source_sha256"],
            assets.meta.get("source_key"),
            params,
            progress,
            check_source=True,
        )
    path = Path(text).expanduser()
    if not path.exists() and _NAME_RE.match(text) and not path.suffix:
        raise AvatarError(f"no avatar named '{text}' in the library and no such file; see `studio avatar list`")
    src = _check_source(path)
    params = (params or AvatarParams()).check()
    import hashlib

    from studio.core.store.fsutil import file_sha256, quick_file_key
    from studio.core.store.paths import sub_dir

    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", src.stem)[:40] or "avatar"
    folder = sub_dir("cache/avatars") / f"{stem}-{hashlib.sha256(str(src).encode()).hexdigest()[:12]}"
    old = _read_meta(folder)
    qkey = quick_file_key(src)
    known = old.get("source_sha256") if old and old.get("source_key") == qkey else None
    sha = known if isinstance(known, str) and _HEX64.match(known) else file_sha256(src)
    return _build(folder, stem, src, sha, qkey, params, progress)


def list_avatars() -> list[dict]:
    """The library, sorted by name (damaged entries are listed with ``"damaged": True``)."""
    out = []
    for folder in sorted(library_dir().iterdir()):
        if not folder.is_dir() or not (folder / "meta.json").exists():
            continue
        meta = _read_meta(folder)
        problem = _meta_problem(meta)
        if problem is None:
            try:  # the quick checks of load(): sizes, headers, head/tail checksums
                _open(folder, meta, wrap=False)
            except _Damaged as exc:
                problem = str(exc)
        if problem is not None:
            out.append(
                {
                    "name": folder.name,
                    "damaged": True,
                    "problem": problem,
                    "fix": _fix_hint(folder.name, folder, meta),
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


def remove(name: str) -> None:
    _check_name(name)
    folder = library_dir() / name
    if not folder.is_dir():
        raise AvatarError(f"no avatar named '{name}' in the library; see `studio avatar list`")
    shutil.rmtree(folder)
    log.info("removed avatar %s", name)


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


def library_dir() -> Path:
    from studio.core.store.paths import sub_dir

    return sub_dir("avatars")


# --------------------------------------------------------------------------------------------
# Opening and checking a cache


class _Damaged(Exception):
    pass


ARRAY_STAGE = {n: stage for stage, names in STAGES for n in names}
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def _load_folder(folder: Path, name: str) -> AvatarAssets:
    meta = _read_meta(folder)
    problem = _meta_problem(meta)
    if problem is None and meta["schema_version"] != SCHEMA_VERSION:
        meta = _upgrade(folder, name, meta)
    if problem is None and meta is not None:
        try:
            return _open(folder, meta)
        except _Damaged:  # _build finds which stages are damaged, says so and rebuilds them
            pass
    elif problem is not None and not _rebuildable(meta):
        raise AvatarError(f"avatar '{name}' is damaged ({problem}); {_fix_hint(name, folder, None)}")
    meta = meta if meta is not None else _read_meta(folder)
    src = Path(meta["source"])
    params = AvatarParams.from_json(meta["params"])
    return _build(
        folder,
        name,
        src if src.is_file() else None,
        meta["source_sha256"],
        meta.get("source_key"),
        params,
        None,
        check_source=True,
    )


def _open(folder: Path, meta: dict, verify: bool = True, wrap: bool = True) -> AvatarAssets:
    """The cache's arrays after the quick checks; those over 64 KiB as ``CheckedArray``s whose
    blocks are verified when first read (``wrap=False``: plain memory maps, for listing)."""
    arrays, specs = {}, meta["files"]
    side = max(int(meta["width"]), int(meta["height"]))
    for _, names in STAGES:
        for n in names:
            arrays[n] = _open_array(folder, n, specs.get(n), verify, side)
    n_frames = meta["frames"]
    for n, a in arrays.items():
        if a.shape[0] != n_frames:
            raise _Damaged(f"{n}.npy has {a.shape[0]} rows, meta.json says {n_frames}")
    if wrap:
        guard = _Guard(folder, meta)
        for n, a in arrays.items():
            if specs[n]["bytes"] > FULL_CHECKSUM_BYTES:
                try:
                    arrays[n] = guard.arrays[n] = CheckedArray(a, specs[n], n, guard, _BOUNDS[n](side))
                except ValueError as exc:
                    raise _Damaged(f"{n}.npy: {exc}") from None
            else:
                guard.small[n] = a
    return AvatarAssets(
        name=meta["name"],
        folder=folder,
        meta=meta,
        frames=arrays["frames"],
        boxes=arrays["boxes"],
        crops=arrays["crops"],
        masks=arrays["masks"],
        landmarks=arrays["landmarks"],
        crop_landmarks=arrays["crop_landmarks"],
        face_ok=arrays["face_ok"],
        raw_landmarks=arrays["raw_landmarks"],
    )


# What a cached value may be: landmarks stay near the frame (a face partly outside it still has
# its points within a few frame sizes), crop landmarks near the crop unless the box is tiny.
_BOUNDS = {
    "frames": lambda side: None,
    "crops": lambda side: None,
    "masks": lambda side: None,
    "face_ok": lambda side: None,
    "boxes": lambda side: side + 2.0,
    "landmarks": lambda side: 16.0 * side,
    "raw_landmarks": lambda side: 16.0 * side,
    "crop_landmarks": lambda side: 1e7,
}


def _values_ok(arr, name: str, side: int) -> bool:
    bound = _BOUNDS[name](side)
    if bound is None:
        return True
    a = np.asarray(arr)
    return bool(np.isfinite(a).all() and (np.abs(a) <= bound).all())


def _open_array(folder: Path, name: str, spec: dict | None, verify: bool = True, side: int | None = None) -> np.ndarray:
    """One cache file memory-mapped after the quick checks: size, header, shape and dtype, the
    head/tail CRC (``verify``), and for small files (read whole here) their values (``side``:
    the frame's larger side)."""
    path = folder / f"{name}.npy"
    if spec is None:
        raise _Damaged(f"{name}.npy is not recorded in meta.json")
    try:
        size = path.stat().st_size
        if size != spec["bytes"]:
            raise _Damaged(f"{name}.npy is {size} bytes, {spec['bytes']} expected (truncated or overwritten)")
        arr = np.load(path, mmap_mode="r")
    except FileNotFoundError:
        raise _Damaged(f"{name}.npy is missing") from None
    except (ValueError, OSError) as exc:
        raise _Damaged(f"{name}.npy is unreadable ({exc})") from None
    if list(arr.shape) != spec["shape"] or arr.dtype.str != spec["dtype"]:
        raise _Damaged(f"{name}.npy holds {arr.dtype.str}{list(arr.shape)}, {spec['dtype']}{spec['shape']} expected")
    if verify and _checksum(path, size) != spec["crc32"]:
        raise _Damaged(f"{name}.npy fails its checksum")
    if side is not None and size <= FULL_CHECKSUM_BYTES and not _values_ok(arr, name, side):
        raise _Damaged(f"{name}.npy holds values no face tracker produces (NaN, infinite or far outside the frame)")
    return arr


def _full_problem(folder: Path, name: str, spec: dict, side: int) -> str | None:
    """Every block of one cache file checked (before a rebuild reads it as its input)."""
    try:
        arr = _open_array(folder, name, spec)
        rows, sums = decode_sums(spec, int(arr.shape[0]))
    except _Damaged as exc:
        return str(exc)
    except ValueError as exc:
        return f"{name}.npy: {exc}"
    from studio.core.avatars.checksums import block_checksums

    bad = np.flatnonzero(block_checksums(arr, rows) != sums)
    if len(bad):
        return f"{name}.npy rows {int(bad[0]) * rows}.. fail their checksum"
    if not _values_ok(arr, name, side):
        return f"{name}.npy holds values no face tracker produces (NaN, infinite or far outside the frame)"
    return None


def _file_spec(path: Path) -> dict:
    arr = np.load(path, mmap_mode="r")
    size = path.stat().st_size
    return {
        "shape": list(arr.shape),
        "dtype": arr.dtype.str,
        "bytes": size,
        "crc32": _checksum(path, size),
        **block_spec(arr),
    }


def _checksum(path: Path, size: int) -> int:
    """CRC-32 of the whole file when small (boxes, face flags), else of its first and last 32 KiB.

    Cheap enough for a < 10 ms load; with the exact byte size and the header check it catches
    truncation, replacement and overwritten headers. Damage anywhere else in a big file is found
    by its per-block checksums when the block is first read (``avatar_check``)."""
    with open(path, "rb") as fh:
        if size <= FULL_CHECKSUM_BYTES:
            return zlib.crc32(fh.read())
        crc = zlib.crc32(fh.read(SAMPLE_BYTES))
        fh.seek(size - SAMPLE_BYTES)
        return zlib.crc32(fh.read(SAMPLE_BYTES), crc)


def _read_meta(folder: Path) -> dict | None:
    """meta.json as a dict, or None when it is missing or not JSON (see ``_meta_problem``)."""
    try:
        meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def _meta_problem(meta: dict | None) -> str | None:
    """What is wrong with a meta.json, in a few words, or None when it is consistent."""
    if meta is None:
        return "meta.json is missing or not valid JSON"

    def is_int(v) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    if meta.get("schema_version") not in (1, SCHEMA_VERSION):
        return f"meta.json has cache schema {meta.get('schema_version')!r}, this version reads 1..{SCHEMA_VERSION}"
    n = meta.get("frames")
    if not is_int(n) or n < 1:
        return f"meta.json says {n!r} frames"
    for key in ("width", "height"):
        if not is_int(meta.get(key)) or meta[key] < 1:
            return f"meta.json has no valid {key}"
    for key, kind in (
        ("source", str),
        ("source_sha256", str),
        ("params", dict),
        ("stages", dict),
        ("name", str),
        ("kind", str),
    ):
        if not isinstance(meta.get(key), kind):
            return f"meta.json has no valid {key}"
    files = meta.get("files")
    if not isinstance(files, dict):
        return "meta.json lists no array files"
    for _, names in STAGES:
        for name in names:
            spec = files.get(name)
            if not isinstance(spec, dict):
                return f"meta.json does not record {name}.npy"
            shape = spec.get("shape")
            if (
                not isinstance(shape, list)
                or not shape
                or not all(is_int(v) and v >= 0 for v in shape)
                or not isinstance(spec.get("dtype"), str)
                or not is_int(spec.get("bytes"))
                or not is_int(spec.get("crc32"))
            ):
                return f"meta.json's record of {name}.npy is malformed"
            if shape[0] != n:
                return f"meta.json says {n} frames but records {shape[0]} rows for {name}.npy"
            if meta["schema_version"] == SCHEMA_VERSION and not (
                is_int(spec.get("block_rows")) and isinstance(spec.get("block_crc32"), str)
            ):
                return f"meta.json has no block checksums for {name}.npy"
    if files["frames"]["shape"][1:] != [meta["height"], meta["width"], 3]:
        return "meta.json's frame size disagrees with frames.npy"
    return None


def _rebuildable(meta: dict | None) -> bool:
    """Whether a damaged meta.json still says which file (and which SHA-256) to rebuild from."""
    if not isinstance(meta, dict):
        return False
    if not isinstance(meta.get("source"), str) or not _HEX64.match(str(meta.get("source_sha256", ""))):
        return False
    try:
        AvatarParams.from_json(meta["params"]).check()
    except (AvatarError, KeyError, TypeError, AttributeError):
        return False
    return True


def _fix_hint(name: str, folder: Path, meta: dict | None) -> str:
    """The one instruction for a damaged avatar, the same in `render`, `avatar list` and the app."""
    library = folder.parent == library_dir()
    if meta is not None and _meta_problem(meta) is None or _rebuildable(meta):
        src = Path(str(meta.get("source")))
        if src.is_file():
            return f"it is rebuilt from its source {src} the next time it is used"
    if library:
        return (
            f"add it again with `studio avatar add {name} SOURCE --force`, or remove it with `studio avatar rm {name}`"
        )
    return f"delete the cache folder {folder} and use the file again"


def _upgrade(folder: Path, name: str, meta: dict) -> dict | None:
    """A schema 1 cache (head/tail checksums only) gets per-block checksums of its files as they
    are (the old checks cannot tell whether they were damaged before); None when they fail the
    old checks (then the damaged stages are rebuilt)."""
    files = dict(meta["files"])
    try:
        for _, names in STAGES:
            for n in names:
                arr = _open_array(folder, n, files.get(n))
                files[n] = {**files[n], **block_spec(arr)}
    except _Damaged as exc:
        log.warning("avatar '%s' cache is damaged (%s); rebuilding it", name, exc)
        return None
    from studio.core.store.fsutil import atomic_write_bytes

    meta = {**meta, "files": files, "schema_version": SCHEMA_VERSION}
    atomic_write_bytes(folder / "meta.json", json.dumps(meta, indent=1).encode())
    log.info("avatar '%s': cache upgraded to schema %d (block checksums)", name, SCHEMA_VERSION)
    return meta


def _file_id(path: Path) -> tuple | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


class _Guard:
    """Repairs one opened avatar when its ``CheckedArray``s find a damaged block: the damaged
    stage and the ones after it are rebuilt from the source (``_build``, only if the source's
    SHA-256 still matches), then every array of the assets reads the new files.

    Data already handed out must not change under the caller: the blocks already verified
    (and so possibly read) must have the same checksums in the rebuilt files. The build is
    deterministic for one source, so they do; if not, one sentence asks to run the command again.
    """

    def __init__(self, folder: Path, meta: dict):
        self.folder, self.meta = folder, meta
        self.arrays: dict[str, CheckedArray] = {}
        self.small: dict[str, np.ndarray] = {}  # the arrays verified whole at load (not wrapped)
        self.lock = threading.Lock()

    def __call__(self, arr: CheckedArray, seen: np.ndarray, reason: str) -> None:
        with self.lock:
            if arr._mm is not seen:  # another thread has repaired it meanwhile
                return
            name = self.meta["name"]
            src = Path(self.meta["source"])
            params = AvatarParams.from_json(self.meta["params"])  # _build says what it rebuilds
            fresh = _build(
                self.folder,
                name,
                src if src.is_file() else None,
                self.meta["source_sha256"],
                self.meta.get("source_key"),
                params,
                None,
                check_source=True,
                damaged=(arr.name, arr.file_id and arr.file_id[0], reason),
            )
            for n in ARRAY_STAGE:  # what this run may have read must not change under it
                a, new = self.arrays.get(n), getattr(fresh, n)
                if a is None:  # a small array, read whole at load: compare it whole
                    same = np.array_equal(np.asarray(self.small[n]), np.asarray(new))
                else:
                    new_mm = new._mm if isinstance(new, CheckedArray) else new
                    rows, sums = decode_sums(fresh.meta["files"][n], int(new_mm.shape[0]))
                    seen_blocks = a.handed_out
                    same = (
                        new_mm.shape == a.shape
                        and rows == a.block_rows
                        and np.array_equal(sums[seen_blocks], a.sums[seen_blocks])
                    )
                if not same:
                    raise AvatarError(
                        f"avatar '{name}' was damaged and has been rebuilt from its source, but the "
                        f"rebuilt {n}.npy differs from what this run had already read; run the "
                        "command again"
                    )
            for n, a in self.arrays.items():
                new = getattr(fresh, n)
                a._swap(new._mm if isinstance(new, CheckedArray) else new, fresh.meta["files"][n])
            self.meta.clear()
            self.meta.update(fresh.meta)


def _check_name(name: str) -> None:
    if not _NAME_RE.match(str(name)):
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


# --------------------------------------------------------------------------------------------
# Building


def _stage_keys(source_sha: str, p: AvatarParams) -> dict[str, str]:
    import hashlib

    def h(*parts) -> str:
        return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]

    picked = () if p.face is None else ("face", p.face)  # absent by default: older keys stay valid
    k_frames = h(KEY_VERSION, source_sha, p.trim_start, p.trim_end, FPS, *picked)
    k_crops = h(k_frames, p.smooth, p.bbox_shift, p.extra_margin, FACE_SIZE)
    k_masks = h(k_crops, p.cheek_width, p.feather, p.mask_mode)
    return {"frames": k_frames, "crops": k_crops, "masks": k_masks}


class _FolderLock:
    """``flock`` on the avatar folder itself: one build of a folder at a time, across processes
    (chunk workers, the app and a CLI command repairing the same cache). No lock file is left."""

    def __init__(self, folder: Path):
        self.folder, self.fd = folder, None

    def __enter__(self):
        try:
            import fcntl
        except ImportError:  # not on POSIX: no cross-process lock
            return self
        self.fd = os.open(self.folder, os.O_RDONLY)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        if self.fd is not None:
            os.close(self.fd)  # releases the lock
            self.fd = None


_DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def _build(
    folder: Path,
    name: str,
    source: Path | None,
    source_sha: str,
    source_key: str | None,
    params: AvatarParams,
    progress: Progress | None,
    *,
    check_source: bool = False,
    damaged: tuple | None = None,
) -> AvatarAssets:
    """Bring ``folder`` up to date for (source, params): reuse every valid stage, rebuild the rest.

    ``check_source``: ``source_sha`` is the recorded hash, not one just computed: the source is
    hashed before decoding it, and a different file is refused. ``damaged``: ``(array, file id,
    reason)`` found by a ``CheckedArray`` (the inode it maps); that stage is rebuilt unless the
    file has been replaced meanwhile (another process repaired it: rebuilds write new files)."""
    new_folder = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    try:
        with _FolderLock(folder):
            return _build_locked(folder, name, source, source_sha, source_key, params, progress, check_source, damaged)
    except OSError as exc:
        if new_folder:
            shutil.rmtree(folder, ignore_errors=True)
        if exc.errno in _DISK_FULL:
            raise AvatarError(
                f"cannot write the avatar cache in {folder.parent} ({os.strerror(exc.errno)}); free "
                "some disk space or use a shorter clip with --trim-start/--trim-end"
            ) from None
        raise
    except BaseException:
        if new_folder:
            shutil.rmtree(folder, ignore_errors=True)
        raise


def _build_locked(folder, name, source, source_sha, source_key, params, progress, check_source, damaged):
    old = _read_meta(folder)
    problem = _meta_problem(old) if old is not None else None
    damage: list[tuple[str, str]] = []  # (what is wrong, the stage rebuilt from), said once the rebuild can go on
    if problem is not None:
        damage.append((problem, "frames"))
        old = None
    elif old is not None and old["schema_version"] != SCHEMA_VERSION:
        old = _upgrade(folder, name, old)
    keys = _stage_keys(source_sha, params)
    side = max(int(old["width"]), int(old["height"])) if old else 0
    todo: list[str] = []
    for stage, names in STAGES:
        if not todo and old is not None and old["stages"].get(stage) == keys[stage]:
            try:
                for n in names:
                    _open_array(folder, n, old["files"].get(n), side=side)
                    if damaged and damaged[0] == n and (_file_id(folder / f"{n}.npy") or (None,))[0] == damaged[1]:
                        raise _Damaged(damaged[2])
                continue
            except _Damaged as exc:
                damage.append((str(exc), stage))
        todo.append(stage)
    if not todo:
        return _open(folder, old, verify=False)
    # The stages kept are the rebuild's input: every block of them is checked first.
    for stage, names in STAGES:
        if stage == todo[0]:
            break
        bad = next((p for p in (_full_problem(folder, n, old["files"][n], side) for n in names) if p), None)
        if bad:
            damage.append((bad, stage))
            todo = [s for s, _ in STAGES][[s for s, _ in STAGES].index(stage) :]
            break
    if "frames" in todo:
        why = f"avatar '{name}' is damaged ({'; '.join(d for d, _ in damage)}) and" if damage else f"avatar '{name}'"
        if source is None:
            src = old.get("source") if old else None
            raise AvatarError(
                f"{why} must be rebuilt, but its source {src or '(unknown)'} is gone; {_fix_hint(name, folder, None)}"
            )
        if check_source:
            from studio.core.store.fsutil import file_sha256, quick_file_key

            if file_sha256(source) != source_sha:
                raise AvatarError(
                    f"{why} must be rebuilt, but its source {source} is now a different file (its "
                    f"SHA-256 changed since it was added); add it again from the right file with "
                    f"`studio avatar add {name} FILE --force`"
                )
            source_key = quick_file_key(source)
    for what, stage in damage:
        log.warning(
            "avatar '%s' cache is damaged (%s); rebuilding it from %s",
            name,
            what,
            "its source" if stage == "frames" else f"the {stage} stage on",
        )
    b = _Builder(folder, name, params, progress)
    try:
        meta = b.run(todo, old, source, source_sha, source_key, keys)
    except BaseException:
        b.discard()
        raise
    return _open(folder, meta, verify=False)


class _Builder:
    """Runs the stages in ``todo``; new arrays go to temporary files until ``_commit``."""

    def __init__(self, folder: Path, name: str, params: AvatarParams, progress: Progress | None):
        self.folder, self.name, self.params = folder, name, params
        self.progress = progress or (lambda done, total, stage: None)
        self.tmp: dict[str, Path] = {}
        self.a: dict[str, np.ndarray] = {}

    def run(self, todo, old, source, source_sha, source_key, keys) -> dict:
        t0 = time.monotonic()
        meta = dict(old) if old else {}
        stage_s = {}
        for stage, names in STAGES:
            t = time.monotonic()
            if stage not in todo:
                for n in names:
                    self.a[n] = np.load(self.folder / f"{n}.npy", mmap_mode="r")
            elif stage == "frames":
                for k in ("faces_found", "face", "downscaled_from"):  # set again by _frames when they apply
                    meta.pop(k, None)
                meta.update(self._frames(source), source=str(source), source_sha256=source_sha)
            elif stage == "crops":
                self._crops()
            else:
                self._masks()
            if stage in todo:
                stage_s[stage] = round(time.monotonic() - t, 3)
        if source is not None and meta.get("source") == str(source):
            meta["source_key"] = source_key
        ok = np.asarray(self.a["face_ok"], bool)
        meta.update(
            schema_version=SCHEMA_VERSION,
            name=self.name,
            params=asdict(self.params),
            fps=FPS,
            frames=int(len(ok)),
            faceless_frames=int((~ok).sum()),
            stages=keys,
            rebuilt=list(todo),
            build_s=round(time.monotonic() - t0, 3),
            stage_s=stage_s,
            bbox_shift_range=list(faces.bbox_shift_range(np.asarray(self.a["raw_landmarks"])[ok])),
        )
        self._commit(meta, clear_engines="crops" in todo)
        log.info("avatar '%s': rebuilt %s in %.1f s", self.name, "+".join(todo), meta["build_s"])
        return meta

    # -- stages ---------------------------------------------------------------------------------

    def _frames(self, source: Path) -> dict:
        kind = source_kind(source)
        reader = None
        if kind == "photo":
            gen, total, info = iter([read_image(source)]), 1, {"source_fps": None, "duration_s": None}
        else:
            reader = VideoReader(source, self.params.trim_start, self.params.trim_end)
            gen, total, info = iter(reader), reader.estimate, {"source_fps": reader.source_fps}
        first = next(gen, None)
        if first is None:
            raise AvatarError(f"{source}: no video frames in the requested range; check --trim-start/--trim-end")
        first, was = fit_photo(first)  # above 4K: every frame scaled down (RAM, H.264 levels)
        if was:
            log.warning(
                "%s is %dx%d; using it downscaled to %dx%d (Studio renders at most 3840x2160)",
                source,
                was[0],
                was[1],
                first.shape[1],
                first.shape[0],
            )
            info["downscaled_from"] = list(was)
            gen = (fit_photo(f)[0] for f in gen)
        h, w = first.shape[:2]
        _check_budget(source, self.folder, w, h, total)
        limit = _limit_bytes()
        found = self._faces_in_first(source, kind, first, info)
        multi = kind == "video" and len(found) > 1
        ref = found[info["face"] - 1] if found and "face" in info else (found[0] if found else None)
        lms, oks = [], []
        stage = "tracking the face" if kind == "photo" else "decoding and tracking"
        writer = _NpyWriter(self._tmp("frames"), (h, w, 3), np.uint8)
        try:
            tracker = faces.FaceTracker(video=True, max_faces=len(found) if multi else 1) if kind == "video" else None
            try:
                frame = first
                while frame is not None:
                    if frame.shape[:2] != (h, w):
                        raise AvatarError(f"{source}: the frame size changes mid-video; re-encode it at one size")
                    writer.append(frame)
                    if writer.bytes_written * _bytes_ratio(w, h) > limit:
                        raise AvatarError(_too_big(source, limit))
                    if tracker is None:
                        lm = ref  # the photo: the face chosen among all found
                    elif multi:  # follow the chosen face: the one nearest its last position
                        lm = faces.nearest_face(tracker.all_faces(frame), ref)
                    else:
                        lm = tracker(frame)
                    if lm is not None:
                        ref = lm
                    oks.append(lm is not None)
                    lms.append(lm if lm is not None else np.zeros((478, 2), np.float32))
                    self.progress(len(oks), total if total and total >= len(oks) else None, stage)
                    frame = next(gen, None)
            finally:
                if tracker is not None:
                    tracker.close()
        except BaseException:
            writer.abort()
            raise
        writer.close()
        n = len(oks)
        if reader is not None:
            self._check_complete(source, reader, n)
        face_ok = np.array(oks, bool)
        if not face_ok.any():
            raise AvatarError(
                f"{source}: no face found in any frame; use a photo or video where the face is "
                "clearly visible, frontal and not too small"
            )
        self._save("face_ok", face_ok)
        self._save("raw_landmarks", np.stack(lms).astype(np.float32))
        self.a["frames"] = np.load(self.tmp["frames"], mmap_mode="r")
        info.update(kind=kind, width=w, height=h, duration_s=info.get("duration_s") if kind == "photo" else n / FPS)
        return info

    def _faces_in_first(self, source: Path, kind: str, first: np.ndarray, info: dict) -> list[np.ndarray]:
        """Every face in the photo (a video: its first frame), left to right; says which one is
        used when there are several (``info["face"]``, 1-based) and checks ``--face``."""
        with faces.FaceTracker(video=False, max_faces=faces.MAX_FACES) as finder:
            found = finder.all_faces(first)
        want = self.params.face
        where = "the photo" if kind == "photo" else "the first frame"
        if want is not None and want > len(found):
            raise AvatarError(
                f"{source}: --face {want} asked for, but {where} has {len(found)} face(s) (numbered from the left)"
            )
        if len(found) > 1 or want is not None:
            i = faces.pick_face(found, want)
            x0, x1, _ = faces.face_extent(found[i])
            how = "as asked" if want is not None else "the largest"
            info.update(faces_found=len(found), face=i + 1)
            if len(found) > 1:
                log.warning(
                    "%s: %d faces found in %s; using face %d from the left (%s, x %d..%d); "
                    "pass --face N to choose another",
                    source,
                    len(found),
                    where,
                    i + 1,
                    how,
                    x0,
                    x1,
                )
        return found

    @staticmethod
    def _check_complete(source: Path, reader: VideoReader, n: int) -> None:
        """Refuse a video that decodes to fewer frames than its own header declares (a truncated
        download whose index survived): rendering it would silently use a fraction of the clip."""
        declared = reader.declared
        start = reader.start
        if declared is not None and n < declared - max(2, int(0.02 * declared)):
            raise AvatarError(
                f"{source}: only {n} of its {declared} frames decode ({n / FPS:.2f} of "
                f"{declared / FPS:.2f} s); the file looks truncated: re-download or re-encode it, "
                f"or pass --trim-end {start + n / FPS:.2f} to use the part that decodes"
            )
        if declared is None and reader.stopped_early:
            log.warning(
                "%s: decoding stopped after %.2f s (%s); using the frames before it",
                source,
                n / FPS,
                reader.stopped_early,
            )

    def _crops(self) -> None:
        frames, ok = self.a["frames"], np.asarray(self.a["face_ok"], bool)
        n, h, w = frames.shape[:3]
        lm = faces.smooth_landmarks(np.asarray(self.a["raw_landmarks"]), ok, self.params.smooth)
        boxes = faces.boxes_for(lm, w, h, self.params.bbox_shift, self.params.extra_margin)
        crop_lm = np.stack([faces.to_crop(lm[i], boxes[i]) for i in range(n)]).astype(np.float32)
        writer = _NpyWriter(self._tmp("crops"), (FACE_SIZE, FACE_SIZE, 3), np.uint8)
        try:
            for i in range(n):
                writer.append(faces.crop_face(frames[i], boxes[i]))
                self.progress(i + 1, n, "cropping faces")
        except BaseException:
            writer.abort()
            raise
        writer.close()
        self._save("landmarks", lm)
        self._save("boxes", boxes)
        self._save("crop_landmarks", crop_lm)

    def _masks(self) -> None:
        boxes, crop_lm = self.a["boxes"], self.a["crop_landmarks"]
        p = self.params
        writer = _NpyWriter(self._tmp("masks"), (FACE_SIZE, FACE_SIZE), np.uint8)
        try:
            for i in range(len(boxes)):
                writer.append(faces.blend_mask(crop_lm[i], boxes[i], p.cheek_width, p.feather, p.mask_mode))
                self.progress(i + 1, len(boxes), "blend masks")
        except BaseException:
            writer.abort()
            raise
        writer.close()

    # -- files ----------------------------------------------------------------------------------

    def _tmp(self, name: str) -> Path:
        """The one place the build's temporaries are made: registered (``fsutil.temp_file``), so a
        killed build's are removed by the next ``studio`` command, and released once renamed in
        (``_commit``) or deleted (``discard``, on any exception)."""
        from studio.core.store.fsutil import temp_file

        path = temp_file(self.folder, f".{name}.", ".tmp.npy")
        self.tmp[name] = path
        return path

    def _save(self, name: str, arr: np.ndarray) -> None:
        np.save(self._tmp(name), arr)
        self.a[name] = np.load(self.tmp[name], mmap_mode="r")

    def _commit(self, meta: dict, clear_engines: bool) -> None:
        from studio.core.store.fsutil import atomic_write_bytes

        files = dict(meta.get("files", {}))
        for name, tmp in self.tmp.items():
            with open(tmp, "rb+") as fh:
                os.fsync(fh.fileno())
            files[name] = _file_spec(tmp)
        meta["files"] = files
        meta["updated"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        meta.setdefault("created", meta["updated"])
        from studio.core.store.fsutil import release_temp

        for name, tmp in self.tmp.items():
            os.replace(tmp, self.folder / f"{name}.npy")
            release_temp(tmp)
        self.tmp.clear()
        if clear_engines:
            shutil.rmtree(self.folder / "engines", ignore_errors=True)
        if "frames" in meta["rebuilt"] or not (self.folder / "thumbnail.png").exists():
            _write_thumbnail(self.folder / "thumbnail.png", self.a["frames"], self.a["face_ok"])
        atomic_write_bytes(self.folder / "meta.json", json.dumps(meta, indent=1).encode())

    def discard(self) -> None:
        from studio.core.store.fsutil import release_temp

        self.a.clear()
        for tmp in self.tmp.values():
            tmp.unlink(missing_ok=True)
            release_temp(tmp)
        self.tmp.clear()


# --------------------------------------------------------------------------------------------
# Sizes, thumbnails, the streaming .npy writer


def _limit_bytes() -> float:
    try:
        from studio.core import env

        gb = env.get_float("STUDIO_AVATAR_MAX_GB", MAX_CACHE_GB)
    except ValueError:
        gb = MAX_CACHE_GB
    return gb * (1 << 30)


def _bytes_ratio(w: int, h: int) -> float:
    """Cache bytes per byte of frames: crops, masks and landmarks come on top of the frames."""
    per_frame = w * h * 3
    return (per_frame + FACE_SIZE * FACE_SIZE * 4 + 478 * 2 * 4 * 3 + 32) / per_frame


def _check_budget(source: Path, folder: Path, w: int, h: int, frames: int | None) -> None:
    if not frames:
        return  # unknown length: checked while writing
    need = frames * w * h * 3 * _bytes_ratio(w, h)
    limit = _limit_bytes()
    if need > limit:
        raise AvatarError(_too_big(source, limit, need, frames, w, h))
    free = shutil.disk_usage(folder).free
    if need + DISK_RESERVE > free:
        raise AvatarError(
            f"{source}: the avatar cache needs {need / 2**30:.1f} GB ({frames} frames of {w}x{h}) but "
            f"only {free / 2**30:.1f} GB is free; free some disk space or use a shorter clip with "
            "--trim-start/--trim-end"
        )


def _too_big(source: Path, limit: float, need: float | None = None, frames=None, w=None, h=None) -> str:
    what = f" ({need / 2**30:.3g} GB for {frames} frames of {w}x{h})" if need else ""
    return (
        f"{source}: the avatar cache would exceed the {limit / 2**30:.3g} GB limit{what}; "
        "use a shorter clip with --trim-start/--trim-end"
    )


def _write_thumbnail(path: Path, frames: np.ndarray, face_ok: np.ndarray) -> None:
    from PIL import Image

    from studio.core.store.fsutil import atomic_path

    ok = np.flatnonzero(np.asarray(face_ok))
    im = Image.fromarray(np.asarray(frames[int(ok[0]) if len(ok) else 0]))
    im.thumbnail((192, 192))
    with atomic_path(path) as tmp:
        im.save(tmp, format="PNG")


class _NpyWriter:
    """Appends rows to a ``.npy`` file whose header is fixed up on close: memory stays bounded
    whatever the row count, and the result opens with ``np.load(mmap_mode="r")``."""

    HEADER = 128  # bytes, a multiple of 64 as numpy writes them

    def __init__(self, path: Path, row_shape: tuple, dtype):
        self.path, self.row_shape, self.dtype = path, tuple(row_shape), np.dtype(dtype)
        self.rows = 0
        self.bytes_written = 0
        self.fh = open(path, "wb")
        self.fh.write(self._header(0))

    def append(self, row: np.ndarray) -> None:
        row = np.ascontiguousarray(row, self.dtype)
        if row.shape != self.row_shape:
            raise ValueError(f"row shape {row.shape} != {self.row_shape}")
        self.fh.write(row.data)
        self.rows += 1
        self.bytes_written += row.nbytes

    def close(self) -> None:
        if self.fh.closed:
            return
        self.fh.seek(0)
        self.fh.write(self._header(self.rows))
        self.fh.close()

    def abort(self) -> None:
        """Close after a failure without raising (a full disk fails the final flush too); the
        caller removes the file."""
        try:
            self.fh.close()
        except OSError:
            pass

    def _header(self, rows: int) -> bytes:
        d = {"descr": self.dtype.str, "fortran_order": False, "shape": (rows, *self.row_shape)}
        body = repr(d).encode("latin1")
        pad = self.HEADER - 10 - len(body) - 1
        return b"\x93NUMPY\x01\x00" + (self.HEADER - 10).to_bytes(2, "little") + body + b" " * pad + b"\n"

"""Avatars: a photo or a video ingested once into a pre-stacked, memory-mapped cache.

    a = prepare("anna", "anna.mp4", AvatarParams(feather=30))   # decode, track, crop, mask; cached
    a = load("anna")                    # < 10 ms: plain .npy files opened with mmap
    a = resolve("clip.mp4")             # a library name, or a path prepared on the fly and cached
    a.frames[i], a.boxes[i], a.crops[i], a.masks[i], a.cycle_index(t)

One folder per avatar (``<data>/avatars/<name>/``; path avatars under ``<data>/cache/avatars/``):
``meta.json`` (schema version, source and its SHA-256, parameters, sizes, per-stage keys, per-file
shape/size/checksum) and one ``.npy`` per array. Three stages, each keyed by what it depends on:

    frames  frames, face_ok, raw_landmarks      <- source bytes, trim          (decode + tracking)
    crops   landmarks, boxes, crops, crop_lm    <- + smooth, bbox_shift, extra_margin
    masks   masks                               <- + cheek_width, feather, mask_mode

A changed key or a damaged file rebuilds that stage and the ones after it, nothing before it
(a new feather recomputes masks only). Rebuilt crops also clear ``engines/`` (per-engine arrays
such as MuseTalk latents depend on them). New files are written beside the old ones and renamed
in just before ``meta.json``; a failed or cancelled build leaves the previous avatar intact.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np

from studio.core import faces
from studio.core.avatar_sources import SOURCE_HELP, VideoReader, read_image, source_kind
from studio.core.constants import FACE_SIZE, FPS
from studio.core.errors import AvatarError

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
MAX_CACHE_GB = 24.0  # refuse bigger caches (override with $STUDIO_AVATAR_MAX_GB)
DISK_RESERVE = 512 << 20  # bytes left free on the disk after the cache
STAGES = (
    ("frames", ("frames", "face_ok", "raw_landmarks")),
    ("crops", ("landmarks", "boxes", "crops", "crop_landmarks")),
    ("masks", ("masks",)),
)
FULL_CHECKSUM_BYTES = 64 << 10  # files up to this size get a CRC of every byte; bigger: head + tail
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

    def __post_init__(self):  # one canonical type per field, so cache keys do not depend on 24 vs 24.0
        try:
            for name, kind in (("bbox_shift", int), ("extra_margin", int), ("cheek_width", int),
                               ("feather", float), ("smooth", float), ("mask_mode", str)):
                object.__setattr__(self, name, kind(getattr(self, name)))
            for name in ("trim_start", "trim_end"):
                v = getattr(self, name)
                object.__setattr__(self, name, None if v is None else float(v))
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


def prepare(name: str, source: str | os.PathLike, params: AvatarParams = AvatarParams(), *, force: bool = False,
            progress: Progress | None = None) -> AvatarAssets:
    """Ingest ``source`` as library avatar ``name``. An existing name needs ``force=True``, and then
    only what the new source/parameters change is recomputed."""
    _check_name(name)
    params.check()
    src = _check_source(source)
    folder = library_dir() / name
    if (folder / "meta.json").exists() and not force:
        raise AvatarError(f"an avatar named '{name}' already exists; pick another name or pass --force to replace it")
    from studio.core.fsutil import file_sha256, quick_file_key

    return _build(folder, name, src, file_sha256(src), quick_file_key(src), params, progress)


def load(name: str) -> AvatarAssets:
    """Open library avatar ``name``; a damaged cache is rebuilt from its source (with a warning)."""
    _check_name(name)
    folder = library_dir() / name
    if not folder.is_dir():
        raise AvatarError(f"no avatar named '{name}' in the library; see `studio avatar list` or add it "
                          f"with `studio avatar add {name} IMAGE_OR_VIDEO`")
    return _load_folder(folder, name)


def resolve(name_or_path: str | os.PathLike, params: AvatarParams | None = None,
            progress: Progress | None = None) -> AvatarAssets:
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
        return _build(assets.folder, text, src if src.is_file() else None, assets.meta["source_sha256"],
                      assets.meta.get("source_key"), params, progress)
    path = Path(text).expanduser()
    if not path.exists() and _NAME_RE.match(text) and not path.suffix:
        raise AvatarError(f"no avatar named '{text}' in the library and no such file; see `studio avatar list`")
    src = _check_source(path)
    params = (params or AvatarParams()).check()
    import hashlib

    from studio.core.fsutil import file_sha256, quick_file_key
    from studio.core.paths import sub_dir

    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", src.stem)[:40] or "avatar"
    folder = sub_dir("cache/avatars") / f"{stem}-{hashlib.sha256(str(src).encode()).hexdigest()[:12]}"
    old = _read_meta(folder)
    qkey = quick_file_key(src)
    sha = old["source_sha256"] if old and old.get("source_key") == qkey else file_sha256(src)
    return _build(folder, stem, src, sha, qkey, params, progress)


def list_avatars() -> list[dict]:
    """The library, sorted by name (damaged entries are listed with ``"damaged": True``)."""
    out = []
    for folder in sorted(library_dir().iterdir()):
        if not folder.is_dir() or not (folder / "meta.json").exists():
            continue
        meta = _read_meta(folder)
        if meta is None:
            out.append({"name": folder.name, "damaged": True, "folder": str(folder)})
            continue
        thumb = folder / "thumbnail.png"
        out.append({
            "name": folder.name, "kind": meta.get("kind"), "frames": meta.get("frames"),
            "width": meta.get("width"), "height": meta.get("height"), "fps": meta.get("fps"),
            "faceless_frames": meta.get("faceless_frames"), "duration_s": meta.get("duration_s"),
            "source": meta.get("source"), "params": meta.get("params"),
            "size_bytes": sum(f.get("bytes", 0) for f in meta.get("files", {}).values()),
            "thumbnail": str(thumb) if thumb.exists() else None, "folder": str(folder),
        })
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
    return faces.overlay_image(assets.frames[index], assets.boxes[index], assets.masks[index],
                               assets.landmarks[index], bool(assets.face_ok[index]))


def library_dir() -> Path:
    from studio.core.paths import sub_dir

    return sub_dir("avatars")


# --------------------------------------------------------------------------------------------
# Opening and checking a cache


class _Damaged(Exception):
    pass


def _load_folder(folder: Path, name: str) -> AvatarAssets:
    meta = _read_meta(folder)
    if meta is None:
        raise AvatarError(f"avatar '{name}' is damaged (meta.json unreadable); add it again with "
                          f"`studio avatar add {name} SOURCE --force`")
    try:
        if meta.get("schema_version") != SCHEMA_VERSION:
            raise _Damaged(f"cache schema {meta.get('schema_version')}, this version writes {SCHEMA_VERSION}")
        return _open(folder, meta)
    except _Damaged:  # _build finds which stages are damaged, says so and rebuilds them
        src = Path(meta.get("source", ""))
        params = AvatarParams.from_json(meta.get("params", {}))
        return _build(folder, name, src if src.is_file() else None, meta.get("source_sha256", ""),
                      meta.get("source_key"), params, None)


def _open(folder: Path, meta: dict, verify: bool = True) -> AvatarAssets:
    arrays = {}
    for _, names in STAGES:
        for n in names:
            arrays[n] = _open_array(folder, n, meta["files"].get(n), verify)
    n_frames = meta["frames"]
    for n, a in arrays.items():
        if a.shape[0] != n_frames:
            raise _Damaged(f"{n}.npy has {a.shape[0]} rows, meta says {n_frames}")
    return AvatarAssets(
        name=meta["name"], folder=folder, meta=meta, frames=arrays["frames"], boxes=arrays["boxes"],
        crops=arrays["crops"], masks=arrays["masks"], landmarks=arrays["landmarks"],
        crop_landmarks=arrays["crop_landmarks"], face_ok=arrays["face_ok"], raw_landmarks=arrays["raw_landmarks"],
    )


def _open_array(folder: Path, name: str, spec: dict | None, verify: bool = True) -> np.ndarray:
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
    return arr


def _file_spec(path: Path) -> dict:
    arr = np.load(path, mmap_mode="r")
    size = path.stat().st_size
    return {"shape": list(arr.shape), "dtype": arr.dtype.str, "bytes": size, "crc32": _checksum(path, size)}


def _checksum(path: Path, size: int) -> int:
    """CRC-32 of the whole file when small (boxes, face flags), else of its first and last 32 KiB.

    Cheap enough for a < 10 ms load; with the exact byte size and the header check it catches
    truncation, replacement and overwritten headers, not a flipped bit in the middle of frames."""
    with open(path, "rb") as fh:
        if size <= FULL_CHECKSUM_BYTES:
            return zlib.crc32(fh.read())
        crc = zlib.crc32(fh.read(SAMPLE_BYTES))
        fh.seek(size - SAMPLE_BYTES)
        return zlib.crc32(fh.read(SAMPLE_BYTES), crc)


def _read_meta(folder: Path) -> dict | None:
    try:
        meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
        return meta if isinstance(meta, dict) and "files" in meta and "frames" in meta else None
    except (OSError, ValueError):
        return None


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

    k_frames = h(SCHEMA_VERSION, source_sha, p.trim_start, p.trim_end, FPS)
    k_crops = h(k_frames, p.smooth, p.bbox_shift, p.extra_margin, FACE_SIZE)
    k_masks = h(k_crops, p.cheek_width, p.feather, p.mask_mode)
    return {"frames": k_frames, "crops": k_crops, "masks": k_masks}


def _build(folder: Path, name: str, source: Path | None, source_sha: str, source_key: str | None,
           params: AvatarParams, progress: Progress | None) -> AvatarAssets:
    """Bring ``folder`` up to date for (source, params): reuse every valid stage, rebuild the rest."""
    old = _read_meta(folder)
    if old is not None and old.get("schema_version") != SCHEMA_VERSION:
        log.warning("avatar '%s' cache has schema %s (this version writes %s); rebuilding it",
                    name, old.get("schema_version"), SCHEMA_VERSION)
        old = None
    keys = _stage_keys(source_sha, params)
    todo: list[str] = []
    for stage, names in STAGES:
        if not todo and old is not None and old.get("stages", {}).get(stage) == keys[stage]:
            try:
                for n in names:
                    _open_array(folder, n, old["files"].get(n))
                continue
            except _Damaged as exc:
                log.warning("avatar '%s' cache is damaged (%s); rebuilding it from the %s stage on", name, exc, stage)
        todo.append(stage)
    if not todo:
        return _open(folder, old, verify=False)
    if "frames" in todo and source is None:
        src = old.get("source") if old else None
        raise AvatarError(f"avatar '{name}' must be rebuilt but its source {src or '(unknown)'} is gone; "
                          f"add it again with `studio avatar add {name} SOURCE --force`")
    new_folder = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    b = _Builder(folder, name, params, progress)
    try:
        meta = b.run(todo, old, source, source_sha, source_key, keys)
    except BaseException:
        b.discard()
        if new_folder:
            shutil.rmtree(folder, ignore_errors=True)
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
            schema_version=SCHEMA_VERSION, name=self.name, params=asdict(self.params), fps=FPS,
            frames=int(len(ok)), faceless_frames=int((~ok).sum()), stages=keys, rebuilt=list(todo),
            build_s=round(time.monotonic() - t0, 3), stage_s=stage_s,
            bbox_shift_range=list(faces.bbox_shift_range(np.asarray(self.a["raw_landmarks"])[ok])),
        )
        self._commit(meta, clear_engines="crops" in todo)
        log.info("avatar '%s': rebuilt %s in %.1f s", self.name, "+".join(todo), meta["build_s"])
        return meta

    # -- stages ---------------------------------------------------------------------------------

    def _frames(self, source: Path) -> dict:
        kind = source_kind(source)
        if kind == "photo":
            rgb = read_image(source)
            gen, total, info = iter([rgb]), 1, {"source_fps": None, "duration_s": None}
        else:
            reader = VideoReader(source, self.params.trim_start, self.params.trim_end)
            gen, total, info = iter(reader), reader.estimate, {"source_fps": reader.source_fps}
        first = next(gen, None)
        if first is None:
            raise AvatarError(f"{source}: no video frames in the requested range; check --trim-start/--trim-end")
        h, w = first.shape[:2]
        _check_budget(source, self.folder, w, h, total)
        limit = _limit_bytes()
        writer = _NpyWriter(self._tmp("frames"), (h, w, 3), np.uint8)
        lms, oks = [], []
        stage = "tracking the face" if kind == "photo" else "decoding and tracking"
        try:
            with faces.FaceTracker(video=kind == "video") as tracker:
                frame = first
                while frame is not None:
                    if frame.shape[:2] != (h, w):
                        raise AvatarError(f"{source}: the frame size changes mid-video; re-encode it at one size")
                    writer.append(frame)
                    if writer.bytes_written * _bytes_ratio(w, h) > limit:
                        raise AvatarError(_too_big(source, limit))
                    lm = tracker(frame)
                    oks.append(lm is not None)
                    lms.append(lm if lm is not None else np.zeros((478, 2), np.float32))
                    self.progress(len(oks), total if total and total >= len(oks) else None, stage)
                    frame = next(gen, None)
        finally:
            writer.close()
        face_ok = np.array(oks, bool)
        if not face_ok.any():
            raise AvatarError(f"{source}: no face found in any frame; use a photo or video where the face is "
                              "clearly visible, frontal and not too small")
        self._save("face_ok", face_ok)
        self._save("raw_landmarks", np.stack(lms).astype(np.float32))
        self.a["frames"] = np.load(self.tmp["frames"], mmap_mode="r")
        n = len(face_ok)
        info.update(kind=kind, width=w, height=h, duration_s=info.get("duration_s") if kind == "photo" else n / FPS)
        return info

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
        finally:
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
        finally:
            writer.close()

    # -- files ----------------------------------------------------------------------------------

    def _tmp(self, name: str) -> Path:
        from studio.core.fsutil import register_temp  # a killed build's temporaries go at the next start

        path = register_temp(self.folder / f".{name}.{os.getpid()}.tmp.npy")
        self.tmp[name] = path
        return path

    def _save(self, name: str, arr: np.ndarray) -> None:
        np.save(self._tmp(name), arr)
        self.a[name] = np.load(self.tmp[name], mmap_mode="r")

    def _commit(self, meta: dict, clear_engines: bool) -> None:
        from studio.core.fsutil import atomic_write_bytes

        files = dict(meta.get("files", {}))
        for name, tmp in self.tmp.items():
            with open(tmp, "rb+") as fh:
                os.fsync(fh.fileno())
            files[name] = _file_spec(tmp)
        meta["files"] = files
        meta["updated"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        meta.setdefault("created", meta["updated"])
        for name, tmp in self.tmp.items():
            os.replace(tmp, self.folder / f"{name}.npy")
        self.tmp.clear()
        if clear_engines:
            shutil.rmtree(self.folder / "engines", ignore_errors=True)
        if "frames" in meta["rebuilt"] or not (self.folder / "thumbnail.png").exists():
            _write_thumbnail(self.folder / "thumbnail.png", self.a["frames"], self.a["face_ok"])
        atomic_write_bytes(self.folder / "meta.json", json.dumps(meta, indent=1).encode())

    def discard(self) -> None:
        self.a.clear()
        for tmp in self.tmp.values():
            tmp.unlink(missing_ok=True)
        self.tmp.clear()


# --------------------------------------------------------------------------------------------
# Sizes, thumbnails, the streaming .npy writer


def _limit_bytes() -> float:
    try:
        gb = float(os.environ.get("STUDIO_AVATAR_MAX_GB", MAX_CACHE_GB))
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
        raise AvatarError(f"{source}: the avatar cache needs {need / 2**30:.1f} GB ({frames} frames of {w}x{h}) but "
                          f"only {free / 2**30:.1f} GB is free; free some disk space or use a shorter clip with "
                          "--trim-start/--trim-end")


def _too_big(source: Path, limit: float, need: float | None = None, frames=None, w=None, h=None) -> str:
    what = f" ({need / 2**30:.3g} GB for {frames} frames of {w}x{h})" if need else ""
    return (f"{source}: the avatar cache would exceed the {limit / 2**30:.3g} GB limit{what}; "
            "use a shorter clip with --trim-start/--trim-end")


def _write_thumbnail(path: Path, frames: np.ndarray, face_ok: np.ndarray) -> None:
    from PIL import Image

    from studio.core.fsutil import atomic_path

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

    def _header(self, rows: int) -> bytes:
        d = {"descr": self.dtype.str, "fortran_order": False, "shape": (rows, *self.row_shape)}
        body = repr(d).encode("latin1")
        pad = self.HEADER - 10 - len(body) - 1
        return b"\x93NUMPY\x01\x00" + (self.HEADER - 10).to_bytes(2, "little") + body + b" " * pad + b"\n"

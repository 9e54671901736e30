"""The avatar cache's integrity: open a folder's arrays, check meta.json, sizes, headers and checksums,
and guard the arrays as they are read (a damaged block rebuilds its stage from the source).

    assets = open_assets(folder, meta, rebuild=builder.rebuild)   # checked as read; damage repaired
    problem = meta_problem(read_meta(folder))
"""

from __future__ import annotations

import json
import logging
import threading
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np

from studio.core.avatars.assets import (
    ARRAY_STAGE,
    FULL_CHECKSUM_BYTES,
    HEX64,
    OPTIONAL_ARRAYS,
    SAMPLE_BYTES,
    SCHEMA_VERSION,
    STAGES,
    AvatarAssets,
    AvatarParams,
    library_dir,
)
from studio.core.avatars.checksums import CheckedArray, block_spec, decode_sums
from studio.core.errors import AvatarError

log = logging.getLogger(__name__)


class Damaged(Exception):
    pass


# ``builder.rebuild(folder, name, meta, params, progress=None, damaged=...)``: the avatar built again
# from its source (the builder uses this module's checks, so it is handed in, not imported)
Rebuild = Callable[..., AvatarAssets]


def open_assets(
    folder: Path, meta: dict, verify: bool = True, wrap: bool = True, rebuild: Rebuild | None = None
) -> AvatarAssets:
    """The cache's arrays after the quick checks; those over 64 KiB as ``CheckedArray``s whose
    blocks are verified when first read (``wrap=False``: plain memory maps, for listing). A damaged
    block found later is repaired with ``rebuild`` (the builder's: ``builder.rebuild``); without
    it, one sentence says the avatar is damaged."""
    arrays, specs = {}, meta["files"]
    side = max(int(meta["width"]), int(meta["height"]))
    for _, names in STAGES:
        for n in names:
            arrays[n] = open_array(folder, n, specs.get(n), verify, side)
    for n in OPTIONAL_ARRAYS:  # only when the avatar has one (alpha)
        if n in specs:
            arrays[n] = open_array(folder, n, specs[n], verify, side)
    n_frames = meta["frames"]
    for n, a in arrays.items():
        if a.shape[0] != n_frames:
            raise Damaged(f"{n}.npy has {a.shape[0]} rows, meta.json says {n_frames}")
    if wrap:
        guard = _Guard(folder, meta, rebuild)
        for n, a in arrays.items():
            if specs[n]["bytes"] > FULL_CHECKSUM_BYTES:
                try:
                    arrays[n] = guard.arrays[n] = CheckedArray(a, specs[n], n, guard, _BOUNDS[n](side))
                except ValueError as exc:
                    raise Damaged(f"{n}.npy: {exc}") from None
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
        alpha=arrays.get("alpha"),
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
    "alpha": lambda side: None,
}


def _values_ok(arr, name: str, side: int) -> bool:
    bound = _BOUNDS[name](side)
    if bound is None:
        return True
    a = np.asarray(arr)
    return bool(np.isfinite(a).all() and (np.abs(a) <= bound).all())


def open_array(folder: Path, name: str, spec: dict | None, verify: bool = True, side: int | None = None) -> np.ndarray:
    """One cache file memory-mapped after the quick checks: size, header, shape and dtype, the
    head/tail CRC (``verify``), and for small files (read whole here) their values (``side``:
    the frame's larger side)."""
    path = folder / f"{name}.npy"
    if spec is None:
        raise Damaged(f"{name}.npy is not recorded in meta.json")
    try:
        size = path.stat().st_size
        if size != spec["bytes"]:
            raise Damaged(f"{name}.npy is {size} bytes, {spec['bytes']} expected (truncated or overwritten)")
        # the checksum first: it covers the header (all of a small file, the first 32 KiB of a big
        # one), so a damaged header is caught here and never reaches numpy's header parser
        if verify and _checksum(path, size) != spec["crc32"]:
            raise Damaged(f"{name}.npy fails its checksum")
        arr = np.load(path, mmap_mode="r")
    except FileNotFoundError:
        raise Damaged(f"{name}.npy is missing") from None
    except Damaged:
        raise
    except Exception as exc:  # noqa: BLE001 - any header numpy cannot read (TokenError, SyntaxError, ...)
        raise Damaged(f"{name}.npy is unreadable ({type(exc).__name__}: {str(exc)[:80]})") from None
    if list(arr.shape) != spec["shape"] or arr.dtype.str != spec["dtype"]:
        raise Damaged(f"{name}.npy holds {arr.dtype.str}{list(arr.shape)}, {spec['dtype']}{spec['shape']} expected")
    if side is not None and size <= FULL_CHECKSUM_BYTES and not _values_ok(arr, name, side):
        raise Damaged(f"{name}.npy holds values no face tracker produces (NaN, infinite or far outside the frame)")
    return arr


def full_problem(folder: Path, name: str, spec: dict, side: int) -> str | None:
    """Every block of one cache file checked (before a rebuild reads it as its input)."""
    try:
        arr = open_array(folder, name, spec)
        rows, sums = decode_sums(spec, int(arr.shape[0]))
    except Damaged as exc:
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


def file_spec(path: Path) -> dict:
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


def read_meta(folder: Path) -> dict | None:
    """meta.json as a dict, or None when it is missing or not JSON (see ``meta_problem``)."""
    try:
        meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def meta_problem(meta: dict | None) -> str | None:
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


def rebuildable(meta: dict | None) -> bool:
    """Whether a damaged meta.json still says which file (and which SHA-256) to rebuild from."""
    if not isinstance(meta, dict):
        return False
    if not isinstance(meta.get("source"), str) or not HEX64.match(str(meta.get("source_sha256", ""))):
        return False
    try:
        AvatarParams.from_json(meta["params"]).check()
    except (AvatarError, KeyError, TypeError, AttributeError):
        return False
    return True


def fix_hint(name: str, folder: Path, meta: dict | None) -> str:
    """The one instruction for a damaged avatar, the same in `render`, `avatar list` and the app."""
    library = folder.parent == library_dir()
    if meta is not None and meta_problem(meta) is None or rebuildable(meta):
        src = Path(str(meta.get("source")))
        if src.is_file():
            return f"it is rebuilt from its source {src} the next time it is used"
    if library:
        return (
            f"add it again with `studio avatar add {name} SOURCE --force`, or remove it with `studio avatar rm {name}`"
        )
    return f"delete the cache folder {folder} and use the file again"


def upgrade(folder: Path, name: str, meta: dict) -> dict | None:
    """A schema 1 cache (head/tail checksums only) gets per-block checksums of its files as they
    are (the old checks cannot tell whether they were damaged before); None when they fail the
    old checks (then the damaged stages are rebuilt)."""
    files = dict(meta["files"])
    try:
        for _, names in STAGES:
            for n in names:
                arr = open_array(folder, n, files.get(n))
                files[n] = {**files[n], **block_spec(arr)}
    except Damaged as exc:
        log.warning("avatar '%s' cache is damaged (%s); rebuilding it", name, exc)
        return None
    from studio.core.store.fsutil import atomic_write_bytes

    meta = {**meta, "files": files, "schema_version": SCHEMA_VERSION}
    atomic_write_bytes(folder / "meta.json", json.dumps(meta, indent=1).encode())
    log.info("avatar '%s': cache upgraded to schema %d (block checksums)", name, SCHEMA_VERSION)
    return meta


def file_id(path: Path) -> tuple | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


class _Guard:
    """Repairs one opened avatar when its ``CheckedArray``s find a damaged block: the damaged
    stage and the ones after it are rebuilt from the source (``build``, only if the source's
    SHA-256 still matches), then every array of the assets reads the new files.

    Data already handed out must not change under the caller: the blocks already verified
    (and so possibly read) must have the same checksums in the rebuilt files. The build is
    deterministic for one source, so they do; if not, one sentence asks to run the command again.
    """

    def __init__(self, folder: Path, meta: dict, rebuild: Rebuild | None):
        self.folder, self.meta, self.rebuild = folder, meta, rebuild
        self.arrays: dict[str, CheckedArray] = {}
        self.small: dict[str, np.ndarray] = {}  # the arrays verified whole at load (not wrapped)
        self.lock = threading.Lock()

    def __call__(self, arr: CheckedArray, seen: np.ndarray, reason: str) -> None:
        with self.lock:
            if arr.mapped is not seen:  # another thread has repaired it meanwhile
                return
            name = self.meta["name"]
            if self.rebuild is None:
                raise AvatarError(f"avatar '{name}' is damaged ({reason}); {fix_hint(name, self.folder, self.meta)}")
            params = AvatarParams.from_json(self.meta["params"])  # build says what it rebuilds
            fresh = self.rebuild(
                self.folder, name, self.meta, params, damaged=(arr.name, arr.file_id and arr.file_id[0], reason)
            )
            for n in [*ARRAY_STAGE, *(k for k in OPTIONAL_ARRAYS if k in self.arrays or k in self.small)]:
                # what this run may have read must not change under it
                a, new = self.arrays.get(n), getattr(fresh, n)
                if a is None:  # a small array, read whole at load: compare it whole
                    same = np.array_equal(np.asarray(self.small[n]), np.asarray(new))
                else:
                    new_mm = new.mapped if isinstance(new, CheckedArray) else new
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
                a.swap(new.mapped if isinstance(new, CheckedArray) else new, fresh.meta["files"][n])
            self.meta.clear()
            self.meta.update(fresh.meta)

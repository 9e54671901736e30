"""Block checksums for the avatar cache, verified as the arrays are read.

    spec = block_spec(arr)                        # {"block_rows": R, "block_crc32": "<base64>"}
    a = CheckedArray(memmap, spec, "frames", on_damage, bound=None)
    a[i], a[s:e], a[idx], np.asarray(a)           # every block it touches is verified first

Each big cache array (frames, crops, masks, landmarks) carries one CRC-32 per block of whole
rows, at least ``BLOCK_BYTES`` each (one 1080p frame, one crop or one mask is a block; 18 rows of
landmarks are one). ``load()`` only opens the files (the header, the exact size and a head/tail
CRC are checked there, so it stays under 10 ms); the blocks are checked the first time anything
reads them, through ``CheckedArray``: indexing checks the rows the index touches,
``np.asarray`` / ``np.array`` / ufuncs check the whole array. A block that passes is remembered
for the process (keyed by the file's inode, size and mtime), so a ping-pong video loop pays for
each frame once. Float arrays are also checked for values a tracker cannot produce (NaN, inf,
coordinates far outside the frame).

A block that fails calls ``on_damage(array, memmap_read, reason)``, which repairs the cache (``avatar.py``:
rebuild from the source, or one sentence why not) and swaps new memory maps in with ``swap``;
the read then goes on with the repaired data.

Hand-written because numpy has no read hook on memory maps: a subclass of ``np.memmap`` would
be bypassed by ``np.asarray`` (it returns the base array without calling anything), which is how
most of the renderer reads the masks, crops and landmarks. zlib's CRC-32 (stdlib, ~2.3 GB/s on
the 2-core test machine: ~2.7 ms per 1080p frame) is used; blocks of one read are checked by a
small thread pool (zlib releases the GIL), so a 64-frame upload to the GPU is checked in parallel.
"""

from __future__ import annotations

import base64
import os
import threading
import zlib
from collections.abc import Callable
from operator import attrgetter
from pathlib import Path

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin

BLOCK_BYTES = 64 << 10
PARALLEL_MIN_BYTES = 8 << 20  # reads that touch this much unchecked data use the thread pool
MAX_REPAIRS = 2  # repairs of one array per process before its damage is blamed on the disk

_VERIFIED: dict[tuple, np.ndarray] = {}  # (path, inode, size, mtime_ns) -> bool per block
_VERIFIED_LOCK = threading.Lock()
_POOL = None
_POOL_LOCK = threading.Lock()


def rows_per_block(row_bytes: int) -> int:
    return max(1, -(-BLOCK_BYTES // max(1, int(row_bytes))))


def block_checksums(arr: np.ndarray, block_rows: int) -> np.ndarray:
    """uint32 CRC-32 of each block of ``block_rows`` rows of a C-contiguous array."""
    n = int(arr.shape[0])
    out = np.empty(-(-n // block_rows) if n else 0, np.uint32)
    for b in range(len(out)):
        out[b] = _crc(arr, b, block_rows)
    return out


def block_spec(arr: np.ndarray) -> dict:
    """What ``meta.json`` records for ``arr`` beyond its shape: rows per block and their CRCs."""
    row_bytes = int(np.prod(arr.shape[1:], dtype=np.int64)) * arr.dtype.itemsize
    rows = rows_per_block(row_bytes)
    sums = block_checksums(arr, rows).astype("<u4")
    return {"block_rows": rows, "block_crc32": base64.b64encode(sums.tobytes()).decode("ascii")}


def decode_sums(spec: dict, n_rows: int) -> tuple[int, np.ndarray]:
    """``(block_rows, sums)`` from a spec, or ValueError when they do not fit ``n_rows``."""
    rows = spec.get("block_rows")
    text = spec.get("block_crc32")
    if not isinstance(rows, int) or rows < 1 or not isinstance(text, str):
        raise ValueError("no block checksums recorded")
    try:
        sums = np.frombuffer(base64.b64decode(text.encode("ascii"), validate=True), "<u4")
    except (ValueError, UnicodeEncodeError):
        raise ValueError("block checksums are not valid base64") from None
    if len(sums) != -(-n_rows // rows):
        raise ValueError(f"{len(sums)} block checksums recorded for {n_rows} rows of {rows}")
    return rows, sums


def _crc(arr, b: int, rows: int) -> int:
    block = arr[b * rows : (b + 1) * rows]
    return zlib.crc32(np.ascontiguousarray(block).data.cast("B"))


VERIFY_THREADS = max(1, min(8, os.cpu_count() or 1))  # the verify pool's threads


def pool_started() -> bool:
    """Whether this process has started its verify pool (a forked child starts its own)."""
    return _POOL is not None


def _pool():
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            from concurrent.futures import ThreadPoolExecutor

            _POOL = ThreadPoolExecutor(max_workers=VERIFY_THREADS, thread_name_prefix="avatar-verify")
        return _POOL


def _reset_after_fork() -> None:
    """A forked child (chunk workers) has the pool object but not its threads: start afresh."""
    global _POOL, _POOL_LOCK, _VERIFIED_LOCK
    _POOL, _POOL_LOCK, _VERIFIED_LOCK = None, threading.Lock(), threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


def _verified_flags(mm: np.ndarray, n_blocks: int) -> tuple[np.ndarray, tuple | None]:
    """The per-process record of checked blocks for this file version (shared by every load),
    and the version: ``(inode, size, mtime_ns)`` of the file when it was opened."""
    name = getattr(mm, "filename", None)
    if not name:
        return np.zeros(n_blocks, bool), None
    st = os.stat(name)
    key = (str(name), st.st_ino, st.st_size, st.st_mtime_ns)
    with _VERIFIED_LOCK:
        flags = _VERIFIED.get(key)
        if flags is None or len(flags) != n_blocks:
            flags = _VERIFIED[key] = np.zeros(n_blocks, bool)
        return flags, key[1:]


def forget_verified() -> None:
    """Drop the per-process record (tests, and after a repair)."""
    with _VERIFIED_LOCK:
        _VERIFIED.clear()


class CheckedArray(NDArrayOperatorsMixin):
    """A read-only memory-mapped array whose blocks are checksum-verified on first read.

    Shape, dtype, ``len``, ``filename`` are the memmap's. Indexing returns what indexing the
    memmap returns (a view, or a copy for fancy indices), after checking the touched blocks;
    ``np.asarray(a)`` checks every block first. Anything else (methods, arithmetic) goes through
    the fully checked array.
    """

    def __init__(
        self,
        mm: np.ndarray,
        spec: dict,
        name: str,
        on_damage: Callable[[CheckedArray, np.ndarray, str], None],
        bound: float | None = None,
    ):
        self.name = name
        self._on_damage = on_damage
        self._bound = bound
        self._lock = threading.Lock()
        self._repairs = 0
        self._set(mm, spec)

    # -- identity --------------------------------------------------------------------------------

    def _set(self, mm: np.ndarray, spec: dict) -> None:
        rows, sums = decode_sums(spec, int(mm.shape[0]))
        self._mm, self._rows, self._sums = mm, rows, sums
        self._ok, self.file_id = _verified_flags(mm, len(sums))

    def swap(self, mm: np.ndarray, spec: dict) -> None:
        """Read from a repaired file from now on (called by the damage handler)."""
        with self._lock:
            self._set(mm, spec)

    # the array's own attributes, read from the file read now (a repair swaps it)
    shape = property(attrgetter("_mm.shape"))
    dtype = property(attrgetter("_mm.dtype"))
    ndim = property(attrgetter("_mm.ndim"))
    size = property(attrgetter("_mm.size"))
    nbytes = property(attrgetter("_mm.nbytes"))
    itemsize = property(attrgetter("_mm.itemsize"))

    @property
    def mapped(self) -> np.ndarray:
        """The memory map read now, unchecked (the damage handler compares it and swaps a new one in)."""
        return self._mm

    @property
    def filename(self):
        return getattr(self._mm, "filename", None)

    @property
    def handed_out(self) -> np.ndarray:
        """Indices of the blocks verified (and so possibly read) so far, with their CRCs."""
        return np.flatnonzero(self._ok)

    @property
    def sums(self) -> np.ndarray:
        return self._sums

    @property
    def block_rows(self) -> int:
        return self._rows

    def __len__(self) -> int:
        return int(self._mm.shape[0])

    def __repr__(self) -> str:
        return f"CheckedArray({self.name}, shape={self.shape}, dtype={self.dtype})"

    # -- reading ---------------------------------------------------------------------------------

    def __getitem__(self, key):
        k0 = key[0] if type(key) is tuple and key else key
        if isinstance(k0, (int, np.integer)):  # the common case, checked before: one flag read
            i = int(k0)
            n = len(self._mm)
            if -n <= i < n and self._ok[(i % n) // self._rows]:
                return self._mm[key]
        elif type(k0) is np.ndarray and k0.dtype.kind in "iu" and k0.ndim == 1 and len(k0):
            if k0.min() >= 0 and k0.max() < len(self._mm) and self._ok[k0 // self._rows].all():
                return self._mm[key]
        self.verify_rows(self._rows_of(key))
        return self._mm[key]

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def __array__(self, dtype=None, copy=None):
        self.verify_all()
        a = np.asarray(self._mm)  # a plain ndarray view of the map
        if dtype is not None and np.dtype(dtype) != a.dtype:
            return a.astype(dtype)
        return np.array(a) if copy else a

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        inputs = tuple(np.asarray(x) if isinstance(x, CheckedArray) else x for x in inputs)
        return getattr(ufunc, method)(*inputs, **kwargs)

    def __getattr__(self, name):  # only for attributes not defined above: .sum(), .astype(), ...
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(np.asarray(self), name)

    def __reduce__(self):  # pickled as the checked data (like a memmap pickles as an array)
        return (np.asarray, (np.array(self),))

    def _rows_of(self, key) -> np.ndarray | slice:
        k0 = key[0] if isinstance(key, tuple) and key else key
        if k0 is Ellipsis or (isinstance(key, tuple) and not key):
            return slice(None)
        if isinstance(k0, slice):
            return k0
        if isinstance(k0, (int, np.integer)):
            n = len(self)
            i = int(k0)
            return slice(i, i + 1) if -n <= i < n else slice(0, 0)  # out of range: the map raises
        if k0 is None:
            return slice(None)
        return np.arange(len(self))[np.asarray(k0)]  # fancy or boolean index (torch tensors too)

    def verify_all(self) -> None:
        self.verify_rows(slice(None))

    def verify_rows(self, rows) -> None:
        if isinstance(rows, slice):
            start, stop, step = rows.indices(len(self))
            if step == 1 or step == -1:
                lo, hi = (start, stop) if step == 1 else (stop + 1, start + 1)
                if hi <= lo:
                    return
                blocks = np.arange(lo // self._rows, (hi - 1) // self._rows + 1)
            else:
                blocks = np.unique(np.arange(start, stop, step) // self._rows)
        else:
            rows = np.asarray(rows, np.int64).reshape(-1)
            if not len(rows):
                return
            blocks = np.unique(rows // self._rows)
        todo = blocks[~self._ok[blocks]]
        if len(todo):
            self._verify_blocks(todo)

    def _verify_blocks(self, blocks: np.ndarray) -> None:
        mm, rows, sums, ok = self._mm, self._rows, self._sums, self._ok
        row_bytes = mm.nbytes // max(1, len(mm))
        if len(blocks) > 1 and len(blocks) * rows * row_bytes >= PARALLEL_MIN_BYTES:
            got = list(_pool().map(lambda b: _crc(mm, int(b), rows), blocks))
        else:
            got = [_crc(mm, int(b), rows) for b in blocks]
        bad = [int(b) for b, c in zip(blocks, got) if c != int(sums[b])]
        if not bad and self._bound is not None:
            bad = [int(b) for b in blocks if not _values_ok(mm[b * rows : (b + 1) * rows], self._bound)]
            reason = "holds values no face tracker produces (NaN, infinite or far outside the frame)"
        else:
            reason = "fails its checksum"
        if bad:
            first = bad[0] * rows
            what = f"row {first}" if rows == 1 else f"rows {first}..{min(len(mm), first + rows) - 1}"
            self._repairs += 1
            if self._repairs > MAX_REPAIRS:
                from studio.core.errors import AvatarError

                raise AvatarError(
                    f"{self.name}.npy of the avatar cache in {Path(str(self.filename)).parent} is "
                    f"still damaged after it was rebuilt ({what} {reason}); check the disk"
                )
            self._on_damage(self, mm, f"{self.name}.npy {what} {reason}")
            if self._mm is mm:  # the handler neither raised nor swapped a repaired file in
                raise RuntimeError(f"{self.name}.npy is damaged and was not repaired")
            touched = np.concatenate([np.arange(b * rows, min(len(mm), (b + 1) * rows)) for b in blocks])
            self.verify_rows(touched[touched < len(self)])  # the repaired file, in its own blocks
            return
        ok[blocks] = True


def _values_ok(block: np.ndarray, bound: float) -> bool:
    a = np.asarray(block)
    return bool(np.isfinite(a).all() and (np.abs(a) <= bound).all())

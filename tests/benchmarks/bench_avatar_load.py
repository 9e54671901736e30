"""Benchmark: loading a prepared 10 s 1080p video avatar (target < 10 ms).

    .venv/bin/python tests/benchmarks/bench_avatar_load.py [--seconds 10] [--size 1920x1080] [--keep]

Makes a real H.264 video (the astronaut photo under a slow virtual camera), prepares it with
``studio.core.avatars.library.prepare`` in a temporary data folder, then times:

* ``load(name)``: metadata, header/size/checksum checks, every array memory-mapped;
* ``resolve(path)``: the same avatar reached through its source path (adds the source check);
* touching one random frame, crop and mask after a load (what the renderer does per frame);
* the baseline: the same arrays read fully into memory with ``np.load`` (no mmap), warm cache;
* verification (the per-block CRC-32s, checked the first time each block is read in a process):
  every frame, crop, mask and landmark row checked from cold, per frame and in GB/s; one frame
  checked alone; and a render-like read (64-frame slices, as the GPU upload does; random
  batches of 16, as the CPU compositor does) on a warm process (blocks already checked) against
  the same reads from the bare memory map.

Prints the figures and the ratio baseline / load. Absolute times depend on the machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def make_video(path: Path, seconds: float, width: int, height: int, fps: int = 30) -> None:
    import av
    import cv2
    from PIL import Image

    img = np.asarray(Image.open(ROOT / "resources" / "demo" / "astronaut.png").convert("RGB"))
    n = int(round(seconds * fps))
    with av.open(str(path), "w") as c:
        s = c.add_stream("libx264", rate=fps)
        s.width, s.height, s.pix_fmt = width, height, "yuv420p"
        s.options = {"crf": "23", "preset": "ultrafast"}
        aspect = width / height
        for i in range(n):
            u = i / max(1, n - 1)
            ch = 300 - 40 * np.sin(np.pi * u)
            cw = ch * aspect
            cx, cy = 225 + 15 * np.sin(2 * np.pi * u), 150
            sx, sy = width / cw, height / ch
            m = np.float32([[sx, 0, -(cx - cw / 2) * sx], [0, sy, -(cy - ch / 2) * sy]])
            frame = cv2.warpAffine(img, m, (width, height), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT)
            for p in s.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                c.mux(p)
        for p in s.encode():
            c.mux(p)


def timed(fn, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--size", default="1920x1080")
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = ap.parse_args()
    width, height = (int(v) for v in args.size.lower().split("x"))

    work = Path(tempfile.mkdtemp(prefix="bench_avatar_"))
    os.environ["STUDIO_HOME"] = str(work / "home")
    from studio.core.avatars import library as avatar

    src = work / "presenter.mp4"
    t = time.perf_counter()
    make_video(src, args.seconds, width, height)
    print(f"source video: {args.seconds:g} s {width}x{height} 30 fps, made in {time.perf_counter() - t:.1f} s")

    t = time.perf_counter()
    a = avatar.prepare("bench", src)
    prep_s = time.perf_counter() - t
    size = sum((a.folder / f"{n}.npy").stat().st_size for n in a.meta["files"])
    print(
        f"prepare: {a.N} frames in {prep_s:.1f} s ({a.N / prep_s:.1f} frames/s), "
        f"cache {size / 2**30:.2f} GiB, face-less frames {a.meta['faceless_frames']}"
    )
    print(
        "  per stage: "
        + ", ".join(f"{k} {v:.1f} s ({a.N / max(v, 1e-9):.0f} frames/s)" for k, v in a.meta["stage_s"].items())
    )
    del a

    load_ms = timed(lambda: avatar.load("bench"), args.repeat)
    resolve_ms = timed(lambda: avatar.resolve(src), args.repeat)
    rng = np.random.default_rng(0)

    def touch():
        b = avatar.load("bench")
        i = int(rng.integers(b.N))
        return int(b.frames[i, ::8, ::8].sum()) + int(b.crops[i].sum()) + int(b.masks[i].sum())

    touch_ms = timed(touch, args.repeat)

    folder = avatar.library_dir() / "bench"

    def full_read():
        return [
            np.load(folder / f"{n}.npy")
            for n in ("frames", "boxes", "crops", "masks", "landmarks", "crop_landmarks", "face_ok")
        ]

    full_read()  # warm the page cache so the baseline measures memory copies, not the disk
    base_ms = timed(full_read, max(3, args.repeat // 10))

    verify = bench_verify(avatar, folder, args.repeat)

    med = statistics.median
    print(f"load(name)               median {med(load_ms):7.2f} ms   (min {min(load_ms):.2f}, max {max(load_ms):.2f})")
    print(f"resolve(path)            median {med(resolve_ms):7.2f} ms")
    print(f"load + touch one frame   median {med(touch_ms):7.2f} ms")
    print(f"baseline np.load (full)  median {med(base_ms):7.2f} ms")
    print(
        f"ratio baseline / load    {med(base_ms) / med(load_ms):.0f}x   target: load < 10 ms -> "
        f"{'OK' if med(load_ms) < 10 else 'MISSED'}"
    )
    for line in verify:
        print(line)
    if args.keep:
        print(f"kept {work}")
    else:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    return 0


def bench_verify(avatar, folder: Path, repeat: int) -> list[str]:
    """The cost of the block checksums: cold (first read in a process) and warm (checked before)."""
    from studio.core.avatars import checksums as avatar_check

    med = statistics.median
    out = []
    b = avatar.load("bench")
    n = b.N
    frame_mb = b.frames.nbytes / n / 2**20
    for name in ("frames", "crops", "masks", "landmarks", "crop_landmarks", "raw_landmarks"):
        arr = getattr(b, name)
        if not isinstance(arr, avatar_check.CheckedArray):
            continue
        times = []
        for _ in range(3):
            avatar_check.forget_verified()
            fresh = getattr(avatar.load("bench"), name)
            t = time.perf_counter()
            fresh.verify_all()
            times.append(time.perf_counter() - t)
        s = min(times)
        out.append(
            f"verify all {name:<14} {s * 1000:8.1f} ms cold  ({s * 1000 / n:.2f} ms/row, "
            f"{arr.nbytes / s / 1e9:.2f} GB/s, {avatar_check.VERIFY_THREADS} threads)"
        )
    one = []
    for i in range(min(n, max(5, repeat))):
        avatar_check.forget_verified()
        fr = avatar.load("bench").frames
        t = time.perf_counter()
        fr.verify_rows(slice(i, i + 1))
        one.append((time.perf_counter() - t) * 1000)
    out.append(f"verify one frame ({frame_mb:.1f} MiB) median {med(one):.2f} ms cold (one thread)")
    # warm: every block checked once; then what a render's reads cost through the checks
    b = avatar.load("bench")
    b.frames.verify_all()
    raw = np.load(folder / "frames.npy", mmap_mode="r")
    rng = np.random.default_rng(1)
    batches = [rng.integers(0, n, 16) for _ in range(max(10, repeat))]

    def slices(a):
        for s0 in range(0, n, 64):
            np.array(a[s0 : s0 + 64])

    def random_batches(a):
        for idx in batches:
            np.ascontiguousarray(a[idx])

    def views(a):  # views, no data copied: only the bookkeeping of a read
        for i in range(2000):
            a[i % n]
            a[i % n : i % n + 2]

    per_call = [min(timed(lambda: views(x), 5)) / 4000 * 1000 for x in (b.frames, raw)]
    out.append(
        f"warm, per read (index bookkeeping only): checked {per_call[0]:.1f} us, bare memmap {per_call[1]:.1f} us"
    )
    for label, fn in (("64-frame slices, whole clip", slices), ("random batches of 16", random_batches)):
        checked = min(timed(lambda: fn(b.frames), 3))
        bare = min(timed(lambda: fn(raw), 3))
        out.append(
            f"warm {label:<28} checked {checked:8.1f} ms, bare memmap {bare:8.1f} ms "
            f"(+{(checked - bare) / max(bare, 1e-9) * 100:.1f} %)"
        )
    return out


if __name__ == "__main__":
    raise SystemExit(main())

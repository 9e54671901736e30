"""Benchmark: loading a prepared 10 s 1080p video avatar (target < 10 ms).

    .venv/bin/python tests/benchmarks/bench_avatar_load.py [--seconds 10] [--size 1920x1080] [--keep]

Makes a real H.264 video (the astronaut photo under a slow virtual camera), prepares it with
``studio.core.avatar.prepare`` in a temporary data folder, then times:

* ``load(name)``: metadata, header/size/checksum checks, every array memory-mapped;
* ``resolve(path)``: the same avatar reached through its source path (adds the source check);
* touching one random frame, crop and mask after a load (what the renderer does per frame);
* the baseline: the same arrays read fully into memory with ``np.load`` (no mmap), warm cache.

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
    from studio.core import avatar

    src = work / "presenter.mp4"
    t = time.perf_counter()
    make_video(src, args.seconds, width, height)
    print(f"source video: {args.seconds:g} s {width}x{height} 30 fps, made in {time.perf_counter() - t:.1f} s")

    t = time.perf_counter()
    a = avatar.prepare("bench", src)
    prep_s = time.perf_counter() - t
    size = sum((a.folder / f"{n}.npy").stat().st_size for n in a.meta["files"])
    print(f"prepare: {a.N} frames in {prep_s:.1f} s ({a.N / prep_s:.1f} frames/s), "
          f"cache {size / 2**30:.2f} GiB, face-less frames {a.meta['faceless_frames']}")
    print("  per stage: " + ", ".join(f"{k} {v:.1f} s ({a.N / max(v, 1e-9):.0f} frames/s)"
                                      for k, v in a.meta["stage_s"].items()))
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
        return [np.load(folder / f"{n}.npy") for n in ("frames", "boxes", "crops", "masks", "landmarks",
                                                     "crop_landmarks", "face_ok")]

    full_read()  # warm the page cache so the baseline measures memory copies, not the disk
    base_ms = timed(full_read, max(3, args.repeat // 10))

    med = statistics.median
    print(f"load(name)               median {med(load_ms):7.2f} ms   (min {min(load_ms):.2f}, max {max(load_ms):.2f})")
    print(f"resolve(path)            median {med(resolve_ms):7.2f} ms")
    print(f"load + touch one frame   median {med(touch_ms):7.2f} ms")
    print(f"baseline np.load (full)  median {med(base_ms):7.2f} ms")
    print(f"ratio baseline / load    {med(base_ms) / med(load_ms):.0f}x   target: load < 10 ms -> "
          f"{'OK' if med(load_ms) < 10 else 'MISSED'}")
    if args.keep:
        print(f"kept {work}")
    else:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

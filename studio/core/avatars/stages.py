"""The stages of an avatar's cache build: decode the frames (a video's at its own listed rate, a photo
fitted), find and track the face, crop the faces and make their masks; each new array goes to a
registered temporary file beside the cache, and ``_commit`` renames them in before meta.json.
``builder.build`` decides which stages a source needs and runs ``StageBuilder`` under the folder's lock.

    b = StageBuilder(folder, name, params, progress)
    meta = b.run(todo, old, source, source_sha, source_key, keys)   # b.discard() on failure
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from studio.core.avatars import faces
from studio.core.avatars.assets import (
    DISK_RESERVE,
    MAX_CACHE_GB,
    OPTIONAL_ARRAYS,
    SCHEMA_VERSION,
    STAGES,
    AvatarParams,
    Progress,
)
from studio.core.avatars.cache import (
    file_spec,
)
from studio.core.avatars.sources import VideoReader, fit_photo, over_grey, read_image_alpha, read_matte, source_kind
from studio.core.constants import FACE_SIZE
from studio.core.errors import AvatarError
from studio.core.hold import hold
from studio.core.media.rates import DEFAULT_RATE, rate_number, rate_text

log = logging.getLogger(__name__)


class StageBuilder:
    """Runs the stages in ``todo``; new arrays go to temporary files until ``_commit``."""

    def __init__(self, folder: Path, name: str, params: AvatarParams, progress: Progress | None):
        self.folder, self.name, self.params = folder, name, params
        self.progress = progress or (lambda done, total, stage: None)
        self.tmp: dict[str, Path] = {}
        self.a: dict[str, np.ndarray] = {}
        self.rate = DEFAULT_RATE  # the frames' rate (a photo: 25)
        self.matte_sha: str | None = None  # --matte's file (its SHA-256), recorded in meta.json

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
                for k in ("faces_found", "face", "downscaled_from", "alpha", "matte_sha256"):  # set again here
                    meta.pop(k, None)
                meta.update(self._frames(source), source=str(source), source_sha256=source_sha)
                if self.matte_sha is not None:
                    meta["matte_sha256"] = self.matte_sha
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
            fps=rate_number(self.rate),
            rate=rate_text(self.rate),
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
        gen: Iterator[np.ndarray]
        total: int | None
        info: dict[str, Any]
        if kind == "photo":
            rgb, alpha = read_image_alpha(source)
            how = "source" if alpha is not None else None
            if self.params.matte is not None:  # --matte: the photo's alpha from that file
                alpha, how = read_matte(Path(self.params.matte), rgb.shape[1], rgb.shape[0]), "matte"
            photo = rgb if alpha is None else np.dstack([rgb, alpha])
            gen, total, info = iter([photo]), 1, {"source_fps": None, "duration_s": None}
            if how:
                info["alpha"] = how
        elif self.params.matte is not None:
            raise AvatarError(
                f"--matte is for photos and {source.name} is a video: a video brings its own alpha "
                "(ProRes 4444 or VP9 WebM with alpha)"
            )
        else:
            from studio.core.media.rates import listed, nearest

            own = VideoReader(source, self.params.trim_start, self.params.trim_end).source_fps
            # a video at a listed rate keeps its own frames (nothing resampled); any other rate (15 fps,
            # a variable-rate phone clip averaging 29.87) is resampled by timestamp to the nearest one
            self.rate = listed(own) or nearest(own)
            if listed(own) is None:
                log.info("%s: %s fps is not a listed rate; its frames are resampled to %s fps", source, own, self.rate)
            reader = VideoReader(source, self.params.trim_start, self.params.trim_end, self.rate)
            gen, total, info = iter(reader), reader.estimate, {"source_fps": reader.source_fps}
            if reader.alpha:  # RGBA frames: the alpha is kept
                info["alpha"] = "source"
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
        rgba = first.shape[2] == 4
        _check_budget(source, self.folder, w, h, total)
        limit = _limit_bytes()
        # tracking sees the frame over grey where it is transparent (its hidden colours are anything)
        found = self._faces_in_first(source, kind, over_grey(first[..., :3], first[..., 3] if rgba else None), info)
        multi = kind == "video" and len(found) > 1
        ref = found[info["face"] - 1] if found and "face" in info else (found[0] if found else None)
        lms, oks = [], []
        stage = "tracking the face" if kind == "photo" else "decoding and tracking"
        writer = _NpyWriter(self._tmp("frames"), (h, w, 3), np.uint8)
        alpha_writer = _NpyWriter(self._tmp("alpha"), (h, w), np.uint8) if rgba else None
        try:
            tracker = faces.FaceTracker(video=True, max_faces=len(found) if multi else 1) if kind == "video" else None
            try:
                frame: np.ndarray | None = first
                while frame is not None:
                    if frame.shape[:2] != (h, w):
                        raise AvatarError(f"{source}: the frame size changes mid-video; re-encode it at one size")
                    if alpha_writer is not None:  # the alpha beside the colours; tracking over grey
                        opacity = frame[..., 3]
                        alpha_writer.append(opacity)
                        frame = frame[..., :3]
                        seen = over_grey(frame, opacity)
                    else:
                        seen = frame
                    writer.append(frame)
                    if writer.rows == 1:  # the tests' hold (off unless $STUDIO_TEST_HOLD is set): a build still running
                        hold(_never, "build")
                    if writer.bytes_written * _bytes_ratio(w, h) > limit:
                        raise AvatarError(_too_big(source, limit))
                    if tracker is None:
                        lm = ref  # the photo: the face chosen among all found
                    elif multi:  # follow the chosen face: the one nearest its last position
                        assert ref is not None  # several faces were found: one was chosen
                        lm = faces.nearest_face(tracker.all_faces(seen), ref)
                    else:
                        lm = tracker(seen)
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
            if alpha_writer is not None:
                alpha_writer.abort()
            raise
        writer.close()
        if alpha_writer is not None:
            alpha_writer.close()
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
        if rgba:
            self.a["alpha"] = np.load(self.tmp["alpha"], mmap_mode="r")
        info.update(
            kind=kind, width=w, height=h, duration_s=info.get("duration_s") if kind == "photo" else float(n / self.rate)
        )
        return info

    def _faces_in_first(self, source: Path, kind: str, first: np.ndarray, info: dict) -> list[np.ndarray]:
        """Every face in the photo (a video: its first frame), left to right; says which one is
        used when there are several (``info["face"]``, 1-based) and checks ``--face``."""
        with faces.FaceTracker(video=False, max_faces=faces.MAX_FACES) as finder:
            found = finder.all_faces(first)
        want = self.params.face
        where = "the photo" if kind == "photo" else "the first frame"
        if want is not None and want > len(found):
            from studio.core.errors import NoSuchFace

            raise NoSuchFace(
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
                f"{source}: only {n} of its {declared} frames decode ({float(n / reader.rate):.2f} of "
                f"{float(declared / reader.rate):.2f} s); the file looks truncated: re-download or re-encode it, "
                f"or pass --trim-end {start + float(n / reader.rate):.2f} to use the part that decodes"
            )
        if declared is None and reader.stopped_early:
            log.warning(
                "%s: decoding stopped after %.2f s (%s); using the frames before it",
                source,
                float(n / reader.rate),
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
        """The one place the build's temporaries are made: registered (``temps.temp_file``), so a
        killed build's are removed by the next ``studio`` command, and released once renamed in
        (``_commit``) or deleted (``discard``, on any exception)."""
        from studio.core.store.temps import temp_file

        path = temp_file(self.folder, f".{name}.", ".tmp.npy")
        self.tmp[name] = path
        return path

    def _save(self, name: str, arr: np.ndarray) -> None:
        np.save(self._tmp(name), arr)
        self.a[name] = np.load(self.tmp[name], mmap_mode="r")

    def _commit(self, meta: dict, clear_engines: bool) -> None:
        from studio.core.store.fsutil import atomic_write_bytes

        files = dict(meta.get("files", {}))
        stale = [
            n for n in OPTIONAL_ARRAYS if n in files and n not in self.tmp and OPTIONAL_ARRAYS[n] in meta["rebuilt"]
        ]
        for n in stale:  # the stage that made it was rebuilt without it (a source without alpha now)
            files.pop(n)
        for name, tmp in self.tmp.items():
            with open(tmp, "rb+") as fh:
                os.fsync(fh.fileno())
            files[name] = file_spec(tmp)
        meta["files"] = files
        meta["updated"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        meta.setdefault("created", meta["updated"])
        from studio.core.store.temps import release_temp

        for name, tmp in self.tmp.items():
            os.replace(tmp, self.folder / f"{name}.npy")
            release_temp(tmp)
        self.tmp.clear()
        if clear_engines:
            shutil.rmtree(self.folder / "engines", ignore_errors=True)
        if "frames" in meta["rebuilt"] or not (self.folder / "thumbnail.png").exists():
            _write_thumbnail(self.folder / "thumbnail.png", self.a["frames"], self.a["face_ok"])
        atomic_write_bytes(self.folder / "meta.json", json.dumps(meta, indent=1).encode())
        for n in stale:
            (self.folder / f"{n}.npy").unlink(missing_ok=True)

    def discard(self) -> None:
        from studio.core.store.temps import release_temp

        self.a.clear()
        for tmp in self.tmp.values():
            tmp.unlink(missing_ok=True)
            release_temp(tmp)
        self.tmp.clear()


def _never() -> bool:
    """A held build's stop: only the test's file (or a signal) ends the hold."""
    return False


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
            f"{source}: the avatar cache needs {size_text(need + DISK_RESERVE)} ({frames} frames of {w}x{h}, "
            f"with {size_text(DISK_RESERVE)} to spare) but only {size_text(free)} is free in {folder.parent}; free some "
            "disk space or use a shorter clip with --trim-start/--trim-end"
        )


def size_text(n: float) -> str:
    """Bytes for a person: 3.2 GB, 740 MB, 48 KB, 0 bytes (never "0.0 GB" for a small disk)."""
    for unit, scale in (("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if n >= scale:
            v = n / scale
            return f"{v:.1f} {unit}" if v < 10 else f"{v:.0f} {unit}"
    return f"{int(n)} bytes"


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

"""Building an avatar's cache: decode, track, crop and mask in stages, each keyed by what it depends on;
new files are written beside the old ones and renamed in before meta.json (a failed build leaves the
previous avatar intact). Builds of one folder are serialised across processes (flock). The stages
themselves (decode and track, crops, masks, the commit) are ``avatars.stages.StageBuilder``.

    assets = build(folder, name, source, sha256, quick_key, params, progress)
    assets = load_folder(folder, name)      # checked; damage repaired (rebuild) or one sentence
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
from pathlib import Path

from studio.core.avatars.assets import (
    KEY_VERSION,
    OPTIONAL_ARRAYS,
    SCHEMA_VERSION,
    STAGES,
    AvatarAssets,
    AvatarParams,
    Progress,
)
from studio.core.avatars.cache import (
    Damaged,
    file_id,
    fix_hint,
    full_problem,
    meta_problem,
    open_array,
    open_assets,
    read_meta,
    rebuildable,
    upgrade,
)
from studio.core.avatars.stages import StageBuilder
from studio.core.constants import FACE_SIZE
from studio.core.errors import AvatarError

log = logging.getLogger(__name__)


#: how a video's frames are timed, in the frames stage's key: "native" = at the video's own rate (a
#: listed rate), 25 = resampled to 25 fps (caches made before output rates were a setting)
NATIVE_RATE = "native"


def stage_keys(
    source_sha: str, p: AvatarParams, timing: str | int = NATIVE_RATE, matte_sha: str | None = None
) -> dict[str, str]:
    import hashlib

    def h(*parts) -> str:
        return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]

    picked = () if p.face is None else ("face", p.face)  # absent by default: older keys stay valid
    if matte_sha is not None:  # --matte: the alpha comes from that file's bytes (not its path)
        picked = (*picked, "matte", matte_sha)
    k_frames = h(KEY_VERSION, source_sha, p.trim_start, p.trim_end, timing, *picked)
    k_crops = h(k_frames, p.smooth, p.bbox_shift, p.extra_margin, FACE_SIZE)
    k_masks = h(k_crops, p.cheek_width, p.feather, p.mask_mode)
    return {"frames": k_frames, "crops": k_crops, "masks": k_masks}


def _matte_sha(params: AvatarParams, old: dict | None) -> str | None:
    """The SHA-256 of ``--matte``'s file (what the frames stage depends on); the recorded one when the
    file is gone (the cache stays usable), None without a matte."""
    if params.matte is None:
        return None
    path = Path(params.matte)
    if path.is_file():
        from studio.core.store.fsutil import file_sha256

        return file_sha256(path)
    if old is not None and old.get("matte_sha256"):
        return str(old["matte_sha256"])
    raise AvatarError(f"--matte {params.matte}: no such file; give a PNG whose white is the presenter")


class FolderLock:
    """``flock`` on the avatar folder itself: one build of a folder at a time, across processes
    (chunk workers, the app and a CLI command repairing the same cache). No lock file is left."""

    def __init__(self, folder: Path):
        self.folder, self.fd = folder, None

    def __enter__(self):
        try:
            import fcntl
        except ImportError:  # not on POSIX: no cross-process lock
            return self
        try:
            self.fd = os.open(self.folder, os.O_RDONLY)
        except FileNotFoundError:
            raise AvatarError(_gone(self.folder)) from None
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        try:  # the folder may have been moved (an avatar removed to the trash) while this waited
            same = os.path.samestat(os.stat(self.folder), os.fstat(self.fd))
        except FileNotFoundError:
            same = False
        if not same:
            self.__exit__()
            raise AvatarError(_gone(self.folder))
        return self

    def __exit__(self, *exc):
        if self.fd is not None:
            os.close(self.fd)  # releases the lock
            self.fd = None


def _gone(folder: Path) -> str:
    from studio.core.avatars.assets import library_dir

    if folder.parent == library_dir():
        return f"avatar '{folder.name}' was removed from the library while it was in use; add it again to use it"
    return f"the avatar cache {folder} was removed while it was in use; run the command again"


_DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def build(
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
    if check_source and new_folder:  # a repair or a re-preparation never brings back a removed avatar
        raise AvatarError(_gone(folder))
    folder.mkdir(parents=True, exist_ok=True)
    try:
        with FolderLock(folder):
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


def rebuild(folder: Path, name: str, meta: dict, params: AvatarParams, progress=None, **kw) -> AvatarAssets:
    """The avatar in ``folder`` built again from what its ``meta`` says (its source file when it is
    still there, its hash and quick key; the source checked against them) with ``params``; ``kw``:
    the builder's other options (``damaged``)."""
    src = Path(meta["source"])
    return build(
        folder,
        name,
        src if src.is_file() else None,
        meta["source_sha256"],
        meta.get("source_key"),
        params,
        progress,
        check_source=True,
        **kw,
    )


def load_folder(folder: Path, name: str) -> AvatarAssets:
    """The avatar in ``folder`` opened (checked; a block damaged later is repaired with ``rebuild``),
    or rebuilt now when its meta.json or a file is damaged (one sentence when it cannot be)."""
    meta = read_meta(folder)
    problem = meta_problem(meta)
    if problem is None and meta is not None:
        if meta["schema_version"] != SCHEMA_VERSION:
            meta = upgrade(folder, name, meta)
        if meta is not None:
            try:
                return open_assets(folder, meta, rebuild=rebuild)
            except Damaged:  # build finds which stages are damaged, says so and rebuilds them
                pass
    elif not rebuildable(meta):
        if not folder.is_dir():
            raise AvatarError(f"no avatar named '{name}' in the library (it was removed); see `studio avatar list`")
        raise AvatarError(f"avatar '{name}' is damaged ({problem}); {fix_hint(name, folder, None)}")
    meta = meta if meta is not None else read_meta(folder)
    if meta is None:  # removed meanwhile
        raise AvatarError(f"avatar '{name}' is damaged (its meta.json is gone); {fix_hint(name, folder, None)}")
    return rebuild(folder, name, meta, AvatarParams.from_json(meta["params"]))


def _build_locked(folder, name, source, source_sha, source_key, params, progress, check_source, damaged):
    old = read_meta(folder)
    problem = meta_problem(old) if old is not None else None
    damage: list[tuple[str, str]] = []  # (what is wrong, the stage rebuilt from), said once the rebuild can go on
    if problem is not None:
        damage.append((problem, "frames"))
        old = None
    elif old is not None and old["schema_version"] != SCHEMA_VERSION:
        old = upgrade(folder, name, old)
    matte_sha = _matte_sha(params, old)
    keys = stage_keys(source_sha, params, matte_sha=matte_sha)
    legacy = stage_keys(source_sha, params, 25, matte_sha=matte_sha)
    if (
        old is not None
        and old["stages"].get("frames") == legacy["frames"]
        and (source is None or old.get("kind") == "photo")
    ):
        # a cache from before output rates: a photo's frame is the same at any rate, and a video whose
        # source is gone keeps its 25 fps frames (``meta["fps"]`` says 25) instead of being lost
        keys = legacy
    side = max(int(old["width"]), int(old["height"])) if old else 0
    todo: list[str] = []
    for stage, names in STAGES:
        if not todo and old is not None and old["stages"].get(stage) == keys[stage]:
            try:
                for n in _stage_files(stage, names, old):  # with the optional ones (alpha): checked alike
                    open_array(folder, n, old["files"].get(n), side=side)
                    if damaged and damaged[0] == n and (file_id(folder / f"{n}.npy") or (None,))[0] == damaged[1]:
                        raise Damaged(damaged[2])
                continue
            except Damaged as exc:
                damage.append((str(exc), stage))
        todo.append(stage)
    if not todo:
        return open_assets(folder, old, verify=False, rebuild=rebuild)
    # The stages kept are the rebuild's input: every block of them is checked first.
    for stage, names in STAGES:
        if stage == todo[0]:
            break
        bad = next(
            (p for p in (full_problem(folder, n, old["files"][n], side) for n in _stage_files(stage, names, old)) if p),
            None,
        )
        if bad:
            damage.append((bad, stage))
            todo = [s for s, _ in STAGES][[s for s, _ in STAGES].index(stage) :]
            break
    if "frames" in todo:
        why = f"avatar '{name}' is damaged ({'; '.join(d for d, _ in damage)}) and" if damage else f"avatar '{name}'"
        if source is None:
            src = old.get("source") if old else None
            raise AvatarError(
                f"{why} must be rebuilt, but its source {src or '(unknown)'} is gone; {fix_hint(name, folder, None)}"
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
    b = StageBuilder(folder, name, params, progress)
    b.matte_sha = matte_sha
    try:
        meta = b.run(todo, old, source, source_sha, source_key, keys)
    except BaseException:
        b.discard()
        raise
    return open_assets(folder, meta, verify=False, rebuild=rebuild)


def _stage_files(stage: str, names, meta: dict) -> list[str]:
    """The arrays of ``stage`` this cache has: the stage's own and the optional ones it made (a
    transparent avatar's ``alpha`` is made with the frames, and repaired with them)."""
    extra = [n for n, made_by in OPTIONAL_ARRAYS.items() if made_by == stage and n in meta.get("files", {})]
    return [*names, *extra]

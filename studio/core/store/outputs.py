"""Where an output may go: one check, before any work starts.

    out = check_output("talk.mp4", render_inputs("anna", "voice.flac"))              # video
    png = check_output("frame.png", [audio, avatar], kind="image")

``check_output`` refuses, with one sentence (``InputError``/``RenderError``, exit 2):

- an output that is one of the inputs: the same file by device and inode (so through symlinks,
  ``./``, ``..`` and hard links) or by resolved path; writing the MP4 there would destroy the
  voice-over or the avatar. ``render_inputs`` names them all: the voice-over, the avatar file, and
  for a library avatar its source video or photo (recorded at ``avatar add``) and its cache folder;
- an output inside an input folder or inside the data folder's own folders (avatars, caches,
  uploads, models, temporaries: everything but ``renders/``);
- an output that is a folder, or an existing non-regular file (a FIFO, a device: the atomic
  rename would replace the node itself);
- a name whose extension is not one Studio writes: ``.mp4``, ``.mov``, ``.m4v`` for video (all
  three hold the same ISO-BMFF H.264 + AAC stream, muxed as MP4), ``.png`` for frames;
- a folder that does not exist or does not accept new files (read-only, permission, full): a
  temporary is really created there and removed, since ``os.access`` is wrong for root and for
  read-only mounts.

The render/frame/demo commands call it first; the service calls it for every request.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from studio.core.errors import InputError, RenderError

SUFFIXES = {"video": (".mp4", ".mov", ".m4v", ".webm"), "image": (".png",)}
_WHAT = {"video": "MP4, QuickTime or WebM video", "image": "PNG images"}


def check_output(
    output: str | os.PathLike, inputs: Iterable | Mapping = (), kind: str = "video", codec: str | None = None
) -> Path:
    """Return ``output`` as a Path once it is safe to write there; raise one sentence otherwise.

    ``inputs``: the files the job reads (paths; a mapping names them, e.g. ``{"voice-over": p}``);
    entries that are not existing paths (an avatar's library name, None) are skipped.
    """
    if kind not in SUFFIXES:
        raise ValueError(f"kind must be one of {sorted(SUFFIXES)}, not {kind!r}")
    text = os.fspath(output) if output is not None else ""
    if not str(text).strip():
        raise InputError("The output path is empty: give a file name such as out.mp4.")
    out = Path(os.path.expanduser(text))
    suffixes = SUFFIXES[kind]
    check_name_length(out)  # first: a name too long makes every stat of it fail
    if out.is_dir():
        raise InputError(f"{out}: is a folder; give a file name inside it, such as {out / ('out' + suffixes[0])}.")
    named = list(inputs.items() if isinstance(inputs, Mapping) else (("input", p) for p in inputs))
    folders = [(f"the {label}", p) for label, p in named] + [
        (f"Studio's own {p.name} folder", p) for p in data_folders()
    ]
    for label, inp in folders:
        if inp is not None and os.path.isdir(inp) and inside(out, inp):
            raise InputError(
                f"{out}: is inside {label} ({inp}); Studio keeps its own files there, so choose another folder."
            )
    for label, inp in named:
        if inp is None or not same_file(out, inp):
            continue
        via = "" if os.path.abspath(out) == os.path.abspath(inp) else f" ({inp}, through a link or another name)"
        raise InputError(
            f"{out}: is the {label} itself{via}; writing there would destroy it, so choose another output name."
        )
    if out.suffix.lower() not in suffixes:
        names = ", ".join(suffixes[:-1]) + " or " + suffixes[-1] if len(suffixes) > 1 else suffixes[0]
        raise InputError(f"{out.name}: Studio writes {_WHAT[kind]}; give the output a {names} name.")
    if kind == "video" and codec is not None:  # the extension follows the codec (.mov for ProRes ...)
        from studio.core.media.codecs import suffix_problem

        problem = suffix_problem(out, codec)
        if problem:
            raise InputError(problem)
    if out.exists() and not out.is_file():
        raise InputError(f"{out}: exists and is not a regular file (a pipe or a device); choose another output name.")
    check_folder(out)
    return out


def check_name_length(out: Path) -> None:
    """One sentence for a file name longer than its file system takes (255 bytes on most)."""
    n = len(out.name.encode("utf-8", "surrogateescape"))
    try:
        limit = os.pathconf(out.parent if out.parent.is_dir() else ".", "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = 255
    if n > limit:
        raise InputError(
            f"{out.name[:40]}...{out.suffix}: the file name is {n} bytes long, but the file system takes at most "
            f"{limit}; choose a shorter name."
        )


def check_kept_name(out: str | os.PathLike) -> None:
    """Where an existing output is kept (no ``--overwrite``), the numbered name the new file gets
    (``out_002.mp4``) must fit the file system too: one sentence now, not a failure after the whole
    render (a legal 254-byte name that exists has no room for ``_002``)."""
    out = Path(os.path.expanduser(os.fspath(out)))
    check_name_length(out)
    try:
        if not out.exists():
            return
    except OSError:
        return
    alt = Path(numbered(out, 2))
    n = len(alt.name.encode("utf-8", "surrogateescape"))
    try:
        limit = os.pathconf(out.parent if out.parent.is_dir() else ".", "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = 255
    if n > limit:
        raise InputError(
            f"{out.name[:40]}...{out.suffix}: a file of that name exists and is kept, but the numbered name the new "
            f"file would get is {n} bytes long and the file system takes at most {limit}; choose a shorter name, "
            "or pass --overwrite to replace that file."
        )


def write_error(exc: OSError, path: str | os.PathLike):
    """One sentence (``RenderError``) for a write that failed: a full disk or quota names the
    folder, a name too long says so; anything else with its reason and folder."""
    path = Path(path)
    folder = Path(exc.filename).parent if isinstance(getattr(exc, "filename", None), str) else path.parent
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        why = "no space left on device" if exc.errno == errno.ENOSPC else "disk quota exceeded"
        return RenderError(
            f"The disk is full ({why} in {folder}) while writing {path.name}: free some space and try again."
        )
    if exc.errno == errno.ENAMETOOLONG:
        return RenderError(
            f"{path.name[:40]}...: the file name is too long for the file system; choose a shorter name."
        )
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return RenderError(f"{path.name} cannot be written in {folder} ({exc.strerror}): choose another folder.")
    return RenderError(f"Writing {path.name} failed ({exc.strerror or exc}, in {folder}): check the output folder.")


def render_inputs(avatar, audio) -> dict:
    """Every file and folder a render reads, named for ``check_output``: the voice-over, the
    avatar (a path), and a library avatar's source and cache folder. Never raises (what cannot be
    read is left out; the render itself says what is wrong with it)."""
    out: dict = {"voice-over": audio}
    text = str(avatar or "")
    if os.sep in text or os.path.exists(text):
        out["avatar"] = text
        return out
    try:
        from studio.core.avatars.cache import read_meta
        from studio.core.avatars.library import library_dir

        folder = library_dir() / text
        if text and folder.is_dir():
            meta = read_meta(folder) or {}
            source, kind = meta.get("source"), meta.get("kind")
            if isinstance(source, str) and source:
                what = kind if kind in ("video", "photo") else "file"
                out[f"avatar's source {what}"] = source
            out["avatar's cache folder"] = folder
    except Exception:  # noqa: BLE001 - a check that cannot read the library skips it
        pass
    return out


def data_folders() -> list[Path]:
    """The data folder's own folders (an output never goes there): everything but ``renders/``."""
    try:
        from studio.core import env
        from studio.core.store.paths import data_dir

        home = Path(env.get("STUDIO_HOME")).expanduser() if env.get("STUDIO_HOME") else data_dir()
    except Exception:  # noqa: BLE001
        return []
    return [home / n for n in ("avatars", "cache", "uploads", "models", "engines", "tmp", "logs")]


def inside(path: str | os.PathLike, folder: str | os.PathLike) -> bool:
    """Whether ``path`` (resolved, links followed) lies in ``folder`` (resolved)."""
    try:
        p, f = Path(os.path.realpath(path)), Path(os.path.realpath(folder))
    except (OSError, ValueError):
        return False
    return p != f and f in p.parents


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether ``a`` and ``b`` name one file: same device and inode (links followed), or the same
    resolved path. False when either does not exist."""
    try:
        sa, sb = os.stat(a), os.stat(b)
    except (OSError, ValueError):
        return False
    if (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino):
        return True
    try:
        return os.path.realpath(a) == os.path.realpath(b)
    except (OSError, ValueError):
        return False


def check_folder(out: str | os.PathLike) -> Path:
    """Raise unless ``out``'s folder exists and accepts a new file (one is created and removed)."""
    from studio.core.store.fsutil import release_temp, temp_file

    out = Path(out)
    folder = out.parent
    if not folder.exists():
        raise RenderError(f"The output folder {folder} does not exist: create it or choose another.")
    if not folder.is_dir():
        raise RenderError(f"{folder} is not a folder, so {out.name} cannot be written there: choose another path.")
    try:
        probe = temp_file(folder, f".{out.stem}.", ".part.probe")
    except OSError as exc:
        why = "the disk is full" if exc.errno == errno.ENOSPC else (exc.strerror or str(exc))
        raise RenderError(f"The output folder {folder} is not writable ({why}): choose another folder.") from None
    try:
        probe.unlink()
    finally:
        release_temp(probe)
    return out


_NUMBERED = re.compile(r"^(.*)_(\d{3,})$")


def numbered(path: str | os.PathLike, n: int) -> str:
    """``out.mp4`` -> ``out_002.mp4`` (n=2); an already numbered stem is renumbered."""
    p = Path(path)
    m = _NUMBERED.match(p.stem)
    stem = m.group(1) if m else p.stem
    return str(p.with_name(f"{stem}_{n:03d}{p.suffix}"))


def numbered_names(path: str | os.PathLike, limit: int = 100_000) -> Iterator[Path]:
    """``path``, then the numbered names after it: ``out.mp4``, ``out_002.mp4``, ``out_003.mp4`` ...
    (``out_007.mp4``: ``out_007.mp4``, ``out_008.mp4`` ...)."""
    yield Path(path)
    m = _NUMBERED.match(Path(path).stem)
    n = int(m.group(2)) + 1 if m else 2
    for k in range(n, n + limit):
        yield Path(numbered(path, k))

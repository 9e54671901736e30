"""Where an output may go: one check, before any work starts.

    out = check_output("talk.mp4", {"voice-over": audio, "avatar": avatar})          # video
    png = check_output("frame.png", [audio, avatar], kind="image")

``check_output`` refuses, with one sentence (``InputError``/``RenderError``, exit 2):

- an output that is one of the inputs: the same file by device and inode (so through symlinks,
  ``./``, ``..`` and hard links) or by resolved path; writing the MP4 there would destroy the
  voice-over or the avatar;
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
from collections.abc import Iterable, Mapping
from pathlib import Path

from studio.core.errors import InputError, RenderError

SUFFIXES = {"video": (".mp4", ".mov", ".m4v"), "image": (".png",)}
_WHAT = {"video": "MP4 video (H.264 + AAC)", "image": "PNG images"}


def check_output(output: str | os.PathLike, inputs: Iterable | Mapping = (), kind: str = "video") -> Path:
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
    if out.is_dir():
        raise InputError(f"{out}: is a folder; give a file name inside it, such as {out / ('out' + suffixes[0])}.")
    named = inputs.items() if isinstance(inputs, Mapping) else (("input", p) for p in inputs)
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
    if out.exists() and not out.is_file():
        raise InputError(f"{out}: exists and is not a regular file (a pipe or a device); choose another output name.")
    check_folder(out)
    return out


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

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

``open_video_for(settings, path, avatar, fps=rate, ...)`` opens the writer of a render of ``avatar``
with ``settings`` (its encoder, CRF, preset and codec; the avatar's size and what of it may change):
the renderer, the several-GPU render and each chunk open theirs here, so none copies the encode
settings field by field.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from studio.core.errors import InputError
from studio.core.store.files import check_folder, check_name_length, inside, same_file

SUFFIXES = {"video": (".mp4", ".mov", ".m4v", ".webm", ".mxf"), "image": (".png",)}
_WHAT = {"video": "MP4, QuickTime, WebM or MXF video", "image": "PNG images"}


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


def open_video_for(
    settings, path: str | os.PathLike, avatar, *, fps, size: tuple[int, int] | None = None, **options: Any
):
    """``media.writer.open_video`` for frames of ``size`` (the output canvas; default the avatar's
    own) with ``settings``' encoder, CRF, preset and codec, at the output's rate ``fps`` (the clip's
    ``rate``, resolved once), told what of the frame may change (``canvas.changing_for``: a photo's
    face where it lands, a video's moving parts).
    ``options`` go on as they are (``audio``, ``total_frames``, ``rolling``, ``overwrite``,
    ``workers`` ...); ``codec=`` or ``changing=`` there override (a chunk of a chunked render is in
    the settings' codec: ``scale.chunks.CHUNK_CODECS``, checked before any work)."""
    from studio.core.media.writer import open_video

    options.setdefault("codec", settings.codec)
    options.setdefault("scan", getattr(settings, "scan", "progressive"))
    width, height = size or (avatar.width, avatar.height)
    from studio.core.media.mxf import problem

    says = problem(options["codec"], width, height, fps, options["scan"], getattr(settings, "audio_format", ""))
    if says:
        raise InputError(says[0].upper() + says[1:] + ".")
    if "changing" not in options:
        from studio.core.render.canvas import changing_for

        options["changing"] = changing_for(settings, avatar)
    return open_video(
        path,
        width,
        height,
        encoder=settings.encoder,
        crf=settings.crf,
        preset=settings.preset,
        fps=fps,
        **({"gop": max(1, round(settings.keyint * float(fps)))} if settings.keyint > 0 else {}),
        **options,
    )


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
        from studio.core.env import data_dir

        home = Path(env.get("STUDIO_HOME")).expanduser() if env.get("STUDIO_HOME") else data_dir()
    except Exception:  # noqa: BLE001
        return []
    return [home / n for n in ("avatars", "cache", "uploads", "models", "engines", "tmp", "logs")]

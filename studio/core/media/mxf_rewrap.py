"""An optional strict re-wrap of an MXF delivery through bmx (the BBC's MXF tools): ``bmxtranswrap``
reads the OP1a file FFmpeg's muxer wrote and writes it again as an RDD9 (XDCAM HD422) or AS-11
(AVC-Intra, the UK DPP's) file, for a play-out server or a QC tool stricter than FFmpeg's muxer is
about the index tables and the partition layout. Essence, timecode and tracks are copied as they are.

    rewrap("news.mxf", "news_rdd9.mxf", "rdd9")      # one sentence if bmx is not installed

Written by hand: bmx is a C++ tool with no Python binding, so this only runs it on the finished file
(an argument list, never a shell), into a temporary beside the output that is renamed when bmx
succeeds; nothing half-written is left behind and an existing file is kept unless ``overwrite``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from studio.core.errors import InputError, RenderError

TOOL = "bmxtranswrap"
#: what the re-wrap makes -> bmxtranswrap's clip type (``-t``)
KINDS = {"rdd9": "rdd9", "as11": "as11op1a", "op1a": "op1a"}


def tool() -> str | None:
    """bmxtranswrap's path, or None (``studio doctor`` says how to get it)."""
    return shutil.which(TOOL)


def rewrap(src: str | os.PathLike, dest: str | os.PathLike, kind: str = "rdd9", *, overwrite: bool = False) -> Path:
    """``src`` (an MXF Studio wrote) re-wrapped by bmx as ``kind`` into ``dest``; the name written (a
    numbered one when ``dest`` exists and ``overwrite`` is off). One sentence for every mistake."""
    from studio.core.store.files import same_file
    from studio.core.store.fsutil import atomic_output

    if kind not in KINDS:
        raise InputError(f"--as {kind!r}: give one of {', '.join(KINDS)}")
    exe = tool()
    if exe is None:
        raise InputError(
            f"{TOOL} is not installed: the re-wrap needs bmx (build it from github.com/bbc/bmx and put "
            f"{TOOL} on the PATH; studio doctor says whether it is found)"
        )
    src, dest = Path(src), Path(dest)
    if not src.is_file():
        raise InputError(f"{src}: no such MXF file")
    if src.suffix.lower() != ".mxf" or dest.suffix.lower() != ".mxf":
        raise InputError("the re-wrap reads and writes .mxf files: name both so")
    if dest.exists() and same_file(src, dest):
        raise InputError(f"{dest}: is the file being re-wrapped; choose another output name")
    if not dest.parent.is_dir():
        raise InputError(f"{dest.parent}: no such folder")
    with atomic_output(dest, overwrite=overwrite) as out:
        out.tmp.unlink(missing_ok=True)  # bmx writes the file itself
        try:
            r = subprocess.run(
                [exe, "-t", KINDS[kind], "-o", str(out.tmp), str(src)],
                capture_output=True,
                text=True,
                timeout=3600,
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise RenderError(f"{TOOL} could not run: {exc}") from None
        if r.returncode != 0 or not out.tmp.is_file() or out.tmp.stat().st_size == 0:
            said = (r.stderr or r.stdout or "").strip().splitlines()
            raise RenderError(f"{TOOL} could not re-wrap {src.name} as {kind}: {said[-1] if said else 'no output'}")
    assert out.final is not None
    return out.final

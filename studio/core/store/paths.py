"""The data folder: ``$STUDIO_HOME``, else the platform's user data folder."""

from __future__ import annotations

import sys
from pathlib import Path

from studio.core.errors import InputError


def data_dir() -> Path:
    """Return (and create) the data folder that holds avatars, models, engines, jobs and logs."""
    from studio.core import env

    home = env.get("STUDIO_HOME")
    if home:
        path = Path(home).expanduser()
    else:
        import platformdirs

        path = Path(platformdirs.user_data_dir("studio", appauthor=False))
    try:
        path.mkdir(parents=True, exist_ok=True)
        if not path.is_dir():
            raise NotADirectoryError(path)
    except OSError as exc:
        from studio.core.errors import InputError

        name = f"STUDIO_HOME={home}" if home else f"the data folder {path}"
        if path.exists() and not path.is_dir():
            raise InputError(
                f"{name}: is not a folder; point STUDIO_HOME at a folder (it is made if missing)"
            ) from None
        why = exc.strerror or type(exc).__name__
        raise InputError(
            f"{name}: the data folder cannot be made there ({why}); point STUDIO_HOME at another folder"
        ) from None
    return path


def sub_dir(name: str) -> Path:
    path = data_dir() / name
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        if exc.errno in READ_ONLY_ERRNOS:
            raise read_only_error(path, exc) from None
        raise
    return path


#: what a write answers on a read-only mount (EROFS) or a folder this user may not write (EACCES, EPERM)
READ_ONLY_ERRNOS = (30, 13, 1)


def is_read_only(path: Path) -> bool:
    """Whether ``path`` (or the folder it would be made in) cannot be written: a read-only mount or
    a folder this user may not write."""
    import os

    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        if os.statvfs(p).f_flag & os.ST_RDONLY:
            return True
    except OSError:
        return False
    return not os.access(p, os.W_OK)


class ReadOnlyDataFolder(InputError, OSError):
    """A data folder Studio cannot write: an ``InputError`` (one sentence, exit 2) that is also an
    ``OSError``, so code that goes on without an optional cache (``except OSError``) still does."""


def read_only_error(path: Path, exc: OSError | None = None):
    """The ``InputError`` for a data folder (or a file in it) Studio cannot write: it says read-only,
    never "damaged", since nothing is wrong with what is there."""
    import errno

    from studio.core.errors import InputError

    if exc is not None:
        rofs = exc.errno == errno.EROFS
    else:
        import os

        p = Path(path)
        while not p.exists() and p != p.parent:
            p = p.parent
        try:
            rofs = bool(os.statvfs(p).f_flag & os.ST_RDONLY)
        except OSError:
            rofs = False
    why = "a read-only file system" if rofs else "no permission to write"
    from studio.core import env

    home = env.get("STUDIO_HOME")
    folder = Path(home).expanduser() if home else None
    if folder is None:
        import platformdirs

        folder = Path(platformdirs.user_data_dir("studio", appauthor=False))
    if Path(path) == folder or Path(path).is_relative_to(folder):
        return ReadOnlyDataFolder(
            f"The data folder {folder} is read-only ({why}: {path} cannot be written); make it writable, or "
            "point STUDIO_HOME at a writable folder (nothing in it was changed)"
        )
    return InputError(f"{path} cannot be written ({why}); choose a writable folder")


def log_file() -> Path:
    return sub_dir("logs") / "studio.log"


def repo_resources() -> Path:
    """The ``resources/`` folder shipped beside the package (demo assets, icons, style sheet)."""
    # Frozen desktop app (packaging/studio.spec): PyInstaller unpacks ``resources/`` into the
    # bundle's folder, sys._MEIPASS (dist/studio/_internal/).
    frozen_root = getattr(sys, "_MEIPASS", None)
    if getattr(sys, "frozen", False) and frozen_root:
        return Path(frozen_root) / "resources"
    package = Path(__file__).resolve().parents[2]  # studio/ (this file is studio/core/store/paths.py)
    here = package.parent / "resources"
    if here.is_dir():
        return here
    # Frozen/installed layouts put resources next to the package.
    return package / "resources"

"""The data folder: ``$STUDIO_HOME``, else the platform's user data folder."""

from __future__ import annotations

import sys
from pathlib import Path


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
    path.mkdir(parents=True, exist_ok=True)
    return path


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

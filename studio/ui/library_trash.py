"""Removing from the Library, undoably: ``RemoveAvatar`` moves an avatar's folder into the trash
(``<data>/trash``) and undo moves it back; ``RemoveScript`` takes a voice-over off the list. The trash
is emptied when the window closes (``empty_trash``): the undo steps end with it.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtGui import QIcon, QUndoCommand
from PySide6.QtWidgets import QListWidgetItem

from studio.ui.widgets import ONLY, icon_path

if TYPE_CHECKING:
    from studio.ui.library import LibraryPanel

log = logging.getLogger(__name__)


class RemoveAvatar(QUndoCommand):
    """Remove an avatar into the trash (``<data>/trash``); undo moves it back, prepared as it was."""

    def __init__(self, panel: LibraryPanel, name: str):
        super().__init__(f"Remove avatar “{name}”")
        self.panel, self.name = panel, name
        self.trashed: Path | None = None

    def redo(self) -> None:
        try:
            self.trashed = trash_avatar(self.name)
        except Exception as exc:  # noqa: BLE001 - nothing moved: no undo step either
            from studio.ui.workers import error_text

            self.panel.error.emit(error_text(exc))
            self.setObsolete(True)
            return
        self.panel.refresh_avatars()

    def undo(self) -> None:
        if self.trashed is None:
            return
        try:
            restore_avatar(self.trashed, self.name)
        except Exception as exc:  # noqa: BLE001
            from studio.ui.workers import error_text

            self.panel.error.emit(error_text(exc))
            return
        self.trashed = None
        self.panel.refresh_avatars(select=self.name)
        self.panel.avatarRestored.emit(self.name)


class RemoveScript(QUndoCommand):
    """Take a voice-over off the list (the file stays where it is); undo puts it back in its place."""

    def __init__(self, panel: LibraryPanel, path: str):
        super().__init__(f"Remove “{Path(path).name}” from the list")
        self.panel, self.path = panel, path
        self.row = -1

    def redo(self) -> None:
        p = self.panel
        self.row = p.script_row(self.path)
        if self.row >= 0:
            p.scripts.takeItem(self.row)
            p.save_scripts()

    def undo(self) -> None:
        p = self.panel
        if self.row < 0 or p.script_row(self.path) >= 0:
            return
        item = QListWidgetItem(QIcon(icon_path("audio")), Path(self.path).name)
        item.setData(Qt.ItemDataRole.UserRole, self.path)
        item.setToolTip(self.path)
        p.scripts.insertItem(min(self.row, p.scripts.count()), item)
        p.save_scripts()
        p.scripts.setCurrentItem(item, ONLY)


def trash_dir() -> Path:
    from studio.core.env import sub_dir

    return sub_dir("trash")


def trash_avatar(name: str) -> Path:
    """Move avatar ``name``'s folder into the trash (a rename inside the data folder); its new path."""
    import uuid

    from studio.core.avatars.library import library_dir
    from studio.core.errors import AvatarError

    folder = library_dir() / name
    if not folder.is_dir():
        raise AvatarError(f"no avatar named '{name}' in the library; see `studio avatar list`")
    target = trash_dir() / f"{name}.{uuid.uuid4().hex[:8]}"
    os.replace(folder, target)
    log.info("avatar %s moved to the trash (%s)", name, target)
    return target


def restore_avatar(trashed: Path, name: str) -> None:
    from studio.core.avatars.library import library_dir
    from studio.core.errors import AvatarError

    folder = library_dir() / name
    if folder.exists():
        raise AvatarError(f"an avatar named “{name}” was made since; remove or rename it, then undo again")
    os.replace(trashed, folder)
    log.info("avatar %s restored from the trash", name)


def empty_trash() -> None:
    """Delete what removals left in the trash (when the window closes: their undo ends with it)."""
    import shutil

    shutil.rmtree(trash_dir(), ignore_errors=True)

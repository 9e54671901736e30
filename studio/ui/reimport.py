"""A file imported again: the Library asks (use the avatar made from it, import it again, or skip it)
instead of silently making "name-2".

    imported_as(entries, "/photos/anna.png")  -> "anna" (or None)
    ask_reimport(library, source, "anna")     # a question that does not block; a dropped batch goes on
"""

from __future__ import annotations

from pathlib import Path


def imported_as(entries: dict, source: str) -> str | None:
    """The avatar of the Library's ``entries`` made from the file ``source``, or None."""
    try:
        want = Path(source).expanduser().resolve()
    except OSError:
        return None
    for name, e in entries.items():
        src = e.get("source")
        if src and not e.get("damaged"):
            try:
                if Path(src).expanduser().resolve() == want:
                    return name
            except OSError:
                continue
    return None


def ask_reimport(library, source: str, same: str) -> None:
    """“photo.png” is avatar “photo” already: use it (selected), import it again under a new name,
    or skip it. Asked without blocking; a dropped batch goes on after the answer."""
    from PySide6.QtWidgets import QMessageBox

    box = QMessageBox(
        QMessageBox.Icon.Question,
        "Import again?",
        f"{Path(source).name} is already in the library as “{same}”. Use that avatar, or import "
        "the file again as a new avatar?",
        QMessageBox.StandardButton.NoButton,
        library,
    )
    box.setObjectName("reimport")
    use = box.addButton(f"Use “{same}”", QMessageBox.ButtonRole.AcceptRole)
    again = box.addButton("Import again", QMessageBox.ButtonRole.ActionRole)
    box.addButton(QMessageBox.StandardButton.Cancel)
    box.setDefaultButton(use)

    def answered(button) -> None:
        if button is use:
            library.refresh_avatars(select=same)
            library.status.emit(f"“{same}” is that file: selected")
        elif button is again:
            library.import_avatar(source, again=True)
            return
        library.next_import()

    box.buttonClicked.connect(answered)
    library.reimport_box = box
    box.open()

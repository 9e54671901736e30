"""The window's menu bar (File, Edit, View, Playback, Render, Help) and toolbar, from one set of actions,
and the commands that belong to no panel (Show output folder, Editor guide, About, Reset layout).

    cmds = WindowCommands(commands, library, session, queue, undo_stack, docks, parent=window)
    window.addToolBar(cmds.toolbar); cmds.render_action, cmds.cancel_action
    cmds.error.connect(show_error); cmds.status.connect(status_bar.showMessage)
    commands.on("render", window.render_now)   # the window's own commands: it connects them

The window is only their Qt parent (of the actions, the toolbar and the dialogs), never asked for
anything: what the window itself does (quit, render now, add to queue, cancel, the Doctor, reset the
layout) it connects to those actions by id, and what these commands have to say comes as the
signals ``error`` (the banner) and ``status`` (the status bar).

Where nothing on this machine opens a folder or a document (no desktop launcher: a bare server, a
container), the command says so in the status bar and the banner instead of doing nothing.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, QSize, Qt, Signal
from PySide6.QtWidgets import QToolBar, QWidget

from studio.ui.actions import Actions


class WindowCommands(QObject):
    """The window's own commands in the menus and the toolbar (``commands``: the registry they join,
    shared with the Playback menu's ``TransportControls``) and the slots of those that belong to no
    panel. ``parent`` (the window) is the Qt parent of the actions, the toolbar and the dialogs."""

    error = Signal(str)  # one readable sentence (the window's banner)
    status = Signal(str, int)  # a note for the status bar, and how long it stays (ms)

    def __init__(self, commands: Actions, library, session, queue, undo_stack, docks, parent: QWidget):
        super().__init__(parent)
        self.commands, self.session = commands, session
        self.guide_box = None  # Help > Editor guide shown in Studio (no desktop viewer here), once opened
        acts, lib = commands, library
        add = acts.add
        add(
            "import_avatar",
            "File",
            "Import photo or video…",
            lib.import_avatar_dialog,
            "Ctrl+I",
            "Import photos or videos as avatars (several at once)",
            icon("import"),
        )
        add(
            "import_audio",
            "File",
            "Import voice-over…",
            lib.import_audio_dialog,
            "Ctrl+O",
            "Import audio files as scripts (several at once)",
            icon("audio"),
        )
        acts.separator("File")
        add("show_output", "File", "Show output folder", self.show_output_folder, tip="Open the output folder")
        acts.separator("File")
        add("quit", "File", "Quit", shortcuts="Ctrl+Q")

        undo = undo_stack.createUndoAction(parent, "Undo")
        redo = undo_stack.createRedoAction(parent, "Redo")
        add("undo", "Edit", "", shortcuts=["Ctrl+Z"], action=undo)
        add("redo", "Edit", "", shortcuts=["Ctrl+Shift+Z", "Ctrl+Y"], action=redo)
        undo.setProperty("command", "Undo")
        redo.setProperty("command", "Redo")
        acts.separator("Edit")
        add(
            "remove_avatar",
            "Edit",
            "Remove avatar",
            lib.remove_selected_avatars,
            tip="Remove the selected avatar (undo restores it)",
        )
        add(
            "remove_script",
            "Edit",
            "Remove voice-over from the list",
            lib.remove_selected_scripts,
            tip="Take the selected voice-over off the list (the file stays)",
        )

        for dock in docks.values():
            view = dock.toggleViewAction()  # enabled: the docks are closable (View brings them back)
            view.setToolTip(f"Show or hide the {dock.windowTitle()} panel")
            add(f"view_{dock.objectName()}", "View", f"{dock.windowTitle()} panel", action=view)
        bar = self.toolbar = QToolBar("Toolbar", parent)  # the window adds it to its top
        bar.setObjectName("mainToolbar")
        bar.setMovable(False)
        bar.setIconSize(QSize(18, 18))
        bar.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        add("view_toolbar", "View", "Toolbar", action=bar.toggleViewAction())
        acts.separator("View")
        face = add("face_box", "View", "Face box on the preview", lib.show_box.setChecked, checkable=True)
        lib.show_box.toggled.connect(face.setChecked)
        mask = add("blend_mask", "View", "Blend mask on the preview", lib.show_mask.setChecked, checkable=True)
        lib.show_mask.toggled.connect(mask.setChecked)
        acts.separator("View")
        add("reset_layout", "View", "Reset layout", tip="Put every panel back where it started")

        add(
            "render",
            "Render",
            "Render now",
            None,
            ["Ctrl+R", "Ctrl+M"],
            "Queue the selected avatar and voice-over and start the queue",
            icon("render"),
        )
        add(
            "add_to_queue",
            "Render",
            "Add to queue",
            None,
            "Ctrl+Shift+R",
            "Queue every selected avatar × voice-over pair; the queue renders them once started",
            icon("queue"),
        )
        acts.separator("Render")
        add(
            "start_queue",
            "Render",
            "Start queue",
            lambda: queue.pause() if queue.state == "running" else queue.start(),
            "Ctrl+Return",
            "Render queued jobs one after another (again: pause after the running job)",
        )  # no tick: its words say what it does next ("Start queue" / "Pause queue")
        acts["start_queue"].setProperty("command", "Start / pause queue")
        add(
            "cancel",
            "Render",
            "Cancel render",
            None,
            "Esc",
            "Stop the running render (nothing is written)",
            icon("cancel"),
        )
        self.render_action, self.cancel_action = acts["render"], acts["cancel"]
        self.cancel_action.setEnabled(False)
        acts.separator("Render")
        rng = add(
            "range_only",
            "Render",
            "Render in/out range only",
            lambda on: session.set("range_only", bool(on)),
            checkable=True,
            tip="Render only the frames between the timeline's in and out points (I / O)",
        )

        def follow(key=None, _before=None, _after=None) -> None:  # the session's range and choice
            if key in (None, "range", "range_only"):
                rng.setEnabled(session.marks.range_frames() is not None)
                rng.blockSignals(True)
                rng.setChecked(bool(session.value("range_only")))
                rng.blockSignals(False)

        session.events.changed.connect(follow)
        session.events.analysis.connect(lambda _a: follow())
        follow()

        add("shortcuts", "Help", "Keyboard shortcuts", acts.show_shortcuts, ["F1", "?"], "Every key of the editor")
        add("doctor", "Help", "Doctor (check this machine)", icon=icon("doctor"))
        add("editor_guide", "Help", "Editor guide", self.open_guide, tip="docs/editor.md: keys, menus, undo, markers")
        add("about", "Help", "About Studio", self.about)

        for key in ("import_avatar", "import_audio", None, "render", "add_to_queue", "cancel", None, "doctor"):
            if key is None:
                bar.addSeparator()
            else:
                bar.addAction(acts[key])
        short = {
            "import_avatar": "Import avatar",
            "import_audio": "Import audio",
            "render": "Render",
            "cancel": "Cancel",
            "doctor": "Doctor",
        }
        for key, text in short.items():  # the toolbar's words; the menus say it in full
            acts[key].setIconText(text)

    @property
    def dialog_parent(self) -> QWidget | None:
        """The Qt parent its dialogs sit over (the window)."""
        parent = self.parent()
        return parent if isinstance(parent, QWidget) else None

    def show_output_folder(self) -> None:
        """File > Show output folder: the file manager there, or (no launcher) its path, said and copied."""
        from PySide6.QtWidgets import QApplication

        folder = Path(self.session.output_path()).parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            self.error.emit(f"the output folder {folder} cannot be made ({exc.strerror}); choose another in Render")
            return
        if not open_url(folder):
            QApplication.clipboard().setText(str(folder))
            self.error.emit(f"No program here opens folders; the output folder is {folder} (its path is copied)")

    def open_guide(self):
        """Help > Editor guide: docs/editor.md in the desktop's viewer, or (none here) in a window of its own."""
        guide = Path(__file__).resolve().parents[2] / "docs" / "editor.md"
        if guide.exists() and open_url(guide):
            return None
        from PySide6.QtWidgets import QDialog, QTextBrowser, QVBoxLayout

        box = QDialog(self.dialog_parent)
        box.setObjectName("editorGuide")
        box.setWindowTitle("Editor guide")
        text = QTextBrowser(box)
        if guide.exists():
            text.setMarkdown(guide.read_text(encoding="utf-8"))
        else:
            text.setPlainText(
                "The editor guide (docs/editor.md) is not installed here; Help > Keyboard shortcuts lists every key."
            )
        QVBoxLayout(box).addWidget(text)
        box.resize(760, 560)
        self.status.emit("No program here opens documents: the editor guide is shown in Studio", 8000)
        self.guide_box = box
        box.show()
        return box

    def about(self) -> None:
        from PySide6.QtWidgets import QMessageBox

        try:
            from importlib.metadata import version

            v = version("studio")
        except Exception:  # noqa: BLE001 - a source checkout
            v = "(source)"
        QMessageBox.about(
            self.dialog_parent, "About Studio", f"Studio {v}\nLip-synced presenter video on this computer."
        )


def open_url(path: Path) -> bool:
    """Open ``path`` with the desktop's program for it; False where no program would open it (no
    launcher, or a launcher with no program for that kind of file: ``can_open``)."""
    from PySide6.QtCore import QUrl
    from PySide6.QtGui import QDesktopServices

    if not can_open(path):
        return False
    return bool(QDesktopServices.openUrl(QUrl.fromLocalFile(str(path))))


def can_open(path: Path) -> bool:
    """Whether a program of the desktop opens ``path`` here. On Linux and the BSDs the launcher is
    ``xdg-open``, which starts (so Qt reports success) even when no program is set for the file's kind
    and then fails on its own: ask ``xdg-mime`` for the default program of a folder, or of the file's
    type (a text file's ``text/plain`` too), first. Elsewhere the system's launcher always has one."""
    import shutil
    import subprocess
    import sys

    if sys.platform in ("darwin", "win32"):
        return True
    if shutil.which("xdg-open") is None or shutil.which("xdg-mime") is None:
        return False
    if path.is_dir():
        kinds = ["inode/directory"]
    else:
        import mimetypes

        kind = mimetypes.guess_type(path.name)[0] or ("text/markdown" if path.suffix == ".md" else "")
        kinds = [k for k in (kind, "text/plain" if kind.startswith("text/") else "") if k]
    for kind in kinds:
        try:
            r = subprocess.run(["xdg-mime", "query", "default", kind], capture_output=True, text=True, timeout=5)
        except (OSError, subprocess.SubprocessError):
            return False
        if r.returncode == 0 and r.stdout.strip():
            return True
    return False


def icon(name: str) -> str:
    from studio.core.env import repo_resources

    return str(repo_resources() / "icons" / f"{name}.svg")

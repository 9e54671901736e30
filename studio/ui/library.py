"""The Library dock: avatars (thumbnails, status, import, parameters) and scripts (audio + text).

Avatar preparation runs on a background thread behind a progress dialog that can cancel it.
Scripts are audio files; their text is shown beside them (a ``.txt`` of the same name is read
when present) and can be spoken (Piper, offline; espeak-ng without it) into a WAV in the data folder. An audio file is
read (analysed) before it joins the list: one that cannot be read leaves the list, the selection
and the waveform as they were, and says why once.

Files dropped on the panel (or on the window) are imported: photos and videos as avatars, one
after another, audio files as scripts.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from pathlib import Path

import numpy as np
from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QIcon, QImage, QPixmap
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QProgressDialog,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from studio.ui import settings as cfg
from studio.ui.library_trash import RemoveAvatar, RemoveScript
from studio.ui.widgets import ONLY, FileDrops, file_kind, icon_path
from studio.ui.workers import run_in_background

AVATAR_FILTER = "Photos and videos (*.png *.jpg *.jpeg *.webp *.bmp *.mp4 *.mov *.mkv *.webm *.avi);;All files (*)"
AUDIO_FILTER = "Audio (*.wav *.flac *.ogg *.opus *.mp3);;All files (*)"
THUMB = 72


def to_qimage(rgb: np.ndarray) -> QImage:
    """A deep copy of an RGB uint8 array as a QImage (safe after the array is gone)."""
    rgb = np.ascontiguousarray(rgb[..., :3], dtype=np.uint8)
    h, w, _ = rgb.shape
    return QImage(rgb.data, w, h, 3 * w, QImage.Format.Format_RGB888).copy()


def safe_name(stem: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", stem).strip("-.") or "avatar"


class HintList(QListWidget):
    """A list that says what to do while it is empty (instead of a blank box)."""

    def __init__(self, hint: str, parent=None):
        super().__init__(parent)
        self.hint = hint
        self.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)  # Ctrl/Shift-click: a batch

    def sizeHint(self):  # noqa: N802 - asks for its minimum: both lists share a short dock's height
        hint = super().sizeHint()
        hint.setHeight(self.minimumHeight() or hint.height())
        return hint

    def paintEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        super().paintEvent(event)
        if self.count():
            return
        from PySide6.QtGui import QPainter

        p = QPainter(self.viewport())
        p.setPen(self.palette().placeholderText().color())
        r = self.viewport().rect().adjusted(12, 8, -12, -8)
        p.drawText(r, int(Qt.AlignmentFlag.AlignCenter | Qt.TextFlag.TextWordWrap), self.hint)
        p.end()


class LibraryPanel(QWidget):
    avatarSelected = Signal(str)  # avatar name ("" when none)
    scriptSelected = Signal(str)  # audio path ("" when none)
    selectionChanged = Signal()  # the avatars or scripts selected for a batch changed
    maskToggled = Signal(bool)
    avatarPrepared = Signal(str)
    avatarPreparing = Signal(str)  # an import of this avatar started
    avatarRestored = Signal(str)  # an undo brought a removed avatar back
    status = Signal(str)  # a passing message (the status bar)
    error = Signal(str)

    def __init__(self, history=None, jobs_using=None, parent=None):
        super().__init__(parent)
        self.setObjectName("library")
        self.settings = cfg.settings()
        self.task = None  # the running avatar preparation, if any
        self.history = history  # the window's undo history (studio.ui.undo.History); None: removals are final
        self.jobs_using = jobs_using  # names -> how many waiting jobs of the queue use those avatars
        self._entries: dict[str, dict] = {}
        self.analyses: dict[str, object] = {}  # path -> AudioAnalysis of scripts checked on import
        self._checking: set[str] = set()  # audio files being read before they join the list
        self._imports: list[str] = []  # dropped avatars waiting for the running import
        self.drops = FileDrops(self, self.files_dropped)  # photos, videos and audio dropped here are imported

        # ---- avatars
        self.avatars = HintList("No avatars yet.\nImport a photo or a video (Ctrl+I), or drop one here.")
        self.avatars.setObjectName("avatarList")
        self.avatars.setIconSize(QSize(THUMB, THUMB))
        self.avatars.setSpacing(2)
        self.avatars.setMinimumHeight(2 * (THUMB + 14) + 6)  # two avatars in sight, never 1.3
        self.avatars.currentItemChanged.connect(self._avatar_changed)
        self.avatars.itemSelectionChanged.connect(self.selectionChanged)
        self.import_avatar_btn = QPushButton(QIcon(icon_path("import")), "Import photo or video…")
        self.import_avatar_btn.clicked.connect(self.import_avatar_dialog)
        self.remove_avatar_btn = QPushButton("Remove")
        self.remove_avatar_btn.clicked.connect(self.remove_selected_avatars)

        self.bbox_shift = _spin(-40, 40, 0, " px", "Moves the mouth crop down (+) or up (-)")
        self.extra_margin = _spin(0, 80, 10, " px", "Extra space below the chin in the crop")
        self.cheek_width = _spin(0, 256, 90, " px", "Half-width of the blended jaw band (MuseTalk's 512-pixel units)")
        self.feather = _spin(0, 128, 24, " px", "Softness of the blend edge, in 256-crop pixels")
        self.show_box = QCheckBox("Face box")
        self.show_box.setToolTip("Draw the face crop box on the preview")
        self.show_box.toggled.connect(self.maskToggled)
        self.show_mask = QCheckBox("Blend mask")
        self.show_mask.setToolTip("Tint the lower-face blend mask on the preview")
        self.show_mask.toggled.connect(self.maskToggled)
        self.apply_btn = QPushButton("Apply and re-prepare")
        self.apply_btn.clicked.connect(self._reprepare)
        params = QFormLayout()
        params.addRow("Bbox shift", self.bbox_shift)
        params.addRow("Extra margin", self.extra_margin)
        params.addRow("Cheek width", self.cheek_width)
        params.addRow("Feather", self.feather)
        shows = QHBoxLayout()
        shows.addWidget(QLabel("Show"))
        shows.addWidget(self.show_box)
        shows.addWidget(self.show_mask)
        shows.addStretch(1)
        params.addRow(shows)
        params.addRow(self.apply_btn)

        self.avatar_status = QLabel("")
        self.avatar_status.setObjectName("dim")
        self.avatar_status.setWordWrap(True)
        av_box = _list_box("Avatars", self.avatars, self.import_avatar_btn, self.remove_avatar_btn, self.avatar_status)
        # the preparation's fields sit below the voice-overs: both lists show without scrolling
        prep_box = QGroupBox("Avatar preparation")
        prep_box.setLayout(params)

        # ---- scripts
        self.scripts = HintList(
            "No voice-overs yet.\nImport an audio file (Ctrl+O), drop one here, or type a text below."
        )
        self.scripts.setObjectName("scriptList")
        self.scripts.currentItemChanged.connect(self._script_changed)
        self.scripts.itemSelectionChanged.connect(self.selectionChanged)
        self.scripts.setMinimumHeight(90)
        self.import_audio_btn = QPushButton(QIcon(icon_path("audio")), "Import audio…")
        self.import_audio_btn.clicked.connect(self.import_audio_dialog)
        self.remove_script_btn = QPushButton("Remove")
        self.remove_script_btn.clicked.connect(self.remove_selected_scripts)
        from studio.ui.speech import SpeechBox

        self.speech = SpeechBox()  # the script text, the new voice-over's name, Speak this text
        self.speech.spoken.connect(self._spoken)
        self.speech.error.connect(self.error)
        self.text, self.speak_btn = self.speech.text, self.speech.speak_btn
        sc_box = _list_box("Voice-overs", self.scripts, self.import_audio_btn, self.remove_script_btn, self.speech)

        box = QVBoxLayout(self)
        box.setContentsMargins(6, 6, 6, 6)
        box.addWidget(av_box, 3)
        box.addWidget(sc_box, 3)
        box.addWidget(prep_box)

        self.refresh_avatars()
        for path in cfg.value(self.settings, "library/scripts", list):
            if Path(path).exists():
                self._add_script_item(path)

    # ---- public API --------------------------------------------------------------------

    @property
    def avatar(self) -> str:
        item = self.avatars.currentItem()
        return item.data(Qt.ItemDataRole.UserRole) if item else ""

    @property
    def script(self) -> str:
        item = self.scripts.currentItem()
        return item.data(Qt.ItemDataRole.UserRole) if item else ""

    def selected_avatars(self) -> list[str]:
        """The avatars selected for a batch (Ctrl/Shift-click), in list order; else the current one."""
        return _selected(self.avatars) or ([self.avatar] if self.avatar else [])

    def selected_scripts(self) -> list[str]:
        """The voice-overs selected for a batch, in list order; else the current one."""
        return _selected(self.scripts) or ([self.script] if self.script else [])

    def refresh_avatars(self, select: str | None = None) -> None:
        try:
            from studio.core.avatars.library import list_avatars

            entries = list_avatars()
        except ImportError:
            entries = []
        except Exception as exc:  # noqa: BLE001 - a damaged library must not stop the window
            from studio.ui.workers import error_text

            self.error.emit(error_text(exc))
            entries = []
        self._entries = {e["name"]: e for e in entries}
        keep = select or self.avatar or cfg.value(self.settings, "library/selected_avatar", str)
        self.avatars.blockSignals(True)
        self.avatars.clear()
        for e in entries:
            if e.get("damaged"):
                item = QListWidgetItem(QIcon(icon_path("avatar")), f"{e['name']}\ndamaged: re-import it")
                item.setData(Qt.ItemDataRole.UserRole, e["name"])
                self.avatars.addItem(item)
                continue
            item = QListWidgetItem(_thumbicon_path(e.get("thumbnail")), self._avatar_caption(e))
            item.setData(Qt.ItemDataRole.UserRole, e["name"])
            item.setToolTip(f"{e['name']}: {e.get('width')}x{e.get('height')}, {e.get('kind', '')}")
            self.avatars.addItem(item)
        self.avatars.blockSignals(False)
        for i in range(self.avatars.count()):
            if self.avatars.item(i).data(Qt.ItemDataRole.UserRole) == keep:
                self.avatars.setCurrentRow(i, ONLY)
                return
        if self.avatars.count():
            self.avatars.setCurrentRow(0, ONLY)

    def import_avatar(
        self, source: str, name: str | None = None, force: bool = False, wait: bool = False, again: bool = False
    ):
        """Prepare ``source`` as avatar ``name`` off the GUI thread behind a progress dialog. A file
        already imported (without a name given) asks first: use that avatar, or ``again``."""
        from studio.core.avatars import library as avatar_mod

        if name is None and not (force or again):
            same = self.imported_as(source)
            if same is not None:  # the same file again: ask, never a silent "-2"
                self._ask_reimport(source, same)
                return None
        if name is None:
            taken = {self.avatars.item(i).data(Qt.ItemDataRole.UserRole) for i in range(self.avatars.count())}
            base = name = safe_name(Path(source).stem)[:60]
            n = 2
            while name in taken:
                name, n = f"{base}-{n}", n + 1
        self.avatarPreparing.emit(name)
        dialog = QProgressDialog(f"Preparing avatar “{name}”…", "Cancel", 0, 100, self)
        dialog.setWindowTitle("Import avatar")
        dialog.setWindowModality(Qt.WindowModality.WindowModal)
        dialog.setMinimumDuration(300)
        dialog.setAutoClose(False)
        dialog.setAutoReset(False)
        self.progress_dialog = dialog

        def progressed(done: int, total: int, stage: str) -> None:
            dialog.setMaximum(max(0, total))  # 0: a busy indicator while the total is unknown
            dialog.setValue(min(done, total) if total else 0)
            if stage:
                dialog.setLabelText(f"Preparing avatar “{name}”: {stage}")

        def finished(_assets) -> None:
            dialog.close()
            self.task = None
            self.avatar_status.setText(f"“{name}” is ready")
            self.refresh_avatars(select=name)
            self.avatarPrepared.emit(name)
            self.next_import()

        def failed(message: str) -> None:
            dialog.close()
            self.task = None
            if message != "cancelled":
                self.error.emit(message)
                self.next_import()
            else:
                self._imports.clear()  # cancel stops the rest of a dropped batch too

        self.task = run_in_background(
            avatar_mod.prepare,
            name,
            source,
            params=self.params(),
            force=force,
            on_done=finished,
            on_error=failed,
            on_progress=progressed,
        )
        dialog.canceled.connect(self.task.cancel)
        return self.task

    def entry(self, name: str) -> dict:
        """What the library lists for avatar ``name`` (kind, frames, size, source, params), or {}."""
        return dict(self._entries.get(name) or {})

    def imported_as(self, source: str) -> str | None:
        """The avatar already made from the file ``source``, or None."""
        from studio.ui.reimport import imported_as

        return imported_as(self._entries, source)

    def _ask_reimport(self, source: str, same: str) -> None:
        from studio.ui.reimport import ask_reimport

        ask_reimport(self, source, same)

    def params(self):
        """``AvatarParams`` from the panel's fields (only the fields the core knows)."""
        from studio.core.avatars.library import AvatarParams

        wanted = {
            "bbox_shift": self.bbox_shift.value(),
            "extra_margin": self.extra_margin.value(),
            "cheek_width": self.cheek_width.value(),
            "feather": float(self.feather.value()),
        }
        known = {f.name for f in dataclasses.fields(AvatarParams)}
        return AvatarParams(**{k: v for k, v in wanted.items() if k in known})

    def add_script(self, path: str, select: bool = True):
        """Read ``path`` off the GUI thread; add it (and select it) only when it is readable audio.

        Returns the background task, or None when the file is already in the list (then selected).
        """
        path = str(Path(path).resolve())
        for i in range(self.scripts.count()):
            if self.scripts.item(i).data(Qt.ItemDataRole.UserRole) == path:
                if select:
                    self.scripts.setCurrentRow(i, ONLY)
                return None
        if path in self._checking:
            return None
        from studio.core.media.analysis import analyze

        self._checking.add(path)

        def readable(analysis) -> None:
            self._checking.discard(path)
            self.analyses[path] = analysis
            self._add_script_item(path)
            self.save_scripts()
            if select:
                self.scripts.setCurrentRow(self.scripts.count() - 1, ONLY)

        def unreadable(message: str) -> None:
            self._checking.discard(path)
            self.error.emit(message)  # nothing else changes: list, selection, waveform, output name

        return run_in_background(analyze, path, on_done=readable, on_error=unreadable)

    def import_files(self, paths: list[str]) -> None:
        """Dropped files: avatars (photos, videos) are prepared one after another; audio files join
        the scripts (the last one is selected); anything else is named in one message."""
        avatars = [p for p in paths if file_kind(p) == "avatar"]
        audio = [p for p in paths if file_kind(p) == "audio"]
        other = [Path(p).name for p in paths if not file_kind(p)]
        if other:
            self.error.emit(
                f"{', '.join(other[:3])}{' …' if len(other) > 3 else ''}: not a photo, video "
                "or audio file Studio imports; drop images/videos for avatars, audio for scripts"
            )
        for i, p in enumerate(audio):
            self.add_script(p, select=i == len(audio) - 1)
        self._imports.extend(avatars)
        if self.task is None:
            self.next_import()

    def next_import(self) -> None:
        if self.task is None and self._imports:
            self.import_avatar(self._imports.pop(0))

    def files_dropped(self, paths: list[str]) -> None:
        self.import_files(paths)

    def select_script(self, path: str) -> None:
        self.add_script(path, select=True)

    # ---- internals ---------------------------------------------------------------------

    def _avatar_caption(self, e: dict) -> str:
        frames = e.get("frames", 0)
        what = "photo" if frames == 1 else f"{frames} frames"
        faceless = e.get("faceless_frames", 0)
        status = "ready" if not faceless else f"{faceless} frame(s) without a face"
        return f"{e['name']}\n{what} · {e.get('width', '?')}x{e.get('height', '?')} · {status}"

    def _avatar_changed(self, *_):
        name = self.avatar
        self.settings.setValue("library/selected_avatar", name)
        self.avatar_status.setText("")
        p = self._entries.get(name, {}).get("params") or {}
        for key, box in (
            ("bbox_shift", self.bbox_shift),
            ("extra_margin", self.extra_margin),
            ("cheek_width", self.cheek_width),
            ("feather", self.feather),
        ):
            if key in p:
                box.setValue(int(round(float(p[key]))))
        self.avatarSelected.emit(name)

    def _script_changed(self, *_):
        path = self.script
        self.settings.setValue("library/selected_script", path)
        self.speech.show_text(self._script_text(path) if path else "")
        self.scriptSelected.emit(path)

    def _script_text(self, path: str) -> str:
        stored = self.settings.value(f"library/text/{_key(path)}")
        if stored:
            return str(stored)
        side = Path(path).with_suffix(".txt")
        try:
            return side.read_text(encoding="utf-8") if side.exists() else ""
        except (OSError, UnicodeDecodeError):
            return ""

    def _add_script_item(self, path: str) -> None:
        item = QListWidgetItem(QIcon(icon_path("audio")), Path(path).name)
        item.setData(Qt.ItemDataRole.UserRole, path)
        item.setToolTip(path)
        self.scripts.addItem(item)

    def save_scripts(self) -> None:
        paths = [self.scripts.item(i).data(Qt.ItemDataRole.UserRole) for i in range(self.scripts.count())]
        self.settings.setValue("library/scripts", paths)

    def import_avatar_dialog(self) -> None:
        """Ask for photos or videos and import them, one after another (the Import button, File > Import)."""
        paths = self._ask_files("folders/avatar", "Import avatar photos or videos", AVATAR_FILTER)
        if paths:
            self.import_files(paths)

    def import_audio_dialog(self) -> None:
        """Ask for voice-overs and add them to the list (the Import button, File > Import audio)."""
        paths = self._ask_files("folders/audio", "Import voice-overs", AUDIO_FILTER)
        if paths:
            self.import_files(paths)

    def _ask_files(self, key: str, title: str, filters: str) -> list[str]:
        """An open-files dialog (several at once) starting in the last folder used for ``key``, which it remembers."""
        paths, _ = QFileDialog.getOpenFileNames(self, title, cfg.value(self.settings, key, str), filters)
        if paths:
            self.settings.setValue(key, str(Path(paths[0]).parent))
        return list(paths)

    def remove_selected_avatars(self) -> None:
        """Remove the selected avatar(s): into the trash, from where Undo (Ctrl+Z) brings them back
        until Studio closes."""
        names = self.selected_avatars()
        if not names:
            self.error.emit("select an avatar to remove")
            return
        waiting = self.jobs_using(names) if self.jobs_using is not None else 0
        if not waiting:
            self._remove_now(names)
            return
        from PySide6.QtWidgets import QMessageBox  # jobs would fail without it: ask first

        who = ", ".join(f"“{n}”" for n in names)
        box = QMessageBox(
            QMessageBox.Icon.Question,
            "Remove avatar",
            f"{waiting} job(s) in the Queue use {who} and would fail without it. Remove it anyway? "
            "(Edit > Undo brings it back until Studio closes.)",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
            self,
        )
        box.setObjectName("removeAvatarInUse")
        box.setDefaultButton(QMessageBox.StandardButton.Cancel)
        box.buttonClicked.connect(
            lambda b: self._remove_now(names) if box.standardButton(b) == QMessageBox.StandardButton.Yes else None
        )
        self.remove_box = box
        box.open()

    def _remove_now(self, names: list[str]) -> None:
        for name in names:
            self._push(RemoveAvatar(self, name))
        if all(n not in self._entries for n in names):
            self.status.emit(f"removed {', '.join(f'“{n}”' for n in names)}; Edit > Undo (Ctrl+Z) brings it back")

    def remove_selected_scripts(self) -> None:
        """Take the selected voice-over(s) off the list (the files stay); Undo puts them back."""
        paths = self.selected_scripts()
        if not paths:
            self.error.emit("select a voice-over to remove from the list")
            return
        for path in paths:
            self._push(RemoveScript(self, path))

    def _push(self, command) -> None:
        if self.history is not None:
            self.history.push_command(command)
        else:
            command.redo()

    def script_row(self, path: str) -> int:
        return next(
            (i for i in range(self.scripts.count()) if self.scripts.item(i).data(Qt.ItemDataRole.UserRole) == path), -1
        )

    def _reprepare(self) -> None:
        name = self.avatar
        source = self._entries.get(name, {}).get("source") if name else None
        if not name:
            self.error.emit("select an avatar first")
        elif not source or not Path(str(source)).exists():
            self.error.emit(f"the source of “{name}” is not known or has moved; import the photo or video again")
        else:
            self.import_avatar(str(source), name=name, force=True)

    def _spoken(self, path: str, text: str) -> None:
        """A voice-over spoken from the script box joins the list (its text kept beside it)."""
        self.settings.setValue(f"library/text/{_key(path)}", text)
        self.add_script(path)


def _selected(lst: QListWidget) -> list[str]:
    rows = sorted(lst.row(i) for i in lst.selectedItems())
    return [lst.item(r).data(Qt.ItemDataRole.UserRole) for r in rows]


def _key(path: str) -> str:
    return hashlib.sha1(str(path).encode()).hexdigest()[:16]


def _list_box(
    title: str, items: QListWidget, import_btn: QPushButton, remove_btn: QPushButton, *below: QWidget
) -> QGroupBox:
    """A Library section: its list, its import and remove buttons side by side, then ``below``."""
    box = QGroupBox(title)
    lay = QVBoxLayout(box)
    lay.addWidget(items, 1)
    row = QHBoxLayout()
    row.addWidget(import_btn, 1)
    row.addWidget(remove_btn)
    lay.addLayout(row)
    for w in below:
        lay.addWidget(w)
    return box


def _spin(lo: int, hi: int, value: int, suffix: str, tip: str) -> QSpinBox:
    s = QSpinBox()
    s.setRange(lo, hi)
    s.setValue(value)
    s.setSuffix(suffix)
    s.setToolTip(tip)
    return s


def _thumbicon_path(thumb) -> QIcon:
    if isinstance(thumb, np.ndarray):
        return QIcon(QPixmap.fromImage(to_qimage(thumb)))
    if thumb and Path(str(thumb)).exists():
        return QIcon(str(thumb))
    return QIcon(icon_path("avatar"))

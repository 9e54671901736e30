"""Small widgets and guards that keep the window steady.

- ``ElidedLabel``: a one-line label that elides its text ("…") instead of asking for more width,
  so a long caption never widens a dock or the window.
- ``InputGuard``: one event filter, installed on every spin box, combo box and text field of a
  window (``guard_inputs(window)``):
    * a wheel over a spin box or combo box that does not have the keyboard focus scrolls the panel
      instead of changing the value (the event is passed on to the parent);
    * text fields and spin boxes keep their own keys: the window's transport shortcuts (Space, J K L,
      arrows, Home/End, I/O) do not fire while one of them has the focus; a focused list box
      (combo box) keeps Up/Down/Home/End/Page Up/Page Down to step through its choices.
  Installed per widget, not on the QApplication, so the other events never pass through Python.
"""

from __future__ import annotations

import weakref
from pathlib import Path

from PySide6.QtCore import QEvent, QItemSelectionModel, QObject, Qt
from PySide6.QtWidgets import (
    QAbstractSpinBox,
    QComboBox,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QSizePolicy,
    QTextEdit,
    QWidget,
)

AVATAR_SUFFIXES = {".png", ".jpg", ".jpeg", ".webp", ".bmp", ".mp4", ".mov", ".mkv", ".webm", ".avi", ".m4v"}
AUDIO_SUFFIXES = {".wav", ".flac", ".ogg", ".oga", ".opus", ".mp3", ".m4a", ".aac", ".aif", ".aiff"}
#: a selection made by the program (an import, a restore) is that one item, never added to a batch
ONLY = QItemSelectionModel.SelectionFlag.ClearAndSelect


def dropped_paths(mime) -> list[str]:
    """Local files in a drag's ``QMimeData`` (empty when it carries none)."""
    if mime is None or not mime.hasUrls():
        return []
    return [u.toLocalFile() for u in mime.urls() if u.isLocalFile() and u.toLocalFile()]


def file_kind(path: str) -> str:
    """ "avatar", "audio" or "" for a dropped file, by its suffix."""
    suffix = Path(path).suffix.lower()
    return "avatar" if suffix in AVATAR_SUFFIXES else "audio" if suffix in AUDIO_SUFFIXES else ""


def icon_path(name: str) -> str:
    """The path of the shipped icon ``name`` (``resources/icons/NAME.svg``)."""
    from studio.core.env import repo_resources

    return str(repo_resources() / "icons" / f"{name}.svg")


class ElidedLabel(QLabel):
    """A single-line label that shows as much of its text as fits and elides the rest. With
    ``shorter`` forms (``setText(text, shorter=[...])``) it shows the longest form that fits whole
    before it elides anything; ``text()`` is always the full one, the tooltip has it."""

    def __init__(self, text: str = "", parent=None, mode=Qt.TextElideMode.ElideRight, max_hint: int = 200):
        super().__init__(parent)
        self._full = ""
        self._shorter: list[str] = []
        self._mode = mode
        self._auto_tip = False  # the tooltip is the elided text's full version (kept up to date)
        self.max_hint = max_hint  # the widest size it asks for (the full text's width, at most this)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.setMinimumWidth(20)
        self.setText(text)

    def setText(self, text: str, shorter=()) -> None:  # noqa: N802 (Qt's name)
        self._full = text or ""
        self._shorter = [t for t in shorter if t]
        self._elide()

    def text(self) -> str:
        return self._full

    def resizeEvent(self, event) -> None:  # noqa: N802
        super().resizeEvent(event)
        self._elide()

    def setToolTip(self, tip: str) -> None:  # noqa: N802 (Qt's name)
        self._auto_tip = False  # a tooltip of its own: kept
        super().setToolTip(tip)

    def _elide(self) -> None:
        room = max(0, self.width() - 2)
        fm = self.fontMetrics()
        text = next((t for t in (self._full, *self._shorter) if fm.horizontalAdvance(t) <= room), None)
        shown = text if text is not None else fm.elidedText(([self._full, *self._shorter])[-1], self._mode, room)
        super().setText(shown)
        if shown != self._full and (self._auto_tip or not self.toolTip()):
            super().setToolTip(self._full)
            self._auto_tip = True
        elif shown == self._full and self._auto_tip:
            super().setToolTip("")
            self._auto_tip = False
        self.updateGeometry()

    def sizeHint(self):  # noqa: N802
        hint = super().sizeHint()
        full = self.fontMetrics().horizontalAdvance(self._full) + 2 * self.margin() + 4
        hint.setWidth(min(full, self.max_hint))
        return hint

    def minimumSizeHint(self):  # noqa: N802
        hint = super().minimumSizeHint()
        hint.setWidth(20)
        return hint


WHEEL_GUARDED = (QAbstractSpinBox, QComboBox)
COMBO_KEYS = (Qt.Key.Key_Up, Qt.Key.Key_Down, Qt.Key.Key_Home, Qt.Key.Key_End, Qt.Key.Key_PageUp, Qt.Key.Key_PageDown)
TEXT_INPUTS = (QLineEdit, QAbstractSpinBox, QPlainTextEdit, QTextEdit)


class InputGuard(QObject):
    """See the module docstring."""

    def eventFilter(self, obj, event) -> bool:  # noqa: N802 (Qt's name)
        kind = event.type()
        if kind == QEvent.Type.Wheel and isinstance(obj, WHEEL_GUARDED) and not obj.hasFocus():
            event.ignore()
            parent = obj.parentWidget()
            while parent is not None:  # the nearest scroll area (or panel) gets the wheel instead
                from PySide6.QtWidgets import QAbstractScrollArea

                if isinstance(parent, QAbstractScrollArea):
                    from PySide6.QtWidgets import QApplication

                    QApplication.sendEvent(parent.verticalScrollBar(), event)
                    break
                parent = parent.parentWidget()
            return True
        if kind == QEvent.Type.ShortcutOverride and isinstance(obj, QComboBox) and not obj.isEditable():
            if event.key() in COMBO_KEYS and not event.modifiers() & ~Qt.KeyboardModifier.KeypadModifier:
                event.accept()  # a focused list box steps through its choices
                return True
        if kind == QEvent.Type.ShortcutOverride and _is_text_input(obj):
            mods = event.modifiers() & ~Qt.KeyboardModifier.KeypadModifier
            if not mods & (
                Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.AltModifier | Qt.KeyboardModifier.MetaModifier
            ):
                event.accept()  # the key goes to the text field, not to a window shortcut
                return True
        return False


def _is_text_input(obj) -> bool:
    if isinstance(obj, TEXT_INPUTS):
        return not (isinstance(obj, QLineEdit) and obj.isReadOnly())
    if isinstance(obj, QComboBox):
        return obj.isEditable()
    return False


_GUARDS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # root widget -> its guard


def guard_inputs(root: QWidget, guard: InputGuard | None = None) -> InputGuard:
    """Install ``guard`` (or a new ``InputGuard`` owned by ``root``) on every input under ``root``."""
    guard = guard or _GUARDS.get(root) or InputGuard(root)
    _GUARDS[root] = guard
    for w in root.findChildren(QWidget):
        if isinstance(w, (*WHEEL_GUARDED, *TEXT_INPUTS)) and not w.property("_guarded"):
            w.installEventFilter(guard)
            w.setProperty("_guarded", True)
            if isinstance(w, WHEEL_GUARDED):
                w.setFocusPolicy(Qt.FocusPolicy.StrongFocus)  # a wheel does not take the focus either
    return guard


class FileDrops(QObject):
    """Takes files dropped on ``widget`` (the Library, the preview, the window) and hands their paths to
    ``on_files``: an event filter the widget owns (``widget.drops``), no base class of the widget.

    ``only_known`` (default True) accepts a drag only when it carries an avatar or audio file.
    While a drag it takes is over the widget, the widget's ``dropTarget`` property is true (style.qss
    draws it highlighted: ``active``), so the editor sees where the files will go.
    """

    def __init__(self, widget: QWidget, on_files, only_known: bool = True):
        super().__init__(widget)
        self.widget, self.on_files, self.only_known = widget, on_files, only_known
        widget.setAcceptDrops(True)
        widget.installEventFilter(self)

    @property
    def active(self) -> bool:
        """A drag this widget takes is over it now."""
        return bool(self.widget.property("dropTarget"))

    def eventFilter(self, obj, event) -> bool:  # noqa: N802 (Qt's name)
        if obj is not self.widget:
            return False
        kind = event.type()
        if kind in (QEvent.Type.DragEnter, QEvent.Type.DragMove):
            paths = dropped_paths(event.mimeData())
            if paths and (not self.only_known or any(file_kind(p) for p in paths)):
                event.acceptProposedAction()
                self._light(True)
            else:
                event.ignore()
            return True
        if kind == QEvent.Type.DragLeave:
            self._light(False)
            return True
        if kind == QEvent.Type.Drop:
            self._light(False)
            paths = dropped_paths(event.mimeData())
            if not paths:
                event.ignore()
                return True
            event.acceptProposedAction()
            self.on_files(paths)
            return True
        return False

    def _light(self, on: bool) -> None:
        w = self.widget
        if self.active == on:
            return
        w.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        w.setProperty("dropTarget", on)
        w.style().unpolish(w)
        w.style().polish(w)
        w.update()


class ValueTip(QObject):
    """Where a field is too narrow for its whole value (a long folder, a name pattern, a canvas of a
    narrow Render column), its tooltip starts with the whole value; its own help follows.

        ValueTip.keep(line_edit_or_combo_box)   # after its help tooltip is set
    """

    def __init__(self, widget: QWidget, help_text: str):
        super().__init__(widget)
        self.widget, self.help = widget, help_text
        self._set = help_text  # the tooltip this put there last (another one set meanwhile is the new help)
        signal = widget.textChanged if isinstance(widget, QLineEdit) else widget.currentTextChanged  # type: ignore[attr-defined]
        signal.connect(lambda _t: self.update())
        widget.installEventFilter(self)
        self.update()

    @classmethod
    def keep(cls, widget: QWidget) -> ValueTip:
        return cls(widget, widget.toolTip())

    def eventFilter(self, obj, event) -> bool:  # noqa: N802 (Qt's name)
        if event.type() in (QEvent.Type.Resize, QEvent.Type.Show):
            self.update()
        return False

    def update(self) -> None:
        w = self.widget
        if w.toolTip() != self._set:  # the owner gave it another tooltip: that is its help now
            self.help = w.toolTip()
        text = w.text() if isinstance(w, QLineEdit) else w.currentText()  # type: ignore[attr-defined]
        fits = not text or w.fontMetrics().horizontalAdvance(text) <= text_room(w)
        tip = self.help if fits else (f"{text}\n{self.help}" if self.help else text)
        self._set = tip
        if w.toolTip() != tip:
            w.setToolTip(tip)


def text_room(w: QWidget) -> int:
    """The pixels a line edit, a combo box or a spin box gives its text (Qt's style says where it goes)."""
    from PySide6.QtWidgets import QStyle, QStyleOptionComboBox, QStyleOptionSpinBox

    if isinstance(w, QComboBox):
        opt = QStyleOptionComboBox()
        w.initStyleOption(opt)
        cc, sc = QStyle.ComplexControl.CC_ComboBox, QStyle.SubControl.SC_ComboBoxEditField
        return w.style().subControlRect(cc, opt, sc, w).width() - 8
    if isinstance(w, QAbstractSpinBox):
        sopt = QStyleOptionSpinBox()
        w.initStyleOption(sopt)
        cc, sc = QStyle.ComplexControl.CC_SpinBox, QStyle.SubControl.SC_SpinBoxEditField
        return w.style().subControlRect(cc, sopt, sc, w).width() - 4
    if isinstance(w, QLineEdit):
        m = w.textMargins()
        return w.contentsRect().width() - m.left() - m.right() - 6
    return w.contentsRect().width()

"""Every command of the window is one ``QAction``: the menu bar holds them, the toolbar and the panels'
buttons reuse them, their shortcuts are the editor's keys, and the Keyboard Shortcuts window (F1, ?)
is generated from them, so a menu, a key and the list of keys can never disagree.

    acts = Actions(window)                      # the window's menu bar
    acts.add("play", "Playback", "Play / stop", transport.toggle, "Space")
    acts.add("step_back", "Playback", "Previous frame", back, ["Left", ","])   # first key: the one shown
    acts["play"].trigger()
    acts.rows()  -> [("Playback", "Play / stop", "Space"), ...]          # what the shortcuts window lists

Keys work wherever the focus is in the window (``WindowShortcut``), except in text fields and spin
boxes, which keep their own keys (``studio.ui.widgets.InputGuard``). Where Premiere Pro and DaVinci
Resolve agree (Space, J K L, I O, Shift+I / Shift+O, M, arrows, Home / End) the keys are theirs;
``docs/editor.md`` lists them all.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QIcon, QKeySequence
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHeaderView,
    QLabel,
    QLineEdit,
    QMenu,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
)

MENUS = ("File", "Edit", "View", "Playback", "Render", "Help")

#: what the mouse does (not actions, listed after them in the shortcuts window)
MOUSE = (
    ("Click the waveform, the RMS plot or the ruler", "move the playhead there"),
    ("Drag the orange line", "silence threshold (log scale); hold Shift for fine steps"),
    ("Right-click a marker (or double-click it)", "rename, delete, render from it to the next"),
    ("Double-click a finished job in the Queue", "play it in the preview"),
)


def key_text(seq: QKeySequence) -> str:
    return seq.toString(QKeySequence.SequenceFormat.NativeText)


class Actions:
    """The window's actions by id, and its menu bar built from them."""

    def __init__(self, window):
        self.window = window
        self.actions: dict[str, QAction] = {}
        self.menu_of: dict[str, str] = {}
        self.shortcuts_dialog: ShortcutsDialog | None = None  # Help > Keyboard shortcuts, once opened
        bar = window.menuBar()
        bar.setObjectName("menuBar")
        self.menus: dict[str, QMenu] = {}
        for title in MENUS:
            menu = bar.addMenu(f"&{title}")
            menu.setObjectName(f"menu{title}")
            self.menus[title] = menu

    def __getitem__(self, key: str) -> QAction:
        return self.actions[key]

    def __contains__(self, key: str) -> bool:
        return key in self.actions

    def add(
        self,
        key: str,
        menu: str,
        text: str,
        slot=None,
        shortcuts: str | list[str] | tuple[str, ...] | QKeySequence.StandardKey = (),
        tip: str = "",
        icon: str | None = None,
        checkable: bool = False,
        action: QAction | None = None,
    ) -> QAction:
        """A new action (or ``action``, made elsewhere: the undo stack's, a dock's) in ``menu``."""
        a = action or QAction(text, self.window)
        if action is not None and text:
            a.setText(text)
        a.setProperty("command", text or a.text())  # the shortcuts window's words (menus may change theirs)
        a.setObjectName(f"action_{key}")
        if icon:
            a.setIcon(QIcon(icon))
        if isinstance(shortcuts, QKeySequence.StandardKey):
            a.setShortcuts(shortcuts)
        elif shortcuts:
            keys = [shortcuts] if isinstance(shortcuts, str) else list(shortcuts)
            a.setShortcuts([QKeySequence(k) for k in keys])
        a.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        if checkable:
            a.setCheckable(True)
        if tip:
            a.setStatusTip(tip)
            a.setToolTip(f"{tip} ({key_text(a.shortcut())})" if not a.shortcut().isEmpty() else tip)
        elif not a.shortcut().isEmpty():
            a.setToolTip(f"{a.text().replace('&', '')} ({key_text(a.shortcut())})")
        self.menus[menu].addAction(a)
        self.window.addAction(a)  # its keys work while the menu bar is hidden too
        self.actions[key] = a
        self.menu_of[key] = menu
        if slot is not None:
            self.on(key, slot)
        return a

    def on(self, key: str, slot) -> None:
        """Call ``slot`` when action ``key`` is triggered (a checkable one: ``slot(checked)`` when toggled)."""
        a = self.actions[key]
        if a.isCheckable():
            a.toggled.connect(slot)
        else:  # not triggered(checked): set_in(frame=None) must not get False as its frame
            a.triggered.connect(lambda _checked=False, f=slot: f())

    def separator(self, menu: str) -> None:
        self.menus[menu].addSeparator()

    def rows(self) -> list[tuple[str, str, str]]:
        """(menu, command, keys) for every action, in menu order; keys joined by ", "."""
        out = []
        for title, menu in self.menus.items():
            for a in _walk(menu):
                text = str(a.property("command") or a.text()).replace("&", "")
                if not text:
                    continue
                keys = ", ".join(key_text(k) for k in a.shortcuts())
                out.append((title, text, keys))
        return out

    def show_shortcuts(self) -> ShortcutsDialog:
        dlg = self.shortcuts_dialog
        if dlg is None:
            dlg = self.shortcuts_dialog = ShortcutsDialog(self, self.window)
        dlg.filter.clear()  # each opening lists everything
        dlg.fill()
        dlg.show()
        dlg.raise_()
        dlg.activateWindow()
        dlg.filter.setFocus()
        return dlg


def _walk(menu: QMenu):
    for a in menu.actions():
        if a.isSeparator():
            continue
        sub = a.menu()
        if isinstance(sub, QMenu):
            yield from _walk(sub)
        else:
            yield a


class ShortcutsDialog(QDialog):
    """Help > Keyboard Shortcuts: every action of the menus with its keys, filtered as you type."""

    def __init__(self, actions: Actions, parent=None):
        super().__init__(parent)
        self.setObjectName("shortcutsDialog")
        self.setWindowTitle("Keyboard Shortcuts")
        self.source = actions
        self.filter = QLineEdit()
        self.filter.setObjectName("shortcutFilter")
        self.filter.setPlaceholderText("Type to filter: a command or a key (e.g. marker, Shift)")
        self.filter.setClearButtonEnabled(True)
        self.filter.textChanged.connect(self._apply_filter)
        self.tree = QTreeWidget()
        self.tree.setObjectName("shortcutTree")
        self.tree.setColumnCount(2)
        self.tree.setHeaderLabels(["Command", "Keys"])
        self.tree.setRootIsDecorated(False)
        self.tree.setUniformRowHeights(True)
        self.tree.header().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.tree.header().setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        note = QLabel("Keys work anywhere in the window except while typing in a field. Esc closes this window.")
        note.setObjectName("dim")
        note.setWordWrap(True)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.close)
        box = QVBoxLayout(self)
        box.addWidget(self.filter)
        box.addWidget(self.tree, 1)
        box.addWidget(note)
        box.addWidget(buttons)
        self.resize(560, 640)

    def fill(self) -> None:
        self.tree.clear()
        groups: dict[str, QTreeWidgetItem] = {}
        for menu, text, keys in self.source.rows():
            group = groups.get(menu)
            if group is None:
                group = groups[menu] = QTreeWidgetItem(self.tree, [menu, ""])
                group.setFirstColumnSpanned(True)
                f = group.font(0)
                f.setBold(True)
                group.setFont(0, f)
                group.setFlags(Qt.ItemFlag.ItemIsEnabled)
            QTreeWidgetItem(group, [text, keys])
        mouse = QTreeWidgetItem(self.tree, ["Mouse", ""])
        mouse.setFirstColumnSpanned(True)
        f = mouse.font(0)
        f.setBold(True)
        mouse.setFont(0, f)
        for what, does in MOUSE:
            QTreeWidgetItem(mouse, [does[:1].upper() + does[1:], what])
        self.tree.expandAll()
        self._apply_filter(self.filter.text())

    def entries(self) -> list[tuple[str, str, str]]:
        """(group, command, keys) of the rows shown now (for tests and tools)."""
        return [(g.text(0), c.text(0), c.text(1)) for g in _tops(self.tree) for c in _kids(g) if not c.isHidden()]

    def _apply_filter(self, text: str) -> None:
        words = text.lower().split()
        for g in _tops(self.tree):
            shown = 0
            for c in _kids(g):
                hay = f"{g.text(0)} {c.text(0)} {c.text(1)}".lower()
                hide = bool(words) and not all(w in hay for w in words)
                c.setHidden(hide)
                shown += not hide
            g.setHidden(shown == 0)


def _tops(tree: QTreeWidget) -> list[QTreeWidgetItem]:
    return [i for k in range(tree.topLevelItemCount()) if (i := tree.topLevelItem(k)) is not None]


def _kids(item: QTreeWidgetItem) -> list[QTreeWidgetItem]:
    return [c for k in range(item.childCount()) if (c := item.child(k)) is not None]

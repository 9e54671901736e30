"""The text-fits walk (issue 52): every visible label, button and field of a window, its text measured
with Qt's font metrics against the room the widget gives it. Where a text does not fit, the widget must
carry the whole text in its tooltip (an elided path, a long name); otherwise it is clipped."""

from __future__ import annotations

from PySide6.QtWidgets import (
    QAbstractButton,
    QAbstractSpinBox,
    QComboBox,
    QLabel,
    QLineEdit,
    QStyle,
    QStyleOptionComboBox,
    QStyleOptionSpinBox,
    QWidget,
)

SLACK = 2  # pixels of rounding


def _room_combo(c: QComboBox) -> int:
    opt = QStyleOptionComboBox()
    c.initStyleOption(opt)
    r = c.style().subControlRect(QStyle.ComplexControl.CC_ComboBox, opt, QStyle.SubControl.SC_ComboBoxEditField, c)
    return r.width() - (8 if c.isEditable() else 4)


def _room_spin(s: QAbstractSpinBox) -> int:
    opt = QStyleOptionSpinBox()
    s.initStyleOption(opt)
    r = s.style().subControlRect(QStyle.ComplexControl.CC_SpinBox, opt, QStyle.SubControl.SC_SpinBoxEditField, s)
    return r.width() - 4


def _room_line(e: QLineEdit) -> int:
    m = e.textMargins()
    return e.contentsRect().width() - m.left() - m.right() - 4


def clipped(root: QWidget) -> list[str]:
    """What of ``root``'s visible widgets shows less than its whole text, with no tooltip that has it."""
    out = []
    for w in [root, *root.findChildren(QWidget)]:
        if not w.isVisible() or w.width() <= 0:  # (scrolled out of a scroll area's view: walked too)
            continue
        fm = w.fontMetrics()
        name = f"{type(w).__name__}#{w.objectName()}"
        if isinstance(w, QLabel):
            if w.pixmap() is not None and not w.pixmap().isNull():
                continue
            shown = QLabel.text(w)  # an ElidedLabel: what is on screen (its text() is the full one)
            full = w.text().removeprefix("→ ")  # "→ /the/output.mp4": the tooltip is the path
            if not shown:
                continue
            if w.wordWrap():
                fits = w.heightForWidth(w.contentsRect().width()) <= w.contentsRect().height() + SLACK
            else:
                lines = shown.split("\n")
                fits = max(fm.horizontalAdvance(x) for x in lines) <= w.contentsRect().width() + SLACK
            if shown != full and full not in w.toolTip():
                out.append(f"{name}: shows {shown!r} of {full!r} with no tooltip that has it")
            elif not fits and full not in w.toolTip():
                out.append(f"{name}: {shown!r} needs {fm.horizontalAdvance(shown)} px, has {w.contentsRect().width()}")
        elif isinstance(w, QAbstractButton):
            text = w.text().replace("&", "")
            if text and w.sizeHint().width() > w.width() + SLACK and text not in w.toolTip():
                out.append(f"{name}: {text!r} needs {w.sizeHint().width()} px, has {w.width()}")
        elif isinstance(w, QComboBox):
            text = w.currentText()
            if text and fm.horizontalAdvance(text) > _room_combo(w) + SLACK and text not in w.toolTip():
                out.append(f"{name}: {text!r} needs {fm.horizontalAdvance(text)} px, has {_room_combo(w)}")
        elif isinstance(w, QAbstractSpinBox):
            text = w.text()
            if text and fm.horizontalAdvance(text) > _room_spin(w) + SLACK and text not in w.toolTip():
                out.append(f"{name}: {text!r} needs {fm.horizontalAdvance(text)} px, has {_room_spin(w)}")
        elif isinstance(w, QLineEdit) and not isinstance(w.parent(), (QComboBox, QAbstractSpinBox)):
            text = w.text() or w.placeholderText()
            if text and fm.horizontalAdvance(text) > _room_line(w) + SLACK and text not in w.toolTip():
                out.append(f"{name}: {text!r} needs {fm.horizontalAdvance(text)} px, has {_room_line(w)}")
    return out

"""No class of the window hides a Qt method under one of its own names.

``w.actions = ...`` hid ``QWidget.actions()`` and a ``render()`` method hid ``QWidget.render()``: Qt's
own code, a test or a tool calling them got the window's thing instead. The rule: a QObject subclass in
studio/ui defines (in its class, or as an attribute set on its instances) no name that one of its Qt
base classes has, unless that name is one of Qt's virtual methods, made to be overridden
(``closeEvent``, ``sizeHint``, ``eventFilter``, ...).

The class check walks every module of studio/ui; the instance check builds the real window and walks
every object in it. Both are shown to fail on a class made for that here.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest
from PySide6.QtCore import QObject, SignalInstance
from PySide6.QtWidgets import QMainWindow
from ui_helpers import window  # noqa: F401 (fixture)

import studio.ui

#: Qt's virtual methods a subclass is meant to override (besides every ``...Event`` handler)
OVERRIDES = frozenset(
    {
        "event",
        "eventFilter",
        "sizeHint",
        "minimumSizeHint",
        "hasHeightForWidth",
        "heightForWidth",
        "paint",
        "boundingRect",
        "shape",
        "itemChange",
        "run",  # QThread / QRunnable
        "validate",
        "fixup",
        "textFromValue",
        "valueFromText",
        "stepBy",
        "stepEnabled",
        "data",
        "setData",
        "flags",
        "rowCount",
        "columnCount",
        "headerData",
        "mimeData",
        "mimeTypes",
        "supportedDropActions",
        "done",  # QDialog
        "accept",
        "reject",
        "setVisible",
        "initPainter",
        "focusNextPrevChild",
        "nativeEvent",
        "initStyleOption",  # QStyledItemDelegate
        "staticMetaObject",  # set by PySide on every subclass
    }
)

#: non-virtual Qt methods a class extends on purpose, said in its docstring (calls super, same meaning)
EXTENDED = {
    "ElidedLabel": {"setText", "text", "setToolTip"},  # text() is the full text; the label shows what fits
    "ScriptEdit": {"setPlainText"},  # and scrolls to its first line
}


def _qt_bases(cls: type) -> list[type]:
    return [b for b in cls.__mro__[1:] if b.__module__.startswith(("PySide6", "shiboken6"))]


def _qt_names(cls: type) -> set[str]:
    return {n for b in _qt_bases(cls) for n in vars(b) if not n.startswith("_")}


def hidden_names(cls: type, names) -> list[str]:
    """The names of ``names`` (defined by ``cls`` or set on its instances) that hide a Qt base's."""
    qt = _qt_names(cls)
    allowed = OVERRIDES | EXTENDED.get(cls.__name__, set())
    return sorted(n for n in names if n in qt and n not in allowed and not n.endswith("Event"))


def _set_names(obj: QObject) -> list[str]:
    """The attributes set on ``obj`` itself (PySide keeps the signals it bound there: not these)."""
    return [n for n, v in vars(obj).items() if not isinstance(v, SignalInstance)]


def ui_classes() -> list[type]:
    out = []
    for info in pkgutil.walk_packages(studio.ui.__path__, "studio.ui."):
        module = importlib.import_module(info.name)
        for _name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and issubclass(cls, QObject):
                out.append(cls)
    return out


def test_the_rule_catches_a_method_and_an_attribute_that_hide_qt():
    class Hides(QMainWindow):
        def render(self):  # hides QWidget.render
            return 1

        def closeEvent(self, event):  # noqa: N802 - Qt's virtual: allowed
            super().closeEvent(event)

    assert hidden_names(Hides, vars(Hides)) == ["render"]
    assert hidden_names(Hides, {"actions": 1, "commands": 2, "sizeHint": 3}) == ["actions"]


def test_no_ui_class_defines_a_name_of_its_qt_bases():
    classes = ui_classes()
    assert len(classes) > 25  # the walk found the window's classes
    bad = {f"{c.__module__}.{c.__qualname__}": h for c in classes if (h := hidden_names(c, vars(c)))}
    assert bad == {}


@pytest.mark.usefixtures("qtbot")
def test_no_object_of_the_window_has_an_attribute_named_like_a_qt_method(window):
    objects = [window, *window.findChildren(QObject)]
    seen = {type(o) for o in objects if type(o).__module__.startswith("studio.ui")}
    assert len(seen) > 10  # the window's own objects were walked
    bad = {
        f"{type(o).__qualname__}": h
        for o in objects
        if type(o).__module__.startswith("studio.ui") and (h := hidden_names(type(o), _set_names(o)))
    }
    assert bad == {}

"""The window's render-setting widgets, made from the one schema (``studio.core.settings``).

    fields = SettingFields(specs("ui", groups=("engine", "encode")))
    fields["crf"].setValue(18)                       # a QSpinBox / QDoubleSpinBox / QComboBox / QCheckBox
    fields.values()  -> {"engine": "auto", "crf": 18, ...}  # typed as the schema says
    fields.save(qsettings); fields.restore(qsettings)        # "render/<name>" keys

Each widget takes its choices, range, default and tooltip from the setting's ``Spec``, so the window
offers what the command line and the server offer, with the same defaults.
"""

from __future__ import annotations

from PySide6.QtWidgets import QCheckBox, QComboBox, QDoubleSpinBox, QSpinBox, QWidget

#: names a free-text setting suggests in its combo box (the first entry is the schema's None)
SUGGESTIONS = {
    "device": ("cuda", "cpu"),
    "loudness": ("-23", "-24", "-16", "-14"),
    "canvas": ("1280x720", "1920x1080", "3840x2160", "1080x1920", "1080x1080"),
    "background": ("white", "#00b140", "transparent"),
    "start_tc": ("10:00:00:00", "01:00:00:00"),
}


def make_widget(spec) -> QWidget:
    """One widget for ``spec``, set to its default (the window's own, ``ui_default``, where it has one)."""
    w: QWidget
    if spec.kind is bool:
        w = QCheckBox(spec.label)
        w.setChecked(bool(spec.default if spec.ui_default is None else spec.ui_default))
    elif spec.optional and spec.kind in (int, float):  # a number or off (loudness): typed or picked
        from PySide6.QtCore import QRegularExpression
        from PySide6.QtGui import QRegularExpressionValidator

        w = QComboBox()
        w.setEditable(True)
        w.addItems([spec.auto_label, *SUGGESTIONS.get(spec.name, ())])
        pattern = rf"{spec.auto_label}|-?\d{{0,3}}(\.\d{{0,2}})?"
        w.setValidator(QRegularExpressionValidator(QRegularExpression(pattern), w))
        w.setCurrentText(spec.auto_label if spec.default is None else str(spec.default))
    elif spec.kind is str and not spec.choices and not spec.optional:  # free text (canvas, markers): typed or picked
        w = QComboBox()
        w.setEditable(True)
        w.addItems([str(spec.default), *SUGGESTIONS.get(spec.name, ())])
        if spec.name == "delivery":
            from studio.core.delivery import all_deliveries

            w.addItems(list(all_deliveries()))
        w.setCurrentText(str(spec.default))
    elif spec.choices or spec.kind is str:
        w = QComboBox()
        items = list(spec.choices or ())
        if not items:
            items = ([spec.auto_label] if spec.optional else []) + list(SUGGESTIONS.get(spec.name, ()))
        w.addItems(items)
        w.setCurrentText(spec.auto_label if spec.default is None else str(spec.default))
    elif spec.kind is int:
        w = QSpinBox()
        w.setRange(
            int(spec.minimum if spec.minimum is not None else -(2**31)),
            int(spec.maximum if spec.maximum is not None else 2**31 - 1),
        )
        if spec.name == "batch":
            w.setSpecialValueText("auto")  # 0: the engine's preferred batch
        w.setValue(int(spec.default))
    else:
        w = QDoubleSpinBox()
        w.setDecimals(4)
        w.setRange(
            spec.minimum if spec.minimum is not None else -1e9, spec.maximum if spec.maximum is not None else 1e9
        )
        w.setValue(float(spec.default))
    w.setToolTip(spec.help[:1].upper() + spec.help[1:])
    w.setObjectName(f"setting_{spec.name}")
    return w


def widget_value(spec, w: QWidget):
    if isinstance(w, QCheckBox):
        return w.isChecked()
    if isinstance(w, QComboBox):
        text = w.currentText()
        if spec.optional and text in (spec.auto_label, ""):
            return None
        if spec.kind is not str:  # a typed number; one still being typed ("-") counts as off
            from studio.core.errors import InputError

            try:
                v = spec.parse(text)
            except InputError:
                return None
            return v if spec.problem(v) is None else None
        return text
    return spec.kind(w.value())  # type: ignore[attr-defined]


def set_widget_value(spec, w: QWidget, value) -> None:
    if isinstance(w, QCheckBox):
        w.setChecked(bool(value))
    elif isinstance(w, QComboBox):
        text = spec.auto_label if value is None else (f"{value:g}" if isinstance(value, float) else str(value))
        if w.isEditable():
            w.setEditText(text)
        elif w.findText(text) >= 0:
            w.setCurrentText(text)
    else:
        w.setValue(value)  # type: ignore[attr-defined]


class SettingFields(dict):
    """name -> widget for the given specs, with typed values and QSettings persistence."""

    def __init__(self, specs):
        super().__init__()
        self.specs = {s.name: s for s in specs}
        for s in self.specs.values():
            self[s.name] = make_widget(s)

    def values(self) -> dict:  # type: ignore[override]
        return {n: widget_value(self.specs[n], w) for n, w in self.items()}

    def set_values(self, values: dict) -> None:
        for n, v in values.items():
            if n in self:
                set_widget_value(self.specs[n], self[n], v)

    def save(self, qsettings) -> None:
        for n, v in self.values().items():
            spec = self.specs[n]
            qsettings.setValue(f"render/{n}", spec.auto_label if v is None else v)

    def restore(self, qsettings) -> None:
        from studio.core.errors import InputError
        from studio.ui import settings as cfg

        for n, spec in self.specs.items():
            raw = cfg.value(qsettings, f"render/{n}", spec.kind)
            try:
                v = spec.parse(raw)
            except InputError:
                continue  # a hand-edited settings file: keep the default
            if spec.problem(v) is None:
                set_widget_value(spec, self[n], v)

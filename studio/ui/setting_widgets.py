"""The window's render-setting widgets, made from the one schema (``studio.core.settings``).

    fields = SettingFields(specs("ui", groups=("engine", "encode")))
    fields["crf"].setValue(18)                       # a QSpinBox / QDoubleSpinBox / QComboBox / QCheckBox
    fields.values()  -> {"engine": "auto", "crf": 18, ...}  # typed as the schema says
    fields.save(qsettings); fields.restore(qsettings)        # "render/<name>" keys

Each widget takes its choices, range, default and tooltip from the setting's ``Spec``, so the window
offers what the command line and the server offer, with the same defaults.
"""

from __future__ import annotations

from PySide6.QtWidgets import QCheckBox, QComboBox, QDoubleSpinBox, QGridLayout, QLabel, QSpinBox, QWidget

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
    elif spec.name == "delivery":  # each delivery by its full name, its key as the item's data
        from studio.ui.delivery_buttons import fill_choices

        w = QComboBox()
        fill_choices(w)  # none, then each delivery (refreshed when one is saved)
    elif spec.kind is str and not spec.choices and not spec.optional:  # free text (canvas, markers): typed or picked
        w = QComboBox()
        w.setEditable(True)
        w.addItems([str(spec.default), *SUGGESTIONS.get(spec.name, ())])
        w.setCurrentText(str(spec.default))
    elif spec.choices or spec.kind is str:
        w = QComboBox()
        items = list(spec.choices or ())
        if not items:  # a free text (a device name, a timecode): typed, with suggestions
            w.setEditable(True)
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
        w.setDecimals(
            2 if spec.maximum is not None and abs(spec.maximum) <= 100 and abs(spec.minimum or 0) <= 100 else 4
        )
        w.setRange(
            spec.minimum if spec.minimum is not None else -1e9, spec.maximum if spec.maximum is not None else 1e9
        )
        w.setValue(float(spec.default))
    if isinstance(w, QComboBox):  # narrow docks: a combo box may be narrower than its longest entry
        w.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        w.setMinimumContentsLength(5 if spec.name != "delivery" else 18)  # a delivery's name is never cut
    from studio.ui.words import window_words

    text = window_words(spec.help, names=True)  # the window's words: no command-line flags, no snake_case
    w.setToolTip(text[:1].upper() + text[1:])
    w.setObjectName(f"setting_{spec.name}")
    if isinstance(w, QComboBox):  # a value wider than its column: the whole of it leads the tooltip
        from studio.ui.widgets import ValueTip

        ValueTip.keep(w)
    return w


def widget_value(spec, w: QWidget):
    if isinstance(w, QCheckBox):
        return w.isChecked()
    if isinstance(w, QComboBox) and spec.name == "delivery":
        return str(w.currentData() or "")
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
    elif isinstance(w, QComboBox) and spec.name == "delivery":
        from studio.core.delivery import key_of

        i = w.findData(key_of(value or ""))
        if i >= 0:
            w.setCurrentIndex(i)
    elif isinstance(w, QComboBox):
        text = spec.auto_label if value is None else (f"{value:g}" if isinstance(value, float) else str(value))
        if w.isEditable():
            w.setEditText(text)
        elif w.findText(text) >= 0:
            w.setCurrentText(text)
    else:
        w.setValue(value)  # type: ignore[attr-defined]


def changed_signal(w: QWidget):
    """The signal a setting's widget sends when the editor changes it."""
    if isinstance(w, QCheckBox):
        return w.toggled
    if isinstance(w, QComboBox):
        return w.currentTextChanged
    return w.valueChanged  # type: ignore[attr-defined]


def bind(session, spec, w: QWidget) -> None:
    """Make ``w`` a view of setting ``spec.name`` in the editor's ``session``: the editor's change goes
    to the session (a value still being typed waits), the session's change (an undo, a restore) to
    the widget."""
    import shiboken6

    from studio.core.errors import InputError

    def edited(*_a) -> None:
        try:
            session.set(spec.name, widget_value(spec, w))
        except InputError:
            pass  # half typed: the session keeps the last whole value

    def changed(key, _before, after) -> None:
        if key != spec.name:
            return
        if not shiboken6.isValid(w):
            session.events.changed.disconnect(changed)
            return
        if widget_value(spec, w) != after:
            w.blockSignals(True)
            try:
                set_widget_value(spec, w, after)
            finally:
                w.blockSignals(False)
            w.update()

    set_widget_value(spec, w, session.value(spec.name))
    changed_signal(w).connect(edited)
    session.events.changed.connect(changed)


class SettingFields(dict):
    """name -> widget for the given specs, with typed values and QSettings persistence."""

    def __init__(self, specs):
        super().__init__()
        self.specs = {s.name: s for s in specs}
        for s in self.specs.values():
            self[s.name] = make_widget(s)

    def labels_of(self, name: str) -> str:
        """What the window calls setting ``name``."""
        return self.specs[name].label

    def values(self) -> dict:  # type: ignore[override]
        return {n: widget_value(self.specs[n], w) for n, w in self.items()}

    def set_values(self, values: dict) -> None:
        """Each widget to its value, as the editor would: the delivery first (it fills the others), then the rest."""
        for n, v in sorted(values.items(), key=lambda nv: nv[0] != "delivery"):
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


class SettingsGrid(QWidget):
    """The settings two a row (label, widget, label, widget) where the panel is wide enough, else one
    a row; by group in the schema's order, check boxes below them, one a row. Made from the specs, so
    a new setting takes the next cell."""

    TWO_COLUMNS = 300  # px: narrower than this, one setting a row

    def __init__(self, group_specs, fields, parent=None):
        super().__init__(parent)
        self.setObjectName("settingsGrid")
        self.fields = fields
        self.pairs = [s for s in group_specs if not isinstance(fields[s.name], QCheckBox)]
        self.boxes = [s for s in group_specs if isinstance(fields[s.name], QCheckBox)]
        self.labels = {}
        for spec in self.pairs:
            label = QLabel(spec.label)
            label.setBuddy(fields[spec.name])
            self.labels[spec.name] = label
        self.grid = QGridLayout(self)
        self.grid.setContentsMargins(0, 0, 0, 0)
        self.grid.setHorizontalSpacing(6)
        self.grid.setVerticalSpacing(4)
        self.columns = 0
        self._place(2)

    def _place(self, columns: int) -> None:
        if columns == self.columns:
            return
        self.columns = columns
        g = self.grid
        while g.count():
            g.takeAt(0)
        for c in range(4):
            g.setColumnStretch(c, 0)
        g.setColumnStretch(1, 1)
        if columns == 2:
            g.setColumnStretch(3, 1)
        for i, spec in enumerate(self.pairs):
            row, col = divmod(i, columns)
            g.addWidget(self.labels[spec.name], row, 2 * col)
            g.addWidget(self.fields[spec.name], row, 2 * col + 1)
        row = (len(self.pairs) + columns - 1) // columns
        for spec in self.boxes:
            g.addWidget(self.fields[spec.name], row, 0, 1, 2 * columns)
            row += 1
        self.updateGeometry()

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        super().resizeEvent(event)
        self._place(2 if event.size().width() >= max(self.TWO_COLUMNS, self.two_columns_need()) else 1)

    #: a value longer than this many characters (a long delivery name) may elide: its tooltip has it
    LONGEST_VALUE = 17

    def field_need(self, name: str) -> int:
        """The width field ``name`` needs to show its values whole: the longest of its current text and
        its suggestions (up to ``LONGEST_VALUE`` characters), plus the box's arrow and padding."""
        w = self.fields[name]
        if not isinstance(w, QComboBox):
            return w.minimumSizeHint().width()
        texts = [w.currentText(), *(w.itemText(i) for i in range(w.count()))]
        fm = w.fontMetrics()
        return max((fm.horizontalAdvance(t) for t in texts if len(t) <= self.LONGEST_VALUE), default=0) + 44

    def label_need(self) -> int:
        return max((w.sizeHint().width() for w in self.labels.values()), default=0)

    def two_columns_need(self) -> int:
        """The width two settings a row need, every label and value whole."""
        field = max((self.field_need(s.name) for s in self.pairs), default=0)
        return 2 * (self.label_need() + field) + 3 * self.grid.horizontalSpacing()

    def minimumSizeHint(self):  # noqa: N802 - the one-column width: the dock may be that narrow
        hint = super().minimumSizeHint()
        field = max((self.field_need(s.name) for s in self.pairs), default=0)
        boxes = max((self.fields[s.name].sizeHint().width() for s in self.boxes), default=0)
        hint.setWidth(max(self.label_need() + 6 + field, boxes))
        return hint

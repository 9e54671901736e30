"""The Render panel's "Save as delivery…" and "Remove delivery": the settings on screen become one of
the user's deliveries (``<data>/deliveries/NAME.json``, through ``store/deliveries.py`` as ``studio
delivery save`` does) and appear at once in the Delivery box.

    row = DeliveryButtons(session, delivery_combo, history)   # under the settings
    row.save_clicked()      # asks a name (``name_box``); a clash asks before replacing (``clash_box``)
    row.remove_clicked()    # the chosen delivery, when it is one of yours (``remove_box`` asks first)
    # history: the window's undo history (a removal is one step, undone by Ctrl+Z); None: removals are final

The dialogs are opened window-modal (``open``), kept as attributes, so a test answers them with real
clicks. A refusal (a shipped name, nothing to save) is one sentence in ``note``.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QUndoCommand
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QMessageBox,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

NONE = "None"  # how the Delivery box shows no delivery


def delivery_choices() -> list[tuple[str, str]]:
    """What the Delivery box offers, as (full name, key): none, then every delivery (shipped, then the user's)."""
    from studio.core.delivery import all_deliveries

    return [(NONE, ""), *((d.title, k) for k, d in all_deliveries().items())]


def fill_choices(combo: QComboBox) -> None:
    """The deliveries there are now, by their full names (each one's description as its tooltip);
    the one chosen stays chosen (no change signal)."""
    from studio.core.delivery import all_deliveries

    key = combo.currentData() or ""
    combo.blockSignals(True)
    try:
        combo.clear()
        found = all_deliveries()
        for title, k in delivery_choices():
            combo.addItem(title, k)
            if k:
                combo.setItemData(combo.count() - 1, found[k].description, Qt.ItemDataRole.ToolTipRole)
        combo.setCurrentIndex(max(0, combo.findData(key)))
    finally:
        combo.blockSignals(False)


def refresh_choices(combo: QComboBox) -> None:
    """Offer the deliveries there are now, keeping the one chosen (no change signal)."""
    fill_choices(combo)


class DeliveryButtons(QWidget):
    def __init__(self, session, combo: QComboBox, history=None, parent=None):
        super().__init__(parent)
        self.session = session
        self.combo = combo
        self.save_btn = QPushButton("Save as delivery…")
        self.save_btn.setObjectName("saveDelivery")
        self.save_btn.setToolTip(
            "Save the canvas, placement, rate, codec, quality, loudness, timecode and captions set here "
            "as a delivery of your own (it joins the Delivery list)"
        )
        self.remove_btn = QPushButton("Remove delivery")
        self.remove_btn.setObjectName("removeDelivery")
        self.remove_btn.setToolTip("Remove the chosen delivery (one of yours; the shipped ones stay)")
        self.note = QLabel("")
        self.note.setObjectName("dim")
        self.note.setWordWrap(True)
        self.note.hide()
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.save_btn)
        row.addWidget(self.remove_btn)
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 0, 0, 0)
        box.addLayout(row)
        box.addWidget(self.note)
        self.history = history  # the window's undo history (studio.ui.undo.History); None: removals are final
        self.name_box: QInputDialog | None = None
        self.clash_box: QMessageBox | None = None
        self.remove_box: QMessageBox | None = None
        self.save_btn.clicked.connect(self.save_clicked)
        self.remove_btn.clicked.connect(self.remove_clicked)
        session.events.changed.connect(self._changed)
        self._changed("delivery", None, session.value("delivery"))

    def _changed(self, key, _before, _after) -> None:
        import shiboken6

        if not shiboken6.isValid(self):
            self.session.events.changed.disconnect(self._changed)
            return
        if key == "delivery":
            self.remove_btn.setEnabled(self._users_delivery() is not None)

    def _users_delivery(self) -> str | None:
        """The chosen delivery's key when it is one of the user's own; else None."""
        from studio.core.delivery import key_of, user_deliveries

        key = key_of(self.session.value("delivery") or "")
        return key if key and key in user_deliveries() else None

    def say(self, text: str) -> None:
        from studio.ui.words import window_words

        text = window_words(text)
        self.note.setText(text)
        self.note.setToolTip(text)
        self.note.setVisible(bool(text))

    def _ask(self, title: str, text: str, on_yes) -> QMessageBox:
        """A Yes/Cancel question (Cancel the default), opened window-modal; Yes calls ``on_yes``."""
        yes = QMessageBox.StandardButton.Yes
        box = QMessageBox(
            QMessageBox.Icon.Question, title, text, yes | QMessageBox.StandardButton.Cancel, self.window()
        )
        box.setDefaultButton(QMessageBox.StandardButton.Cancel)
        box.buttonClicked.connect(lambda b: on_yes() if box.standardButton(b) == yes else None)
        box.open()
        return box

    # ---- save ---------------------------------------------------------------------------------

    def save_clicked(self) -> None:
        values = self.session.delivery_values()
        if not values:
            self.say("Every delivery setting is at its default: set a canvas, codec or loudness first.")
            return
        box = QInputDialog(self.window())
        box.setObjectName("deliveryNameBox")
        box.setWindowTitle("Save as delivery")
        box.setLabelText("Name of the delivery:\n" + self._listed(values))
        box.setTextValue(self._users_delivery() or "")
        box.textValueSelected.connect(self._named)
        self.name_box = box
        box.open()

    def _named(self, name: str) -> None:
        from studio.core.errors import InputError
        from studio.core.store.deliveries import user_path

        try:
            path = user_path(name)
        except InputError as exc:
            self.say(f"{str(exc)[:1].upper()}{str(exc)[1:]}.")
            return
        if not path.exists():
            self._write(name, overwrite=False)
            return
        self.clash_box = self._ask(
            "Replace delivery",
            f"You have a delivery named “{path.stem}”. Replace it with these settings?",
            lambda: self._write(name, overwrite=True),
        )

    def _write(self, name: str, *, overwrite: bool) -> None:
        from studio.core.errors import InputError
        from studio.core.store import deliveries

        try:
            d = deliveries.save(name, self.session.delivery_values(), "saved from the window", overwrite=overwrite)
        except (InputError, OSError) as exc:
            self.say(f"The delivery was not saved: {exc}.")
            return
        refresh_choices(self.combo)
        self.session.set("delivery", d.name)  # chosen: it sets what is on screen already
        self.remove_btn.setEnabled(True)
        self.say(f"Saved delivery “{d.name}”: {self._listed(d.settings)}.")

    def _listed(self, values: dict) -> str:
        """ "Canvas 1080x1080, CRF 18, OTIO timeline on": the settings in the window's words."""
        s = self.session
        return ", ".join(f"{s.label(k)} {s.describe(k, v)}" for k, v in values.items())

    # ---- remove -------------------------------------------------------------------------------

    def remove_clicked(self) -> None:
        key = self._users_delivery()
        if key is None:
            self.say("Choose one of your deliveries in Delivery to remove it; the shipped ones stay.")
            return
        self.remove_box = self._ask("Remove delivery", f"Remove your delivery “{key}”?", lambda: self._remove(key))

    def _remove(self, key: str) -> None:
        command = RemoveDelivery(self, key)
        if self.history is not None:
            self.history.push_command(command)
        else:
            command.redo()


class RemoveDelivery(QUndoCommand):
    """Remove the user's delivery ``key`` (its file's text is kept); undo writes it back and chooses it
    again, as it was. The choice of "no delivery" that the removal makes is part of this one step."""

    def __init__(self, row: DeliveryButtons, key: str):
        super().__init__(f"Remove delivery “{key}”")
        self.row, self.key = row, key
        self.saved: bytes | None = None
        self.chosen = row.session.value("delivery")

    def redo(self) -> None:
        from studio.core.errors import InputError
        from studio.core.store import deliveries

        try:
            data = deliveries.user_path(self.key).read_bytes()
            deliveries.remove(self.key)
        except (InputError, OSError) as exc:  # nothing removed: no undo step either
            self.row.say(f"The delivery was not removed: {exc}.")
            self.setObsolete(True)
            return
        self.saved = data
        with self.row.session.quiet():
            self.row.session.set("delivery", "")
        refresh_choices(self.row.combo)
        self.row.remove_btn.setEnabled(False)
        self.row.say(f"Removed delivery “{self.key}”; Edit > Undo (Ctrl+Z) brings it back.")

    def undo(self) -> None:
        from studio.core.errors import InputError
        from studio.core.store import deliveries
        from studio.core.store.fsutil import atomic_write_bytes

        if self.saved is None:
            return
        try:
            atomic_write_bytes(deliveries.user_path(self.key), self.saved)
        except (InputError, OSError) as exc:
            self.row.say(f"The delivery could not be put back: {exc}.")
            return
        self.saved = None
        refresh_choices(self.row.combo)
        with self.row.session.quiet():
            self.row.session.set("delivery", self.chosen or self.key)
        self.row.remove_btn.setEnabled(True)
        self.row.say(f"Delivery “{self.key}” is back.")

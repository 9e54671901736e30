"""'Speak this text' in the window: the script box, the voice-over's name and the Speak button, under the
Library's voice-overs. The speech itself is the core's (``studio.core.media.speech``: Piper, espeak-ng
without it), also used by ``studio serve``'s ``text`` field, so the window and the server speak a script
the same way.

    box = SpeechBox()
    box.text.setPlainText("Good evening. Here is the news.")   # the name field reads good-evening-here-is-the
    box.speak()                   # on a background thread; spoken(path) with <data>/scripts/NAME.wav

The script box grows with its text (from ``MIN_LINES`` to ``MAX_LINES`` lines, then it scrolls). It is never
shorter than a few lines: a ``QPlainTextEdit`` whose viewport is shorter than one line (with its document
margin) counts one line more than it shows, and a ``setPlainText`` then leaves its scroll value past the
last line, so it draws nothing at all, typed characters included (issue 52: "the box looks empty after
speaking"). The name follows the script's first words until it is typed into (then it is the user's).
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QHBoxLayout, QLabel, QLineEdit, QPlainTextEdit, QPushButton, QVBoxLayout, QWidget

from studio.core.media.speech import MAX_CHARS, available, title_of
from studio.ui.widgets import icon_path

__all__ = ["MAX_CHARS", "ScriptEdit", "SpeechBox", "available"]


class ScriptEdit(QPlainTextEdit):
    """A plain-text box as tall as its text: ``MIN_LINES`` to ``MAX_LINES`` lines, then it scrolls."""

    MIN_LINES = 4
    MAX_LINES = 10

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        self.textChanged.connect(self._fit)
        self._fit()

    def lines(self) -> int:
        """Lines the text takes at the box's width (wrapped lines counted)."""
        return max(1, int(self.document().documentLayout().documentSize().height()))

    def height_for(self, lines: int) -> int:
        m = self.contentsMargins()
        doc = int(2 * self.document().documentMargin())
        return lines * self.fontMetrics().lineSpacing() + doc + m.top() + m.bottom() + 2

    def _fit(self) -> None:
        lines = min(max(self.lines(), self.MIN_LINES), self.MAX_LINES)
        h = self.height_for(lines)
        if self.height() != h or self.minimumHeight() != h:
            self.setFixedHeight(h)

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt's name): another width wraps it differently
        super().resizeEvent(event)
        self._fit()

    def setPlainText(self, text: str) -> None:  # noqa: N802 (Qt's name)
        super().setPlainText(text)
        self.verticalScrollBar().setValue(0)  # its first line in view
        self._fit()


class SpeechBox(QWidget):
    spoken = Signal(str, str)  # the new voice-over's path, the text spoken
    error = Signal(str)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.text = ScriptEdit()
        self.text.setObjectName("setting_script")  # the voice-over's text: the captions' too (the script setting)
        self.text.setPlaceholderText("Script text (optional). Type a text and press Speak to make a voice-over.")
        self.name = QLineEdit()
        self.name.setObjectName("speechName")
        self.name.setPlaceholderText("named from its first words")
        self.name.setToolTip("The new voice-over's file name (its outputs take it too); type to change it")
        self.name_label = QLabel("Name")
        self.name_label.setBuddy(self.name)
        self.speak_btn = QPushButton(QIcon(icon_path("speak")), "Speak this text")
        self.speak_btn.setObjectName("speakButton")
        self.speak_btn.setToolTip("Speak the script into a new voice-over, named as the Name field says")
        self.speak_btn.clicked.connect(self.speak)
        self.task = None
        self._typed_name = False  # the user typed the name: it no longer follows the text
        self.name.textEdited.connect(self._name_edited)
        self.text.textChanged.connect(self._text_changed)
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.name_label)
        row.addWidget(self.name, 1)
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 0, 0, 0)
        box.addWidget(self.text)
        box.addLayout(row)
        box.addWidget(self.speak_btn)
        can = available()
        for w in (self.name_label, self.name, self.speak_btn):
            w.setVisible(can)

    def show_text(self, text: str) -> None:
        """Show a voice-over's script (its name follows the words again)."""
        self._typed_name = False
        if text != self.text.toPlainText():  # the script just spoken stays as it is, cursor and all
            self.text.setPlainText(text)
        self._text_changed()

    def _name_edited(self, text: str) -> None:
        self._typed_name = bool(text.strip())

    def _text_changed(self) -> None:
        if not self._typed_name:
            words = self.text.toPlainText().strip()
            self.name.setText(title_of(words) if words else "")

    def speak(self) -> None:
        """Speak the script on a background thread; ``spoken(path, text)`` with the named WAV."""
        from studio.ui.workers import run_in_background

        text = self.text.toPlainText().strip()
        if not text:
            self.error.emit("type the script text first, then press Speak")
            return
        name = self.name.text().strip() or title_of(text)
        self.speak_btn.setEnabled(False)
        self.speak_btn.setText("Speaking…")

        def done(path) -> None:
            self._idle()
            self.spoken.emit(str(path), text)

        def failed(message: str) -> None:
            self._idle()
            self.error.emit(message)

        self.task = run_in_background(_speak_named, text, name, on_done=done, on_error=failed)

    def _idle(self) -> None:
        self.task = None
        self.speak_btn.setEnabled(True)
        self.speak_btn.setText("Speak this text")


def _speak_named(text: str, name: str):
    """On a background thread: the speech, kept as ``<data>/scripts/<name>.wav``."""
    from studio.core.media.speech import keep_as, synthesize

    return keep_as(synthesize(text), name)

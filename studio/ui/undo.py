"""Undo and redo for the editor (Edit > Undo, Ctrl+Z; Redo, Ctrl+Shift+Z), on a ``QUndoStack``.

    history = History(stack)
    history.track("crf", "CRF", get=lambda: crf.value(), set=crf.setValue, signal=crf.valueChanged, widget=crf)
    history.push_command(RemoveAvatar(...))       # an action with its own undo (a removal)

``track`` watches one value: each change the editor makes (a drag, a click, a typed value) becomes
one undo step that knows the value before and after, and undo puts the old value back through the
same setter the editor's change went through, so everything that follows the value (the mask, the
output name, the Render panel) follows an undo too. Changes made while the history applies an undo
are not recorded again. One drag of the threshold line, or the arrows held on a focused spin box,
is one step: changes of one value merge while its edit is open (``begin``/``end``, or the widget's
focus), never across another value's change.

Values that belong to one voice-over (in/out, markers) are tracked with ``scope``: an undo of them
after another voice-over was selected changes that voice-over's remembered values
(``studio.ui.voiceovers``), not the one on screen.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field

from PySide6.QtGui import QUndoCommand

log = logging.getLogger(__name__)


@dataclass
class Tracked:
    key: str
    label: str
    get: Callable[[], object]
    set: Callable[[object], None]
    describe: Callable[[object], str] = str
    widget: object = None  # a spin box / line edit whose focus is one edit
    scope: Callable[[], str] | None = None  # the voice-over the value belongs to (None: global)
    apply_elsewhere: Callable[[str, object], None] | None = None  # set it for a voice-over not on screen
    text: Callable[[object, object], str] | None = None  # the step's words (default: "label before → after")
    last: object = None
    session: int = 0  # bumped when an edit ends: no merging across it
    open: bool = False
    ids: dict = field(default_factory=dict)


class Change(QUndoCommand):
    """One value from ``before`` to ``after`` (already applied when pushed)."""

    def __init__(self, history: History, t: Tracked, before, after, token, scope: str):
        super().__init__()
        self.history, self.t = history, t
        self.before, self.after, self.token, self.scope = before, after, token, scope
        self._done = True  # the editor's change is on screen already: the first redo is a no-op
        self._text()

    def _text(self) -> None:
        t = self.t
        if t.text is not None:
            self.setText(t.text(self.before, self.after))
        else:
            self.setText(f"{t.label} {t.describe(self.before)} → {t.describe(self.after)}")

    def id(self) -> int:
        return self.history.id_of(self.t.key)

    def mergeWith(self, other) -> bool:  # noqa: N802 (Qt's name)
        if not isinstance(other, Change) or other.t is not self.t or self.token is None:
            return False
        if other.token != self.token or other.scope != self.scope:
            return False
        self.after = other.after
        self._text()
        if self.after == self.before:
            self.setObsolete(True)  # dragged back where it was: no step at all
        return True

    def redo(self) -> None:
        if self._done:
            self._done = False
            return
        self.history.apply(self.t, self.after, self.scope)

    def undo(self) -> None:
        self.history.apply(self.t, self.before, self.scope)


class History:
    def __init__(self, stack):
        self.stack = stack
        self.tracked: dict[str, Tracked] = {}
        self.applying = False
        self._ids: dict[str, int] = {}

    def id_of(self, key: str) -> int:
        return self._ids.setdefault(key, 1000 + len(self._ids))

    def track(
        self,
        key: str,
        label: str,
        get,
        set,
        signal=None,
        describe=str,
        widget=None,
        scope=None,
        apply_elsewhere=None,
        text=None,
    ) -> Tracked:
        t = Tracked(key, label, get, set, describe, widget, scope, apply_elsewhere, text)
        t.last = get()
        self.tracked[key] = t
        if signal is not None:
            signal.connect(lambda *_a, k=key: self.changed(k))
        if widget is not None and hasattr(widget, "editingFinished"):
            widget.editingFinished.connect(lambda k=key: self.end(k))
        return t

    def begin(self, key: str) -> None:
        self.tracked[key].open = True

    def end(self, key: str) -> None:
        t = self.tracked[key]
        t.open = False
        t.session += 1

    def session(self, key: str, open_: bool) -> None:
        (self.begin if open_ else self.end)(key)

    def reset(self, key: str) -> None:
        """The value changed for a reason that is no edit (another voice-over loaded): take it as it is."""
        t = self.tracked[key]
        t.last = t.get()

    def changed(self, key: str) -> None:
        t = self.tracked[key]
        now = t.get()
        if self.applying:
            t.last = now
            return
        before, t.last = t.last, now
        if before == now:
            return
        w = t.widget
        editing = t.open or (w is not None and hasattr(w, "hasFocus") and w.hasFocus())
        token = (t.session,) if editing else None
        scope = t.scope() if t.scope else ""
        self.stack.push(Change(self, t, before, now, token, scope))

    def apply(self, t: Tracked, value, scope: str = "") -> None:
        """Put ``value`` back (an undo or a redo), without recording it again."""
        here = t.scope() if t.scope else ""
        self.applying = True
        try:
            if scope and scope != here:
                if t.apply_elsewhere is not None:
                    t.apply_elsewhere(scope, value)
            else:
                t.set(value)
        except Exception:
            log.warning("could not undo %s", t.key, exc_info=True)
        finally:
            self.applying = False
            t.last = t.get()
        t.session += 1

    @contextmanager
    def quiet(self):
        """Changes inside are no edits (a voice-over's remembered marks being put back)."""
        was, self.applying = self.applying, True
        try:
            yield
        finally:
            self.applying = was

    def push_command(self, command: QUndoCommand) -> None:
        """An action with its own undo (a removal): pushed, and its ``redo`` runs now."""
        self.stack.push(command)

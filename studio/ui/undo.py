"""Undo and redo for the editor (Edit > Undo, Ctrl+Z; Redo, Ctrl+Shift+Z), on a ``QUndoStack``,
recording the editor's model: each change of the ``EditorSession`` (``studio.ui.model``) the editor made
is one step that knows its key, the value before and after.

    history = History(stack, session)
    history.focus("crf", crf_box)                 # while it has the focus, its changes are one step
    history.push_command(RemoveAvatar(...))       # an action with its own undo (a removal)

Undo puts the old value back into the session (``session.apply``, not recorded again), and every view
that follows the session (the timeline, the Render panel, the output name) follows the undo too, as in
Kdenlive and OpenShot, whose undo is on the model too. One drag of the threshold line, or the arrows
held on a focused spin box, is one step: changes of one key merge while its edit is open
(``begin``/``end``, or its widget's focus), never across another key's change.

The in/out points and markers belong to one voice-over (their ``scope``): an undo of them after
another voice-over was selected changes that voice-over's remembered values, not the one on screen.
"""

from __future__ import annotations

import logging

from PySide6.QtGui import QUndoCommand

log = logging.getLogger(__name__)


class Change(QUndoCommand):
    """One key of the session from ``before`` to ``after`` (already applied when pushed)."""

    def __init__(self, history: History, key: str, before, after, token, scope: str):
        super().__init__()
        self.history, self.key = history, key
        self.before, self.after, self.token, self.scope = before, after, token, scope
        self._done = True  # the editor's change is on screen already: the first redo is a no-op
        self._text()

    def _text(self) -> None:
        self.setText(self.history.session.step_text(self.key, self.before, self.after))

    def id(self) -> int:
        return self.history.id_of(self.key)

    def mergeWith(self, other) -> bool:  # noqa: N802 (Qt's name)
        if not isinstance(other, Change) or other.key != self.key or self.token is None:
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
        self.history.apply(self.key, self.after, self.scope)

    def undo(self) -> None:
        self.history.apply(self.key, self.before, self.scope)


class History:
    def __init__(self, stack, session):
        self.stack = stack
        self.session = session
        self._ids: dict[str, int] = {}
        self._open: dict[str, bool] = {}
        self._sessions: dict[str, int] = {}
        self._widgets: dict[str, object] = {}
        session.events.edited.connect(self._edited)

    def id_of(self, key: str) -> int:
        return self._ids.setdefault(key, 1000 + len(self._ids))

    def focus(self, key: str, widget) -> None:
        """While ``widget`` (a spin box, a line edit) has the focus, changes of ``key`` are one step;
        its ``editingFinished`` ends the step."""
        self._widgets[key] = widget
        if hasattr(widget, "editingFinished"):
            widget.editingFinished.connect(lambda k=key: self.end(k))

    def begin(self, key: str) -> None:
        self._open[key] = True

    def end(self, key: str) -> None:
        self._open[key] = False
        self._sessions[key] = self._sessions.get(key, 0) + 1

    def session_edit(self, key: str, open_: bool) -> None:
        (self.begin if open_ else self.end)(key)

    def _edited(self, key: str, before, after, scope: str) -> None:
        w = self._widgets.get(key)
        editing = self._open.get(key, False)
        if not editing and w is not None:
            import shiboken6

            editing = shiboken6.isValid(w) and bool(w.hasFocus())  # type: ignore[attr-defined]
        token = (self._sessions.get(key, 0),) if editing else None
        self.push_command(Change(self, key, before, after, token, scope))

    def apply(self, key: str, value, scope: str = "") -> None:
        """Put ``value`` back (an undo or a redo), without recording it again."""
        try:
            self.session.apply(key, value, scope)
        except Exception:
            log.warning("could not undo %s", key, exc_info=True)
        self._sessions[key] = self._sessions.get(key, 0) + 1

    def quiet(self):
        """Changes inside are no edits (a voice-over's remembered marks being put back)."""
        return self.session.quiet()

    pushing = False  # True while a new step is pushed (not an undo or a redo)

    def push_command(self, command: QUndoCommand) -> None:
        """An action with its own undo (a removal): pushed, and its ``redo`` runs now."""
        self.pushing = True
        try:
            self.stack.push(command)
        finally:
            self.pushing = False

"""Plain Python events for the editor's model (no Qt): a view subscribes with a callback.

    events = EventGroup()
    events.changed.connect(lambda key, before, after: ...)   # any emitter, made on first use
    events.changed.emit("crf", 20, 18)
    events.changed.disconnect(callback)

Written by hand because it is a dozen lines: napari's ``EmitterGroup`` and psygnal do this and more,
but pulling either in for three methods would add a dependency to the window for nothing. A callback
that raises is logged and the others still run (one broken view must not stop the editor).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

log = logging.getLogger(__name__)


class Emitter:
    def __init__(self, name: str):
        self.name = name
        self._callbacks: list[Callable] = []

    def connect(self, callback: Callable) -> Callable:
        if callback not in self._callbacks:
            self._callbacks.append(callback)
        return callback

    def disconnect(self, callback: Callable) -> None:
        if callback in self._callbacks:
            self._callbacks.remove(callback)

    def emit(self, *args) -> None:
        for cb in list(self._callbacks):
            try:
                cb(*args)
            except Exception:
                log.exception("a view's %s callback failed", self.name)

    def __len__(self) -> int:
        return len(self._callbacks)


class EventGroup:
    """Named emitters, each made on first use: ``group.changed``, ``group.rate``."""

    def __getattr__(self, name: str) -> Emitter:
        if name.startswith("_"):
            raise AttributeError(name)
        e = Emitter(name)
        setattr(self, name, e)
        return e

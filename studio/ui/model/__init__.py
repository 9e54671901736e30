"""The editor's model, Qt-free (an import contract keeps PySide6, shiboken6 and pyqtgraph out):
``EditorSession`` owns what the editor has chosen; the Qt panels are its views."""

from studio.ui.model.events import Emitter, EventGroup
from studio.ui.model.marks import Marker
from studio.ui.model.session import EditorSession, session_attr, session_value

__all__ = ["EditorSession", "Emitter", "EventGroup", "Marker", "session_attr", "session_value"]

"""'Speak this text' in the window: the core's text to speech (``studio.core.media.speech``: Piper, espeak-ng without it), also used by
``studio serve``'s ``text`` field, so the window and the server speak a script the same way."""

from __future__ import annotations

from studio.core.media.speech import MAX_CHARS, available, speak

__all__ = ["MAX_CHARS", "available", "speak"]

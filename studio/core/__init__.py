"""The Qt-free core of Studio: audio, avatars, engines, rendering, encoding.

Nothing under ``studio.core`` may import Qt (PySide6, shiboken6, pyqtgraph); a test enforces it.
"""

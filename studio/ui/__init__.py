"""The studio window: PySide6 + pyqtgraph only; talks to the core through the Renderer API and signals."""

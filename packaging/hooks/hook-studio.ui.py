"""The window's Qt needs beyond what its imports show.

- QtSvg: every icon and the style sheet's arrows are SVG files; the ``iconengines/qsvgicon`` and
  ``imageformats/qsvg`` plugins are collected only with the QtSvg module.
- QtMultimedia / QtMultimediaWidgets: finished renders play in the app; their hooks bring the
  ``multimedia`` plugins (the FFmpeg backend) with them.

The ``platforms`` plugins (xcb for desktops, offscreen for tests and headless runs) come with
PyInstaller's own QtGui hook; ``packaging/build.sh`` checks that they are in the build.
"""

hiddenimports = ["PySide6.QtSvg", "PySide6.QtMultimedia", "PySide6.QtMultimediaWidgets"]

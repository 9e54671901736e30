"""Entry point of the frozen app (PyInstaller runs this file as ``__main__``).

``multiprocessing.freeze_support()`` comes first: PyInstaller's runtime hook makes it serve the
helper processes that the standard library re-launches from ``sys.executable`` (the shared-memory
resource tracker used by the x264 encoder workers). Everything else, including the encoder
workers themselves (``studio __studio_x264_worker__ FD``), goes through ``studio.cli.main``.
"""

import multiprocessing

if __name__ == "__main__":
    multiprocessing.freeze_support()

    from studio.cli import main

    raise SystemExit(main())

"""Start the studio window: ``studio`` with no arguments, ``python -m studio`` or ``studio gui``.

First paint comes before any heavy import: torch, the engines and face tracking load on
background threads after the window is shown.
"""

from __future__ import annotations

import logging
import sys
import time
import traceback
from typing import cast

log = logging.getLogger(__name__)

APP_NAME = "Studio"


def main(argv: list[str] | None = None) -> int:
    t0 = time.perf_counter()
    from studio.core.env import set_default

    set_default("QT_LOGGING_RULES", "qt.multimedia.symbolsresolver=false")
    from PySide6.QtCore import QTimer

    app = create_app(argv)
    from studio.ui.main_window import MainWindow

    window = MainWindow()
    install_excepthook(window)
    install_stop_signals(window)
    window.show()
    QTimer.singleShot(0, lambda: log.info("first paint after %.2f s", time.perf_counter() - t0))
    from studio.core import env

    if env.get("STUDIO_QUIT_AFTER_MS"):  # smoke tests of the frozen app
        QTimer.singleShot(env.get_int("STUDIO_QUIT_AFTER_MS"), window.close)
    code = app.exec()
    sys.excepthook = sys.__excepthook__
    return int(code)


def create_app(argv: list[str] | None = None):
    """The QApplication with the app's name, icon and dark style sheet (reused when one exists)."""
    import pyqtgraph as pg
    from PySide6.QtGui import QIcon
    from PySide6.QtWidgets import QApplication

    app = cast(QApplication, QApplication.instance() or QApplication(list(argv) if argv is not None else sys.argv[:1]))
    app.setApplicationName(APP_NAME)
    app.setOrganizationName("studio")
    app.setApplicationDisplayName(APP_NAME)
    app.setStyle("Fusion")
    from studio.core.env import repo_resources

    res = repo_resources()
    app.setWindowIcon(QIcon(str(res / "icons" / "studio.svg")))
    qss = res / "style.qss"
    if qss.exists():
        icons = (res / "icons").as_posix()
        app.setStyleSheet(qss.read_text(encoding="utf-8").replace("@ICONS@", icons))
    pg.setConfigOptions(antialias=True, foreground="#c8ccd4", background="#16181d", imageAxisOrder="row-major")
    return app


def install_stop_signals(window) -> None:
    """SIGTERM, SIGHUP and Ctrl-C close the window as its close button does, without asking: a running
    render stops within a batch, writes nothing and comes back interrupted; temporaries go.

    Python runs signal handlers only between bytecodes, and Qt's event loop is C++: a timer gives the
    interpreter a moment four times a second to notice them.
    """
    import signal

    from PySide6.QtCore import QTimer

    def stop(signo, _frame) -> None:
        log.warning("%s: closing the window", signal.Signals(signo).name)
        window.close_confirmed = True
        QTimer.singleShot(0, window.close)

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        try:
            signal.signal(sig, stop)
        except (ValueError, OSError):  # not the main thread, or a platform without it
            pass
    tick = QTimer(window)
    tick.setInterval(250)
    tick.timeout.connect(lambda: None)
    tick.start()


def install_excepthook(window) -> None:
    """Log any uncaught exception with its traceback; show one readable line in the window."""
    from studio.core.env import log_file
    from studio.core.errors import StudioError

    def hook(exc_type, exc, tb):
        if issubclass(exc_type, KeyboardInterrupt):
            sys.__excepthook__(exc_type, exc, tb)
            return
        if isinstance(exc, StudioError):
            message = str(exc)
        else:
            text = "".join(traceback.format_exception(exc_type, exc, tb))
            log.error("uncaught exception:\n%s", text)
            try:
                with open(log_file(), "a", encoding="utf-8") as fh:
                    fh.write(text)
            except OSError:
                pass
            message = f"internal error ({exc_type.__name__}: {exc}); the details are in {log_file()}"
        try:
            window.show_error(message)
        except Exception:  # noqa: BLE001 - the window may be gone
            pass

    sys.excepthook = hook

"""One start of the window on a screen of a given size (Qt's offscreen platform with a screen of that
size), for tests/ui/test_producer_ui.py's layout test: it opens the window as a user would (a first start,
or restoring the layout saved in STUDIO_HOME), loads a voice-over, prints what it sees as JSON, and closes
the window (which saves the layout). Not a test (pytest does not collect it).

    STUDIO_HOME=... python tests/ui/layout_run.py 1280x720 voiceover.wav [--resize 1500x850]
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    size, audio = argv[0], argv[1]
    width, height = (int(v) for v in size.split("x"))
    config = Path(tempfile.mkdtemp()) / "screen.json"
    screen = {"name": "s", "x": 0, "y": 0, "width": width, "height": height, "logicalDpi": 96, "logicalBaseDpi": 96}
    config.write_text(json.dumps({"windowFrameMargins": False, "screens": [{**screen, "dpr": 1}]}))
    os.environ["QT_QPA_PLATFORM"] = f"offscreen:configfile={config}"
    sys.path.insert(0, str(Path(__file__).parent))
    from PySide6.QtCore import QEventLoop, QTimer
    from text_fits import clipped

    from studio.ui.app import create_app
    from studio.ui.main_window import MainWindow

    create_app([])
    w = MainWindow()

    def wait(ms: int) -> None:
        loop = QEventLoop()
        QTimer.singleShot(ms, loop.quit)
        loop.exec()

    restored = w.state.layout_restored
    w.show()
    if "--resize" in argv:  # the user makes the window another size before closing it
        rw, rh = (int(v) for v in argv[argv.index("--resize") + 1].split("x"))
        w.resize(rw, rh)
    w.load_script(audio)
    t0 = time.time()
    while (w.analysis is None or (restored != "same" and not w.state.room_given)) and time.time() - t0 < 120:
        wait(50)  # the voice-over is on screen, and (unless restored as it was) the centre split
    from PySide6.QtWidgets import QApplication

    for _ in range(3):  # the layout requests those posted: the plots at their new heights
        QApplication.processEvents()
    split = w.splitter.sizes()
    tl = w.timeline
    print(
        json.dumps(
            {
                "restored": restored,
                "window": [w.width(), w.height()],
                "screen": [width, height],
                "preview_share": split[0] / max(1, sum(split)),
                "plots": [tl.wave_plot.geometry().height(), tl.rms_plot.geometry().height()],
                "clipped": clipped(w),
                "toolbar": w.window_commands.toolbar.isVisible(),
            }
        )
    )
    w.close_confirmed = True
    w.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

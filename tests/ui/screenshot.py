"""Make ``resources/screenshot.png``: the window after loading the demo and rendering a 9 s clip.

    Xvfb :99 -screen 0 1600x1050x24 &
    STUDIO_HOME=$(mktemp -d) DISPLAY=:99 QT_QPA_PLATFORM=xcb .venv/bin/python tests/ui/screenshot.py

Not a test (pytest does not collect it); it drives the real window, engine and encoder.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEMO_AUDIO = ROOT / "resources" / "demo" / "voiceover.flac"
DEMO_AVATAR = ROOT / "resources" / "demo" / "astronaut.png"


def main(out: str = str(ROOT / "resources" / "screenshot.png")) -> int:
    import soundfile as sf
    from PIL import Image
    from PySide6.QtCore import QEventLoop, QTimer

    from studio.core.paths import data_dir
    from studio.ui.app import create_app
    from studio.ui.main_window import MainWindow

    app = create_app([])
    w = MainWindow()
    w.show()

    def wait(ms: int) -> None:
        loop = QEventLoop()
        QTimer.singleShot(ms, loop.quit)
        loop.exec()

    def until(cond, timeout: float = 120) -> bool:
        t0 = time.time()
        while not cond() and time.time() - t0 < timeout:
            wait(50)
        return cond()

    w.load_avatar(str(DEMO_AVATAR), "astronaut")
    until(lambda: w.assets is not None)
    x, rate = sf.read(DEMO_AUDIO)
    intro = data_dir() / "news-intro.wav"
    sf.write(intro, x[: 9 * rate], rate)
    w.load_script(str(intro))
    until(lambda: w.analysis is not None and w.analysis.info.duration_s < 10)
    w.render_panel.encoder.setCurrentText("x264")
    w.render()
    until(lambda: w.current is None, 600)
    w.load_script(str(DEMO_AUDIO))
    until(lambda: w.analysis is not None and w.analysis.info.duration_s > 20)
    w.scrub_to(3.2)
    until(lambda: w.last_scrub is not None and w.last_scrub[1] == 80)
    wait(1500)
    raw = str(Path(out).with_suffix(".raw.png"))
    w.grab().save(raw)
    w.close()
    im = Image.open(raw).convert("RGB")
    im.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(out, optimize=True)  # < 500 KB
    os.remove(raw)
    print(out, os.path.getsize(out), "bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))

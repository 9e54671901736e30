"""Make ``resources/screenshot.png``: the window after loading the demo, rendering a 9 s clip, and
marking an in/out range and three markers on the full voice-over (the timecode field shows the
playhead).

    xvfb-run -s "-screen 0 1920x1080x24" env STUDIO_HOME=$(mktemp -d) QT_QPA_PLATFORM=xcb \\
        .venv/bin/python tests/ui/screenshot.py [OUT.png] [--size 1920x1080] [--no-render] [--raw]

``--size`` sets the window (default: 1600x1000 for the README); ``--raw`` keeps the full-colour
PNG (for looking at layouts); otherwise it is quantised to 256 colours to stay small. The layout
checks of issue 36 are ``--size 1600x900 --raw`` and ``--size 1280x720 --raw`` (every label whole,
the timeline's plots at least 120 px tall at 1600x900; tests/ui/test_session_ui.py asserts the same).
Not a test (pytest does not collect it); it drives the real window, engine and encoder.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEMO_AUDIO = ROOT / "resources" / "demo" / "voiceover.flac"
DEMO_AVATAR = ROOT / "resources" / "demo" / "astronaut.png"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?", default=str(ROOT / "resources" / "screenshot.png"))
    ap.add_argument("--size", default="1600x1000", help="the window's size; 'first': as on a first launch")
    ap.add_argument("--no-render", action="store_true")
    ap.add_argument("--raw", action="store_true")
    args = ap.parse_args(argv)
    first = args.size == "first"
    width, height = (0, 0) if first else (int(v) for v in args.size.lower().split("x"))

    import soundfile as sf
    from PIL import Image
    from PySide6.QtCore import QEventLoop, QTimer

    from studio.core.env import data_dir
    from studio.ui.app import create_app
    from studio.ui.main_window import MainWindow

    app = create_app([])
    w = MainWindow()
    if not first:
        w.resize(width, height)
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
    if not args.no_render:
        x, rate = sf.read(DEMO_AUDIO)
        intro = data_dir() / "news-intro.wav"
        sf.write(intro, x[: 9 * rate], rate)
        w.load_script(str(intro))
        until(lambda: w.analysis is not None and w.analysis.info.duration_s < 10)
        until(lambda: bool(w.library.avatar and w.library.script))  # the Library lists and selects it after
        w.render_panel.encoder.setCurrentText("x264")
        w.render_now()
        if not until(lambda: w.current is None and w.render_panel.play_btn.isEnabled(), 600):
            print("the render did not finish:", w.banner_text.text(), file=sys.stderr)
            return 1
    w.load_script(str(DEMO_AUDIO))
    if not until(lambda: w.analysis is not None and w.analysis.info.duration_s > 20):
        print("the demo voice-over did not load:", w.banner_text.text(), file=sys.stderr)
        return 1
    tl = w.timeline
    tl.set_frame(5 * 25 + 12)
    tl.set_in()
    tl.set_frame(14 * 25 + 3)
    tl.set_out()
    w.render_panel.range_check.setChecked(True)
    for seconds, name in ((2.0, "Welcome"), (8.4, "Weather"), (20.0, "Sign-off")):
        tl.markers_layer.add_marker(int(seconds * 25), name, edit=False)
    w.scrub_to(8.4)
    until(lambda: w.last_scrub is not None and w.last_scrub[1] == 210)
    wait(1500)
    raw = str(Path(args.out).with_suffix(".raw.png"))
    if first:  # the whole screen: the window manager's frame and where the window sits
        app.primaryScreen().grabWindow(0).save(raw)
    else:
        w.grab().save(raw)
    w.close()
    if args.raw:
        os.replace(raw, args.out)
    else:
        im = Image.open(raw).convert("RGB")
        im.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(args.out, optimize=True)
        os.remove(raw)
    print(args.out, os.path.getsize(args.out), "bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

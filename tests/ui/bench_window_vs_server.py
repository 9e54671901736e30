"""The same job from the window and from a server (issue 26: the window's Live panel within 10 % of
the server). Not collected by pytest.

    QT_QPA_PLATFORM=offscreen .venv/bin/python tests/ui/bench_window_vs_server.py [--frames 672]
        [--height 1080] [--repeats 3] [--json OUT]

What a user does on each side, in one data folder of its own: a library avatar added from a JPEG
(``bench_user.add_avatars``), a 48 kHz stereo WAV voice-over (new content each run, so its AAC track
is encoded each time on both sides), default settings (the engine ``auto`` picks MuseTalk where
weights are imported, else the classic engine). The server side is a real ``studio serve`` process
answering ``POST /generate`` (one warm-up request first); the window side is the real window in
this process (offscreen), the avatar and voice-over chosen in its Library and Render pressed (one
warm-up render first). Each side's figure is what the user reads: the job result's frames/s (the
window's Live panel shows it when the render ends; the server returns it with the job), and the
wall time (the request; Render pressed to the job finished). The two sides run one after the other,
never at once.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def server_side(work: Path, env: dict, voices: list[Path], warm: Path) -> list[dict]:
    from studio.core import bench_user
    from studio.service.client import StudioClient
    from studio.service.serve_process import ServeProcess

    folder = work / "server"
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    with ServeProcess(folder, env) as srv, StudioClient(srv.url, timeout=900) as client:
        client.generate(bench_user.PHOTO, folder / "warm.mp4", audio=warm)
        time.sleep(2.0)  # as the bench's server rows: the idle server finishes its warm-up captures
        for k, voice in enumerate(voices):
            t0 = time.perf_counter()
            r = client.generate(bench_user.PHOTO, folder / f"out{k}.mp4", audio=voice)
            wall = time.perf_counter() - t0
            res = client.render(r["job"]).get("result") or {}
            rows.append(
                {
                    "wall_s": round(wall, 3),
                    "fps": res.get("fps"),
                    "seconds": res.get("seconds"),
                    "frames": res.get("frames"),
                }
            )
            print(f"server  #{k}: {rows[-1]}", flush=True)
    return rows


def window_side(work: Path, voices: list[Path], warm: Path) -> list[dict]:
    from PySide6.QtCore import QEventLoop, Qt, QTimer

    from studio.core import bench_user
    from studio.ui.app import create_app
    from studio.ui.main_window import MainWindow

    app = create_app([])
    w = MainWindow()
    w.resize(1600, 1000)
    w.show()
    app.processEvents()
    w.render_panel.folder.setText(str(work / "window"))

    def wait(signal, start, timeout_s: float = 900.0):
        """Run ``start()`` and the event loop until ``signal`` fires; its arguments."""
        got: list = []
        loop = QEventLoop()

        def on(*args):
            got.append(args)
            loop.quit()

        signal.connect(on)
        QTimer.singleShot(int(timeout_s * 1000), loop.quit)
        start()
        if not got:
            loop.exec()
        signal.disconnect(on)
        if not got:
            raise RuntimeError(f"the window did not answer within {timeout_s:.0f} s")
        return got[0]

    lib = w.library
    deadline = time.monotonic() + 120
    while w.assets is None and time.monotonic() < deadline:  # the avatar selected at start loads
        app.processEvents()
        time.sleep(0.01)
    if lib.avatar != bench_user.PHOTO:
        names = [lib.avatars.item(i).data(Qt.ItemDataRole.UserRole) for i in range(lib.avatars.count())]
        wait(w.avatarLoaded, lambda: lib.avatars.setCurrentRow(names.index(bench_user.PHOTO)))
    rows = []
    for k, voice in enumerate([warm, *voices]):
        wait(w.analysisReady, lambda v=voice: w.load_script(str(v)))
        t0 = time.perf_counter()
        _, result = wait(w.worker.finished, w.render)
        wall = time.perf_counter() - t0
        app.processEvents()
        detail = w.render_panel.result_detail.text()
        if k == 0:
            continue  # the warm-up render
        rows.append(
            {
                "wall_s": round(wall, 3),
                "fps": round(result.fps, 2),
                "seconds": round(result.seconds, 3),
                "frames": result.frames,
                "live_panel": detail,
            }
        )
        print(f"window  #{k - 1}: {rows[-1]}", flush=True)
    w.close_confirmed = True
    w.close()
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=672)
    ap.add_argument("--height", type=int, default=1080)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="studio-window-vs-server-"))
    home = work / "home"
    os.environ["STUDIO_HOME"] = str(home)
    from studio.core import bench_user

    bench_user.add_avatars(work / "sources", args.height)
    voices = [bench_user.voice_file(work / "voices", "wav48", args.frames, seed=s) for s in range(1, args.repeats + 1)]
    win_voices = [
        bench_user.voice_file(work / "voices", "wav48", args.frames, seed=s) for s in range(11, 11 + args.repeats)
    ]
    warm_srv = bench_user.voice_file(work / "voices", "wav48", args.frames, seed=100)
    warm_win = bench_user.voice_file(work / "voices", "wav48", args.frames, seed=101)
    env = {**os.environ, "STUDIO_HOME": str(home), "PYTHONPATH": str(ROOT)}

    srv = server_side(work, env, voices, warm_srv)
    win = window_side(work, win_voices, warm_win)
    s_fps, w_fps = statistics.median(r["fps"] for r in srv), statistics.median(r["fps"] for r in win)
    s_wall, w_wall = statistics.median(r["wall_s"] for r in srv), statistics.median(r["wall_s"] for r in win)
    print(
        f"\n{args.frames} frames, {args.height}p photo avatar, 48 kHz stereo WAV, default settings; medians of {args.repeats}:\n"
        f"  server (POST /generate)  {s_fps:8.1f} frames/s   request {s_wall:.3f} s\n"
        f"  window (Render)          {w_fps:8.1f} frames/s   Render to finished {w_wall:.3f} s\n"
        f"  window / server          {w_fps / s_fps:8.3f} (frames/s)   {w_wall / s_wall:.3f} (wall)"
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "frames": args.frames,
                    "height": args.height,
                    "server": srv,
                    "window": win,
                    "ratio_fps": w_fps / s_fps,
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

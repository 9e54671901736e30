"""The same job from the window and from a server (issue 26: the window's Live panel within 10 % of
the server). Not collected by pytest.

    QT_QPA_PLATFORM=offscreen .venv/bin/python tests/ui/bench_window_vs_server.py [--frames 672]
        [--height 1080] [--repeats 3] [--json OUT]

What a user does on each side, in one data folder of its own: a library avatar added from a JPEG
(``bench_user.add_avatars``), a 48 kHz stereo WAV voice-over (new content for every job, so its AAC
track is encoded each time on both sides), default settings (the engine ``auto`` picks MuseTalk
where weights are imported, else the classic engine; the window's lip-sync check, on by default
there and off over HTTP, is left on unless ``--no-check``). The server side is a real ``studio
serve`` process answering ``POST /generate``; the window side is the real window in this process
(offscreen), the avatar and voice-over chosen in its Library and Render pressed. One warm-up job on
each side, then the two sides take turns, job by job (a shared machine's speed drifts: taking turns
compares them at the same moments); only one renders at a time. Each side's figure is what the user
reads: the job result's frames/s (the window's Live panel shows it when the render ends; the server
returns it with the job), and the wall time (the request; Render pressed to the job finished).
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


class WindowSide:
    """The real window, offscreen: the library avatar selected, then ``job(voice)`` per render."""

    def __init__(self, work: Path, avatar: str, check: bool):
        from PySide6.QtCore import Qt

        from studio.ui.app import create_app
        from studio.ui.main_window import MainWindow

        self.app = create_app([])
        self.w = w = MainWindow()
        w.resize(1600, 1000)
        w.show()
        self.app.processEvents()
        w.render_panel.folder.setText(str(work / "window"))
        w.render_panel.check_box.setChecked(check)
        lib = w.library
        deadline = time.monotonic() + 120
        while w.assets is None and time.monotonic() < deadline:  # the avatar selected at start loads
            self.app.processEvents()
            time.sleep(0.01)
        if lib.avatar != avatar:
            names = [lib.avatars.item(i).data(Qt.ItemDataRole.UserRole) for i in range(lib.avatars.count())]
            self.wait(w.avatarLoaded, lambda: lib.avatars.setCurrentRow(names.index(avatar)))

    def wait(self, signal, start, timeout_s: float = 900.0):
        """Run ``start()`` and the event loop until ``signal`` fires; its arguments."""
        from PySide6.QtCore import QEventLoop, QTimer

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

    def job(self, voice: Path) -> dict:
        w = self.w
        self.wait(w.analysisReady, lambda: w.load_script(str(voice)))
        t0 = time.perf_counter()
        _, result = self.wait(w.worker.finished, w.render)
        wall = time.perf_counter() - t0
        self.app.processEvents()
        return {
            "wall_s": round(wall, 3),
            "fps": round(result.fps, 2),
            "seconds": round(result.seconds, 3),
            "frames": result.frames,
            "live_panel": w.render_panel.result_detail.text(),
        }

    def close(self) -> None:
        self.w.close_confirmed = True
        self.w.close()


def server_job(client, avatar: str, voice: Path, out: Path) -> dict:
    t0 = time.perf_counter()
    r = client.generate(avatar, out, audio=voice)
    wall = time.perf_counter() - t0
    res = client.render(r["job"]).get("result") or {}
    return {"wall_s": round(wall, 3), "fps": res.get("fps"), "seconds": res.get("seconds"), "frames": res.get("frames")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=672)
    ap.add_argument("--height", type=int, default=1080)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-check", action="store_true", help="the window without its lip-sync check after each render")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="studio-window-vs-server-"))
    home = work / "home"
    os.environ["STUDIO_HOME"] = str(home)
    from studio.bench import user as bench_user
    from studio.service.client import StudioClient
    from studio.service.serve_process import ServeProcess

    bench_user.add_avatars(work / "sources", args.height)

    def voice(seed: int) -> Path:
        return bench_user.voice_file(work / "voices", "wav48", args.frames, seed=seed)

    env = {**os.environ, "STUDIO_HOME": str(home), "PYTHONPATH": str(ROOT)}
    (work / "server").mkdir()
    srv_rows, win_rows = [], []
    with ServeProcess(work / "server", env) as srv, StudioClient(srv.url, timeout=900) as client:
        server_job(client, bench_user.PHOTO, voice(100), work / "server" / "warm.mp4")
        window = WindowSide(work, bench_user.PHOTO, check=not args.no_check)
        window.job(voice(101))
        time.sleep(2.0)  # as the bench's server rows: the idle server finishes its warm-up captures
        for k in range(args.repeats):
            srv_rows.append(server_job(client, bench_user.PHOTO, voice(1 + k), work / "server" / f"out{k}.mp4"))
            print(f"server  #{k}: {srv_rows[-1]}", flush=True)
            win_rows.append(window.job(voice(11 + k)))
            print(f"window  #{k}: {win_rows[-1]}", flush=True)
        window.close()
    s_fps, w_fps = statistics.median(r["fps"] for r in srv_rows), statistics.median(r["fps"] for r in win_rows)
    s_wall = statistics.median(r["wall_s"] for r in srv_rows)
    w_wall = statistics.median(r["wall_s"] for r in win_rows)
    print(
        f"\n{args.frames} frames, {args.height}p photo avatar, 48 kHz stereo WAV, default settings"
        f"{'' if args.no_check else ' (the window checks lip sync after each render)'}; medians of {args.repeats}, "
        f"taking turns:\n"
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
                    "check": not args.no_check,
                    "server": srv_rows,
                    "window": win_rows,
                    "ratio_fps": w_fps / s_fps,
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""UI benchmark (not collected by pytest): timeline on a one-hour voice-over, and the preview path.

    QT_QPA_PLATFORM=offscreen .venv/bin/python tests/ui/bench_ui.py

Prints absolute times on this machine and ratios against baselines measured in the same run:
the one-hour timeline against the 28 s demo, fixed-level preview frames against auto-levels.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def one_hour_analysis(seconds: float = 3600.0, seed: int = 0):
    """A synthetic AudioAnalysis of ``seconds`` of speech with a pause every ~4 s (no decoding)."""
    from studio.core.constants import FPS, SAMPLE_RATE
    from studio.core.media.analysis import ENVELOPE_BUCKET, AudioAnalysis
    from studio.core.media.audio_info import AudioInfo

    rng = np.random.default_rng(seed)
    frames = int(seconds * FPS)
    speech = (np.arange(frames) % 100) < 80  # 3.2 s of speech, 0.8 s pause
    rms = np.where(speech, 0.05 + 0.05 * rng.random(frames), 0.001 * rng.random(frames)).astype(np.float32)
    buckets = int(seconds * SAMPLE_RATE / ENVELOPE_BUCKET)
    env = np.repeat(rms, buckets // frames + 1)[:buckets] * 3
    info = AudioInfo("synthetic.wav", "WAV", "PCM_16", SAMPLE_RATE, 1, int(seconds * SAMPLE_RATE))
    return AudioAnalysis(info, rms, -env, env)


def timed(fn, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def bench_timeline(app) -> None:
    from studio.core.media.analysis import analyze
    from studio.ui.timeline import TimelineView

    demo = analyze(ROOT / "resources" / "demo" / "voiceover.flac")
    hour = one_hour_analysis()
    results = {}
    for label, analysis in (("demo 28 s", demo), ("1 hour", hour)):
        view = TimelineView()
        view.resize(1100, 300)
        view.show()
        app.processEvents()
        t_set = timed(lambda: (view.set_analysis(analysis), app.processEvents()), 1)
        t_paint = timed(lambda: view.plots.grab())
        view.wave_plot.setXRange(600 if analysis.frames > 10000 else 5, 610 if analysis.frames > 10000 else 15)
        t_zoom = timed(lambda: view.plots.grab())
        t_thr = timed(lambda: (view.set_threshold(0.02), view.set_threshold(0.008)))
        results[label] = (t_set, t_paint, t_zoom, t_thr, len(view.silent_spans))
        print(
            f"timeline {label:9s}: load {t_set * 1e3:7.1f} ms · paint full {t_paint * 1e3:6.1f} ms · "
            f"paint 10 s {t_zoom * 1e3:6.1f} ms · threshold drag step {t_thr / 2 * 1e3:6.1f} ms "
            f"({results[label][4]} silences)"
        )
        view.close()
    a, b = results["demo 28 s"], results["1 hour"]
    print(
        f"timeline ratio 1 hour / demo (128x the audio): load {b[0] / a[0]:.1f}x · paint full {b[1] / a[1]:.1f}x · "
        f"paint 10 s {b[2] / a[2]:.1f}x"
    )


def bench_preview(app) -> None:
    from studio.ui.preview import PreviewView

    view = PreviewView()
    view.resize(960, 560)
    view.show()
    rng = np.random.default_rng(0)
    for h, w in ((512, 512), (1080, 1920)):
        frames = [rng.integers(0, 255, (h, w, 3), dtype=np.uint8) for _ in range(8)]
        n = 60

        def push(fixed: bool):
            for i in range(n):
                if fixed:
                    view.image_item.setImage(frames[i % 8], autoLevels=False, levels=(0, 255))
                else:
                    view.image_item.setImage(frames[i % 8], autoLevels=True)
                view.graphics.grab()

        t_fixed = timed(lambda: push(True), 1)
        t_auto = timed(lambda: push(False), 1)
        print(
            f"preview {w}x{h}: fixed levels {n / t_fixed:6.1f} fps · auto levels {n / t_auto:6.1f} fps · "
            f"ratio {t_auto / t_fixed:.2f}x"
        )
    view.close()


def bench_first_paint() -> None:
    """Seconds from a bare interpreter to the window's first paint (target: under 2 s idle), in a
    child process: imports, the QApplication, the window, one event loop pass."""
    import subprocess

    code = (
        "import time; t0 = time.perf_counter()\n"
        "from studio.ui.app import create_app\nfrom studio.ui.main_window import MainWindow\n"
        "app = create_app([]); w = MainWindow(); w.show(); app.processEvents()\n"
        "print(f'{time.perf_counter() - t0:.3f}'); w.close_confirmed = True; w.close()\n"
    )
    env = dict(os.environ, STUDIO_HOME=tempfile.mkdtemp(prefix="studio-bench-"))
    runs = [
        float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env).stdout)
        for _ in range(3)
    ]
    print(f"first paint: best {min(runs):.2f} s of {len(runs)} (target < 2 s on an idle machine)")


def main() -> int:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    os.environ.setdefault("STUDIO_HOME", tempfile.mkdtemp(prefix="studio-bench-"))
    from studio.ui.app import create_app

    app = create_app([])
    print(f"machine: {os.cpu_count()} CPU cores, Qt platform {os.environ['QT_QPA_PLATFORM']}")
    bench_timeline(app)
    bench_preview(app)
    bench_first_paint()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Piper's share of a job spoken from text: a ~30 s script synthesised (cold cache) against the whole job
(synthesis + the render of it), on this machine's CPU.

    .venv/bin/python tests/benchmarks/bench_speech.py [--canvas avatar|1920x1080] [--engine classic]

Prints the synthesis seconds, the render seconds, the job's wall and the synthesis share of it (the issue's
target: under 10 %), the same in CPU seconds (on a machine shared with other work the wall times stretch
by the load; CPU seconds do not), and the voice-over's rate and peak. The data folder is a fresh temporary one.
"cold": the process's first job (Piper's voice loaded in it); "warm": a later job of the same process (a
server or the window: the voice stays loaded), an edited script whose sentences are all new. The last
line is the figure: ``speech share: cold X % warm Y % of the job's wall (N cores, load L)``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

SCRIPT = (
    "Good evening, and welcome to the six o'clock news. Tonight, the city council approved a new budget for "
    "public transport. Buses will run every ten minutes on the main lines from next spring. The mayor said the "
    "plan would cut travel times across the city. Critics warned that the cost could rise if fuel prices keep "
    "climbing. In sport, the home team won its third match in a row. And the weather: a dry and sunny weekend "
    "is expected, with temperatures up to twenty degrees. That's all from us tonight. Good night."
)


def _cpu() -> float:
    import resource

    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--canvas", default="avatar")
    ap.add_argument("--engine", default="classic")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    os.environ["STUDIO_HOME"] = tempfile.mkdtemp(prefix="bench-speech-")
    import numpy as np
    import soundfile as sf

    from studio.core.env import repo_resources
    from studio.core.media import speech
    from studio.core.render.renderer import Renderer
    from studio.core.settings import RenderSettings

    t0, c0 = time.perf_counter(), _cpu()
    s = speech.synthesize(SCRIPT)
    synth, synth_cpu = time.perf_counter() - t0, _cpu() - c0
    x, rate = sf.read(s.path)
    out = Path(tempfile.mkdtemp(prefix="bench-speech-out-")) / "news.mp4"
    settings = RenderSettings(engine=args.engine, device=args.device, canvas=args.canvas)
    t1, c1 = time.perf_counter(), _cpu()
    r = Renderer(str(repo_resources() / "demo" / "astronaut.png"), s.path, settings).render(out)
    render, render_cpu = time.perf_counter() - t1, _cpu() - c1
    wall = synth + render
    print(f"cpu cores: {os.cpu_count()}  script: {len(SCRIPT)} chars, {len(s.sentences)} sentences")
    print(f"voice-over: {s.duration_s:.1f} s at {rate} Hz, peak {20 * np.log10(np.abs(x).max()):.2f} dBFS")
    print(f"synthesis (Piper, cold cache): {synth:.2f} s ({s.duration_s / synth:.1f}x real time)")
    print(f"render ({args.engine}, {args.device}, canvas {args.canvas}): {render:.2f} s, {r.frames} frames")
    print(f"job wall: {wall:.2f} s; synthesis share {100 * synth / wall:.1f} % (target < 10 %)")
    cpu = synth_cpu + render_cpu
    print(
        f"CPU seconds (this process and its encoder processes; what a shared machine's load does not inflate): "
        f"synthesis {synth_cpu:.2f}, render {render_cpu:.2f}; synthesis share {100 * synth_cpu / cpu:.1f} %"
    )
    t2 = time.perf_counter()
    speech.synthesize(SCRIPT)
    print(f"again (cached): {time.perf_counter() - t2:.3f} s")
    # warm: the voice loaded already; every sentence new (the same script, each sentence edited)
    edited = SCRIPT.replace(". ", ", then. ").replace("Good night.", "Good night then.")
    t3, c3 = time.perf_counter(), _cpu()
    warm = speech.synthesize(edited)
    synth_w, synth_w_cpu = time.perf_counter() - t3, _cpu() - c3
    print(f"synthesis (warm voice, new sentences): {synth_w:.2f} s, {synth_w_cpu:.2f} CPU s, {warm.duration_s:.1f} s")
    warm_share = 100 * synth_w / (synth_w + render * warm.duration_s / s.duration_s)
    print(
        f"speech share: cold {100 * synth / wall:.1f} % warm {warm_share:.1f} % of the job's wall "
        f"(CPU: cold {100 * synth_cpu / cpu:.1f} %; {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f})"
    )


if __name__ == "__main__":
    sys.exit(main())

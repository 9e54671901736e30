"""Render fps of the bundled demo on this machine: one libx264 encoder against parallel chunks.

    .venv/bin/python tests/benchmarks/bench_render.py [--engine classic] [--seconds 10]

Both runs use the same warm engine, avatar and voice-over (cut to ``--seconds``); the second
line prints the ratio against the first, measured in the same process.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import soundfile as sf


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", default="classic")
    ap.add_argument("--seconds", type=float, default=10.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("STUDIO_HOME", tmp)
        from studio.core.avatars import library as avatar_mod
        from studio.core.engines import select_engine
        from studio.core.env import repo_resources
        from studio.core.render.renderer import Renderer
        from studio.core.settings import RenderSettings

        demo = repo_resources() / "demo"
        data, rate = sf.read(demo / "voiceover.flac", dtype="float32")
        voice = Path(tmp) / "voice.wav"
        sf.write(voice, data[: int(args.seconds * rate)], rate)
        avatar = avatar_mod.resolve(demo / "astronaut.png")
        engine = select_engine(args.engine).engine
        Renderer(avatar, voice, RenderSettings(engine=args.engine), engine=engine).frame(0)  # warm up
        base = None
        for enc in ("x264", "x264-parallel"):
            for _ in range(2):  # the first parallel run also starts the encoder processes
                r = Renderer(avatar, voice, RenderSettings(engine=args.engine, encoder=enc), engine=engine)
                t0 = time.perf_counter()
                res = r.render(Path(tmp) / f"{enc}.mp4")
                fps = res.frames / (time.perf_counter() - t0)
            base = base or fps
            print(
                f"{enc:<14} {res.encoder:<24} {res.frames} frames  {fps:6.1f} fps  x{fps / base:.2f}  "
                f"({os.cpu_count()} cores, engine {res.engine} on {engine.device})"
            )


if __name__ == "__main__":
    main()

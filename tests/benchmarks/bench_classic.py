"""Classic engine speed, before (issue 17) and after, measured in the same process.

    .venv/bin/python tests/benchmarks/bench_classic.py [--device cpu|cuda] [--seconds 28.2] [--json OUT]

For each engine version (``classic_v1.py`` beside this file is the engine as it was before the
issue; ``studio.core.engines.classic`` is the current one) on the same warm avatar and
voice-over:

- **features**: the voice-over -> mouth controls, seconds;
- **engine**: faces/s of ``generate`` alone over every speech frame, at the engine's batch;
- **render**: frames/s of a whole render to MP4 (audio, plan, engine, compositing, encoding).

On CPU the avatar is the demo photo (512x512) and the voice-over the demo's (706 frames). With
``--device cuda`` the avatar is also the 1080p presenter loop of ``studio bench`` (50 frames),
the reference workload's avatar (made from stored landmarks: no face tracker needed). Every line prints the ratio after / before.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf

HERE = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--seconds", type=float, default=0.0, help="cut the demo voice-over (0: all of it)")
    ap.add_argument("--repeat", type=int, default=2, help="runs of each measure (the best is kept)")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    sys.path.insert(0, str(HERE))
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("STUDIO_HOME", tmp)
        import classic_v1
        import torch

        from studio.core.avatars import library as avatar_mod
        from studio.core.engines.classic import ClassicEngine
        from studio.core.env import repo_resources
        from studio.core.render.renderer import Renderer
        from studio.core.settings import RenderSettings

        demo = repo_resources() / "demo"
        data, rate = sf.read(demo / "voiceover.flac", dtype="float32")
        if args.seconds:
            data = data[: int(args.seconds * rate)]
        voice = Path(tmp) / "voice.wav"
        sf.write(voice, data, rate)
        avatars = {}
        try:  # needs the face tracker (mediapipe) to prepare the photo
            avatars["demo photo 512"] = avatar_mod.resolve(demo / "astronaut.png")
        except Exception as exc:  # noqa: BLE001 - a GPU host without mediapipe still times the loop
            print(f"demo photo skipped: {exc}")
        if args.device.startswith("cuda"):
            from studio.bench.reference import synthetic_avatar

            avatars["1080p presenter loop"] = synthetic_avatar(Path(tmp), 1080)
        if not args.device.startswith("cuda"):
            from studio.core.engines.runtime_torch import limit_cpu_threads

            limit_cpu_threads()  # as every render does: a quarter of the cores for torch
        threads = torch.get_num_threads()
        results = []
        for label, avatar in avatars.items():
            row = {}
            for version, cls in (("before", classic_v1.ClassicEngine), ("after", ClassicEngine)):
                engine = cls(device=args.device)
                settings = RenderSettings(engine="classic", device=args.device)
                r = Renderer(avatar, voice, settings, engine=engine)
                plan = r.plan
                t0 = time.perf_counter()
                feats = engine.audio_features(r.wave)
                t_feat = time.perf_counter() - t0
                prepared = engine.prepare(avatar)
                engine.bind(feats)
                speech = plan.engine_frames
                batch = engine.preferred_batch()
                engine.generate(prepared, plan.avatar_idx[speech[:batch]], speech[:batch])  # warm up
                best = 0.0
                for _ in range(args.repeat):
                    _sync(args.device)
                    t0 = time.perf_counter()
                    for a in range(0, len(speech), batch):
                        idx = speech[a : a + batch]
                        engine.generate(prepared, plan.avatar_idx[idx], idx)
                    _sync(args.device)
                    best = max(best, len(speech) / (time.perf_counter() - t0))
                fps = 0.0
                for k in range(args.repeat):
                    rr = Renderer(avatar, voice, settings, engine=engine)
                    t0 = time.perf_counter()
                    res = rr.render(Path(tmp) / f"{version}{k}.mp4")
                    fps = max(fps, res.frames / (time.perf_counter() - t0))
                row[version] = {
                    "features_s": round(t_feat, 3),
                    "engine_faces_per_s": round(best, 1),
                    "render_frames_per_s": round(fps, 1),
                    "frames": int(plan.frames),
                    "speech_frames": int(len(speech)),
                    "encoder": res.encoder,
                }
                engine.close()
            b, a = row["before"], row["after"]
            print(
                f"{label}: {a['frames']} frames ({a['speech_frames']} with speech), device {args.device}, "
                f"{os.cpu_count()} cores, torch threads {threads}"
            )
            for key, name in (
                ("features_s", "features (s)"),
                ("engine_faces_per_s", "engine faces/s"),
                ("render_frames_per_s", "render frames/s"),
            ):
                ratio = a[key] / max(b[key], 1e-9)
                print(f"  {name:<18} before {b[key]:>8}  after {a[key]:>8}  after/before x{ratio:.2f}")
            results.append({"avatar": label, **row})
        if args.json:
            Path(args.json).write_text(
                json.dumps({"device": args.device, "cores": os.cpu_count(), "results": results}, indent=2)
            )


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()

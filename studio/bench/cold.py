"""Cold starts (``studio bench --cold``): a fresh process renders a photo avatar, timed from its
start (imports, loading the engine, the render) to the finished MP4."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from studio.bench.inputs import reference_audio, synthetic_avatar
from studio.core import env


def cold_render(
    workdir: Path,
    engine: str,
    decoder: str | None,
    device: str,
    models_dir,
    frames: int,
    height: int,
    encoder: str = "auto",
    preset: str = "ultrafast",
    crf: int = 20,
    fast_copies: bool = False,
) -> dict:
    """A fresh Python process renders ``frames`` frames of a ``height``p photo avatar: wall time of
    the whole process (interpreter start to exit), less the time it spends building the synthetic
    avatar (a library avatar is a memory map); with the child's own breakdown."""
    import json
    import subprocess
    import sys

    args = {
        "workdir": str(workdir),
        "engine": engine,
        "decoder": decoder,
        "device": device,
        "frames": frames,
        "models_dir": None if models_dir is None else str(models_dir),
        "height": height,
        "encoder": encoder,
        "preset": preset,
        "crf": crf,
    }
    t0 = time.perf_counter()
    launched = time.time()
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import time; t=time.time(); import sys; "
            "from studio.bench.cold import _cold_child; _cold_child(sys.argv[1], t)",
            json.dumps(args),
        ],
        capture_output=True,
        text=True,
        env=env.child(STUDIO_X264_NICE=env.get("STUDIO_X264_NICE"), STUDIO_FAST_COPIES="1" if fast_copies else "0"),
    )
    wall = time.perf_counter() - t0
    ended = time.time()
    if proc.returncode != 0:
        return {"error": proc.stderr[-2000:], "seconds": round(wall, 3)}
    child = json.loads(proc.stdout.strip().splitlines()[-1])
    # the interpreter's start before the child's first line, and its exit after its answer
    child["python_start_s"] = round(child.pop("t_first") - launched, 3)
    child["exit_s"] = round(ended - child.pop("t_answer"), 3)
    seconds = wall - child["avatar_s"]
    child.update(
        seconds=round(seconds, 3),
        process_wall_s=round(wall, 3),
        fps=round(frames / seconds, 1),
        warnings=[ln for ln in proc.stderr.splitlines() if "WARNING" in ln][-5:],
    )
    return child


def _cold_child(args_json: str, t_first: float = 0.0) -> None:
    """The child of ``cold_render``: prints one JSON line (its breakdown, in seconds)."""
    import json

    t_start = time.perf_counter()
    a = json.loads(args_json)
    import torch  # noqa: F401 - timed: the import a cold render pays

    t_torch = time.perf_counter()
    from studio.core.render.renderer import Renderer
    from studio.core.settings import RenderSettings

    t_import = time.perf_counter()
    workdir = Path(a["workdir"])
    avatar = synthetic_avatar(workdir / "cold", a["height"], photo=True)
    audio = reference_audio(workdir / "cold", a["frames"])
    t_avatar = time.perf_counter()
    eng: Any
    if a["engine"] == "musetalk":
        from studio.core.engines.musetalk import MuseTalkEngine

        eng = MuseTalkEngine(
            device=a["device"],
            precision="fp16" if "cuda" in a["device"] else "fp32",
            decoder=a["decoder"],
            models_dir=a["models_dir"],
        )
    else:
        from studio.core.engines.classic import ClassicEngine

        eng = ClassicEngine(device=a["device"])
    settings = RenderSettings(
        engine=a["engine"],
        device=a["device"],
        decoder=a["decoder"] or "taesd",
        encoder=a["encoder"],
        preset=a["preset"],
        crf=a["crf"],
    )
    r = Renderer(avatar, audio, settings, engine=eng)
    t_engine = time.perf_counter()
    result = r.render(workdir / "cold" / f"cold_{a['engine']}.mp4")
    t_end = time.perf_counter()
    import sys

    sys.stdout.write(
        json.dumps(
            {  # the answer to the parent bench process (its protocol, not a message)
                "frames": result.frames,
                "engine": eng.name,
                "encoder": result.encoder,
                "import_s": round(t_import - t_start, 3),
                "import_torch_s": round(t_torch - t_start, 3),
                "avatar_s": round(t_avatar - t_import, 3),
                "t_first": t_first,
                "engine_object_s": round(t_engine - t_avatar, 3),
                "render_s": round(t_end - t_engine, 3),
                "load_ms": getattr(eng, "load_ms", {}),
                "stage_ms": result.stage_ms,
                "finish_ms": result.finish_ms,
                "modules": sorted(m for m in ("transformers", "diffusers", "torch._dynamo") if m in sys.modules),
                "t_answer": time.time(),
            }
        )
        + "\n"
    )
    sys.stdout.flush()
    from studio.core.signals import quick_exit

    quick_exit(0)  # as a command ends (studio.cli.main)

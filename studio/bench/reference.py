"""The reference benchmark workload (``studio bench``), timed against the official loop.

Workload (issue "GPU speed"): a 26.88 s voice-over (672 frames; the demo voice-over cut to length,
~20 % silence), a 1080p video avatar loop (the demo presenter swaying over 2 s, 50 frames), the
MuseTalk v1.5 architecture (random weights when none are imported: speed does not depend on the
values), TAESD and SD-VAE decoders. Each run is timed from the audio file to the finished MP4.

The avatar is built from a known motion of the demo photo: its face-mesh landmarks (stored once in
``resources/demo/astronaut_landmarks.npy``) are moved with the same displacement as the pixels,
then boxes, crops and masks come from ``studio.core.avatars.faces`` exactly as for a tracked avatar. This
keeps the benchmark free of the face tracker (which is not part of a render) and of mediapipe.

The ratios are against ``studio.bench.official.official_loop``, MuseTalk's realtime script
reproduced on the same inputs; ``--cold`` rows are ``studio.bench.cold``'s fresh processes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path
from typing import Any

from studio.bench.cold import cold_render
from studio.bench.inputs import REF_FRAMES, reference_audio, synthetic_avatar
from studio.bench.official import official_loop
from studio.core import env

log = logging.getLogger(__name__)


def time_render(avatar, audio: Path, settings, engine, output: Path, engines=None) -> dict:
    """Render ``audio`` with a warm ``engine`` (or warm ``engines``, one per GPU, at once); wall
    time from the audio file to the MP4 on disk."""
    from studio.core.render.renderer import Renderer
    from studio.core.scale.multigpu import DeviceRender

    trace_dir = env.get("STUDIO_TRACE_DIR")  # per-frame encoder traces of the timed runs
    if trace_dir and not output.stem.startswith("warm"):
        env.put("STUDIO_TRACE", str(Path(trace_dir) / f"trace_{output.stem}.json"))
    elif trace_dir:
        env.put("STUDIO_TRACE", None)
    sampler = StackSampler() if env.get("STUDIO_STACKS") and not output.stem.startswith("warm") else None
    t0 = time.perf_counter()
    renderer: Any
    if engines:
        renderer = DeviceRender(avatar, audio, settings, engines=engines)
    else:
        renderer = Renderer(avatar, audio, settings, engine=engine)
    with sampler or contextlib.nullcontext():
        result = renderer.render(output)
    wall = time.perf_counter() - t0
    extra = {"stacks": sampler.top()} if sampler is not None else {}
    return {
        **extra,
        "frames": result.frames,
        "silent_frames": result.silent_frames,
        "seconds": round(wall, 3),
        "fps": round(result.frames / wall, 1),
        "encoder": result.encoder,
        "stage_ms": result.stage_ms,
        "finish_ms": result.finish_ms,
        "output_bytes": output.stat().st_size,
    }


def time_codecs(avatar, audio: Path, warm_audio: Path, workdir: Path, codecs, settings, device: str, note) -> dict:
    """``classic-<codec>`` rows: the classic engine renders ``audio`` in each codec (after one warm-up
    render that starts its encoder processes); frames/s end to end, the encoder and the file size."""
    from studio.core.engines.classic import ClassicEngine
    from studio.core.media.codecs import CODECS, available

    rows: dict = {}
    missing = available()
    eng = ClassicEngine(device=device)
    for codec in codecs:
        key = f"classic-{codec}"
        if codec not in CODECS or missing.get(codec):
            rows[key] = {"error": missing.get(codec) or f"unknown codec {codec}"}
            continue
        s = settings(engine="classic", codec=codec)
        suffix = CODECS[codec].suffix
        try:
            time_render(avatar, warm_audio, s, eng, workdir / f"warm_{codec}{suffix}")
            rows[key] = time_render(avatar, audio, s, eng, workdir / f"codec_{codec}{suffix}")
            note(f"classic in {codec}: {rows[key]['fps']} frames/s end to end ({rows[key]['encoder']})")
        except Exception:  # noqa: BLE001 - a row says why it failed, the others still run
            import traceback

            rows[key] = {"error": traceback.format_exc()}
    eng.close()
    return rows


class StackSampler:
    """Samples the calling thread's Python stack every ``interval`` s from a daemon thread
    (``STUDIO_STACKS``): where a render thread spends its wall time, waits included, which a
    profiler of CPU time does not show. ``top()``: the most frequent innermost frames of the
    studio code with their share of the samples. Written by hand: py-spy needs ptrace, which the
    GPU machines do not grant, and cProfile counts CPU time, not waits."""

    def __init__(self, interval: float = 0.005, depth: int = 4):
        self.interval, self.depth = interval, depth
        self.samples: dict[tuple, int] = {}
        self.total = 0
        self._stop: Any = None  # a threading.Event while sampling

    def __enter__(self):
        import threading

        self._target = threading.get_ident()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stack-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        return False

    def _run(self) -> None:
        import sys

        while not self._stop.wait(self.interval):
            frame = sys._current_frames().get(self._target)
            stack: list[str] = []
            while frame is not None and len(stack) < self.depth:
                code = frame.f_code
                stack.append(f"{Path(code.co_filename).name}:{frame.f_lineno} {code.co_name}")
                frame = frame.f_back
            key = tuple(stack)
            self.samples[key] = self.samples.get(key, 0) + 1
            self.total += 1

    def top(self, n: int = 12) -> list:
        best = sorted(self.samples.items(), key=lambda kv: -kv[1])[:n]
        return [{"share": round(c / max(1, self.total), 3), "stack": list(k)} for k, c in best]


def machine_info() -> dict:
    import platform

    info: dict[str, Any] = {
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    try:
        import torch

        info["torch"] = torch.__version__
        if torch.cuda.is_available():
            p = torch.cuda.get_device_properties(0)
            info.update(
                gpu=p.name,
                gpu_count=torch.cuda.device_count(),
                cuda=torch.version.cuda,
                gpu_memory_gib=round(p.total_memory / 2**30, 1),
            )
            try:
                import subprocess

                info["driver"] = (
                    subprocess.run(
                        ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                        capture_output=True,
                        text=True,
                        timeout=10,
                    )
                    .stdout.strip()
                    .splitlines()[0]
                )
            except Exception:  # noqa: BLE001 - deliberate: any failure here is reported, not fatal
                pass
    except ImportError:
        pass
    return info


# --------------------------------------------------------------------------------------------
# The whole benchmark


def run_bench(
    workdir: Path,
    *,
    device: str | None = None,
    frames: int | None = None,
    height: int | None = None,
    decoders=("taesd", "sd-vae"),
    official_frames: int | None = None,
    encoder: str = "auto",
    preset: str = "ultrafast",
    crf: int = 20,
    batch: int = 0,
    compile: bool = False,
    classic: bool = True,
    gpus: int = 1,
    official: bool = True,
    long_frames: int = 0,
    photo: bool = False,
    cold: bool = False,
    cold_frames: int = 375,
    codecs: tuple[str, ...] = (),
    note=log.info,
) -> dict:
    """Time our renderer (MuseTalk with each decoder, and the classic engine) and the official loop.

    On CUDA the defaults are the reference workload (672 frames, 1080p, real architecture); on
    CPU a smoke version (48 frames, 360p, tiny configs of the same classes). ``note(text)`` is
    called with progress lines. ``long_frames``: also a MuseTalk run of the first decoder on a
    clip that long (``finish_ms`` says what the work after the last frame was); ``photo``: also
    one on a photo avatar (one still frame); ``cold``: fresh processes render ``cold_frames``
    frames of a photo avatar with each engine (``cold_render``: imports, loading, render).
    Clips longer than the reference warm up on a reference-length clip.
    """
    import torch

    from studio.core.engines import runtime_torch as rt
    from studio.core.engines import weights
    from studio.core.engines.classic import ClassicEngine
    from studio.core.engines.musetalk import MuseTalkEngine
    from studio.core.settings import RenderSettings

    dev = rt.resolve_device(device)
    cuda = dev.type == "cuda"
    if gpus > 1 and (not cuda or torch.cuda.device_count() < gpus):
        from studio.core.errors import InputError

        raise InputError(
            f"--gpus {gpus} needs {gpus} CUDA GPUs; this machine has {torch.cuda.device_count() if cuda else 0}"
        )
    frames = frames or (REF_FRAMES if cuda else 48)
    height = height or (1080 if cuda else 360)
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {
        "machine": machine_info(),
        "device": str(dev),
        "frames": frames,
        "height": height,
        "preset": preset,
        "crf": crf,
        "runs": {},
    }

    note(f"inputs: {frames} frames, {height}p video avatar")
    audio = reference_audio(workdir, frames)
    avatar = synthetic_avatar(workdir, height)
    from studio.core.media.analysis import analysis_of
    from studio.core.media.audio import load

    out["silent_fraction"] = round(float(analysis_of(load(audio)).mask().mean()), 3)
    models_dir, which = bench_models(workdir, tiny=not cuda, note=note)
    out["weights"] = which
    warm_audio = audio if frames <= REF_FRAMES else reference_audio(workdir, REF_FRAMES)
    if cold:  # first, while nothing else holds the GPU
        dec = decoders[0] if decoders else "taesd"
        plan = [
            ("cold-classic", "classic", None),
            (f"cold-musetalk-{dec}-no-fast-copies", "musetalk", dec),
            ("fast copies", None, None),
            (f"cold-musetalk-{dec}", "musetalk", dec),
        ]
        for key, eng_name, d in plan if cuda else plan[:1] + plan[-1:]:
            if eng_name is None:  # what `studio models import` can store: fp16 safetensors for the GPU
                t0 = time.perf_counter()
                weights.write_fast_copies(models_dir, torch.float16, decoders)
                out["fast_copies_s"] = round(time.perf_counter() - t0, 3)
                continue
            note(f"cold start: a fresh process renders {cold_frames} frames with {eng_name}")
            out["runs"][key] = cold_render(
                workdir,
                eng_name,
                d,
                str(dev),
                models_dir,
                cold_frames,
                height,
                encoder=encoder,
                preset=preset,
                crf=crf,
                fast_copies="no-fast" not in key and eng_name == "musetalk",
            )
            note(f"{key}: {out['runs'][key]['seconds']} s wall")

    official_engine: Any = None

    def settings(**kw):
        return RenderSettings(device=str(dev), encoder=encoder, preset=preset, crf=crf, batch=batch, **kw)

    def musetalk(device: str, decoder: str):
        precision = "fp16" if device.startswith("cuda") else "fp32"
        return MuseTalkEngine(
            device=device, precision=precision, decoder=decoder, batch=batch, compile=compile, models_dir=models_dir
        )

    for decoder in decoders:
        note(f"MuseTalk + {decoder}: loading and warming up")
        mt = settings(engine="musetalk", decoder=decoder)
        engine = musetalk(str(dev), decoder)
        # graphs, encoders, latents: all warm
        time_render(avatar, warm_audio, mt, engine, workdir / f"warm_{decoder}.mp4")
        note(f"MuseTalk + {decoder}: timing")
        run = time_render(avatar, audio, mt, engine, workdir / f"ours_{decoder}.mp4")
        run["engine"] = engine.describe()
        run["batch"] = batch or engine.preferred_batch()
        out["runs"][f"musetalk-{decoder}"] = run
        note(f"MuseTalk + {decoder}: {run['fps']} frames/s end to end")
        if decoder == decoders[0] and photo:
            still = synthetic_avatar(workdir, height, photo=True)
            time_render(still, warm_audio, mt, engine, workdir / f"warm_{decoder}_photo.mp4")
            run_p = time_render(still, audio, mt, engine, workdir / f"ours_{decoder}_photo.mp4")
            out["runs"][f"musetalk-{decoder}-photo"] = run_p
            note(f"MuseTalk + {decoder}, photo avatar: {run_p['fps']} frames/s end to end")
            # the same without telling x264 what cannot change: the photo, and the video avatar's still backdrop
            for who, av_, stem in (("photo", still, "photo_nohints"), ("video", avatar, "nohints")):
                with env.scoped("STUDIO_VIDEO_HINTS", "0"):
                    run_n = time_render(av_, audio, mt, engine, workdir / f"ours_{decoder}_{stem}.mp4")
                out["runs"][f"musetalk-{decoder}{'-photo' if who == 'photo' else ''}-no-hints"] = run_n
                note(f"MuseTalk + {decoder}, {who} avatar without video hints: {run_n['fps']} frames/s")
        if decoder == decoders[0] and long_frames:
            long_audio = reference_audio(workdir, long_frames)
            note(f"MuseTalk + {decoder}: timing a {long_frames}-frame clip")
            run_l = time_render(avatar, long_audio, mt, engine, workdir / f"ours_{decoder}_long.mp4")
            out["runs"][f"musetalk-{decoder}-{long_frames}"] = run_l
            note(f"MuseTalk + {decoder}, {long_frames} frames: {run_l['fps']} frames/s, finish {run_l['finish_ms']}")
            (workdir / f"ours_{decoder}_long.mp4").unlink(missing_ok=True)
        if gpus > 1:
            extra = [musetalk(f"cuda:{g}", decoder) for g in range(1, gpus)]
            engines = [engine, *extra]
            note(f"MuseTalk + {decoder} on {gpus} GPUs: warming up")
            time_render(avatar, audio, mt, None, workdir / f"warm_{decoder}_{gpus}gpu.mp4", engines=engines)
            multi = time_render(avatar, audio, mt, None, workdir / f"ours_{decoder}_{gpus}gpu.mp4", engines=engines)
            multi["gpus"] = gpus
            multi["scaling"] = round(multi["fps"] / run["fps"], 2)
            out["runs"][f"musetalk-{decoder}-{gpus}gpu"] = multi
            note(f"MuseTalk + {decoder} on {gpus} GPUs: {multi['fps']} frames/s ({multi['scaling']}x one GPU)")
            for e in extra:
                e.close()
        if decoder == "sd-vae" or decoder == decoders[-1]:
            official_engine = engine
        else:
            engine.close()
    if classic:
        eng = ClassicEngine(device=str(dev))
        time_render(avatar, warm_audio, settings(engine="classic"), eng, workdir / "warm_classic.mp4")
        out["runs"]["classic"] = time_render(avatar, audio, settings(engine="classic"), eng, workdir / "classic.mp4")
        note(f"classic: {out['runs']['classic']['fps']} frames/s end to end")
    if codecs:
        out["runs"].update(time_codecs(avatar, audio, warm_audio, workdir, codecs, settings, str(dev), note))

    if not official:
        if official_engine is not None:  # no MuseTalk decoder was timed (--decoders "")
            official_engine.close()
        return out
    note("official loop reproduction: loading fp16 eager UNet + SD-VAE")
    p: Any = weights.resolve(models_dir)
    dtype = torch.float16 if cuda else torch.float32
    unet = weights.load_module("unet", p.unet, p.weight_file(p.unet), dev, dtype)
    vae = weights.load_module("vae", p.vae, p.weight_file(p.vae), dev, dtype)
    feats = official_engine.audio_features(load(audio)).array()
    latents = torch.from_numpy(official_engine.encode_crops(avatar.crops))
    official_engine.close()
    n_off = official_frames or frames
    note(f"official loop reproduction: timing {n_off} frames")
    off = official_loop(avatar, audio, unet, vae, feats, latents, workdir / "official.mp4", dev, n_off)
    out["runs"]["official"] = off
    base = off["fps"]
    out["ratios"] = {k: round(v["fps"] / base, 1) for k, v in out["runs"].items() if k != "official" and "fps" in v}
    return out


def bench_models(workdir: Path, tiny: bool, note) -> tuple[Path | None, str]:
    """The imported weights when there are some; else random weights of the real architecture
    (tiny configs on CPU), imported into a private store under ``workdir``."""
    from studio.core.engines import random_models, weights

    if weights.availability().ready and not tiny:
        return None, "imported"
    store = workdir / "store"
    if not weights.availability(store).ready:
        note("writing random-weight models (" + ("tiny configs" if tiny else "real architecture") + ")")
        src = random_models.write_official_models(workdir / "random", tiny=tiny)
        taesd = random_models.write_taesd(
            workdir / "random" / "taesd", config=random_models.TAESD_TINY if tiny else None
        )
        weights.import_models(src, taesd.parent, models_dir=store)
    return store, "random (tiny configs)" if tiny else "random (real architecture)"

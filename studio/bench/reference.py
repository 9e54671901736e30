"""The reference benchmark workload (``studio bench``) and a reproduction of the official loop.

Workload (issue "GPU speed"): a 26.88 s voice-over (672 frames; the demo voice-over cut to length,
~20 % silence), a 1080p video avatar loop (the demo presenter swaying over 2 s, 50 frames), the
MuseTalk v1.5 architecture (random weights when none are imported: speed does not depend on the
values), TAESD and SD-VAE decoders. Each run is timed from the audio file to the finished MP4.

The avatar is built from a known motion of the demo photo: its face-mesh landmarks (stored once in
``resources/demo/astronaut_landmarks.npy``) are moved with the same displacement as the pixels,
then boxes, crops and masks come from ``studio.core.avatars.faces`` exactly as for a tracked avatar. This
keeps the benchmark free of the face tracker (which is not part of a render) and of mediapipe.

``official_loop`` reproduces MuseTalk's realtime script (spec §4.2) on the same inputs: fp16 eager
UNet at batch 20, SD-VAE decode, per-frame CPU resize and PIL-style mask paste into the full frame,
PNG frames on disk, then one libx264 encode of the PNGs (crf 18) and a second pass that re-encodes
the video while muxing the audio (the official ``ffmpeg -i audio -i video out.mp4`` without
``-c copy``). ffmpeg's defaults are mirrored through PyAV (preset medium, all threads).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from studio.core import env
from studio.core.constants import FPS, SAMPLE_RATE, SAMPLES_PER_FRAME

log = logging.getLogger(__name__)

REF_FRAMES = 672
OFFICIAL_BATCH = 20


# --------------------------------------------------------------------------------------------
# Inputs


def reference_audio(workdir: Path, frames: int = REF_FRAMES) -> Path:
    """The demo voice-over cut (or looped) to exactly ``frames`` video frames, as 16 kHz WAV."""
    import soundfile as sf

    from studio.core.env import repo_resources
    from studio.core.media.audio import load

    wave = load(repo_resources() / "demo" / "voiceover.flac")
    n = frames * SAMPLES_PER_FRAME
    reps = -(-n // len(wave.samples))
    samples = np.tile(wave.samples, reps)[:n]
    path = Path(workdir) / f"voice_{frames}.wav"
    sf.write(path, samples, SAMPLE_RATE, subtype="PCM_16")
    return path


def synthetic_avatar(
    workdir: Path, height: int = 1080, loop_frames: int = 50, spread=(0.09, 0.20), photo: bool = False
):
    """An in-memory ``AvatarAssets``: the demo photo on a 16:9 backdrop, the presenter swaying
    over a ``loop_frames`` loop.

    Like a tripod recording, the camera and backdrop stay still: a smooth displacement field
    centred on the head and shoulders (Gaussian, ``spread`` = sigma as fractions of the width and
    height, cut to zero past 3 sigma) moves the presenter by up to ~12 px (and the face-mesh
    landmarks with it); the rest of the frame (the flag, the shuttle model) is the same in every
    frame, bit for bit. That matters for the encoders, which skip still macroblocks cheaply.
    ``photo=True``: a photo avatar (one still frame, kind "photo"): only the mouth moves.
    (Until 2026-11-30 the field was ~2x wider, sigma (0.22, 0.35), with no cut-off: the whole
    frame moved by up to a pixel. On the H200 host 16 x264 processes encoded that at 833 fps and
    this one at 931 fps in the same run, a difference within the spread between runs.)
    """
    import cv2
    import PIL.Image

    from studio.core.avatars import faces
    from studio.core.env import repo_resources

    still = photo is True
    if still:
        loop_frames = 1
    demo = repo_resources() / "demo"
    image = np.asarray(PIL.Image.open(demo / "astronaut.png").convert("RGB"))
    lm0 = np.load(demo / "astronaut_landmarks.npy").astype(np.float32)
    width = (height * 16 // 9) // 2 * 2
    ramp = np.linspace(0.0, 1.0, height, dtype=np.float32)[:, None, None]
    backdrop = np.array([22, 30, 48], np.float32) * (1 - ramp) + np.array([60, 70, 92], np.float32) * ramp
    canvas = np.broadcast_to(backdrop, (height, width, 3)).astype(np.uint8).copy()
    s = 0.95 * height / image.shape[0]
    pw, ph = int(round(image.shape[1] * s)), int(round(image.shape[0] * s))
    x0, y0 = (width - pw) // 2, (height - ph) // 2
    canvas[y0 : y0 + ph, x0 : x0 + pw] = cv2.resize(image, (pw, ph), interpolation=cv2.INTER_AREA)
    base_lm = lm0 * s + np.array([x0, y0], np.float32)
    # the sway: a Gaussian bump of motion around the head and shoulders
    cx, cy = float(base_lm[:, 0].mean()), float(base_lm[:, 1].mean()) + 0.12 * height
    gy, gx = np.mgrid[0:height, 0:width].astype(np.float32)
    sx, sy = spread[0] * width, spread[1] * height
    bump = np.exp(-(((gx - cx) / sx) ** 2 + ((gy - cy) / sy) ** 2) / 2)
    bump[bump < np.exp(-4.5)] = 0.0  # past 3 sigma: a still backdrop
    amp = np.array([0.006 * width, 0.004 * height], np.float32)
    frames = np.empty((loop_frames, height, width, 3), np.uint8)
    lms = np.empty((loop_frames, len(lm0), 2), np.float32)
    for k in range(loop_frames):
        ph_ = 2 * np.pi * k / loop_frames
        dx, dy = amp[0] * np.sin(ph_), amp[1] * np.sin(2 * ph_)
        mx, my = (gx - dx * bump).astype(np.float32), (gy - dy * bump).astype(np.float32)
        frames[k] = cv2.remap(canvas, mx, my, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT)
        b = np.exp(-(((base_lm[:, 0] - cx) / sx) ** 2 + ((base_lm[:, 1] - cy) / sy) ** 2) / 2)
        lms[k] = base_lm + np.stack([dx * b, dy * b], 1)
    boxes = faces.boxes_for(lms, width, height)
    crops = np.stack([faces.crop_face(f, b) for f, b in zip(frames, boxes)])
    crop_lm = np.stack([faces.to_crop(lm, b) for lm, b in zip(lms, boxes)])
    masks = np.stack([faces.blend_mask(c, b) for c, b in zip(crop_lm, boxes)])
    folder = Path(workdir) / ("photo" if still else "avatar")  # its own engine caches (latents)
    folder.mkdir(parents=True, exist_ok=True)
    from studio.core.avatars.library import AvatarAssets

    meta = {"kind": "photo" if still else "video", "fps": FPS, "frames": loop_frames, "width": width, "height": height}
    return AvatarAssets(
        name="bench",
        folder=folder,
        meta=meta,
        frames=frames,
        boxes=boxes,
        crops=crops,
        masks=masks,
        landmarks=lms,
        crop_landmarks=crop_lm,
        face_ok=np.ones(loop_frames, bool),
    )


# --------------------------------------------------------------------------------------------
# Timing our renderer


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


# --------------------------------------------------------------------------------------------
# The official realtime loop, reproduced


def official_masks(avatar) -> tuple[list[np.ndarray], list[tuple[int, int, int, int]]]:
    """MuseTalk's per-frame blend material: a mask over the 1.5x square around the box, and that square."""
    import cv2

    masks, crop_boxes = [], []
    for i in range(avatar.N):
        x1, y1, x2, y2 = (int(v) for v in avatar.boxes[i])
        w, h = x2 - x1, y2 - y1
        xc, yc = (x1 + x2) // 2, (y1 + y2) // 2
        s = int(max(w, h) // 2 * 1.5)
        xs, ys = xc - s, yc - s
        full = np.zeros((2 * s, 2 * s), np.uint8)
        full[y1 - ys : y2 - ys, x1 - xs : x2 - xs] = cv2.resize(np.asarray(avatar.masks[i]), (w, h))
        masks.append(full)
        crop_boxes.append((xs, ys, xs + 2 * s, ys + 2 * s))
    return masks, crop_boxes


def official_blend(frame_bgr: np.ndarray, face_bgr: np.ndarray, box, mask: np.ndarray, crop_box) -> np.ndarray:
    """``get_image_blending``: hard-paste the face into the 1.5x square, then alpha-paste the square."""
    import PIL.Image

    x1, y1, x2, y2 = (int(v) for v in box)
    xs, ys, xe, ye = crop_box
    body = PIL.Image.fromarray(frame_bgr[:, :, ::-1])
    face = PIL.Image.fromarray(face_bgr[:, :, ::-1])
    face_large = body.crop((xs, ys, xe, ye))
    face_large.paste(face, (x1 - xs, y1 - ys))
    body.paste(face_large, (xs, ys), PIL.Image.fromarray(mask, "L"))
    return np.asarray(body)[:, :, ::-1]


def official_loop(
    avatar, audio: Path, unet, vae, features: np.ndarray, latents, output: Path, device, frames: int | None = None
) -> dict:
    """Time the official realtime loop on ``frames`` frames (all by default).

    ``unet``/``vae`` are the loaded modules (``weights.load_module``: ours, with diffusers'
    interface) already in fp16 on ``device``; ``features`` the
    ``[T,50,384]`` whisper tokens with PE; ``latents`` the avatar's ``[N,8,32,32]`` UNet inputs.
    """
    import cv2
    import torch

    T = len(features) if frames is None else min(frames, len(features))
    masks, crop_boxes = official_masks(avatar)
    tmp = output.parent / f".{output.stem}.official"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    stages = {"model": 0.0, "resize_blend": 0.0, "png": 0.0, "encode": 0.0, "mux": 0.0}
    t_start = time.perf_counter()
    timestep = torch.tensor([0], device=device)
    dtype = next(unet.parameters()).dtype  # fp16 on CUDA as the official script; fp32 on a CPU
    feats = torch.from_numpy(np.asarray(features[:T])).to(device, dtype)
    lat_all = latents.to(device, dtype)
    for a in range(0, T, OFFICIAL_BATCH):
        b = min(T, a + OFFICIAL_BATCH)
        t0 = time.perf_counter()
        idx = torch.as_tensor(avatar.cycle_index(np.arange(a, b)), device=device)
        with torch.no_grad():
            pred = unet(lat_all[idx], timestep, encoder_hidden_states=feats[a:b], return_dict=False)[0]
            img = vae.decode(pred / 0.18215, return_dict=False)[0]
        if device.type == "cuda":
            torch.cuda.synchronize()
        img = (
            (img.float() / 2 + 0.5)
            .clamp(0, 1)
            .permute(0, 2, 3, 1)
            .mul(255)
            .round()
            .to(torch.uint8)
            .cpu()
            .numpy()[..., ::-1]
        )
        stages["model"] += time.perf_counter() - t0
        for j, t in enumerate(range(a, b)):
            t0 = time.perf_counter()
            i = avatar.cycle_index(t)
            x1, y1, x2, y2 = (int(v) for v in avatar.boxes[i])
            frame = np.ascontiguousarray(avatar.frames[i][:, :, ::-1])  # deep copy, BGR
            face = cv2.resize(np.ascontiguousarray(img[j]), (x2 - x1, y2 - y1))
            combined = official_blend(frame, face, avatar.boxes[i], masks[i], crop_boxes[i])
            t1 = time.perf_counter()
            cv2.imwrite(str(tmp / f"{t:08d}.png"), np.ascontiguousarray(combined))
            stages["resize_blend"] += t1 - t0
            stages["png"] += time.perf_counter() - t1
    t0 = time.perf_counter()
    temp_mp4 = tmp / "temp.mp4"
    _encode_pngs(sorted(tmp.glob("*.png")), temp_mp4, avatar.width, avatar.height)
    stages["encode"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    _mux_reencode(temp_mp4, audio, output)
    stages["mux"] = time.perf_counter() - t0
    wall = time.perf_counter() - t_start
    shutil.rmtree(tmp, ignore_errors=True)
    return {
        "frames": T,
        "seconds": round(wall, 3),
        "fps": round(T / wall, 2),
        "stage_s": {k: round(v, 3) for k, v in stages.items()},
    }


def _encode_pngs(pngs, out: Path, width: int, height: int) -> None:
    """``ffmpeg -r 25 -i %08d.png -vcodec libx264 -vf format=yuv420p -crf 18 temp.mp4``."""
    from fractions import Fraction

    import av
    import cv2

    with av.open(str(out), "w") as c:
        s = c.add_stream("libx264", rate=FPS)
        s.width, s.height, s.pix_fmt = width // 2 * 2, height // 2 * 2, "yuv420p"
        s.options = {"crf": "18"}
        s.codec_context.time_base = Fraction(1, FPS)
        for k, p in enumerate(pngs):
            rgb = np.asarray(cv2.imread(str(p)))[: s.height, : s.width, ::-1]
            fr = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24").reformat(format="yuv420p")
            fr.pts = k
            c.mux(s.encode(fr))
        c.mux(s.encode(None))


def _mux_reencode(video: Path, audio: Path, out: Path) -> None:
    """``ffmpeg -i audio -i video out.mp4``: the video is decoded and encoded again (libx264 defaults)."""
    from fractions import Fraction

    import av
    import soundfile as sf

    data, rate = sf.read(str(audio), dtype="float32", always_2d=True)
    with av.open(str(video)) as src, av.open(str(out), "w") as dst:
        vin = src.streams.video[0]
        vs = dst.add_stream("libx264", rate=FPS)
        vs.width, vs.height, vs.pix_fmt = vin.width, vin.height, "yuv420p"
        vs.codec_context.time_base = Fraction(1, FPS)
        ast = dst.add_stream("aac", rate=rate)
        ast.layout = "mono" if data.shape[1] == 1 else "stereo"
        for k, fr in enumerate(src.decode(vin)):
            fr.pts, fr.time_base = k, Fraction(1, FPS)
            dst.mux(vs.encode(fr))
        dst.mux(vs.encode(None))
        frame_size = 1024
        for a in range(0, len(data), frame_size):
            chunk = np.ascontiguousarray(data[a : a + frame_size].T)
            af = av.AudioFrame.from_ndarray(chunk, format="fltp", layout=ast.layout.name)
            af.sample_rate = rate
            af.pts = a
            dst.mux(ast.encode(af))
        dst.mux(ast.encode(None))


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
    from studio.core.media.audio import analysis_of, load

    out["silent_fraction"] = round(float(analysis_of(load(audio)).mask().mean()), 3)
    models_dir, which = _bench_models(workdir, tiny=not cuda, note=note)
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
            "from studio.bench.reference import _cold_child; _cold_child(sys.argv[1], t)",
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


def _bench_models(workdir: Path, tiny: bool, note) -> tuple[Path | None, str]:
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

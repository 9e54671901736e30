"""MuseTalk's realtime loop reproduced (spec §4.2), the baseline of ``studio bench``'s ratios.

``official_loop`` runs it on the reference workload's inputs: fp16 eager UNet at batch 20, SD-VAE
decode, per-frame CPU resize and PIL-style mask paste into the full frame, PNG frames on disk, then
one libx264 encode of the PNGs (crf 18) and a second pass that re-encodes the video while muxing
the audio (the official ``ffmpeg -i audio -i video out.mp4`` without ``-c copy``). ffmpeg's
defaults are mirrored through PyAV (preset medium, all threads).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import numpy as np

from studio.core.constants import FPS

OFFICIAL_BATCH = 20


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

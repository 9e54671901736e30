"""The reference workload's inputs, made here (nothing is downloaded): a voice-over cut from the demo
voice to ``REF_FRAMES`` frames and an in-memory avatar drawn from a known motion of the demo photo
(its face-mesh landmarks, ``resources/demo/astronaut_landmarks.npy``, moved with the pixels; boxes,
crops and masks from ``studio.core.avatars.faces`` as for a tracked avatar: no face tracker, no
mediapipe)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from studio.core.constants import FPS, SAMPLE_RATE, SAMPLES_PER_FRAME

REF_FRAMES = 672


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

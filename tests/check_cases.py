"""Renders whose lip-sync quality is known, for ``studio check``'s tests and validation script.

    shifted_voice(samples, +4)           # the voice 4 frames (160 ms) later: the video is 4 frames early
    edit_video(render, out, voice, avatar, "open")   # a copy whose silences show a talking mouth

Edits of a real render (decoded, changed, encoded again by Studio's own writer):

* ``open``: every silent frame shows a speech frame of the render instead (a loop of one second of
  speech): the mouth keeps talking through the pauses, the complaint about Wav2Lip-style renders;
* ``blur``: inside the avatar's blend mask, speech frames are blurred (Gaussian, sigma ``amount``
  pixels, 2 by default), the way a generator's upscaled 256 px face looks;
* ``seam``: inside the blend mask (its soft alpha), speech frames are brightened by ``amount``
  8-bit levels (12 by default): a generated face whose skin tone does not match;
* ``drift``: inside the blend mask, speech frames show the frame moved down by ``amount`` pixels
  (4 by default): a generated lower face that slides off the presenter's;
* ``shake``: inside the blend mask, every frame shows the frame moved by a random shift (each axis
  Gaussian, sigma ``amount`` pixels, 1.5 by default; seeded): a lower face that shakes from frame to
  frame, as a render without its crossfade or with a noisy landmark track does.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

EDITS = ("open", "blur", "seam", "drift", "shake")
DEFAULT_AMOUNT = {"open": 0.0, "blur": 2.0, "seam": 12.0, "drift": 4.0, "shake": 1.5}


def shifted_voice(samples: np.ndarray, frames: int, fps: float = 25.0, rate: int = 16_000) -> np.ndarray:
    """``samples`` delayed by ``frames`` (positive: silence put before) or advanced (negative:
    the start cut off), same length."""
    n = round(frames * rate / fps)
    x = np.asarray(samples, np.float32)
    if n >= 0:
        return np.concatenate([np.zeros(n, np.float32), x])[: len(x)]
    return np.concatenate([x[-n:], np.zeros(-n, np.float32)])


def write_wav(path: Path, samples: np.ndarray, rate: int = 16_000) -> Path:
    import soundfile as sf

    sf.write(path, samples, rate, subtype="PCM_16")
    return path


def decode_rgb(path: Path) -> np.ndarray:
    import av

    with av.open(str(path)) as c:
        return np.stack([f.to_ndarray(format="rgb24") for f in c.decode(video=0)])


def edit_video(
    render: Path,
    out: Path,
    voice: Path,
    avatar,
    kind: str,
    amount: float | None = None,
    silent: np.ndarray | None = None,
    span: tuple[int, int] | None = None,
) -> Path:
    """A copy of ``render`` with ``kind`` (one of ``EDITS``) done to it, its audio ``voice``;
    ``span``: only to the frames ``[a, b)``."""
    import cv2

    from studio.core.media.analysis import frame_rms, silence_mask
    from studio.core.media.audio import load
    from studio.core.media.writer import open_video

    amount = DEFAULT_AMOUNT[kind] if amount is None else float(amount)
    frames = decode_rgb(render)
    t_all, h, w, _ = frames.shape
    if silent is None:
        silent = silence_mask(frame_rms(load(voice).samples, t_all))
    silent = np.asarray(silent, bool)[:t_all]
    speech = np.flatnonzero(~silent)
    edited = np.zeros(t_all, bool)
    edited[slice(*span) if span else slice(None)] = True
    x1, y1, x2, y2 = (int(v) for v in np.asarray(avatar.boxes[0]))
    alpha = cv2.resize(np.asarray(avatar.masks[0]), (x2 - x1, y2 - y1)).astype(np.float32)[..., None] / 255.0
    out_frames = frames.copy()
    if kind == "open":
        loop = speech[(speech >= speech[0] + 25) & (speech < speech[0] + 50)]
        loop = loop if len(loop) else speech
        for j, t in enumerate(np.flatnonzero(silent & edited)):
            out_frames[t] = frames[loop[j % len(loop)]]
    elif kind == "shake":
        rng = np.random.default_rng(7)
        for t in np.flatnonzero(edited):
            dx, dy = rng.normal(0.0, amount, 2)
            m = np.float32([[1, 0, dx], [0, 1, dy]])
            new = cv2.warpAffine(frames[t], m, (w, h), borderMode=cv2.BORDER_REPLICATE)[y1:y2, x1:x2]
            roi = frames[t, y1:y2, x1:x2].astype(np.float32)
            out_frames[t, y1:y2, x1:x2] = (roi * (1 - alpha) + new * alpha).round().clip(0, 255).astype(np.uint8)
    else:
        for t in speech[edited[speech]]:
            roi = frames[t, y1:y2, x1:x2].astype(np.float32)
            if kind == "blur":
                new = cv2.GaussianBlur(roi, (0, 0), amount)
            elif kind == "seam":
                new = roi + amount
            elif kind == "drift":
                m = np.float32([[1, 0, 0], [0, 1, amount]])
                new = cv2.warpAffine(frames[t], m, (w, h), borderMode=cv2.BORDER_REPLICATE)[y1:y2, x1:x2]
                new = new.astype(np.float32)
            else:
                raise ValueError(f"kind must be one of {EDITS}")
            out_frames[t, y1:y2, x1:x2] = (roi * (1 - alpha) + new * alpha).round().clip(0, 255).astype(np.uint8)
    # superfast, as open_video's own default was when these cases were calibrated (the drift case sits
    # near its threshold: ultrafast, the schema's default now, measured 0.0299 against 0.03)
    with open_video(out, w, h, audio=str(voice), total_frames=t_all, preset="superfast") as writer:
        for a in range(0, t_all, 32):
            writer.write(out_frames[a : a + 32])
    return out


def shift_audio_track(src: Path, dst: Path, seconds: float) -> Path:
    """A copy of ``src`` whose audio packets are stamped ``seconds`` later (negative: earlier), the
    frames untouched: a muxing offset, as a faulty editor or transcoder leaves it."""
    import av

    with av.open(str(src)) as i, av.open(str(dst), "w") as o:
        vs = o.add_stream_from_template(i.streams.video[0])
        aus = o.add_stream_from_template(i.streams.audio[0])
        for pkt in i.demux():
            if pkt.dts is None:
                continue
            if pkt.stream.type == "audio":
                d = round(seconds / pkt.time_base)
                pkt.pts, pkt.dts = pkt.pts + d, pkt.dts + d
                pkt.stream = aus
            elif pkt.stream.type == "video":
                pkt.stream = vs
            else:
                continue  # the timecode track and the chapters (data streams) are not copied
            o.mux(pkt)
    return dst


def transcode_mjpeg(src: Path, dst: Path) -> Path:
    """``src`` as Motion-JPEG (yuvj422p, not 4:2:0) with PCM audio in an AVI: another decoding path."""
    from fractions import Fraction

    import av

    res = av.AudioResampler(format="s16", layout="mono", rate=16_000)
    with av.open(str(src)) as i:
        sound = [g for f in i.decode(audio=0) for g in res.resample(f)] + list(res.resample(None))
    with av.open(str(src)) as i, av.open(str(dst), "w") as o:
        v = o.add_stream("mjpeg", rate=25)
        v.time_base = Fraction(1, 25)
        v.width, v.height, v.pix_fmt = i.streams.video[0].width, i.streams.video[0].height, "yuvj422p"
        a = o.add_stream("pcm_s16le", rate=16_000, layout="mono")
        for k, f in enumerate(i.decode(video=0)):
            g = f.reformat(format="yuvj422p")
            g.pts, g.time_base = k, Fraction(1, 25)
            for pkt in v.encode(g):
                o.mux(pkt)
        for pkt in v.encode(None):
            o.mux(pkt)
        for g in sound:
            g.pts = None
            for pkt in a.encode(g):
                o.mux(pkt)
        for pkt in a.encode(None):
            o.mux(pkt)
    return dst

"""LSE-C and LSE-D: the published SyncNet lip-sync scores, with the user's own ``syncnet_v2.model``.

    import_syncnet("syncnet_v2.model")            # checked (structure, SHA-256), stored in the model store
    scores = lse_of_video("clip.mp4")             # {"lse_c", "lse_d", "offset_frames", ...}, or None without weights

Papers and peers report lip sync as LSE-C (confidence, higher is better) and LSE-D (distance,
lower is better), computed by the evaluation code released with SyncNet ("Out of time", Chung &
Zisserman 2016; the code that Wav2Lip's and later papers' tables use). Studio computes them as that
code does, written here from its maths (not copied):

* **the crop**: a face box per frame, its centre and half-size each smoothed by a 13-frame median
  filter, the frame padded by ``bs * (1 + 2 * 0.4)`` grey (110) pixels, the crop
  ``[y - bs, y + bs * 1.8] x [x - bs * 1.4, x + bs * 1.4]`` resized to 224 x 224 (BGR, 0-255);
* **the audio**: 16 kHz mono 16-bit samples, MFCC by python_speech_features' defaults (25 ms
  rectangular windows every 10 ms, pre-emphasis 0.97, 512-point FFT power spectrum, 26 mel
  filters, log, DCT-II, 13 coefficients, lifter 22, the first replaced by the log frame energy):
  ``mfcc`` below, equal to that library's within float rounding (the tests compare them);
* **the windows**: video frames ``i..i+4`` against MFCC columns ``4i..4i+19`` for every ``i`` up to
  the shorter stream's length in frames less 5;
* **the score**: for each window, the Euclidean distance (with torch's ``pairwise_distance`` epsilon
  1e-6) of its video embedding to the audio embeddings of windows ``i-15..i+15`` (zeros beyond the
  ends); the mean over windows per shift; **LSE-D** is the smallest mean, **LSE-C** the median of
  the 31 means minus that smallest, the offset ``15 - argmin`` (SyncNet's sign).

What differs, and is said in the report: the face box comes from Studio's face mesh (the box of its
face-oval landmarks) instead of the S3FD detector, and the frames are the render's decoded frames
fed directly (a **lossless** intermediate), where the published pipeline re-encodes the crop to
XVID and to JPEG first: codec choices shift SyncNet scores by 0.4-1.2.

The weights are never downloaded: ``studio models import-syncnet FILE`` takes a file the user has.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Callable
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import numpy as np

from studio.core.errors import InputError

log = logging.getLogger(__name__)

#: The SHA-256 of the published ``syncnet_v2.model``. None: no source this project could verify
#: gives it (docs/check.md says so), so a file is accepted by its structure (every tensor of the
#: network, each of its exact shape, all finite) and its hash is recorded; set it here to pin the file.
SYNCNET_SHA256: str | None = None
FILE_NAME = "syncnet_v2.model"
VSHIFT = 15  # frames each way, as the published evaluation's --vshift 15
FRAMES = 5  # video frames per window
MFCC_PER_FRAME = 4  # 100 MFCC frames a second against 25 video frames
MFCC_WINDOW = 20
CROP_SCALE = 0.40
SMOOTH = 13  # frames: the median filter on the face box
SIZE = 224
PAD_GREY = 110
RATE = 16_000
HOW_TO_GET = (
    "LSE-C/LSE-D need SyncNet's published weights (syncnet_v2.model, released with the syncnet_python "
    "evaluation code by the University of Oxford's VGG); get the file yourself and run "
    "`studio models import-syncnet syncnet_v2.model` (Studio never downloads weights)"
)


# --------------------------------------------------------------------------------------------
# The network


def build_net(embedding: int = 1024):
    """SyncNet's two streams, with the published state dict's parameter names (``netcnnaud``,
    ``netfcaud``, ``netcnnlip``, ``netfclip``): audio MFCC ``[N,1,13,20]`` and lips
    ``[N,3,5,224,224]`` (BGR, 0-255) to ``[N, embedding]`` each."""
    import torch
    from torch import nn

    def c2(i, o, k=3, pool=None):
        layers = [nn.Conv2d(i, o, kernel_size=k, padding=1 if k == 3 else 0), nn.BatchNorm2d(o), nn.ReLU()]
        return layers + ([nn.MaxPool2d(*pool)] if pool else [])

    def c3(i, o, k, stride=(1, 1, 1), pad=(0, 0, 0), pool=None):
        layers = [nn.Conv3d(i, o, kernel_size=k, stride=stride, padding=pad), nn.BatchNorm3d(o), nn.ReLU()]
        return layers + ([nn.MaxPool3d(*pool)] if pool else [])

    def head():
        return nn.Sequential(nn.Linear(512, 512), nn.BatchNorm1d(512), nn.ReLU(), nn.Linear(512, embedding))

    class SyncNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.netcnnaud = nn.Sequential(
                *c2(1, 64, pool=((1, 1), (1, 1))),
                *c2(64, 192, pool=((3, 3), (1, 2))),
                *c2(192, 384),
                *c2(384, 256),
                *c2(256, 256, pool=((3, 3), (2, 2))),
                *c2(256, 512, k=(5, 4)),
            )
            self.netfcaud = head()
            self.netfclip = head()
            self.netcnnlip = nn.Sequential(
                *c3(3, 96, (5, 7, 7), (1, 2, 2), pool=((1, 3, 3), (1, 2, 2))),
                *c3(96, 256, (1, 5, 5), (1, 2, 2), (0, 1, 1), pool=((1, 3, 3), (1, 2, 2), (0, 1, 1))),
                *c3(256, 256, (1, 3, 3), pad=(0, 1, 1)),
                *c3(256, 256, (1, 3, 3), pad=(0, 1, 1)),
                *c3(256, 256, (1, 3, 3), pad=(0, 1, 1), pool=((1, 3, 3), (1, 2, 2))),
                *c3(256, 512, (1, 6, 6)),
            )

        def forward_aud(self, x: torch.Tensor) -> torch.Tensor:
            return self.netfcaud(self.netcnnaud(x).flatten(1))

        def forward_lip(self, x: torch.Tensor) -> torch.Tensor:
            return self.netfclip(self.netcnnlip(x).flatten(1))

    return SyncNet().eval()


# --------------------------------------------------------------------------------------------
# The weights


def store_dir() -> Path:
    from studio.core.engines.weights import models_root

    return models_root() / "syncnet"


def weights_file() -> Path | None:
    """The imported weights, or None."""
    p = store_dir() / FILE_NAME
    return p if p.is_file() else None


def _state_of(path: Path) -> dict:
    """The file's state dict, or one sentence saying why it is not SyncNet's."""
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any failure to read is one sentence
        raise InputError(
            f"{path}: not a readable SyncNet weights file ({type(exc).__name__}); the file is damaged or "
            f"is not {FILE_NAME}"
        ) from None
    if hasattr(state, "state_dict"):
        state = state.state_dict()
    if not isinstance(state, dict):
        raise InputError(f"{path}: not SyncNet's weights (no state dict inside); give {FILE_NAME}")
    want = build_net().state_dict()
    for k, v in want.items():  # files saved by PyTorch before 0.4.1 have no BatchNorm step counters
        if k.endswith("num_batches_tracked") and k not in state:
            state[k] = v
    missing = [k for k in want if k not in state]
    wrong = [k for k in want if k in state and tuple(state[k].shape) != tuple(want[k].shape)]
    if missing or wrong:
        bad = (missing or wrong)[0]
        raise InputError(
            f"{path}: not SyncNet's weights ({len(missing)} tensors missing, {len(wrong)} of another shape, "
            f"e.g. {bad}); give the published {FILE_NAME}"
        )
    for k in want:
        t = state[k]
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise InputError(f"{path}: damaged SyncNet weights (tensor {k} holds NaN or infinity)")
    return {k: state[k] for k in want}


def import_syncnet(source: str | os.PathLike, pin: str | None = SYNCNET_SHA256) -> dict:
    """Check ``source`` (its SHA-256 against ``pin`` when there is one, its tensors against the
    network) and copy it into the model store, atomically; its record."""
    from studio.core.store.fsutil import atomic_write_bytes, file_sha256

    path = Path(source).expanduser()
    if not path.is_file():
        raise InputError(f"{path}: no such file; give the {FILE_NAME} you have")
    digest = file_sha256(path)
    if pin is not None and digest != pin:
        raise InputError(
            f"{path}: its SHA-256 ({digest[:12]}...) is not the published {FILE_NAME}'s; the file is damaged "
            "or another model"
        )
    _state_of(path)
    folder = store_dir()
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(folder / FILE_NAME, path.read_bytes())
    record = {
        "file": FILE_NAME,
        "sha256": digest,
        "size": path.stat().st_size,
        "pinned": pin is not None,
        "source": str(path),
    }
    atomic_write_bytes(folder / "syncnet.json", json.dumps(record, indent=2).encode())
    return record


def load_net(path: Path | None = None, device: str = "cpu"):
    """The network with the imported (or given) weights, in eval mode."""
    path = path or weights_file()
    if path is None:
        raise InputError(HOW_TO_GET)
    net = build_net()
    net.load_state_dict(_state_of(path))
    return net.to(device).eval()


# --------------------------------------------------------------------------------------------
# The audio front end


def _round_half_up(x: float) -> int:
    return int(Decimal(x).quantize(Decimal("1"), rounding=ROUND_HALF_UP))


def _hz_to_mel(hz):
    return 2595.0 * np.log10(1.0 + np.asarray(hz, np.float64) / 700.0)


def _mel_to_hz(mel):
    return 700.0 * (10.0 ** (np.asarray(mel, np.float64) / 2595.0) - 1.0)


def mel_filters(nfilt: int = 26, nfft: int = 512, rate: int = RATE) -> np.ndarray:
    """[nfilt, nfft//2+1] triangles between mel-spaced FFT bins (0 Hz to Nyquist)."""
    mels = np.linspace(_hz_to_mel(0.0), _hz_to_mel(rate / 2), nfilt + 2)
    bins = np.floor((nfft + 1) * _mel_to_hz(mels) / rate)
    fb = np.zeros((nfilt, nfft // 2 + 1))
    for j in range(nfilt):
        lo, mid, hi = bins[j], bins[j + 1], bins[j + 2]
        up = np.arange(int(lo), int(mid))
        down = np.arange(int(mid), int(hi))
        fb[j, up] = (up - lo) / (mid - lo)
        fb[j, down] = (hi - down) / (hi - mid)
    return fb


def mfcc(samples: np.ndarray, rate: int = RATE, ncep: int = 13, nfilt: int = 26, nfft: int = 512) -> np.ndarray:
    """[frames, ncep] MFCC of ``samples`` (16-bit values as numbers), as SyncNet's evaluation takes them."""
    from scipy.fft import dct

    x = np.asarray(samples, np.float64)
    x = np.concatenate([x[:1], x[1:] - 0.97 * x[:-1]])
    flen, step = _round_half_up(0.025 * rate), _round_half_up(0.010 * rate)
    n = len(x)
    count = 1 if n <= flen else 1 + math.ceil((n - flen) / step)
    x = np.concatenate([x, np.zeros((count - 1) * step + flen - n)])
    frames = x[np.arange(flen)[None, :] + step * np.arange(count)[:, None]]
    power = np.abs(np.fft.rfft(frames, nfft)) ** 2 / nfft
    eps = np.finfo(float).eps
    energy = power.sum(1)
    energy = np.where(energy == 0, eps, energy)
    bands = power @ mel_filters(nfilt, nfft, rate).T
    bands = np.where(bands == 0, eps, bands)
    cep = dct(np.log(bands), type=2, axis=1, norm="ortho")[:, :ncep]
    lift = 1 + 11.0 * np.sin(np.pi * np.arange(ncep) / 22.0)
    cep = cep * lift
    cep[:, 0] = np.log(energy)
    return cep


def to_int16(samples: np.ndarray) -> np.ndarray:
    """Float samples in [-1, 1] as 16-bit values (as FFmpeg's pcm_s16le writes them)."""
    return np.clip(np.rint(np.asarray(samples, np.float64) * 32768.0), -32768, 32767).astype(np.int16)


# --------------------------------------------------------------------------------------------
# The score


def lse(net, crops: np.ndarray, audio: np.ndarray, vshift: int = VSHIFT, batch: int = 20, device: str = "cpu") -> dict:
    """LSE-C, LSE-D and SyncNet's offset of ``crops`` ([T,224,224,3] BGR uint8) against ``audio``
    (16 kHz 16-bit samples), with the per-shift mean distances."""
    import torch

    cc = mfcc(audio).T.astype(np.float32)  # [13, N]
    usable = min(len(crops), len(audio) // (RATE // 25))
    last = usable - FRAMES
    if last < 1:
        raise InputError(f"the clip is too short for SyncNet's score: it needs more than {FRAMES} frames with sound")
    lips, auds = [], []
    with torch.inference_mode():
        for a in range(0, last, batch):
            idx = range(a, min(last, a + batch))
            clips = np.stack([crops[i : i + FRAMES] for i in idx])  # [B,5,H,W,3]
            v = torch.from_numpy(clips.astype(np.float32)).permute(0, 4, 1, 2, 3).to(device)
            m = np.stack([cc[:, MFCC_PER_FRAME * i : MFCC_PER_FRAME * i + MFCC_WINDOW] for i in idx])[:, None]
            lips.append(net.forward_lip(v).cpu())
            auds.append(net.forward_aud(torch.from_numpy(m).to(device)).cpu())
        lip, aud = torch.cat(lips), torch.cat(auds)
        padded = torch.nn.functional.pad(aud, (0, 0, vshift, vshift))
        width = 2 * vshift + 1
        dists = torch.stack(
            [
                torch.nn.functional.pairwise_distance(lip[[i]].repeat(width, 1), padded[i : i + width])
                for i in range(len(lip))
            ]
        )  # [windows, shifts]
        mean = dists.mean(0)
        lse_d, at = torch.min(mean, 0)
        lse_c = torch.median(mean) - lse_d
    return {
        "lse_c": float(lse_c),
        "lse_d": float(lse_d),
        "offset_frames": int(vshift - int(at)),
        "windows": int(len(lip)),
        "mean_distances": [float(d) for d in mean],
    }


def face_crops(video: str | os.PathLike, progress: Callable[[int, int], None] | None = None) -> np.ndarray:
    """[T,224,224,3] BGR uint8: each decoded frame's face crop, as the published pipeline cuts it
    (box: Studio's face mesh, its face-oval landmarks' extent; frames without a face take the
    box interpolated between their neighbours)."""
    import cv2
    from scipy.signal import medfilt

    from studio.core.avatars import faces
    from studio.core.quality import mouth
    from studio.core.quality.video import iter_frames, probe_video

    info = probe_video(video)
    boxes: list[tuple[float, float, float] | None] = []
    with mouth.FaceFinder() as finder:
        for k, frame in enumerate(iter_frames(video, info)):
            lm = finder(frame)
            if lm is None:
                boxes.append(None)
            else:
                oval = np.asarray(lm, np.float64)[list(faces.FACE_OVAL)]
                lo, hi = oval.min(0), oval.max(0)
                boxes.append((max(hi[0] - lo[0], hi[1] - lo[1]) / 2, (lo[0] + hi[0]) / 2, (lo[1] + hi[1]) / 2))
            if progress is not None and k % 25 == 0:
                progress(k + 1, max(info.frames or 0, k + 1))
    found = [i for i, b in enumerate(boxes) if b is not None]
    if not found:
        raise InputError(f"{info.path}: no face was found in any frame; SyncNet's score needs a presenter's face")
    t = np.arange(len(boxes))
    det = np.stack([np.interp(t, found, [boxes[i][j] for i in found]) for j in range(3)])  # type: ignore[index]
    s, x, y = (medfilt(det[j], kernel_size=SMOOTH) for j in range(3))
    out = np.zeros((len(boxes), SIZE, SIZE, 3), np.uint8)
    for k, frame in enumerate(iter_frames(video, info)):
        if k >= len(out):
            break
        bgr = cv2.cvtColor(frame.rgb(), cv2.COLOR_RGB2BGR)
        bs = s[k]
        pad = int(bs * (1 + 2 * CROP_SCALE))
        padded = cv2.copyMakeBorder(bgr, pad, pad, pad, pad, cv2.BORDER_CONSTANT, value=(PAD_GREY,) * 3)
        my, mx = y[k] + pad, x[k] + pad
        face = padded[
            int(my - bs) : int(my + bs * (1 + 2 * CROP_SCALE)),
            int(mx - bs * (1 + CROP_SCALE)) : int(mx + bs * (1 + CROP_SCALE)),
        ]
        out[k] = cv2.resize(face, (SIZE, SIZE))
    return out


def lse_of_video(
    video: str | os.PathLike,
    audio: str | os.PathLike | None = None,
    device: str = "cpu",
    progress: Callable[[int, int], None] | None = None,
) -> dict:
    """The published scores of ``video`` (spoken by ``audio``, default its own track), or, without
    imported weights, ``{"lse_c": None, "note": how to get them}``."""
    path = weights_file()
    if path is None:
        return {"lse_c": None, "lse_d": None, "note": HOW_TO_GET + "; the report uses Studio's own score meanwhile"}
    from studio.core.quality.video import load_voice, probe_video

    net = load_net(path, device)
    crops = face_crops(video, progress)
    samples = to_int16(load_voice(video, probe_video(video), audio, None))
    out = lse(net, crops, samples, device=device)
    out["note"] = (
        "SyncNet (syncnet_v2.model) as its published evaluation computes it, on a lossless intermediate "
        "(the decoded frames, cropped and scaled in memory; the published pipeline re-encodes to XVID and "
        "JPEG, which shifts scores by 0.4-1.2); face box from Studio's face mesh, not S3FD"
    )
    return out

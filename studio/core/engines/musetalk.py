"""The MuseTalk engine on PyTorch: whisper tokens -> one UNet step at t = 0 -> SD-VAE or TAESD.

    engine = MuseTalkEngine(device="cuda", decoder="taesd")     # weights from the model store
    prepared = engine.prepare(avatar)        # [N,8,32,32] latents, cached with the avatar
    engine.bind(engine.audio_features(wave)) # [T,50,384] tokens (PE included), len == wave.frames
    faces = engine.generate(prepared, avatar_idx, feat_idx)     # uint8 [B,256,256,3] RGB

Maths (spec §1): the avatar crop (RGB, /255) is encoded twice by the SD-VAE, once with rows
128..255 set to 0 before the [-1,1] mapping (so the masked half is -1) and once whole; each latent
is the distribution's **mean** x 0.18215 (deterministic, as training does; the official inference
samples, which only adds noise) and the UNet input is cat(masked, reference) on channels. The UNet
runs once at timestep 0 with the audio tokens as ``encoder_hidden_states``; its output is decoded
by the SD-VAE (``decode(lat / 0.18215)``) or by TAESD (which lives in the scaled latent space, so
no division), mapped from [-1,1] to uint8 with rounding. Faces stay RGB (the official code flips to
BGR for OpenCV). Weights are the official files, loaded strictly (``studio.core.engines.weights``).

Where the official code has known bugs we do the right thing (spec §1.6, §3.3, §4.2, §7):
- the positional encoding is added at inference, as the official inference does (the released
  training code lost it while tidying, MuseTalk#136);
- every avatar frame gets a latent, face or not, so latents stay aligned with frames and boxes
  (the official list skips face-less frames and drifts);
- T = ceil(duration * 25) frames, all generated (official: floor, and the loop writes T-1);
- v1.0 weights get the same HF whisper features as v1.5 (what the official code feeds both since
  2025-03-31; the legacy pre-LayerNorm, clamped-edge path has no reference output to match).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from studio.core import env
from studio.core.constants import FACE_SIZE
from studio.core.devices import to_device
from studio.core.engines import weights
from studio.core.engines.base import Availability, LipSyncEngine
from studio.core.errors import ModelError, StudioError

log = logging.getLogger(__name__)

LATENT_CACHE = "latents.npy"
DECODERS = ("taesd", "sd-vae")
# Working memory per frame (bytes, fp16) for the VRAM budget: UNet at 32x32 plus the decoder's
# 256x256 activations; generous so that CUDA graph pools of several buckets still fit.
PER_FRAME_BYTES = {"taesd": 48 << 20, "sd-vae": 192 << 20}


def availability(models_dir=None) -> Availability:
    """Whether MuseTalk can run here (``str``: ``ready: v1.5 UNet, sd-vae, whisper-tiny, taesd`` or
    ``unavailable: <why, with the fix>``).

    Cheap (reads the store's manifest and stats its files; no torch, no hashing).
    """
    return weights.availability(models_dir)


@dataclass(frozen=True, eq=False)
class Prepared:
    """Per-avatar UNet inputs: latents ``[N,8,32,32]`` on the engine's device and dtype."""

    latents: Any
    cache_file: Path | None
    from_cache: bool

    def __len__(self) -> int:
        return int(self.latents.shape[0])


class MuseTalkEngine(LipSyncEngine):
    name = "musetalk"
    label = "MuseTalk one-step latent inpainting (PyTorch)"

    def __init__(
        self,
        device=None,
        precision="auto",
        decoder="taesd",
        batch=0,
        compile=None,
        cuda_graphs=True,
        models_dir=None,
        version="v15",
        runtime="auto",
        **_,
    ):
        from studio.core.engines import runtime_torch as rt

        dev = rt.resolve_device(device)
        super().__init__(str(dev))
        self.dtype = rt.resolve_dtype(self.device, precision)
        self.precision = precision
        self.batch = int(batch or 0)
        if compile is None:  # STUDIO_COMPILE=1: torch.compile (default mode) when the networks load
            from studio.core import env

            compile = env.get("STUDIO_COMPILE") == "1"
        self.compile = bool(compile)
        self.cuda_graphs = bool(cuda_graphs)
        self.version = version
        self.paths = weights.resolve(models_dir, version)
        missing = [
            n
            for n, p in (("UNet", self.paths.unet), ("sd-vae", self.paths.vae), ("whisper", self.paths.whisper))
            if p is None
        ]
        if missing:
            raise ModelError(
                f"MuseTalk needs {', '.join(missing)} in {self.paths.root}; run studio models import DIR "
                "with the official MuseTalk models/ folder"
            )
        if decoder in ("vae", "sd-vae-ft-mse"):
            decoder = "sd-vae"
        if decoder not in DECODERS:
            raise StudioError(f"unknown decoder {decoder!r}; use taesd (fast) or sd-vae (quality)")
        if decoder == "taesd" and self.paths.taesd is None:
            log.warning("TAESD is not imported; decoding with the SD-VAE (studio models import --taesd DIR)")
            decoder = "sd-vae"
        self.decoder = decoder
        # TensorRT hook (issue 7): "auto" uses valid TensorRT engines when they load, else PyTorch.
        if runtime not in ("auto", "torch", "tensorrt"):
            raise StudioError(f"unknown runtime {runtime!r}; use auto, torch or tensorrt")
        if runtime == "tensorrt" and self.device.type != "cuda":
            raise StudioError(f"the TensorRT runtime needs a CUDA GPU (device is {self.device}); use --runtime torch")
        self.runtime = runtime
        self.runtime_used = "torch"
        self.runtime_reason = (
            "PyTorch runtime (chosen explicitly)" if runtime == "torch" else "decided when the networks load"
        )
        self.features = None
        self._nets = None
        self._whisper = None
        self.load_ms: dict[str, float] = {}  # where loading went: networks, warm-up, whisper, waits
        self._loader: threading.Thread | None = None  # the networks loading in the background
        self._load_error: BaseException | None = None

    # ----------------------------------------------------------------------------------------
    # The engine interface

    def prepare(self, avatar) -> Prepared:
        """VAE latents of the avatar's crops, read from / written to the avatar's engine cache."""
        import torch

        self.load_in_background()
        crops = avatar.crops
        n = int(getattr(avatar, "N", len(crops)))
        cache = Path(avatar.engine_dir(f"musetalk-{self._vae_key()[:16]}")) / LATENT_CACHE
        latents, from_cache = None, False
        if cache.is_file():
            from studio.core.store.fsutil import load_checked_npy

            arr = load_checked_npy(cache)  # None: missing, damaged (header included) or unchecked
            if arr is not None and arr.shape == (n, 8, FACE_SIZE // 8, FACE_SIZE // 8) and arr.dtype == np.float32:
                latents, from_cache = arr, True
            elif arr is not None:
                log.info("latent cache %s has shape %s, avatar has %d frames: re-encoding", cache, arr.shape, n)
        if latents is None:  # all N crops, face-less ones too: index i is always frame i
            latents = self.encode_crops(crops)
            from studio.core.store.fsutil import save_checked_npy

            save_checked_npy(cache, latents)
            log.info("encoded %d avatar frames -> %s", n, cache)
        lat = torch.from_numpy(latents).to(self.device, self.dtype)
        return Prepared(self._channels_last(lat), cache, from_cache)

    def audio_features(self, wave):
        """Whisper tokens for every frame of ``wave`` (``len == wave.frames``), PE included."""
        self.load_in_background()  # the UNet and decoder load while whisper loads and runs
        if self._whisper is None:
            from studio.core.engines.whisper_features import WhisperFeatures

            t0 = time.perf_counter()
            self._whisper = WhisperFeatures(self.paths.whisper, device=self.device)
            self.load_ms["whisper"] = (time.perf_counter() - t0) * 1e3
        return self._whisper(wave)

    def features_key(self) -> tuple:
        """Whisper tokens live on this engine's device and come from the imported whisper."""
        return (*super().features_key(), str(self.paths.whisper))

    def load_in_background(self) -> None:
        """Start loading the networks (and capturing the render batch's CUDA graph) in a thread,
        so that whisper, the audio features and the avatar's latents overlap them; the first
        call that needs the networks waits for it. CUDA only (a CPU has no cores to spare);
        ``STUDIO_BACKGROUND_LOAD=0`` turns it off."""
        if (
            self._nets is not None
            or self._loader is not None
            or self.device.type != "cuda"
            or not env.flag("STUDIO_BACKGROUND_LOAD")
        ):
            return

        def run() -> None:
            try:
                self.networks()
            except BaseException as exc:  # noqa: BLE001 - raised by the call that waits for it
                self._load_error = exc

        self._loader = threading.Thread(target=run, name="musetalk-load", daemon=True)
        self._loader.start()

    def generate(self, prepared, avatar_idx, feat_idx, weight=None):
        import torch

        from studio.core.engines import runtime_torch as rt

        if self.features is None:
            raise RuntimeError("MuseTalkEngine.generate: call bind(audio_features(wave)) first")
        a = np.asarray(avatar_idx, np.int64).reshape(-1)
        f = np.asarray(feat_idx, np.int64).reshape(-1)
        if len(a) != len(f) or len(a) == 0:
            raise ValueError(f"avatar_idx ({len(a)}) and feat_idx ({len(f)}) must be the same non-zero length")
        if a.min() < 0 or a.max() >= len(prepared) or f.min() < 0 or f.max() >= len(self.features):
            raise IndexError(
                f"index out of range: avatar {a.min()}..{a.max()} of {len(prepared)}, "
                f"features {f.min()}..{f.max()} of {len(self.features)}"
            )
        nets = self.networks()
        with torch.inference_mode(), rt.on_device(self.device):
            lat = self._channels_last(prepared.latents[to_device(a, self.device)])
            audio = self.features.window(to_device(f, self.features.steps.device)).to(self.device, self.dtype)
            return nets["run"](lat, audio).clone()

    def generate_many(self, items) -> list:
        """Several clips' batches through the networks as one batch (each clip's own latents and
        audio tokens side by side), split back per clip: a face does not depend on its batch
        neighbours (float noise of another batch shape aside: within one grey level)."""
        import torch

        from studio.core.engines import runtime_torch as rt

        if len(items) == 1:
            prepared, features, a, f, w = items[0]
            self.bind(features)
            return [self.generate(prepared, a, f, w)]
        nets = self.networks()
        lats, audios, sizes = [], [], []
        with torch.inference_mode(), rt.on_device(self.device):
            for prepared, features, avatar_idx, feat_idx, _ in items:
                a = np.asarray(avatar_idx, np.int64).reshape(-1)
                f = np.asarray(feat_idx, np.int64).reshape(-1)
                if len(a) != len(f) or len(a) == 0 or a.max() >= len(prepared) or f.max() >= len(features):
                    raise IndexError(f"a batch of {len(a)} faces does not fit its avatar or its clip")
                lats.append(prepared.latents[to_device(a, self.device)])
                audios.append(features.window(to_device(f, features.steps.device)).to(self.device, self.dtype))
                sizes.append(len(a))
            faces = nets["run"](self._channels_last(torch.cat(lats)), torch.cat(audios))
            return [part.clone() for part in torch.split(faces, sizes)]

    def preferred_batch(self) -> int:
        from studio.core.engines import runtime_torch as rt

        if self.batch > 0:
            return self.batch
        return rt.vram_batch(PER_FRAME_BYTES[self.decoder] * (self.dtype.itemsize // 2 or 1), self.device)

    def describe(self) -> dict:
        d = super().describe()
        d.update(
            version=self.version,
            unet=weights.COMPONENTS[self.paths.unet_name].label,
            decoder=self.decoder,
            precision=str(self.dtype).replace("torch.", ""),
            compile=self.compile,
            cuda_graphs=self.cuda_graphs and self.device.type == "cuda",
            runtime=self.runtime_used,
            runtime_reason=self.runtime_reason,
        )
        if self._nets is not None and self.device.type == "cuda":  # which batch sizes replay a graph
            graphs = self._nets["run"].captured()
            d.update(
                graph_buckets=sorted(b for b, ok in graphs.items() if ok),
                eager_buckets=sorted(b for b, ok in graphs.items() if not ok),
            )
        return d

    def close(self) -> None:
        if self._loader is not None and self._loader is not threading.current_thread():
            self._loader.join()
        self._loader = self._load_error = None
        self._nets = None
        self._whisper = None
        self.features = None
        if self.device.type == "cuda":
            import torch

            torch.cuda.empty_cache()

    # ----------------------------------------------------------------------------------------
    # Networks

    def encode_crops(self, crops, batch: int | None = None) -> np.ndarray:
        """float32 ``[N,8,32,32]``: cat(masked-latent, reference-latent), distribution means x scale."""
        import torch

        vae = self.networks()["vae"]
        scale = float(vae.config.scaling_factor)
        batch = batch or self.preferred_batch()
        out = np.empty((len(crops), 2 * vae.config.latent_channels, FACE_SIZE // 8, FACE_SIZE // 8), np.float32)
        with torch.inference_mode():
            for i in range(0, len(crops), batch):
                x = torch.from_numpy(np.array(crops[i : i + batch])).to(
                    self.device
                )  # a copy: crops may be a read-only memmap
                x = x.permute(0, 3, 1, 2).to(self.dtype) / 255.0  # RGB in [0,1]
                masked = x.clone()
                masked[:, :, FACE_SIZE // 2 :, :] = 0  # lower half black in [0,1] -> -1 below
                # Two encoder calls, as the official code does (one batch of both differs by
                # float noise that the GroupNorms amplify on the flat masked half).
                lat = [vae.encode(self._channels_last(v * 2 - 1)).latent_dist.mean * scale for v in (masked, x)]
                out[i : i + len(x)] = torch.cat(lat, dim=1).float().cpu().numpy()
        return out

    def held_networks(self) -> list:
        return [*(self._nets or {}).values(), self._whisper]

    @property
    def loaded(self) -> bool:
        """Whether the networks are in memory (``close`` lets them go)."""
        return self._nets is not None

    def networks(self) -> dict:
        """The loaded networks (``unet``, ``vae``, ``taesd`` and ``run``, the UNet's graph runner),
        loaded on the first call (or taken from the background load)."""
        if self._nets is not None:
            return self._nets
        loader = self._loader
        if loader is not None and loader is not threading.current_thread():
            t0 = time.perf_counter()
            loader.join()
            self.load_ms["waited"] = self.load_ms.get("waited", 0.0) + (time.perf_counter() - t0) * 1e3
            self._loader = None
            if self._load_error is not None:  # load again here: a real fault raises from this thread
                exc, self._load_error = self._load_error, None
                log.warning(
                    "loading MuseTalk in the background failed (%s: %s); loading it again", type(exc).__name__, exc
                )
            if self._nets is not None:
                return self._nets
        from studio.core.engines import runtime_torch as rt

        with rt.on_device(self.device):  # graphs are captured on the current device's streams
            return self._load_on_device()

    def _load_on_device(self) -> dict:
        import torch

        from studio.core.engines import runtime_torch as rt

        p = self.paths
        t0 = time.perf_counter()
        unet = weights.load_module("unet", p.unet, p.weight_file(p.unet), self.device, self.dtype)
        rt.fold_time_embedding(unet)
        t1 = time.perf_counter()
        vae = weights.load_module("vae", p.vae, p.weight_file(p.vae), self.device, self.dtype)
        taesd = None
        if self.decoder == "taesd":
            taesd = weights.load_module("taesd", p.taesd, p.weight_file(p.taesd), self.device, self.dtype)
        self.load_ms.update(unet=(t1 - t0) * 1e3, decoders=(time.perf_counter() - t1) * 1e3)
        if self.device.type == "cuda":  # tensor-core convolutions prefer NHWC
            for m in (unet, vae, taesd):
                if m is not None:
                    torch.nn.Module.to(m, memory_format=torch.channels_last)  # type: ignore[call-overload]
        unet_c = rt.maybe_compile(unet, self.compile)
        scale = float(vae.config.scaling_factor)
        timestep = torch.zeros(1, dtype=torch.long, device=self.device)  # a tensor: nothing to copy in a graph
        decode = rt.maybe_compile(taesd.decode if taesd is not None else vae.decode, self.compile)
        divide = 1.0 if taesd is not None else scale  # TAESD decodes the scaled latent space as is

        def torch_unet(lat, audio):
            return unet_c(lat, timestep, encoder_hidden_states=audio, return_dict=False)[0]

        def torch_decode(pred):
            return decode(pred / divide, return_dict=False)[0]  # [-1,1] for both decoders

        # TensorRT hook (issue 7): engines for these weights replace both calls when they load
        # and agree with PyTorch (tensorrt_runner.engine_functions); otherwise PyTorch, with why.
        unet_fn, decode_fn = torch_unet, torch_decode
        if self.runtime != "torch":
            from studio.core.engines import tensorrt_runner as rtt

            fns, self.runtime_reason = rtt.engine_functions(
                p, self.decoder, self.dtype, self.device, (torch_unet, torch_decode), self.runtime == "tensorrt"
            )
            if fns is not None:
                (unet_fn, decode_fn), self.runtime_used = fns, "tensorrt"
                self.label = self.label.replace("PyTorch", "TensorRT")

        def forward(lat, audio):
            img = decode_fn(unet_fn(lat, audio))
            img = ((img.float() / 2 + 0.5).clamp(0, 1) * 255).round().to(torch.uint8)
            return img.permute(0, 2, 3, 1).contiguous()  # [B,256,256,3] RGB

        run = rt.GraphRunner(forward, self.device, enabled=self.cuda_graphs)
        if self.device.type == "cuda":
            t0 = time.perf_counter()
            self._warm_up(run, unet)
            self.load_ms["warm_up"] = (time.perf_counter() - t0) * 1e3
        self._nets = {"unet": unet, "vae": vae, "taesd": taesd, "run": run}
        log.info("MuseTalk loaded: %s", self.describe())
        return self._nets

    def _warm_up(self, run, unet, buckets=None) -> None:
        """Compile/capture the render's batch before the first frame (or ``buckets``); other
        buckets (the preview's batch of 1, a clip's last short batch) are captured when first used,
        or by ``warm_buckets`` when a service is idle."""
        import torch

        c = unet.config
        side = FACE_SIZE // 8
        wcfg = weights.read_config(self.paths.whisper / "config.json")
        tokens = 10 * (int(wcfg.get("encoder_layers", 4)) + 1)
        for b in buckets or (min(self.preferred_batch(), run.buckets[-1]),):
            lat = torch.zeros(b, c.in_channels, side, side, device=self.device, dtype=self.dtype)
            audio = torch.zeros(b, tokens, c.cross_attention_dim, device=self.device, dtype=self.dtype)
            with torch.inference_mode():
                run.warm_up(self._channels_last(lat), audio)
        torch.cuda.synchronize(self.device)

    def warm(self) -> dict:
        """Everything a first render would otherwise pay for, now (a server does it before it says
        it is ready): the networks, every batch bucket's CUDA graph up to the render batch, the
        whisper model run once on a second of silence. ``load_ms`` says where the time went."""
        from types import SimpleNamespace

        from studio.core.media.rates import DEFAULT_RATE

        t0 = time.perf_counter()
        self.networks()
        self.warm_buckets()
        silence = SimpleNamespace(samples=np.zeros(16_000, np.float32), frames=25, rate=DEFAULT_RATE)
        self.audio_features(silence)
        self.load_ms["warm"] = (time.perf_counter() - t0) * 1e3
        return dict(self.load_ms)

    def warm_buckets(self, lock=None) -> list[int]:
        """Capture the CUDA graph of every batch bucket up to the render batch not captured yet,
        one at a time under ``lock`` (the engine's, so a render's batches go between them): a warm
        server's short jobs and last short batches then pay no capture (~1 s once each on the
        H200). The buckets captured; [] on a CPU, before the networks load, or when all are."""
        import contextlib

        nets = self._nets
        if nets is None or self.device.type != "cuda" or not nets["run"].enabled:
            return []
        from studio.core.engines import runtime_torch as rt

        run = nets["run"]
        top = min(self.preferred_batch(), run.buckets[-1])
        done = []
        for b in run.buckets:
            if b > top or b in run.captured():
                continue
            with lock or contextlib.nullcontext(), rt.on_device(self.device):
                self._warm_up(run, nets["unet"], (b,))
            done.append(b)
        return done

    def _channels_last(self, x):
        import torch

        return x.contiguous(memory_format=torch.channels_last) if self.device.type == "cuda" else x

    def _vae_key(self) -> str:
        """The VAE weights' SHA-256 from the manifest (or a cheap path/size/mtime key outside the store)."""
        sha = self.paths.sha256(self.paths.vae)
        if sha:
            return sha
        from studio.core.store.fsutil import quick_file_key

        return quick_file_key(self.paths.weight_file(self.paths.vae))

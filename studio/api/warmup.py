"""Ready means ready: ``WarmUp`` loads the engines a server will serve before it says it is ready.

    w = WarmUp(pool, settings_list, devices, then=queue.start)
    w.start()                        # a thread: every engine on every device, every batch size
    w.ready, w.doing, w.error        # what /v1/ready says: 503 "warming up: loading musetalk on
                                     # cuda:0 (4 s so far)" with Retry-After, then 200

The queue runner starts when the warm-up ends (``then``), so a job posted before the server is
ready waits in the queue for the warm engine instead of loading a second one, and a scrub frame
asked for meanwhile waits for the engine being loaded (the engine cache loads a key once).
A warm-up that fails leaves the server up and not ready, saying why (the queue runs anyway: each
job loads its engine or fails with its own sentence). The library's avatars are prepared for the warm
MuseTalk engines too (their latents cached), and the first of them is rendered once (1.5 s of a
synthetic voice, to a file that is removed) on each device, so no first request pays for the
compositor, the encoders or the muxer either.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from studio.core.progress import Startup

log = logging.getLogger(__name__)

AVATARS = 50  # library avatars prepared before ready, at most


def parse_warm(text: str):
    """``"decoder=sd-vae,precision=fp32"`` -> the default ``RenderSettings`` with those values (one
    sentence for a bad one)."""
    from studio.core.errors import InputError
    from studio.core.settings import from_dict

    values: dict[str, Any] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, eq, value = part.partition("=")
        if not eq or not name.strip():
            raise InputError(f"--warm {text!r}: give NAME=VALUE pairs such as decoder=sd-vae,precision=fp16")
        values[name.strip()] = value.strip()
    from studio.core.settings import SCHEMA

    unknown = sorted(set(values) - set(SCHEMA))
    if unknown:
        raise InputError(
            f"--warm {text!r}: {unknown[0]!r} is not a render setting (such as decoder, precision, device)"
        )
    try:
        settings = from_dict(values)
        if settings.device is not None:
            from studio.service.preflight import check_device

            check_device(settings.device, "device=")  # cuda:9 on a CPU machine is not "warm"
        return settings
    except InputError as exc:
        raise InputError(f"--warm {text!r}: {exc}") from None


class WarmUp(Startup):
    def __init__(
        self, pool, settings: list, devices: list, then: Callable[[], None] | None = None, writers: int | None = None
    ):
        super().__init__("the warm-up failed")
        self.pool = pool
        #: renders at once in the warm-up render (default: what the queue whose ``start`` is ``then``
        #: runs at once on a device: its jobs a device, plus one draining when it pipelines)
        self.writers = writers or writers_of(getattr(then, "__self__", None))
        self.settings = list(settings)
        self.devices = list(devices) or [None]
        self.then = then
        self._thread: threading.Thread | None = None
        self.rendered: list[str] = []  # the avatars the warm-up rendered once (one a device)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="studio-warm-up", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for slot, device in enumerate(self.devices):
                for s in self.settings:
                    if device is not None and s.device in (None, "", "auto"):
                        s = s.with_(device=device)
                    self.doing = f"loading the {s.engine} engine"
                    self.pool.warm_up(s, slot=slot, on_step=self._say)
            names = self._prepare_avatars()
            if names:
                self._render_once(names[0])
            self.doing = "starting the queue"
            if self.then is not None:
                self.then()
            self.succeed()
            log.info("warm-up done in %.1f s: %d engine(s) warm", self.seconds, len(self.pool))
        except Exception as exc:
            log.error("warm-up failed: %s", exc, exc_info=True)
            self.fail(str(exc) or type(exc).__name__)
            if self.then is not None:  # jobs still run (each loads its engine, or fails with why)
                self.then()

    def _prepare_avatars(self) -> list[str]:
        """The library's avatars prepared for each warm engine (MuseTalk's latents are written to
        the avatar's cache the first time: a photo's first request would pay it), the newest first,
        at most ``AVATARS``; one that fails is left to its first job, which says why."""
        from studio.core.avatars import library

        try:
            names = [a["name"] for a in library.list_avatars() if not a.get("damaged")]
        except OSError:
            return []
        engines = [e for e in self.pool.engines() if getattr(e, "name", "") == "musetalk"]
        for name in names[:AVATARS]:
            for engine in engines:
                self.doing = f"preparing avatar {name} for {engine.name} on {engine.device}"
                try:
                    engine.prepare(library.load(name))
                except Exception:
                    log.warning("warm-up: avatar %s was not prepared", name, exc_info=True)
        return names

    def _render_once(self, avatar: str) -> None:
        """A render of ``avatar`` on each device, to a file that is then removed: what the engine
        alone does not touch is warm for the first request too. What a user's request touches: a
        48 kHz stereo voice-over (the resampler, the AAC encoder at that rate), long enough that
        every x264 lane encodes (``frames_for_every_lane``: a lane's process maps and registers its
        frame ring and opens libx264 on its first frame; 1.5 s reached 4 of 16), and as many
        renders at once as the queue runs writers at once (``writers``: a pipelined queue's next job
        renders while the last one's encoders drain, so a second set of encoder processes is
        started and warmed here, not in the first burst of clients). ``STUDIO_WARM_RENDER=short``:
        the earlier warm-up (1.5 s of 16 kHz mono, one render; for the benchmarks' comparison)."""
        import tempfile

        import soundfile as sf

        from studio.core import env
        from studio.core.env import data_dir

        short = env.get("STUDIO_WARM_RENDER") == "short"
        rate, frames = (16_000, 38) if short else (48_000, frames_for_every_lane())
        writers = 1 if short else self.writers
        voice = synthetic_voice(frames, rate, channels=1 if short else 2)
        base = self.settings[0]
        with tempfile.TemporaryDirectory(prefix=".warm-", dir=data_dir()) as tmp:
            wav = Path(tmp) / "voice.wav"
            sf.write(wav, voice, rate, subtype="PCM_16")
            for slot, device in enumerate(self.devices):
                s = base.with_(device=device) if device is not None and base.device in (None, "", "auto") else base
                self.doing = f"a first render of {avatar} on {device or 'the default device'}"
                runs = [
                    threading.Thread(
                        target=self._render, args=(avatar, wav, s, slot, Path(tmp) / f"warm{slot}-{k}.mp4")
                    )
                    for k in range(writers)
                ]
                for t in runs:
                    t.start()
                for t in runs:
                    t.join()

    def _render(self, avatar: str, wav: Path, settings, slot: int, out: Path) -> None:
        r = None
        try:
            r = self.pool.renderer(avatar, str(wav), settings, slot=slot)
            for _ in r.run(out):
                pass
            self.rendered.append(avatar)
        except Exception:
            log.warning("warm-up: the first render of %s failed", avatar, exc_info=True)
        finally:
            done = getattr(r.chosen_engine if r is not None else None, "done", None)
            if done is not None:
                done()  # a batcher's view: no more batches from this render

    def _say(self, text: str) -> None:
        self.doing = text


def writers_of(queue) -> int:
    """Writers a queue has open at once on one device (2 for the pipelined one-job runner)."""
    if queue is None:
        return 1
    per_device = max(1, int(getattr(queue, "jobs_per_device", 1) or 1))
    return per_device + (1 if per_device == 1 and getattr(queue, "pipeline", False) else 0)


def frames_for_every_lane() -> int:
    """Frames of a render whose parallel x264 writer uses a lane per core (``writer.MIN_CHUNK``
    frames a lane at least), plus a second: at most 60 s."""
    import os

    from studio.core.media.writer import MIN_CHUNK

    return min(60 * 25, MIN_CHUNK * (os.cpu_count() or 1) + 25)


def synthetic_voice(frames: int, rate: int, channels: int = 2, fps: int = 25):
    """float32 samples (``[n]`` or ``[n, channels]``) of ``frames`` frames: a voiced tone at a
    syllable's pace with room noise, so the render's speech frames go through the engine."""
    import numpy as np

    rng = np.random.default_rng(0)
    t = np.arange(frames * rate // fps) / rate
    voice = (0.3 * np.sin(2 * np.pi * 180 * t) * (1 + np.sin(2 * np.pi * 3 * t)) / 2).astype(np.float32)
    voice += (0.02 * rng.standard_normal(len(t))).astype(np.float32)
    if channels == 1:
        return voice
    return np.stack([voice, 0.9 * voice], axis=1)

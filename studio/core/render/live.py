"""The frames of a live presenter, one slot at a time: what ``studio serve``'s live sessions draw.

    pic = LivePicture(avatar, engine, settings)         # engine: a warm engine or a batcher's view
    voice = LiveVoice(rate=25)                          # 16 kHz mono float32 in, one slot per frame
    voice.push(samples16k); slot = voice.next_slot()    # the samples frame n shows (zeros when none came)
    plan = pic.plan(voice, n)                           # rest or speech, the crossfade weight
    frame = pic.rest(n) | pic.speech([n], [w], voice)   # [H,W,3] uint8 RGB (numpy)

The maths are a file render's (``Renderer``): the avatar's ping-pong cycle, the silence threshold and
run, the crossfade weights, the engine's faces pasted by the ``Compositor``, the canvas by ``Delivered``;
only the audio is a stream: the engine's features come from the last second of the voice and the
``LOOKAHEAD`` slots after the frame (a file render sees the whole clip, so a live mouth can differ from
the file's by the context it lacks). A silent slot is the avatar's own frame: no engine call.
Scheduling (which frame when, sharing the engine) is the service's (``studio.service.live``).
"""

from __future__ import annotations

import threading
from fractions import Fraction
from typing import Any

import numpy as np

from studio.core.constants import SAMPLE_RATE
from studio.core.media import rates

LOOKAHEAD = 2  # slots of voice a frame waits for after its own (the engine's look-ahead): 80 ms at 25 fps
CONTEXT = 25  # slots of voice before a frame that its features see (1 s)
KEEP = 4 * CONTEXT  # slots of voice kept behind the frame being drawn


class LiveVoice:
    """The voice of a live session on its frame grid: samples come in at any pace (``push``), and
    leave one slot per frame (``next_slot``: zeros when none are queued, so a late voice starts at the
    next slot rather than bunching up). Thread-safe: a socket pushes while the session's clock takes."""

    def __init__(self, rate=25, threshold: float = 0.008):
        self.rate = Fraction(rate)
        self.threshold = float(threshold)
        self._lock = threading.Lock()
        self._queue: list[np.ndarray] = []
        self._queued = 0
        self._times: list[tuple[int, float]] = []  # (queued sample position, arrival time)
        self._in_total = 0  # samples ever pushed (positions of ``_times``)
        self._taken = 0  # samples ever taken out of the queue
        self.slots = 0  # slots handed out
        self._kept: list[np.ndarray] = []  # the last KEEP slots' samples, newest last
        self.arrival: dict[int, float] = {}  # slot -> when its first voiced sample arrived (monotonic)
        #: after a barge-in, the first slot that rests at once (no silence run, no crossfade), until voice comes
        self.quiet_from: int | None = None

    def slot_samples(self, n: int) -> int:
        return int(rates.first_sample(n + 1, self.rate, SAMPLE_RATE)) - int(
            rates.first_sample(n, self.rate, SAMPLE_RATE)
        )

    def push(self, samples: np.ndarray, now: float) -> None:
        samples = np.asarray(samples, np.float32).reshape(-1)
        if not len(samples):
            return
        with self._lock:
            self._queue.append(samples)
            self._times.append((self._in_total, now))
            self._in_total += len(samples)
            self._queued += len(samples)

    @property
    def queued_s(self) -> float:
        with self._lock:
            return self._queued / SAMPLE_RATE

    def clear(self) -> int:
        """Drop the queued voice (barge-in) and the look-ahead slots already taken; the slots dropped."""
        with self._lock:
            dropped = self._queued
            self._taken += dropped
            self._queue.clear()
            self._times.clear()
            self._queued = 0
            for i in range(max(0, len(self._kept) - LOOKAHEAD), len(self._kept)):
                self._kept[i] = np.zeros_like(self._kept[i])
            self.quiet_from = max(0, self.slots - LOOKAHEAD)
            return dropped

    def next_slot(self) -> np.ndarray:
        """The samples of the next slot (zero-padded when the voice runs out)."""
        with self._lock:
            n = self.slots
            need = self.slot_samples(n)
            out = np.zeros(need, np.float32)
            got = 0
            first_at = None
            while got < need and self._queue:
                head = self._queue[0]
                take = min(need - got, len(head))
                out[got : got + take] = head[:take]
                if first_at is None:
                    first_at = self._arrived(self._taken)
                got += take
                self._taken += take
                self._queued -= take
                if take == len(head):
                    self._queue.pop(0)
                else:
                    self._queue[0] = head[take:]
            if first_at is not None and got and _rms(out) >= self.threshold:
                self.arrival[n] = first_at
                self.quiet_from = None
            self.slots += 1
            self._kept.append(out)
            del self._kept[: max(0, len(self._kept) - KEEP)]
            for k in [k for k in self.arrival if k < n - KEEP]:
                del self.arrival[k]
            return out

    def _arrived(self, position: int) -> float:
        """When the sample at ``position`` was pushed (the chunk that held it); drops older chunks."""
        t = self._times[0][1] if self._times else 0.0
        while len(self._times) > 1 and self._times[1][0] <= position:
            self._times.pop(0)
        if self._times:
            t = self._times[0][1]
        return t

    def window(self, first: int, end: int) -> np.ndarray:
        """Samples of slots ``first .. end`` (taken ones; zeros before the voice and past what is kept)."""
        with self._lock:
            have0 = self.slots - len(self._kept)
            parts = []
            for n in range(first, end):
                i = n - have0
                parts.append(self._kept[i] if 0 <= i < len(self._kept) else np.zeros(self.slot_samples(n), np.float32))
            return np.concatenate(parts) if parts else np.zeros(0, np.float32)


def _rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x, dtype=np.float64)))) if len(x) else 0.0


class LivePicture:
    """One avatar's frames for a live session on one engine (a warm engine or a batcher's view)."""

    def __init__(self, avatar: Any, engine: Any, settings: Any):
        from studio.core.render.canvas import Delivered
        from studio.core.render.composite import Compositor

        self.avatar = avatar
        self.engine = engine
        self.settings = settings
        self.rate = Fraction(rates.parse_rate(settings.fps)) if settings.fps not in (None, "", "auto") else Fraction(25)
        base = getattr(engine, "base_engine", engine)
        self.prepared = base.prepare(avatar)
        self.comp = Compositor(avatar.frames, avatar.boxes, avatar.masks, device=base.device)
        self.delivered = Delivered(settings, avatar, base.device, list)
        self.face_ok = np.asarray(avatar.face_ok, bool)

    def avatar_index(self, ns) -> np.ndarray:
        """The avatar frames shown at output frames ``ns`` (the ping-pong cycle of a video avatar)."""
        shown = rates.map_frames(np.asarray(ns, np.int64), self.rate, getattr(self.avatar, "fps", 25))
        return np.asarray(self.avatar.cycle_index(shown), np.int64).reshape(-1)

    def weights(self, voice: LiveVoice, n: int) -> float:
        """Frame ``n``'s crossfade weight (0: rest) from the voice around it: the settings' silence
        threshold and run, the crossfade, over the slots taken (up to ``n + LOOKAHEAD``)."""
        from studio.core.media.analysis import frame_rms, silence_mask
        from studio.core.render.plan import crossfade_weights

        if voice.quiet_from is not None and n >= voice.quiet_from:
            return 0.0  # barge-in: rest now
        s = self.settings
        back = max(int(s.min_silence), int(s.crossfade)) + 1
        first = max(0, n - back)
        end = n + LOOKAHEAD + 1
        samples = voice.window(first, end)
        rms = frame_rms(samples, end - first, self.rate)
        silent = silence_mask(rms, s.threshold, s.min_silence)
        speech = ~silent & self.face_ok[self.avatar_index(np.arange(first, end))]
        return float(crossfade_weights(speech, int(s.crossfade))[n - first])

    def features(self, voice: LiveVoice, ns) -> tuple[Any, np.ndarray]:
        """The engine's audio features for frames ``ns`` (ascending): one call over the voice from
        ``CONTEXT`` slots before the first to ``LOOKAHEAD`` after the last; and each frame's index into them."""
        from studio.core.media.audio import Wave
        from studio.core.media.audio_info import AudioInfo

        ns = np.asarray(ns, np.int64)
        first = max(0, int(ns[0]) - CONTEXT)
        end = int(ns[-1]) + LOOKAHEAD + 1
        samples = voice.window(first, end)
        info = AudioInfo("live", "live", "FLOAT", SAMPLE_RATE, 1, len(samples))
        wave = Wave(samples, info, rate=self.rate)
        base = getattr(self.engine, "base_engine", self.engine)
        feats = base.audio_features(wave)
        return feats, ns - first

    def rest(self, ns) -> np.ndarray:
        """The resting frames ``ns`` ([B,H,W,3] uint8): the avatar itself, never the engine."""
        idx = self.avatar_index(ns)
        return self._finish(self.comp.background(idx), ns, idx)

    def speech(self, ns, weights, voice: LiveVoice, generate=None) -> np.ndarray:
        """Speaking frames ``ns`` with their ``weights`` ([B,H,W,3] uint8): the engine's faces pasted in.
        ``generate(item)``: how the engine is asked (default: the engine's ``generate_many``), where
        ``item`` is ``(prepared, features, avatar_idx, feat_idx, weight)``."""
        idx = self.avatar_index(ns)
        w = np.asarray(weights, np.float32)
        feats, fidx = self.features(voice, ns)
        item = (self.prepared, feats, idx, fidx, w)
        faces = generate(item) if generate is not None else self.engine.generate_many([item])[0]
        frames = self.comp.paste(faces, idx, w)
        return self._finish(frames, ns, idx)

    def _finish(self, frames, ns, idx) -> np.ndarray:
        if self.delivered.active:
            frames = self.delivered.apply(frames, np.asarray(ns), idx, self.rate, lambda name, t0: None)
            if frames.shape[-1] == 4:
                frames = frames[..., :3]
        return frames.cpu().numpy()

    @property
    def size(self) -> tuple[int, int]:
        """(width, height) of the frames."""
        from studio.core.render.canvas import output_size

        return output_size(self.settings, self.avatar)

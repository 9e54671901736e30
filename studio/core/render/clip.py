"""A loaded clip that several renderers share: the avatar, the voice-over, the plan, the audio features.

    clip = Clip("anna", "voice.flac", settings)
    a = Renderer.for_clip(clip, settings.with_(device="cuda:0"))
    b = Renderer.for_clip(clip, settings.with_(device="cuda:1"))   # one decode, one plan, one avatar load

Every part loads on first use, once, whichever renderer (and thread) asks first. The plan depends on
the silence settings the clip was made with (``settings``); a renderer whose settings plan the clip
differently cannot use it (``Clip.fits``). Audio features are kept per ``engine.features_key()``:
engines with equal keys (the classic engine on any device; MuseTalk on one device) compute them once.

``frames``/``focus``: the in/out range the clip is used for. On a voice-over over 5 minutes only
that stretch and 30 s around it are decoded, planned and featured (``plan.audio_window``); a range
outside it prepares again (``generation`` counts how often, so renderers drop what they kept).
"""

from __future__ import annotations

import threading
from fractions import Fraction
from typing import Any

from studio.core.render.plan import RenderPlan, audio_window, covers, make_plan
from studio.core.settings import SCHEMA, RenderSettings

#: the settings the plan is made from (the schema's "silence" group, and the output's frame rate)
PLAN_SETTINGS = (*(n for n, s in SCHEMA.items() if s.group == "silence"), "fps")


class Clip:
    """One avatar x one voice-over, loaded lazily and shared; thread-safe.

    ``avatar`` is an ``AvatarAssets``, a library name or an image/video path; ``audio`` a file path.
    """

    def __init__(
        self, avatar: Any, audio: Any, settings: RenderSettings | None = None, frames: tuple[int, int] | None = None
    ):
        self.settings = settings or RenderSettings()
        self.avatar_source = avatar
        self.audio_path = str(audio)
        self._focus = None if frames is None else (int(frames[0]), int(frames[1]))
        self.generation = 0  # bumped when a new focus drops the prepared audio
        self._lock = threading.RLock()
        self._avatar: Any = None
        self._rate: Fraction | None = None
        self._wave: Any = None
        self._plan: RenderPlan | None = None
        self._cues: dict[str, list] = {}
        self._features: dict[tuple, Any] = {}
        self._feature_locks: dict[tuple, threading.Lock] = {}

    def fits(self, settings: RenderSettings) -> bool:
        """Whether ``settings`` plan this clip as its own settings do (same silence settings and rate)."""
        return all(getattr(settings, n) == getattr(self.settings, n) for n in PLAN_SETTINGS)

    @property
    def avatar(self) -> Any:
        """The ``AvatarAssets`` (memory-mapped from the avatar cache)."""
        with self._lock:
            if self._avatar is None:
                from studio.core.avatars import library

                a = self.avatar_source
                self._avatar = a if hasattr(a, "frames") else library.resolve(a)
            return self._avatar

    @property
    def rate(self) -> Fraction:
        """The output's frame rate, exact (``Fraction(30000, 1001)`` at 29.97): the ``fps`` setting,
        or for ``auto`` the video avatar's own rate (25 for a photo). A render of a ``RenderRequest``
        has ``fps`` pinned to the rate the request resolved: the avatar is not asked again."""
        with self._lock:
            if self._rate is None:
                from studio.core.media.rates import output_rate, parse_rate

                fps = self.settings.fps
                self._rate = output_rate(None, self.avatar) if fps in (None, "", "auto") else parse_rate(fps)
            return self._rate

    @property
    def wave(self) -> Any:
        """The decoded voice-over on the output's frame grid (``studio.core.media.audio.Wave``, ``rate``)."""
        with self._lock:
            if self._wave is None:
                from studio.core.media.audio import load, probe

                window = None
                if self._focus is not None:
                    window = audio_window(self._focus, probe(self.audio_path).frames, self.rate)
                self._wave = load(self.audio_path, window=window, rate=self.rate)
            return self._wave

    def focus(self, frames: tuple[int, int] | None) -> bool:
        """Use the clip for the range ``frames`` (None: all of it) from now on; True when what was
        prepared does not cover it and is dropped (it is prepared again on next use)."""
        with self._lock:
            self._focus = None if frames is None else (int(frames[0]), int(frames[1]))
            w = self._wave
            if w is None:
                return False
            total = w.info.frames  # 25 fps: the window's grid
            window = None if self._focus is None else audio_window(self._focus, total, w.rate)
            if covers(w.decoded, window, total):
                return False
            self._wave, self._plan = None, None
            self._features.clear()
            self.generation += 1
            return True

    def covers(self, index: int) -> bool:
        """Whether frame ``index`` can be rendered from what is prepared (or nothing is yet)."""
        w = self._wave
        if w is None:
            return True
        return covers(w.decoded, audio_window((index, index + 1), w.info.frames, w.rate), w.info.frames)

    @property
    def plan(self) -> RenderPlan:
        with self._lock:
            if self._plan is None:
                self._plan = make_plan(self.wave, self.avatar, self.settings)
            return self._plan

    def cues(self, script: str = "") -> list:
        """The captions' cues (``captions.make_cues``) of the voice-over and ``script``, made once per script."""
        with self._lock:
            if script not in self._cues:
                from studio.core.captions import make_cues, script_sentences

                self._cues[script] = make_cues(script_sentences(self.audio_path, script))
            return self._cues[script]

    @property
    def loaded(self) -> bool:
        """Whether the voice-over is decoded and planned (a first ``plan`` has run)."""
        return self._plan is not None

    def features(self, engine: Any) -> Any:
        """``engine.audio_features(wave)``, computed once per ``engine.features_key()``."""
        key = engine.features_key()
        with self._lock:
            if key in self._features:
                return self._features[key]
            lock = self._feature_locks.setdefault(key, threading.Lock())
        wave = self.wave
        with lock:  # engines with other keys compute theirs meanwhile
            with self._lock:
                if key in self._features:
                    return self._features[key]
            feats = engine.audio_features(wave)
            with self._lock:
                self._features[key] = feats
            return feats

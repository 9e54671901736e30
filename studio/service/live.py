"""Live sessions: a presenter drawn on deadlines from a voice that streams in (``studio serve``'s /v1/live).

    hub = LiveHub(pool, max_live=8)
    s = hub.open("anna", settings, client="")        # LiveFull when max_live are open
    s.add_sink(sink)                                  # sink.frame(n, rgb[H,W,3], pcm16k_int16) per frame
    s.push_pcm(b"...", rate=48000); s.speak("Good evening."); s.clear()   # the voice, barge-in
    s.figures()                                       # time to first frame, latency, intervals, late, dropped
    hub.close(s.id)                                   # the clock stops, the sinks and pushes end

Each session has a clock thread: frame ``n`` is due at ``start + n / fps``. At each tick it takes the
voice's slots up to the due frame plus the engine's look-ahead (``LiveVoice.next_slot``: zeros when
the voice has not come), then draws only the frames that are due: a silent frame is the avatar's own
frame (rest: no engine call), a speaking one goes through the engine's ``Batcher`` on the live lane
(``Ticket(level=LIVE)``: the scheduler takes it before every job's lane, and without a scheduler the
batcher takes live batches first), merged with the other live sessions' frames of the same engine
into one call, file renders filling the rest. A session that falls more than ``MAX_BEHIND_S`` behind its clock
drops the oldest due frames (counted) rather than drifting. Every frame leaves with its slot of the
voice, so picture and sound keep the same clock (``av_offset_ms`` measures what the sinks got).
"""

from __future__ import annotations

import collections
import logging
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from studio.core.errors import InputError

log = logging.getLogger(__name__)

MAX_BEHIND_S = 0.2  # a session this far behind its clock drops frames instead of bunching them
PCM_RATES = (8_000, 48_000)  # the audio socket's rates, Hz
MAX_QUEUED_S = 120.0  # voice queued ahead of the clock before more is refused
EVENTS_KEPT = 200


class LiveFull(Exception):
    """``max_live`` sessions are open."""


@dataclass
class Figures:
    """A session's measured figures (seconds)."""

    started: float = field(default_factory=time.monotonic)
    first_frame_s: float | None = None
    frames: int = 0
    engine_frames: int = 0
    rest_frames: int = 0
    late: int = 0
    dropped: int = 0
    latency: collections.deque = field(default_factory=lambda: collections.deque(maxlen=2000))
    interval: collections.deque = field(default_factory=lambda: collections.deque(maxlen=2000))
    last_sent: float | None = None
    av_offset_ms: float = 0.0

    def as_dict(self) -> dict:
        def q(values, p):  # (deque.copy is atomic: the clock thread appends meanwhile)
            values = values.copy()
            return round(float(np.percentile(np.asarray(values), p)) * 1e3, 1) if len(values) else None

        elapsed = max(1e-6, time.monotonic() - self.started)
        return {
            "first_frame_s": None if self.first_frame_s is None else round(self.first_frame_s, 3),
            "frames": self.frames,
            "engine_frames": self.engine_frames,
            "rest_frames": self.rest_frames,
            "late": self.late,
            "dropped": self.dropped,
            "fps": round(self.frames / elapsed, 2),
            "latency_ms": {"p50": q(self.latency, 50), "p95": q(self.latency, 95), "max": q(self.latency, 100)},
            "frame_interval_ms": {
                "p50": q(self.interval, 50),
                "p99": q(self.interval, 99),
                "max": q(self.interval, 100),
            },
            "av_offset_ms": round(self.av_offset_ms, 1),
        }


class LiveSession:
    """One live presenter (see the module's text). Made by ``LiveHub.open``."""

    def __init__(self, hub: LiveHub, avatar: Any, avatar_name: str, settings: Any, client: str, voice: str):
        from studio.core.render.live import LiveVoice

        self.hub = hub
        self.id = secrets.token_urlsafe(12)
        self.key = secrets.token_urlsafe(18)  # the audio socket's key (a browser sends no token)
        self.client = client
        self.avatar_name = avatar_name
        self.settings = settings
        self.voice_name = voice
        self.state = "starting"
        self.error: str | None = None
        self.created = time.time()
        self.figures = Figures()
        self.voice = LiveVoice(25 if settings.fps in (None, "", "auto") else settings.fps, settings.threshold)
        self.fps = float(self.voice.rate)
        self.avatar = avatar
        self._sinks: list[Any] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._events: collections.deque = collections.deque(maxlen=EVENTS_KEPT)
        self._listeners: list[Any] = []
        self._speech = threading.Thread(target=self._speak_loop, name=f"live-speak-{self.id[:6]}", daemon=True)
        self._texts: collections.deque = collections.deque()
        self._texts_cv = threading.Condition()
        self._said = 0  # barge-ins so far: speech made before the last one is dropped
        self.pushes: list[Any] = []
        self._thread = threading.Thread(target=self._run, name=f"live-{self.id[:6]}", daemon=True)
        self.engine_name = ""
        self.drawn = -1  # the last frame drawn
        self.drawing = -1  # the last frame of the batch being drawn
        self.view: Any = None  # the engine's batcher view (``LiveHub.picture``)
        self.size = (0, 0)  # the frames' (width, height), once the picture is ready

    # -- the face -----------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()
        self._speech.start()

    def add_sink(self, sink) -> None:
        with self._lock:
            self._sinks.append(sink)

    def remove_sink(self, sink) -> None:
        with self._lock:
            if sink in self._sinks:
                self._sinks.remove(sink)

    def push_pcm(self, data: bytes, rate: int, resampler=None) -> None:
        """s16le mono PCM at ``rate`` Hz (any length): queued after the voice already queued."""
        if len(data) % 2:
            data = data[:-1]
        x = np.frombuffer(data, "<i2").astype(np.float32) / 32768.0
        self.push_float(x, rate, resampler)

    def push_float(self, x: np.ndarray, rate: int, resampler=None) -> None:
        if self.voice.queued_s > MAX_QUEUED_S:
            raise InputError(f"more than {MAX_QUEUED_S:g} s of voice is queued; send it in real time")
        if rate != 16_000:
            if resampler is None:
                import soxr

                x = soxr.resample(x, rate, 16_000)
            else:
                x = resampler.resample_chunk(x)
        self.voice.push(x, time.monotonic())

    def speak(self, text: str) -> None:
        """Speak ``text`` with the session's voice (Piper), after what is queued."""
        from studio.core.constants import MAX_CHARS

        text = " ".join(str(text or "").split())
        if not text:
            raise InputError("the text is empty; send what the presenter says")
        if len(text) > MAX_CHARS:
            raise InputError(f"the text is {len(text)} characters; speak at most {MAX_CHARS} at a time")
        with self._texts_cv:
            self._texts.append(text)
            self._texts_cv.notify()

    def clear(self) -> int:
        """Barge-in: the queued voice and speech are dropped; the presenter rests from the next frame
        drawn. Answers the last frame drawn before it."""
        with self._texts_cv:
            self._texts.clear()
            self._said += 1
        dropped = self.voice.clear()
        last = max(self.drawn, self.drawing)  # frames being drawn now were planned before the clear
        self.event("clear", {"dropped_s": round(dropped / 16_000, 3), "frame": last})
        return last

    def stop(self) -> None:
        self._stop.set()
        with self._texts_cv:
            self._texts_cv.notify_all()
        for p in list(self.pushes):
            p.stop()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)
        if self._speech.is_alive():
            self._speech.join(timeout=5)
        if self.state not in ("failed",):
            self.state = "ended"
        self.event("state", {"state": self.state})
        with self._lock:
            sinks = list(self._sinks)
            self._sinks.clear()
        for s in sinks:
            try:
                s.end()
            except Exception:
                log.exception("live sink end")

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() or self._speech.is_alive()

    # -- events -------------------------------------------------------------------------------

    def event(self, kind: str, data: dict) -> None:
        ev = {"type": kind, "time": round(time.time(), 3), **data}
        self._events.append(ev)
        for fn in list(self._listeners):
            try:
                fn(ev)
            except Exception:
                log.exception("live event listener")

    def listen(self, fn) -> Any:
        """``fn(event)`` for each event from now on, after the ones kept; returns the unsubscribe."""
        for ev in list(self._events):
            fn(ev)
        self._listeners.append(fn)
        return lambda: self._listeners.remove(fn) if fn in self._listeners else None

    def describe(self) -> dict:
        return {
            "id": self.id,
            "state": self.state,
            "avatar": self.avatar_name,
            "engine": self.engine_name,
            "fps": self.fps,
            "voice": self.voice_name,
            "created": self.created,
            "error": self.error,
            "queued_voice_s": round(self.voice.queued_s, 3),
            "viewers": len(self._sinks),
            "pushes": [p.describe() for p in self.pushes],
            "figures": self.figures.as_dict(),
        }

    # -- the clock ----------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            picture, generate = self.hub.picture(self)
            self.size = picture.size
        except Exception as exc:  # noqa: BLE001 - the session fails with one sentence
            self.state, self.error = "failed", str(exc).splitlines()[0][:300]
            self.event("state", {"state": "failed", "error": self.error})
            log.warning("live session %s failed to start: %s", self.id, self.error)
            return
        from studio.core.render.live import LOOKAHEAD

        self.state = "live"
        self.event("state", {"state": "live"})
        fps = self.fps
        start = time.monotonic()
        drawn = 0
        while not self._stop.is_set():
            now = time.monotonic()
            due = int((now - start) * fps)  # frames 0..due are due
            while self.voice.slots <= due + LOOKAHEAD:
                self.voice.next_slot()
            behind = due - drawn
            if behind > MAX_BEHIND_S * fps:
                skip = behind - int(MAX_BEHIND_S * fps)
                self.figures.dropped += skip
                drawn += skip
            if drawn <= due:
                ns = np.arange(drawn, due + 1)
                self.drawing = due
                self._draw(picture, generate, ns, start)
                drawn = due + 1
                self.drawn = due
            wait = start + drawn / fps - time.monotonic()
            if wait > 0:
                self._stop.wait(wait)
        self.hub.release(self)

    def _draw(self, picture, generate, ns: np.ndarray, start: float) -> None:
        w = np.array([picture.weights(self.voice, int(n)) for n in ns], np.float32)
        speak = w > 0
        frames: dict[int, np.ndarray] = {}
        if (~speak).any():
            for n, f in zip(ns[~speak], picture.rest(ns[~speak]), strict=True):
                frames[int(n)] = f
            self.figures.rest_frames += int((~speak).sum())
        if speak.any():
            for n, f in zip(ns[speak], picture.speech(ns[speak], w[speak], self.voice, generate), strict=True):
                frames[int(n)] = f
            self.figures.engine_frames += int(speak.sum())
        for n in ns:
            n = int(n)
            pcm = (np.clip(self.voice.window(n, n + 1), -1, 1) * 32767).astype(np.int16)
            self._send(n, frames[n], pcm, start)

    def _send(self, n: int, frame: np.ndarray, pcm: np.ndarray, start: float) -> None:
        fig = self.figures
        now = time.monotonic()
        if fig.first_frame_s is None:
            fig.first_frame_s = now - fig.started
            self.event("first_frame", {"seconds": round(fig.first_frame_s, 3)})
            self.hub.observe("first_frame", fig.first_frame_s)
        if now > start + (n + 2) / self.fps:  # more than a frame past its time
            fig.late += 1
            self.hub.observe("late", 1)
        if fig.last_sent is not None:
            fig.interval.append(now - fig.last_sent)
            self.hub.observe("interval", now - fig.last_sent)
        fig.last_sent = now
        arrived = self.voice.arrival.pop(n, None)
        if arrived is not None:
            fig.latency.append(now - arrived)
            self.hub.observe("latency", now - arrived)
        fig.frames += 1
        with self._lock:
            sinks = list(self._sinks)
        for s in sinks:
            try:
                s.frame(n, frame, pcm)
            except Exception:
                log.exception("live sink")
                self.remove_sink(s)

    def _speak_loop(self) -> None:
        while not self._stop.is_set():
            with self._texts_cv:
                while not self._texts and not self._stop.is_set():
                    self._texts_cv.wait(0.5)
                if self._stop.is_set():
                    return
                text = self._texts.popleft()
                said = self._said
            try:
                import soundfile as sf

                from studio.core.media.speech import synthesize

                speech = synthesize(text, self.voice_name)
                x, rate = sf.read(str(speech.path), dtype="float32", always_2d=True)
                if said == self._said and not self._stop.is_set():  # no barge-in while it was spoken
                    self.push_float(x.mean(axis=1), int(rate))
                    self.event("speak", {"chars": len(text), "seconds": round(len(x) / rate, 3)})
            except Exception as exc:  # noqa: BLE001 - one sentence in the events
                self.event("error", {"error": str(exc).splitlines()[0][:300], "where": "speak"})


class LiveHub:
    """The open live sessions of a server, at most ``max_live``; engines from the warm ``pool``."""

    def __init__(self, pool, max_live: int = 8, observe=None):
        self.pool = pool
        self.max_live = int(max_live)
        self._sessions: dict[str, LiveSession] = {}
        self._lock = threading.Lock()
        self._observe = observe

    def observe(self, kind: str, value: float) -> None:
        if self._observe is not None:
            self._observe(kind, value)

    def open(self, avatar_name: str, settings, client: str = "", voice: str = "") -> LiveSession:
        from studio.core.avatars import library

        avatar = library.resolve(avatar_name)
        with self._lock:
            if len(self._sessions) >= self.max_live:
                raise LiveFull(f"{self.max_live} live sessions are open (--max-live); end one or try again later")
            s = LiveSession(self, avatar, avatar_name, settings, client, voice)
            self._sessions[s.id] = s
        s.start()
        return s

    def picture(self, session: LiveSession):
        """The session's ``LivePicture`` on the warm engine of its settings, and how it asks the engine:
        through the engine's batcher on the live lane (its frames go first, merged with the others')."""
        from studio.core.render.live import LivePicture
        from studio.service.scheduler import LIVE, Ticket

        engine, _reason = self.pool.get(session.settings)
        session.engine_name = getattr(engine, "name", "")
        view = self.pool.batcher(engine).view(Ticket(client=session.client, level=LIVE))
        session.view = view
        return LivePicture(session.avatar, view, session.settings), view.generate_item

    def release(self, session: LiveSession) -> None:
        view = getattr(session, "view", None)
        if view is not None:
            view.done()

    def get(self, sid: str) -> LiveSession | None:
        with self._lock:
            return self._sessions.get(sid)

    def sessions(self) -> list[LiveSession]:
        with self._lock:
            return list(self._sessions.values())

    def close(self, sid: str) -> LiveSession | None:
        with self._lock:
            s = self._sessions.pop(sid, None)
        if s is not None:
            s.stop()
        return s

    def close_all(self) -> None:
        for s in self.sessions():
            self.close(s.id)

"""A live session pushed to a broadcaster's ingest: RTMP(S) or SRT through FFmpeg's muxers (PyAV).

    push = Push(session, "rtmp://localhost/live/key")   # a sink of the session
    push.start(); push.describe(); push.stop()

``rtmp://`` and ``rtmps://`` carry FLV, ``srt://`` MPEG-TS; video H.264 (libx264, ``zerolatency``,
a keyframe every 2 s), audio AAC 48 kHz mono, both stamped from the session's frame numbers and voice
slots. A connection that fails or drops is retried with a growing pause (1, 2, 4 ... 30 s); every
error and reconnect is an event of the session (``push_error``, ``push_connected``).
"""

from __future__ import annotations

import collections
import logging
import secrets
import threading
import time
from fractions import Fraction
from urllib.parse import urlsplit

import numpy as np

from studio.core.errors import InputError

log = logging.getLogger(__name__)

SCHEMES = {"rtmp": "flv", "rtmps": "flv", "srt": "mpegts"}
QUEUE = 50  # frames a slow ingest may fall behind before the oldest are dropped
BACKOFF_S = (1, 2, 4, 8, 15, 30)


def check_url(url: str) -> str:
    """``url`` if it is an rtmp://, rtmps:// or srt:// address with a host; else one sentence."""
    url = (url or "").strip()
    try:
        parts = urlsplit(url)
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in SCHEMES or not parts.hostname or any(c.isspace() for c in url):
        raise InputError("the push URL must be rtmp://HOST/..., rtmps://HOST/... or srt://HOST:PORT")
    return url


def protocol_ready(scheme: str) -> bool:
    """Whether PyAV's FFmpeg has the protocol (PyPI's PyAV wheels carry RTMP but not SRT)."""
    import av

    try:  # an output opens its address when it starts writing
        out = av.open(f"{scheme}://127.0.0.1:9/x", "w", format=SCHEMES[scheme], timeout=0.5)
        out.add_stream("aac", rate=48_000)
        out.start_encoding()
        out.close()
    except av.error.ProtocolNotFoundError:
        return False
    except Exception:  # noqa: BLE001 - refused, timed out: the protocol is there
        return True
    return True


def shown(url: str) -> str:
    """The URL without its stream key or credentials (what events and lists show)."""
    p = urlsplit(url)
    host = p.hostname or ""
    return f"{p.scheme}://{host}{f':{p.port}' if p.port else ''}/…"


class Push:
    def __init__(self, session, url: str):
        self.id = secrets.token_urlsafe(6)
        self.session = session
        self.url = check_url(url)
        self.state = "connecting"
        self.error: str | None = None
        self.reconnects = 0
        self.frames = 0
        self._q: collections.deque = collections.deque(maxlen=QUEUE)
        self._cv = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"live-push-{self.id}", daemon=True)

    def describe(self) -> dict:
        return {
            "id": self.id,
            "url": shown(self.url),
            "state": self.state,
            "error": self.error,
            "reconnects": self.reconnects,
            "frames": self.frames,
        }

    def start(self) -> None:
        self.session.add_sink(self)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.session.remove_sink(self)
        with self._cv:
            self._cv.notify_all()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=10)
        self.state = "stopped"

    # a sink of the session
    def frame(self, n: int, rgb, pcm) -> None:
        with self._cv:
            self._q.append((n, rgb, pcm))
            self._cv.notify()

    def end(self) -> None:
        self._stop.set()
        with self._cv:
            self._cv.notify_all()

    def _run(self) -> None:
        import av

        tries = 0
        while not self._stop.is_set():
            try:
                self._stream()
                return
            except av.error.ProtocolNotFoundError:
                self.state = "failed"
                scheme = urlsplit(self.url).scheme
                self.error = f"this server's FFmpeg (in PyAV) was built without {scheme}: push over rtmp:// instead"
                self.session.event("push_error", {"push": self.id, "error": self.error, "retry_in_s": None})
                return
            except Exception as exc:  # noqa: BLE001 - the ingest's trouble: an event, then a retry
                self.error = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
                self.state = "retrying"
                wait = BACKOFF_S[min(tries, len(BACKOFF_S) - 1)]
                self.session.event("push_error", {"push": self.id, "error": self.error, "retry_in_s": wait})
                tries += 1
                if self._stop.wait(wait):
                    return
                self.reconnects += 1

    def _stream(self) -> None:
        import av

        fmt = SCHEMES[urlsplit(self.url).scheme]
        options = {"rw_timeout": "5000000"} if fmt == "flv" else {}
        out = av.open(self.url, "w", format=fmt, options=options, timeout=(5.0, 5.0))
        try:
            fps = Fraction(self.session.fps).limit_denominator(1001)
            w, h = self.session.size
            v = out.add_stream("libx264", rate=fps)
            v.width, v.height, v.pix_fmt = w - w % 2, h - h % 2, "yuv420p"
            v.options = {"preset": "veryfast", "tune": "zerolatency", "g": str(int(2 * fps))}
            a = out.add_stream("aac", rate=48_000)
            a.layout = "mono"
            resampler = av.AudioResampler(format="fltp", layout="mono", rate=48_000)
            first = None
            self.state, self.error = "live", None
            self.session.event("push_connected", {"push": self.id, "url": shown(self.url)})
            while not self._stop.is_set():
                with self._cv:
                    while not self._q and not self._stop.is_set():
                        self._cv.wait(0.5)
                    items = list(self._q)
                    self._q.clear()
                for n, rgb, pcm in items:
                    if first is None:
                        first = n
                    frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb[: v.height, : v.width]), format="rgb24")
                    frame.pts = n - first
                    frame.time_base = 1 / fps
                    for p in v.encode(frame):
                        out.mux(p)
                    af = av.AudioFrame.from_ndarray(pcm.reshape(1, -1), format="s16", layout="mono")
                    af.sample_rate = 16_000
                    af.pts = None
                    for rf in resampler.resample(af):
                        for p in a.encode(rf):
                            out.mux(p)
                    self.frames += 1
            for p in v.encode(None):
                out.mux(p)
        finally:
            out.close()
        time.sleep(0)

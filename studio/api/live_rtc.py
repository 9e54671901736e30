"""WebRTC for live sessions (aiortc): a WHEP viewer's peer connection, its tracks, the microphone in.

    peer = await Viewer.answer(session, offer_sdp, loop)     # the SDP answer: peer.sdp; peer.id
    await peer.close()

A viewer is a sink of the session (``LiveSession.add_sink``): each frame and its slot of the voice
arrive from the session's clock thread and are handed to the event loop; the video track sends them
with presentation times from the frame number (90 kHz) and the audio track with the voice's sample
count (16 kHz, Opus-encoded by aiortc at 48 kHz), so both are timed from one clock. A viewer that
cannot keep up loses its oldest frames (``QUEUE`` deep), never the session's. A microphone track in
the offer (sendrecv) is read, resampled to 16 kHz mono and queued as the session's voice.
"""

from __future__ import annotations

import asyncio
import fractions
import logging
import secrets
from typing import Any

log = logging.getLogger(__name__)

QUEUE = 8  # frames a viewer may fall behind before its oldest are dropped
VIDEO_CLOCK = 90_000
AUDIO_RATE = 16_000


class _Queue:
    """A bounded queue on the loop that drops its oldest item when full."""

    def __init__(self) -> None:
        self.q: asyncio.Queue = asyncio.Queue(QUEUE)
        self.dropped = 0

    def put(self, item) -> None:
        if self.q.full():
            self.q.get_nowait()
            self.dropped += 1
        self.q.put_nowait(item)


class Viewer:
    """One WHEP viewer: its ``RTCPeerConnection`` and the tracks the session feeds."""

    def __init__(self, session, loop) -> None:
        from aiortc import RTCPeerConnection

        self.id = secrets.token_urlsafe(9)
        self.session = session
        self.loop = loop
        self.pc = RTCPeerConnection()
        self.video_q = _Queue()
        self.audio_q = _Queue()
        self.video = _VideoTrack(self.video_q, session.fps)
        self.audio = _AudioTrack(self.audio_q)
        self._mic: asyncio.Task | None = None
        self.closed = False

    # a sink of the session (called on its clock thread)
    def frame(self, n: int, rgb, pcm) -> None:
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._put, n, rgb, pcm)

    def end(self) -> None:
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._put_end)

    def _put(self, n: int, rgb, pcm) -> None:
        self.video_q.put((n, rgb))
        self.audio_q.put((n, pcm))

    def _put_end(self) -> None:
        self.video_q.put(None)
        self.audio_q.put(None)

    @classmethod
    async def answer(cls, session, offer_sdp: str, loop) -> Viewer:
        from aiortc import RTCSessionDescription

        v = cls(session, loop)
        pc = v.pc

        @pc.on("track")
        def on_track(track) -> None:
            if track.kind == "audio":
                v.listen(track)

        @pc.on("connectionstatechange")
        async def on_state() -> None:
            if pc.connectionState in ("failed", "closed"):
                await v.close()

        await pc.setRemoteDescription(RTCSessionDescription(offer_sdp, "offer"))
        kinds = {t.kind for t in pc.getTransceivers()}
        if "video" not in kinds:
            raise ValueError("the offer has no video: a WHEP viewer offers to receive video (and audio)")
        pc.addTrack(v.video)
        if "audio" in kinds:
            pc.addTrack(v.audio)
        answer = await pc.createAnswer()
        await pc.setLocalDescription(answer)
        session.add_sink(v)
        return v

    @property
    def sdp(self) -> str:
        return self.pc.localDescription.sdp

    @property
    def codecs(self) -> dict:
        """The codec of each kind the answer chose (its first payload type), e.g. ``{"video": "H264"}``."""
        out = {}
        for section in self.sdp.split("m=")[1:]:
            lines = section.splitlines()
            head = lines[0].split()
            if len(head) < 4:
                continue
            for line in lines:
                if line.startswith(f"a=rtpmap:{head[3]} "):
                    out[head[0]] = line.split()[1].split("/")[0]
        return out

    def listen(self, track) -> None:
        """The viewer's microphone (an audio track of its offer) feeds the session's voice."""
        self._mic = asyncio.ensure_future(self._read_mic(track))

    async def _read_mic(self, track) -> None:
        """The browser's microphone as the session's voice (16 kHz mono)."""
        import av
        import numpy as np
        from aiortc.mediastreams import MediaStreamError

        resampler = av.AudioResampler(format="s16", layout="mono", rate=AUDIO_RATE)
        while not self.closed:
            try:
                frame = await track.recv()
            except MediaStreamError:
                return
            for f in resampler.resample(frame):
                x = f.to_ndarray().reshape(-1).astype(np.float32) / 32768.0
                try:
                    self.session.push_float(x, AUDIO_RATE)
                except Exception as exc:  # noqa: BLE001 - too much queued: the event says so
                    self.session.event("error", {"error": str(exc), "where": "microphone"})

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.session.remove_sink(self)
        self._put_end()
        if self._mic is not None:
            self._mic.cancel()
        await self.pc.close()


def _track_base():
    from aiortc import MediaStreamTrack

    return MediaStreamTrack


class _QueuedTrack(_track_base()):  # type: ignore[misc]
    """A track that sends what a viewer's queue holds, one item per ``recv``, until its end (None)."""

    def __init__(self, q: _Queue) -> None:
        super().__init__()
        self.q = q

    async def recv(self):
        from aiortc.mediastreams import MediaStreamError

        item = await self.q.q.get()
        if item is None:
            self.stop()
            raise MediaStreamError
        return self.frame(*item)


class _VideoTrack(_QueuedTrack):
    kind = "video"

    def __init__(self, q: _Queue, fps: float) -> None:
        super().__init__(q)
        self.fps = fps

    def frame(self, n: int, rgb):
        import av

        frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
        frame.pts = int(round(n * VIDEO_CLOCK / self.fps))
        frame.time_base = fractions.Fraction(1, VIDEO_CLOCK)
        return frame


class _AudioTrack(_QueuedTrack):
    kind = "audio"

    def __init__(self, q: _Queue) -> None:
        super().__init__(q)
        self.samples = 0

    def frame(self, _n: int, pcm):
        import av

        frame = av.AudioFrame.from_ndarray(pcm.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = AUDIO_RATE
        frame.pts = self.samples
        frame.time_base = fractions.Fraction(1, AUDIO_RATE)
        self.samples += pcm.size
        return frame


def parse_offer_check(sdp: str) -> str | None:
    """Why ``sdp`` is not an SDP offer (None: it looks like one)."""
    text = sdp.strip()
    if not text.startswith("v=0"):
        return "the body is not an SDP offer (it must start with 'v=0')"
    if "m=video" not in text:
        return "the SDP offer has no video section (m=video): a WHEP viewer receives video"
    return None


def viewers_of(registry: dict[str, Any], sid: str) -> list[Any]:
    return [v for v in registry.values() if v.session.id == sid]

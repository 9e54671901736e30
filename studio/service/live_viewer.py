"""A WHEP viewer of a live session (aiortc), for the live benchmark and the tests: a real peer that
records every decoded frame (its arrival time, its RTP time and, when asked, its mouth region), and the
audio socket's sender.

    async with Viewer(base_url, sid, headers) as v:        # POST {whep} with an SDP offer, set the answer
        await v.wait_frames(25)
        v.frames[-1].pts, v.frames[-1].mouth               # decoded [h,w,3] crop of the mouth's half of the face
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class Got:
    pts: int
    at: float
    mouth: np.ndarray | None  # the lower half of the face box


class Viewer:
    def __init__(self, base: str, sid: str, headers: dict, mouth=None, mic=None, prefer: str | None = None):
        self.base, self.sid, self.headers = base, sid, headers
        self.mouth = mouth  # the face box (x1, y1, x2, y2): its lower half is kept (``Got.mouth``)
        self.mic = mic  # an aiortc audio track sent to the server (sendrecv)
        self.prefer = prefer  # "video/VP8" or "video/H264": offered first
        self.frames: list[Got] = []
        self.audio_frames = 0
        self.pc: Any = None
        self.location: str | None = None
        self.answer_sdp = ""
        self._tasks: list[asyncio.Task] = []

    async def __aenter__(self):
        import httpx
        from aiortc import RTCPeerConnection, RTCSessionDescription
        from aiortc.rtcrtpsender import RTCRtpSender

        pc = self.pc = RTCPeerConnection()
        video = pc.addTransceiver("video", direction="recvonly")
        if self.prefer:
            caps = RTCRtpSender.getCapabilities("video").codecs
            video.setCodecPreferences(
                [c for c in caps if c.mimeType == self.prefer] + [c for c in caps if c.mimeType != self.prefer]
            )
        if self.mic is not None:
            pc.addTrack(self.mic)
        else:
            pc.addTransceiver("audio", direction="recvonly")

        @pc.on("track")
        def on_track(track):
            self._tasks.append(asyncio.ensure_future(self._read(track)))

        await pc.setLocalDescription(await pc.createOffer())
        async with httpx.AsyncClient(base_url=self.base, headers=self.headers, timeout=60) as c:
            r = await c.post(
                f"/v1/live/{self.sid}/whep",
                content=pc.localDescription.sdp,
                headers={"Content-Type": "application/sdp"},
            )
        assert r.status_code == 201, r.text
        assert r.headers["content-type"].startswith("application/sdp")
        self.location = r.headers["location"]
        self.answer_sdp = r.text
        await pc.setRemoteDescription(RTCSessionDescription(r.text, "answer"))
        return self

    async def _read(self, track):
        from aiortc.mediastreams import MediaStreamError

        while True:
            try:
                f = await track.recv()
            except MediaStreamError:
                return
            if track.kind == "audio":
                self.audio_frames += 1
                continue
            crop = None
            if self.mouth is not None:
                x1, y1, x2, y2 = self.mouth
                crop = f.to_ndarray(format="rgb24")[(y1 + y2) // 2 : y2, x1:x2].astype(np.int16)
            self.frames.append(Got(int(f.pts), time.monotonic(), crop))

    async def wait_frames(self, n: int, timeout: float = 60) -> None:
        end = time.monotonic() + timeout
        target = len(self.frames) + n
        while len(self.frames) < target:
            assert time.monotonic() < end, f"{len(self.frames)} frames of {target} in {timeout} s"
            await asyncio.sleep(0.05)

    async def leave(self, delete: bool = True) -> None:
        import httpx

        if delete and self.location:
            async with httpx.AsyncClient(base_url=self.base, headers=self.headers, timeout=30) as c:
                await c.delete(self.location)
        for t in self._tasks:
            t.cancel()
        await self.pc.close()

    async def __aexit__(self, *exc):
        await self.leave()


def mouth_box(avatar) -> tuple[int, int, int, int]:
    """The avatar's face box (frame 0), inside the frame."""
    x1, y1, x2, y2 = (int(v) for v in avatar.boxes[0])
    h, w = avatar.frames.shape[1:3]
    return max(0, x1), max(0, y1), min(w, x2), min(h, y2)


def moved(a: np.ndarray, b: np.ndarray, block: int = 8) -> float:
    """How far two mouth crops differ, in levels: the largest difference of their ``block``-pixel block
    means (a mouth opening darkens whole blocks; the encoder's noise and its refinement of a still
    picture average out inside a block)."""
    h, w = (a.shape[0] // block) * block, (a.shape[1] // block) * block

    def blocks(x):
        return x[:h, :w].reshape(h // block, block, w // block, block, -1).mean(axis=(1, 3))

    return float(np.abs(blocks(a) - blocks(b)).max())


async def send_pcm(ws, x: np.ndarray, rate: int, chunk_s: float = 0.02, realtime: bool = True) -> None:
    """``x`` (float, -1..1) as s16le messages of ``chunk_s`` seconds, paced in real time when asked."""
    pcm = (np.clip(x, -1, 1) * 32767).astype("<i2")
    step = max(1, int(rate * chunk_s))
    t0 = time.monotonic()
    for i in range(0, len(pcm), step):
        await ws.send(pcm[i : i + step].tobytes())
        if realtime:
            ahead = t0 + (i + step) / rate - time.monotonic()
            if ahead > 0:
                await asyncio.sleep(ahead)

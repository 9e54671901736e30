"""Feed a live session of a ``studio serve`` from a file or stdin, in real time (``studio live``).

    play(client, "anna", audio="voice.flac" | "-" | None, push="rtmp://...", on_line=print)

Opens the session, prints its WHEP link (any WHEP player shows it: docs/live.md), optionally pushes it
to an RTMP(S)/SRT ingest, then sends the voice over the session's audio WebSocket as s16le PCM in
20 ms messages paced by the clock (a file is decoded by Studio's audio reader at 16 kHz; stdin is
s16le mono at ``rate``). When the voice ends it waits for the presenter to say it all, prints the
session's figures and ends the session (Ctrl-C ends it at once).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator

import numpy as np

CHUNK_S = 0.02


def _file_chunks(path: str) -> tuple[Iterator[bytes], int]:
    from studio.core.media.audio import load

    wave = load(path)
    pcm = (np.clip(wave.samples, -1, 1) * 32767).astype("<i2").tobytes()
    step = int(16_000 * CHUNK_S) * 2
    return (pcm[i : i + step] for i in range(0, len(pcm), step)), 16_000


def _stdin_chunks(rate: int) -> Iterator[bytes]:
    step = int(rate * CHUNK_S) * 2
    stream = sys.stdin.buffer
    while True:
        data = stream.read(step)
        if not data:
            return
        yield data


def play(
    client,
    avatar: str,
    audio: str | None = None,
    push: str | None = None,
    rate: int = 16_000,
    settings: dict | None = None,
    on_line: Callable[[str], None] = print,
    hold_s: float | None = None,
) -> dict:
    """Run one live session (see the module's text); answers its last figures. ``hold_s``: without
    ``audio``, how long the session stays open (None: until Ctrl-C)."""
    from websockets.sync.client import connect

    session = client.live_open(avatar, **(settings or {}))
    sid = session["id"]
    on_line(f"live session {sid}: WHEP {client.url}{session['links']['whep']}")
    try:
        if push:
            p = client.live_push(sid, push)
            on_line(f"pushing to {p['url']}")
        if audio is None:
            end = None if hold_s is None else time.monotonic() + hold_s
            while end is None or time.monotonic() < end:
                time.sleep(0.5)
        else:
            chunks, rate = _file_chunks(audio) if audio != "-" else (_stdin_chunks(rate), rate)
            with connect(client.live_audio_url(session, rate), max_size=2**20) as ws:
                t0 = time.monotonic()
                sent = 0
                for data in chunks:
                    ws.send(data)
                    sent += len(data) // 2
                    ahead = t0 + sent / rate - time.monotonic()
                    if ahead > 0:
                        time.sleep(ahead)
            while client.live(sid)["queued_voice_s"] > 0:  # the presenter says what is queued
                time.sleep(0.1)
            time.sleep(0.5)  # and its look-ahead
        figures = client.live(sid)["figures"]
        on_line(
            f"{figures['frames']} frames at {figures['fps']} frames/s; first frame {figures['first_frame_s']} s; "
            f"latency p50 {figures['latency_ms']['p50']} ms, p95 {figures['latency_ms']['p95']} ms; "
            f"late {figures['late']}, dropped {figures['dropped']}"
        )
        return figures
    finally:
        client.live_end(sid)

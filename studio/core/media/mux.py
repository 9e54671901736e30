"""The output container: one MP4 with the video stream and the voice-over's AAC interleaved.

    mux = Muxer(fh, fps, total_frames, audio)        # audio: an encoders.AudioSource or None
    vs = mux.open()                                   # libx264 stream (or mux.open(template) for NVENC)
    mux.video(pkt)                                    # one encoded packet, in decode order
    mux.append_chunks(chunks, stop)                   # the streaming mux: spilled chunks, in order
    mux.finish()                                      # the rest of the audio, the index; then close

``delivery_tags(start_tc="10:00:00:00", chapters=[(0.0, 4.2, "Intro"), ...])`` around ``open_video``: the
MP4/MOV files opened in that context get a timecode track (``tmcd``: the first frame's timecode; FFmpeg's
mov muxer writes it from the ``timecode`` tag, drop-frame when written ``HH:MM:SS;FF``) and chapters (a
QuickTime chapter track and, in MP4, Nero ``chpl``). A context variable rather than one more argument
through every writer: the writers open the container in their constructor, in the caller's thread.

The index (``moov``) goes into space reserved at the front when the frame count is known (no rewrite
at the end), else by a faststart rewrite. The audio is muxed up to the video's time as the video
arrives, so the file is interleaved without a second pass. The writer (``media.writer``) owns the
encoders and lanes; this module owns what goes into the file and in which order.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

from studio.core.media.encoders import BT709, RANGE_MPEG, read_packets
from studio.core.media.rates import mp4_time_base

MAX_CHAPTERS = 100  # the reserved index has room for this many (16 KiB of slack: ~80 bytes each)

_TAGS: contextvars.ContextVar[dict | None] = contextvars.ContextVar("studio_mux_tags", default=None)


@contextlib.contextmanager
def delivery_tags(start_tc: str | None = None, chapters=None):
    """Files opened inside get a timecode track starting at ``start_tc`` and ``chapters``
    (``(start_s, end_s, title)``, at most ``MAX_CHAPTERS``, titles cut to 60 characters)."""
    chapters = [(float(a), float(b), str(t)[:60]) for a, b, t in (chapters or []) if b > a][:MAX_CHAPTERS]
    token = _TAGS.set({"start_tc": start_tc, "chapters": chapters})
    try:
        yield
    finally:
        _TAGS.reset(token)


def current_tags() -> dict | None:
    """The context's ``{"start_tc", "chapters"}`` (None outside ``delivery_tags``): what an encoder that
    writes timecode itself reads (the MPEG-2 GOP headers of XDCAM)."""
    return _TAGS.get()


def tag_container(container, vstream) -> None:
    """Write the context's timecode and chapters into ``container`` (before its header is written); an
    MXF gets the timecode (its material package and system item), not chapters."""
    tags = _TAGS.get()
    if tags and container.format.name.split(",")[0] == "mxf":
        if tags["start_tc"]:
            container.metadata["timecode"] = tags["start_tc"]
        return
    if not tags or container.format.name.split(",")[0] not in ("mp4", "mov"):
        return
    if tags["start_tc"]:
        vstream.metadata["timecode"] = tags["start_tc"]
    if tags["chapters"]:
        ms = Fraction(1, 1000)
        container.set_chapters(
            [
                {
                    "id": k + 1,
                    "start": round(a * 1000),
                    "end": round(b * 1000),
                    "time_base": ms,
                    "metadata": {"title": t},
                }
                for k, (a, b, t) in enumerate(tags["chapters"])
            ]
        )


SYNC_BYTES = 64 << 20  # the mux hands finished MP4 data to the disk every this many bytes
MOOV_PER_SAMPLE = 48  # bytes of index per video frame or AAC packet at most (stsz, stts, ctts, stss, stsc, co64)


class Muxer:
    """Packets into one MP4 file object ``fh``: video in decode order, audio interleaved by time."""

    def __init__(self, fh, fps: int | Fraction, total_frames: int | None, audio=None):
        self.fh = fh
        self.fps = Fraction(fps)  # exact: 30000/1001 at 29.97
        self.total_frames = int(total_frames or 0)  # 0: unknown (the index is written at the end)
        self.audio = audio
        self.container: Any = None  # av.container.OutputContainer once open()ed
        self.vstream: Any = None
        self.chunks_muxed = 0  # chunks appended so far (append_chunks)
        self._muxed_until_s = 0.0  # seconds of video muxed so far (drives the audio interleave)
        self._last_dts = -(1 << 62)
        self._synced = 0

    def open(self, template=None):
        """Open the container with a libx264 stream (the caller configures its codec context), or a
        stream copied from ``template`` (an NVENC elementary stream's); returns the video stream."""
        import av

        options = {"movflags": "+faststart"}
        if self.total_frames:  # the index goes into space reserved up front: no rewrite of the whole file at close
            samples = self.total_frames + (self.audio.packets_at_most() if self.audio is not None else 0)
            options = {"moov_size": str(16384 + MOOV_PER_SAMPLE * samples)}
        self.container = av.open(self.fh, "w", format="mp4", options=options)
        if template is None:
            vs = self.container.add_stream("libx264", rate=self.fps)
        else:
            vs = self.container.add_stream_from_template(template)
            vs.time_base = mp4_time_base(self.fps)
        cc = vs.codec_context
        cc.color_primaries = cc.color_trc = cc.colorspace = BT709
        cc.color_range = RANGE_MPEG
        self.vstream = vs
        tag_container(self.container, vs)
        if self.audio is not None:
            self.audio.add_stream(self.container)
        return vs

    def start(self) -> None:
        self.container.start_encoding()

    def video(self, pkt) -> None:
        """Mux one video packet, then the audio up to its time."""
        pkt.stream = self.vstream
        if pkt.dts is not None:  # safety net where two chunks' reorder delays differ
            if pkt.dts <= self._last_dts < pkt.pts:
                pkt.dts = self._last_dts + 1
            self._last_dts = pkt.dts
        if pkt.pts is not None and pkt.time_base is not None:
            # read before muxing: the muxer rescales pts to the file's time base in place (read after,
            # it counted 1/12800 s ticks as frames, so the mux asked for the whole audio at once and
            # waited for its encoder: 5.8 s of a 15,000-frame render on the H200)
            end = float(pkt.pts * pkt.time_base) + 1.0 / float(self.fps)
            self._muxed_until_s = max(self._muxed_until_s, end)
        self.container.mux(pkt)
        if self.audio is not None:
            self.audio.mux_until(self.container, self._muxed_until_s)

    def annexb(self, raw: Path) -> None:
        """Mux an H.264 Annex B file (no B-frames: decode order = display order) frame by frame."""
        import av

        with av.open(str(raw), format="h264", options={"framerate": str(self.fps)}) as src:
            self.open(src.streams.video[0])
            self.start()
            tb = 1 / self.fps
            for i, pkt in enumerate(p for p in src.demux(src.streams.video[0]) if p.size):
                pkt.pts = pkt.dts = i
                pkt.duration = 1
                pkt.time_base = tb
                self.video(pkt)

    def append_chunks(self, chunks, stop) -> None:
        """Append spilled ``chunks`` (from ``chunks_muxed`` on) in order, each as soon as it is encoded
        (``chunk.done``); its spill file is deleted once in. Returns early when ``stop`` is set."""
        for ch in chunks[self.chunks_muxed :]:
            while not ch.done.wait(0.05):
                if stop.is_set():
                    return
            for pkt in read_packets(ch.spill, self.vstream):
                if stop.is_set():
                    return
                self.video(pkt)
            with contextlib.suppress(FileNotFoundError):
                ch.spill.unlink()
            ch.muxed_at = time.perf_counter()
            self.chunks_muxed += 1
            if self.fh.tell() - self._synced > SYNC_BYTES:  # write back as we go: a short fsync at close
                self.fh.flush()
                os.fdatasync(self.fh.fileno())
                self._synced = self.fh.tell()

    def finish(self) -> None:
        """The rest of the audio, then the index (the container is closed; the file object is not)."""
        if self.audio is not None:
            self.audio.mux_until(self.container, None)
        self.container.close()

    def discard(self) -> None:
        """Close without writing anything more (the file object must be closed first)."""
        if self.container is not None:
            with contextlib.suppress(Exception):
                self.container.close()

"""The encoder back-ends a ``VideoWriter`` drives, their spill files, and the AAC audio source.

``X264Encoder`` (libx264 in this process), ``NvencEncoder`` (PyNvVideoCodec, H.264 Annex B) and
``probe_nvenc``; ``PacketFile``/``read_packets`` spill a chunk's packets to disk (``REC`` records,
the same format the x264 worker processes write) and ``RawFile`` an elementary stream, all
through ``HookedFile`` (tests inject a full disk there); ``AudioSource`` is the voice-over's AAC
track (copied, cached or encoded) muxed as the video advances.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import struct
import threading
from fractions import Fraction
from pathlib import Path

import numpy as np

from studio.core.errors import AudioError
from studio.core.media.x264_pool import REC

log = logging.getLogger(__name__)

AAC_RATES = (96000, 88200, 64000, 48000, 44100, 32000, 24000, 22050, 16000, 12000, 11025, 8000)
BT709, RANGE_MPEG = 1, 1  # AVCOL_PRI/TRC/SPC_BT709 and AVCOL_RANGE_MPEG (limited)


@functools.lru_cache(maxsize=1)
def probe_nvenc() -> tuple[bool, str]:
    """(available, why): NVENC counts as available only when an encode session really opens."""
    try:
        import PyNvVideoCodec as nvc  # noqa: N813
    except Exception as exc:  # noqa: BLE001 - ImportError, or OSError for a missing libnvidia-encode.so.1
        return False, f"PyNvVideoCodec cannot be imported ({type(exc).__name__}: {exc})"
    try:
        enc = nvc.CreateEncoder(256, 256, "NV12", True, codec="h264")
        enc.EndEncode()
        del enc
    except Exception as exc:  # noqa: BLE001 - PyNvVCException on GPUs without NVENC (H100/H200)
        return False, f"NVENC session cannot be opened ({type(exc).__name__}: {exc})"
    return True, "NVENC session opened"


def x264_params(gop: int = 0) -> str:
    """libx264's private options: always closed GOPs (every chunk and keyframe a clean cut), and with
    ``gop`` frames a keyframe at least that often (0: x264's own, 250 frames)."""
    return "open-gop=0" + (f":keyint={int(gop)}" if gop and gop > 0 else "")


def configure_x264(ctx, width, height, fps, crf, preset, threads, gop: int = 0) -> None:
    ctx.width, ctx.height = width, height
    ctx.pix_fmt = "nv12"  # x264 works in NV12 internally: no conversion on our side or its side
    ctx.time_base = 1 / Fraction(fps)  # pts = frame index, exact at 30000/1001 too
    ctx.framerate = Fraction(fps)
    ctx.color_primaries = ctx.color_trc = ctx.colorspace = BT709
    ctx.color_range = RANGE_MPEG
    ctx.thread_count = threads
    ctx.options = {"preset": str(preset), "crf": str(crf), "x264-params": x264_params(gop)}


class X264Encoder:
    """A libx264 codec context fed NV12 frames; yields PyAV packets."""

    def __init__(self, ctx):
        import av

        self._av, self.ctx = av, ctx

    def encode(self, nv12: np.ndarray, pts: int):
        av = self._av
        try:
            vf = av.VideoFrame.from_numpy_buffer(nv12, format="nv12")
        except ValueError:  # widths the zero-copy path cannot take
            vf = av.VideoFrame.from_ndarray(np.ascontiguousarray(nv12), format="nv12")
        vf.color_range, vf.colorspace = RANGE_MPEG, BT709
        vf.pts = pts
        return self.ctx.encode(vf)

    def flush(self):
        return self.ctx.encode(None)


# x264 preset names -> NVENC presets P1 (fastest) .. P7 (best)
NV_PRESETS = {
    "ultrafast": "P1",
    "superfast": "P1",
    "veryfast": "P2",
    "faster": "P3",
    "fast": "P4",
    "medium": "P4",
    "slow": "P5",
    "slower": "P6",
    "veryslow": "P7",
    "placebo": "P7",
}


class NvencEncoder:
    """PyNvVideoCodec H.264, host NV12 input, no B-frames, constant QP ~ the CRF; yields bytes."""

    def __init__(self, width, height, fps, crf, preset, gop: int = 0):
        import PyNvVideoCodec as nvc  # noqa: N813

        gop = int(gop) if gop and gop > 0 else 10 * round(fps)

        self._enc = nvc.CreateEncoder(
            width,
            height,
            "NV12",
            True,
            codec="h264",
            preset=NV_PRESETS.get(str(preset), "P4"),
            tuning_info="high_quality",
            rc="constqp",
            constqp=int(crf),
            fps=round(fps),
            gop=gop,
            idrperiod=gop,
            bf=0,
            repeatspspps=1,
        )

    def encode(self, nv12: np.ndarray, pts: int):
        data = self._enc.Encode(np.ascontiguousarray(nv12))
        return [bytes(data)] if data is not None and len(data) else []

    def flush(self):
        data = self._enc.EndEncode()
        return [bytes(data)] if data is not None and len(data) else []


# Encoders that produce an H.264 Annex B elementary stream (no B-frames), by writer-name prefix.
ELEMENTARY = {"nvenc": NvencEncoder}


class HookedFile:
    """A binary file whose writes first call ``hook(nbytes)`` (to simulate a full disk)."""

    def __init__(self, path, mode, hook):
        self._f = open(path, mode)
        self._hook = hook
        self.name = str(path)

    def write(self, data) -> int:
        if self._hook is not None:
            self._hook(len(data))
        return self._f.write(data)

    def __getattr__(self, name):
        return getattr(self._f, name)


class RawFile:
    """An elementary stream: each encoded chunk of bytes appended as is."""

    def __init__(self, path: Path, hook):
        self.path = path
        self._f = HookedFile(path, "wb", hook)

    def __call__(self, data: bytes) -> None:
        self._f.write(data)

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()


class PacketFile:
    """Encoded packets of one chunk, spilled to disk in encode order until ``close`` appends them."""

    def __init__(self, path: Path, hook):
        self.path = path
        self._f = HookedFile(path, "wb", hook)

    def __call__(self, pkt) -> None:
        data = bytes(pkt)
        self._f.write(REC.pack(pkt.pts, pkt.dts, len(data), 1 if pkt.is_keyframe else 0) + data)

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()


def read_packets(path: Path, stream):
    import av

    with open(path, "rb") as f:
        while head := f.read(REC.size):
            pts, dts, size, key = REC.unpack(head)
            pkt = av.Packet(f.read(size))
            pkt.pts, pkt.dts = pts, dts
            pkt.time_base = stream.codec_context.time_base
            pkt.is_keyframe = bool(key)
            yield pkt


AREC = struct.Struct("<qqII")  # one AAC packet in a worker's audio file: pts, dts, size, duration
AAC_BIT_RATE = 96_000  # per channel
# FFmpeg's "fast" AAC coder: its documentation says it is worse than the default two-loop search
# below 64 kbit/s per channel but better and much faster above; at 96 kbit/s per channel it took
# 0.46 s against 1.05 s for 28 s of 48 kHz stereo speech on the 2-core development machine.
AAC_OPTIONS = {"aac_coder": "fast"}


class AudioSource:
    """The voice-over's AAC track for one output, muxed up to the video's time as the video arrives.

    Three ways, chosen at open: the voice-over already is AAC (M4A, a video's AAC track):
    its packets are **copied** unchanged; an earlier render encoded the same content with the same
    settings: the packets come from the **cache** (``aac_cache``); otherwise the samples are
    **encoded** here block by block, or by an x264-pool worker process (``encode_elsewhere``:
    PyAV holds the GIL while it encodes) from the moment the writer opens, the mux copying its
    packets as they come. ``how`` says which ("copied", "cached", "encoded"); an encoded track is
    stored in the cache for the next render. ``wait_s``: time the mux was held up waiting for
    packets that were not encoded yet.
    """

    BLOCK = 8192

    def __init__(self, path, cache: bool = True):
        from studio.core.media import audio

        self.path = Path(path)
        self.info = audio.probe(self.path)  # AudioError: one sentence naming what is wrong
        self.copy = audio.aac_copyable(self.path)
        self.rate_in = self.info.source_rate
        self.channels = self.info.channels if self.info.channels <= 2 else 1  # more than stereo: a mono mix
        self.rate = self.rate_in if self.rate_in in AAC_RATES else 48000
        self.layout = "mono" if self.channels == 1 else "stereo"
        self.how = "copied" if self.copy else "encoded"
        self.cache_root = None
        if cache and not self.copy:
            from studio.core.media import aac_cache

            with contextlib.suppress(OSError):
                self.cache_root = aac_cache.default_root()
        self._resampler = None
        self._sent = 0
        self._eof = False
        self._src = None  # copy: the voice-over's container, demuxed as the video advances
        self._demux = None
        self._records = None  # packets from an AREC file: a remote encoder's (growing) or a cache entry
        self._remote = None  # (worker or None once it answered, packet file): another process encodes
        self._remote_lock = threading.Lock()
        self._remote_done = False
        self._next = None
        self._tee = None  # (file, path, records): a local encode's packets, stored in the cache at the end
        self._key = None
        self.started_at = None  # perf_counter when the track started to be prepared (for traces)
        self.ready_at = None  # ... and when it was complete
        self.wait_s = 0.0
        self.cancel = threading.Event()  # set by an aborting writer: stop waiting for the remote encoder

    def settings(self) -> dict:
        """What the encoded bytes depend on, besides the samples (the cache key's half)."""
        return {
            "codec": "aac",
            "rate": self.rate,
            "channels": self.channels,
            "bit_rate": AAC_BIT_RATE * self.channels,
            "options": AAC_OPTIONS,
        }

    def packets_at_most(self) -> int:
        """An upper bound on the AAC packets of the whole file (1024 samples each; for the index)."""
        seconds = self.info.source_frames / max(1, self.rate_in)
        return int(seconds * max(self.rate, self.rate_in) / 1024) + 16

    def add_stream(self, container) -> None:
        import time

        self.started_at = time.perf_counter()
        if self.copy:
            import av

            self._src = av.open(str(self.path))
            src_stream = self._src.streams.audio[0]
            self.stream = container.add_stream_from_template(src_stream)
            self._demux = (p for p in self._src.demux(src_stream) if p.size)
            self.ready_at = self.started_at  # nothing to prepare
            return
        self.stream = container.add_stream("aac", rate=self.rate, layout=self.layout, options=dict(AAC_OPTIONS))
        self.stream.codec_context.bit_rate = AAC_BIT_RATE * self.channels

    def frames(self):
        """The audio as AAC-ready ``AudioFrame`` blocks (resampled, at most stereo)."""
        import av

        from studio.core.media import audio

        if self.rate != self.rate_in and self._resampler is None:
            import soxr

            self._resampler = soxr.ResampleStream(self.rate_in, self.rate, self.channels, dtype="float32")
        blocks = audio.read_blocks(self.info, self.BLOCK)
        block = next(blocks, None)
        while not self._eof:
            following = next(blocks, None) if block is not None else None
            last = following is None
            if block is None:
                block = np.zeros((0, self.info.channels), np.float32)
            if block.shape[1] > 2:
                block = block.mean(axis=1, keepdims=True)
            if self._resampler is not None:
                block = self._resampler.resample_chunk(block, last=last)
            self._eof = last
            if len(block):
                frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(block.T), format="fltp", layout=self.layout)
                frame.sample_rate = self.rate
                frame.pts = self._sent
                frame.time_base = Fraction(1, self.rate)
                self._sent += len(block)
                yield frame
            block = following

    def encode_elsewhere(self, worker, path: Path) -> None:
        """Have ``worker`` (an x264-pool process) prepare the track into ``path`` (``AREC``
        records, written block by block: ``mux_until`` reads them as they come): from the cache
        when it holds this content, else encoded (and then stored there)."""
        worker.conn.send(("aac", str(self.path), str(path), str(self.cache_root or "")))
        self._remote = (worker, Path(path))
        self._records = _Records(Path(path), self.rate)

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Wait until a remote encoder has answered (the whole track is in its file)."""
        import time

        end = None if timeout is None else time.monotonic() + timeout
        while not self._remote_done and self._remote is not None:
            self._poll_remote(0.01)
            if end is not None and time.monotonic() > end:
                break
        return self._remote_done or self._remote is None

    def _poll_remote(self, timeout: float) -> None:
        """Take the remote encoder's answer when it is there (from any thread, one at a time)."""
        import time

        with self._remote_lock:
            if self._remote_done or self._remote is None or self._remote[0] is None:
                return
            worker = self._remote[0]
            if not worker.conn.poll(timeout):
                return
            msg = worker.conn.recv()
            worker.lock.release()
            self._remote = (None, self._remote[1])
            if msg[0] == "error":
                self._remote_error = msg
            else:
                self.how = msg[2] if len(msg) > 2 else "encoded"
                self.ready_at = msg[4] if len(msg) > 4 else time.perf_counter()  # the worker's clock: the same on Linux
            self._remote_done = True

    def _next_remote(self):
        """The next remote packet, waiting for the worker as needed; None at the end."""
        import time

        t0 = None
        try:
            while True:
                pkt = self._records.next()
                if pkt is not None:
                    return pkt
                if self._remote_done:
                    msg = getattr(self, "_remote_error", None)
                    if msg is not None:
                        if len(msg) > 2 and msg[2]:
                            raise OSError(msg[2], f"audio encoder failed: {msg[1]}")
                        raise AudioError(f"Encoding the audio of {self.path.name} failed ({msg[1]}).")
                    pkt = self._records.next()  # the last records, written before the answer
                    return pkt
                if t0 is None:
                    t0 = time.perf_counter()
                self._poll_remote(0.005)
                if self.cancel.is_set() and not self._remote_done:
                    raise AudioError("the render was stopped before its audio was encoded")
        finally:
            if t0 is not None:
                self.wait_s += time.perf_counter() - t0

    def _open_local(self) -> None:
        """A local encode: packets from the cache when it holds this content, else a tee file
        that is stored there when the encode ends."""
        import time

        from studio.core.media import aac_cache

        if self.cache_root is None or self._key is not None:
            return
        try:
            self._key = aac_cache.entry_key(self.path, self.settings())
            hit = aac_cache.lookup(self._key, self.cache_root)
            if hit is not None:
                self._records = _Records(hit[0], self.rate, limit=hit[1])
                self._remote_done = True
                self.how = "cached"
                self.ready_at = time.perf_counter()
                return
            from studio.core.store.temps import temp_file

            # registered: a run killed mid-encode (SIGKILL) leaves it to the next command's sweep
            tee_path = temp_file(self.cache_root, f".{self._key}.", ".part")
            self._tee = [open(tee_path, "wb"), tee_path, 0]
        except OSError as exc:
            log.debug("AAC cache not used: %s", exc)

    def _mux_encoded(self, container, pkt) -> None:
        container.mux(pkt)
        if self._tee is not None:
            data = bytes(pkt)
            self._tee[0].write(AREC.pack(pkt.pts, pkt.dts, len(data), pkt.duration or 0) + data)
            self._tee[2] += 1

    def mux_until(self, container, seconds: float | None) -> None:
        """Mux audio up to ``seconds`` of the video (None: to the end, flushing an encoder)."""
        import time

        if self.copy:
            limit = None if seconds is None else seconds + self.BLOCK / self.rate
            while True:
                if self._next is None:
                    self._next = next(self._demux, None)
                    if self._next is None:
                        return
                pkt = self._next
                if limit is not None and pkt.pts is not None and float(pkt.pts * pkt.time_base) >= limit:
                    return
                pkt.stream = self.stream
                container.mux(pkt)
                self._next = None
        if self._records is None and self._remote is None:
            self._open_local()
        if self._records is not None:
            limit = None if seconds is None else (int(seconds * self.rate) + self.BLOCK)
            while True:
                if self._next is None:
                    self._next = self._next_remote() if self._remote is not None else self._records.next()
                    if self._next is None:
                        return
                if limit is not None and self._next.pts >= limit:
                    return
                self._next.stream = self.stream
                container.mux(self._next)
                self._next = None
        target = None if seconds is None else int(seconds * self.rate) + self.BLOCK
        if self._eof is False and not hasattr(self, "_frames"):
            self._frames = self.frames()
        while not self._eof and (target is None or self._sent < target):
            frame = next(self._frames, None)
            if frame is None:
                break
            for pkt in self.stream.encode(frame):
                self._mux_encoded(container, pkt)
        if seconds is None:
            for pkt in self.stream.encode(None):
                self._mux_encoded(container, pkt)
            self.ready_at = time.perf_counter()
            self._store_tee()

    def _store_tee(self) -> None:
        if self._tee is None:
            return
        from studio.core.media import aac_cache
        from studio.core.store import temps

        fh, path, count = self._tee
        self._tee = None
        try:
            fh.close()
            aac_cache.store(self._key, path, self.cache_root, count)
        except OSError as exc:
            log.debug("AAC cache entry not stored: %s", exc)
        finally:
            temps.drop_temp(path)

    def close(self) -> None:
        if self._remote is not None and self._remote[0] is not None:  # still encoding: stop it
            worker = self._remote[0]
            self._remote = (None, self._remote[1])
            with contextlib.suppress(Exception):
                worker.kill()
            with contextlib.suppress(Exception):
                worker.lock.release()
        if self._records is not None:
            self._records.close()
        if self._tee is not None:  # an encode that did not finish: nothing is stored
            from studio.core.store import temps

            fh, path, _ = self._tee
            self._tee = None
            with contextlib.suppress(OSError):
                fh.close()
            temps.drop_temp(path)
        if self._src is not None:
            with contextlib.suppress(Exception):
                self._src.close()


class _Records:
    """``AREC`` packets read from a file as it grows (a worker writes it) or up to ``limit``
    bytes (a cache entry: its trailer follows)."""

    def __init__(self, path: Path, rate: int, limit: int | None = None):
        self.path, self.rate, self.limit = path, rate, limit
        self._f = None

    def next(self):
        """The next packet, or None when there is none (yet)."""
        import av

        if self._f is None:
            try:
                self._f = open(self.path, "rb")
            except FileNotFoundError:  # the worker has not started on it yet
                return None
        f = self._f
        pos = f.tell()
        if self.limit is not None and pos + AREC.size > self.limit:
            return None
        head = f.read(AREC.size)
        if len(head) == AREC.size:
            pts, dts, size, duration = AREC.unpack(head)
            data = f.read(size)
            if len(data) == size:
                pkt = av.Packet(data)
                pkt.pts, pkt.dts, pkt.time_base = pts, dts, Fraction(1, self.rate)
                if duration:
                    pkt.duration = duration
                return pkt
        f.seek(pos)  # a record still being written
        return None

    def close(self) -> None:
        if self._f is not None:
            with contextlib.suppress(Exception):
                self._f.close()
            self._f = None


def encode_aac_file(src: str, out: str, cache_root: str = "") -> tuple[int, str]:
    """Prepare ``src``'s AAC track exactly as ``AudioSource`` does in a writer, as ``AREC``
    records in ``out``: copied from the cache under ``cache_root`` when it holds this content,
    else encoded (flushed block by block: the writer's mux thread reads as it goes) and then
    stored there. Runs in an x264-pool worker (``("aac", src, out, cache_root)``); returns the
    packet count and how ("cached" or "encoded")."""

    import av

    from studio.core.media import aac_cache

    source = AudioSource(src, cache=False)
    key = None
    try:
        if cache_root:
            with contextlib.suppress(OSError):
                key = aac_cache.entry_key(src, source.settings())
                hit = aac_cache.lookup(key, cache_root)
                if hit is not None:
                    with open(hit[0], "rb") as f, open(out, "wb") as o:
                        left = hit[1]
                        while left > 0 and (chunk := f.read(min(left, 1 << 20))):
                            o.write(chunk)
                            left -= len(chunk)
                    return -1, "cached"
        ctx = av.CodecContext.create("aac", "w")
        ctx.sample_rate = source.rate
        ctx.layout = source.layout
        ctx.format = "fltp"
        ctx.time_base = Fraction(1, source.rate)
        ctx.bit_rate = AAC_BIT_RATE * source.channels
        ctx.options = dict(AAC_OPTIONS)
        ctx.flags |= av.codec.context.Flags.global_header
        ctx.open()
        n = 0
        with open(out, "wb") as f:
            for frame in itertools.chain(source.frames(), [None]):
                for p in ctx.encode(frame):
                    data = bytes(p)
                    f.write(AREC.pack(p.pts, p.dts, len(data), p.duration or 0) + data)
                    n += 1
                f.flush()  # block by block: the writer's mux thread reads as it goes
        if key is not None:
            aac_cache.store(key, out, cache_root, n)
        return n, "encoded"
    finally:
        source.close()

"""The encoder back-ends a ``VideoWriter`` drives, their spill files, and the AAC audio source.

``X264Encoder`` (libx264 in this process), ``NvencEncoder`` (PyNvVideoCodec, H.264 Annex B) and
``probe_nvenc``; ``PacketFile``/``read_packets`` spill a chunk's packets to disk (``REC`` records,
the same format the x264 worker processes write) and ``RawFile`` an elementary stream, all
through ``HookedFile`` (tests inject a full disk there); ``AudioSource`` encodes the original audio
to AAC block by block as the video advances.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import struct
import threading
from fractions import Fraction
from pathlib import Path

import numpy as np

from studio.core.errors import AudioError
from studio.core.media.x264_pool import REC

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


def configure_x264(ctx, width, height, fps, crf, preset, threads) -> None:
    ctx.width, ctx.height = width, height
    ctx.pix_fmt = "nv12"  # x264 works in NV12 internally: no conversion on our side or its side
    ctx.time_base = Fraction(1, fps)
    ctx.framerate = Fraction(fps)
    ctx.color_primaries = ctx.color_trc = ctx.colorspace = BT709
    ctx.color_range = RANGE_MPEG
    ctx.thread_count = threads
    ctx.options = {"preset": str(preset), "crf": str(crf), "x264-params": "open-gop=0"}


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

    def __init__(self, width, height, fps, crf, preset):
        import PyNvVideoCodec as nvc  # noqa: N813

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
            fps=int(fps),
            gop=10 * int(fps),
            idrperiod=10 * int(fps),
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


class AudioSource:
    """The original audio file, read block by block and encoded to AAC as the video advances.

    ``encode_elsewhere(worker, path)`` hands the encoding to an x264-pool worker process instead
    (PyAV holds the GIL while it encodes: 10 minutes of audio cost ~5-10 s of the parent's time,
    which used to be spent in the final join); ``mux_until`` then copies its packets.
    """

    BLOCK = 8192

    def __init__(self, path):
        import soundfile as sf

        self.path = Path(path)
        try:
            self._sf = sf.SoundFile(str(self.path))
        except Exception as exc:
            raise AudioError(
                f"Cannot read the audio file {self.path.name} ({exc}): use a WAV, FLAC, OGG or MP3 file."
            ) from exc
        self.rate_in = self._sf.samplerate
        self.channels = min(self._sf.channels, 2) if self._sf.channels <= 2 else 1
        self.rate = self.rate_in if self.rate_in in AAC_RATES else 48000
        self._layout = "mono" if self.channels == 1 else "stereo"
        self._resampler = None
        if self.rate != self.rate_in:
            import soxr

            self._resampler = soxr.ResampleStream(self.rate_in, self.rate, self.channels, dtype="float32")
        self._sent = 0
        self._eof = False
        self._remote = None  # (worker or None once it answered, packet file): another process encodes
        self.wait_s = 0.0  # time spent waiting for the remote encoder
        self.cancel = threading.Event()  # set by an aborting writer: stop waiting for the remote encoder

    def packets_at_most(self) -> int:
        """An upper bound on the AAC packets of the whole file (1024 samples each; for the index)."""
        seconds = self._sf.frames / max(1, self.rate_in)
        return int(seconds * self.rate / 1024) + 16

    def add_stream(self, container) -> None:
        self.stream = container.add_stream("aac", rate=self.rate, layout=self._layout)
        self.stream.codec_context.bit_rate = 96_000 * self.channels

    def frames(self):
        """The audio as AAC-ready ``AudioFrame`` blocks (resampled, at most stereo)."""
        import av

        while not self._eof:
            block = self._sf.read(self.BLOCK, dtype="float32", always_2d=True)
            last = len(block) < self.BLOCK
            if self._sf.channels > 2:
                block = block.mean(axis=1, keepdims=True)
            if self._resampler is not None:
                block = self._resampler.resample_chunk(block, last=last)
            self._eof = last
            if len(block):
                frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(block.T), format="fltp", layout=self._layout)
                frame.sample_rate = self.rate
                frame.pts = self._sent
                frame.time_base = Fraction(1, self.rate)
                self._sent += len(block)
                yield frame

    def encode_elsewhere(self, worker, path: Path) -> None:
        """Have ``worker`` (an x264-pool process) encode the file to ``path`` (``AREC`` records,
        flushed block by block: ``mux_until`` reads them as they come)."""
        worker.conn.send(("aac", str(self.path), str(path)))
        self._remote = (worker, Path(path))
        self._remote_done = False
        self._reader = None
        self._next = None

    def _read_remote(self):
        """The next packet of the remote encoder's file, or None when there is none yet."""
        import av

        if self._reader is None:
            try:
                self._reader = open(self._remote[1], "rb")
            except FileNotFoundError:  # the worker has not started on it yet
                return None
        f = self._reader
        pos = f.tell()
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

    def _next_remote(self):
        """The next remote packet, waiting for the worker as needed; None at the end."""
        import time

        t0 = time.perf_counter()
        try:
            while True:
                pkt = self._read_remote()
                if pkt is not None or self._remote_done:
                    return pkt
                worker = self._remote[0]
                if worker.conn.poll(0.005):
                    msg = worker.conn.recv()
                    worker.lock.release()
                    self._remote = (None, self._remote[1])
                    if msg[0] == "error":
                        if len(msg) > 2 and msg[2]:
                            raise OSError(msg[2], f"audio encoder failed: {msg[1]}")
                        raise AudioError(f"Encoding the audio of {self.path.name} failed ({msg[1]}).")
                    self._remote_done = True
                elif self.cancel.is_set():
                    raise AudioError("the render was stopped before its audio was encoded")
        finally:
            self.wait_s += time.perf_counter() - t0

    def mux_until(self, container, seconds: float | None) -> None:
        """Encode and mux audio up to ``seconds`` (None: to the end, then flush the encoder)."""
        if self._remote is not None:
            limit = None if seconds is None else (int(seconds * self.rate) + self.BLOCK)
            while True:
                if self._next is None:
                    self._next = self._next_remote()
                    if self._next is None:
                        return
                if limit is not None and self._next.pts >= limit:
                    return
                self._next.stream = self.stream
                container.mux(self._next)
                self._next = None
        target = None if seconds is None else int(seconds * self.rate) + self.BLOCK
        while not self._eof and (target is None or self._sent < target):
            for frame in self.frames():
                for pkt in self.stream.encode(frame):
                    container.mux(pkt)
                if target is not None and self._sent >= target:
                    break
        if seconds is None:
            for pkt in self.stream.encode(None):
                container.mux(pkt)

    def close(self) -> None:
        if self._remote is not None and self._remote[0] is not None:  # still encoding: stop it
            worker = self._remote[0]
            self._remote = (None, self._remote[1])
            with contextlib.suppress(Exception):
                worker.kill()
            with contextlib.suppress(Exception):
                worker.lock.release()
        if getattr(self, "_reader", None) is not None:
            with contextlib.suppress(Exception):
                self._reader.close()
        with contextlib.suppress(Exception):
            self._sf.close()


def encode_aac_file(src: str, out: str) -> int:
    """Encode ``src`` to AAC exactly as ``AudioSource`` does in a writer; write ``AREC`` records
    to ``out``. Runs in an x264-pool worker (``("aac", src, out)``); returns the packet count."""
    import av

    source = AudioSource(src)
    try:
        ctx = av.CodecContext.create("aac", "w")
        ctx.sample_rate = source.rate
        ctx.layout = source._layout
        ctx.format = "fltp"
        ctx.time_base = Fraction(1, source.rate)
        ctx.bit_rate = 96_000 * source.channels
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
        return n
    finally:
        source.close()

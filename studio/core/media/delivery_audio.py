"""The audio a delivery names: its sample rate, channels, bit depth and AAC bit rate, and for the MXF
deliveries its tracks and channel map; the voice-over conformed to it once, before the writers see it.

    fmt = AUDIO_FORMATS["stereo-48k"]          # 48 kHz stereo: 24-bit PCM in MOV/MXF, AAC-LC 192 kb/s in MP4
    with conformed("voice.wav", "stereo-48k") as path:   # a 48 kHz stereo 24-bit FLAC (soxr), removed after
        ...
    fmt.channel_map -> ("voice", "voice")       # what each output channel carries, track by track

``source`` (the default, no delivery) keeps the voice-over's own rate and channels, as before. The
other formats are applied by writing the voice-over once as a 24-bit FLAC in the format's rate and
channels (soxr's VHQ resampler; a mono voice-over goes on both channels of a stereo pair, a stereo one
keeps its two), so every writer (the PCM of QuickTime, the AAC of MP4, MXF's tracks) and the loudness
normalisation that follows read a file already in the delivery's format: the writers keep one code path.
The AAC bit rate follows from the channels (``encoders.AAC_BIT_RATE`` per channel: 192 kb/s stereo).
"""

from __future__ import annotations

import contextlib
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from studio.core.errors import AudioError

VOICE, SILENCE = "voice", "silence"


@dataclass(frozen=True)
class AudioFormat:
    """One delivery audio format. ``rate`` None: the voice-over's own (``source``)."""

    name: str
    description: str
    rate: int | None = None
    channels: int | None = None  # of the conformed file (None: the voice-over's own)
    bits: int = 24  # PCM containers' bit depth
    tracks: int = 1  # mono tracks in an MXF (8 for XDCAM/AVC-Intra); 1: one track of ``channels``
    channel_map: tuple[str, ...] = ()  # per output channel (track by track): "voice" or "silence"

    @property
    def conforms(self) -> bool:
        return self.rate is not None


AUDIO_FORMATS: dict[str, AudioFormat] = {
    f.name: f
    for f in (
        AudioFormat("source", "the voice-over's own sample rate and channels (PCM at its own bit depth in MOV)"),
        AudioFormat(
            "stereo-48k",
            "48 kHz stereo: 24-bit PCM in MOV and MXF, AAC-LC at 192 kb/s in MP4, Opus in WebM; a mono "
            "voice-over on both channels",
            rate=48_000,
            channels=2,
            channel_map=(VOICE, VOICE),
        ),
        AudioFormat(
            "8-mono-48k",
            "eight mono 48 kHz 24-bit PCM tracks (XDCAM HD422, AVC-Intra): the voice on tracks 1 and 2, "
            "silence on 3 to 8",
            rate=48_000,
            channels=2,  # the pair on tracks 1-2, measured and normalised as a stereo programme (R128)
            tracks=8,
            channel_map=(VOICE, VOICE) + (SILENCE,) * 6,
        ),
    )
}
AUDIO_CHOICES = tuple(AUDIO_FORMATS)


def audio_format(name: str) -> AudioFormat:
    try:
        return AUDIO_FORMATS[name]
    except KeyError:
        raise AudioError(f"audio format {name!r} is not one of {', '.join(AUDIO_FORMATS)}") from None


BLOCK = 1 << 16


@contextlib.contextmanager
def conformed(path, name: str, folder=None):
    """``path`` itself for ``source`` (or None), else a temporary 24-bit FLAC of it in the format's
    rate and channels (a voice-over already in that format is still rewritten: one bit depth for all);
    removed on leaving."""
    fmt = audio_format(name)
    if path is None or not fmt.conforms:
        yield path
        return
    import soundfile as sf
    import soxr

    from studio.core.media.audio import probe, read_blocks

    info = probe(path)
    channels = int(fmt.channels or info.channels)
    with tempfile.TemporaryDirectory(prefix="studio-delivery-audio.", dir=folder) as tmp:
        out = Path(tmp) / "conformed.flac"
        resampler = None
        if info.source_rate != fmt.rate:
            resampler = soxr.ResampleStream(
                info.source_rate, int(fmt.rate or 48_000), channels, dtype="float32", quality="VHQ"
            )
        with sf.SoundFile(str(out), "w", samplerate=int(fmt.rate or 48_000), channels=channels, subtype="PCM_24") as fh:
            for block in read_blocks(info, BLOCK):
                block = _channels(np.asarray(block, np.float32), channels)
                if resampler is not None:
                    block = resampler.resample_chunk(block)
                if len(block):
                    fh.write(np.clip(block, -1.0, 1.0))
            if resampler is not None:
                tail = resampler.resample_chunk(np.zeros((0, channels), np.float32), last=True)
                if len(tail):
                    fh.write(np.clip(tail, -1.0, 1.0))
        yield str(out)


def _channels(block: np.ndarray, channels: int) -> np.ndarray:
    """A block with ``channels`` channels: mono copied to every channel, more folded to their mean."""
    have = block.shape[1]
    if have == channels:
        return block
    mono = block if have == 1 else block.mean(axis=1, keepdims=True, dtype=np.float32)
    return np.ascontiguousarray(np.repeat(mono, channels, axis=1))

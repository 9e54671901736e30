"""Voice-overs libsndfile does not read, decoded by FFmpeg (PyAV): M4A/AAC, the audio track of a
video file, Matroska/WebM, AVI, WMA... ``audio.probe`` and ``audio.read_blocks`` come here for them
(``is_ffmpeg_container`` tells by content, else by name), so a caller never sees which library read
the file.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from studio.core.errors import AudioError
from studio.core.media.audio_info import READ_BLOCK, SUPPORTED, AudioInfo, max_audio_minutes, quiet_stderr, too_long

# Names of files libsndfile never reads; FFmpeg does (the sniff below catches most by content).
FFMPEG_SUFFIXES = frozenset(
    ".m4a .m4b .aac .adts .mp4 .m4v .mov .qt .3gp .3g2 .mkv .mka .webm .avi .wma .wmv .asf .flv .ts .mts "
    ".m2ts .amr .ac3 .eac3 .dts .mpg .mpeg".split()
)
_CONTAINERS = {  # FFmpeg's demuxer names -> what a user calls the file
    "mov": "M4A/MP4",
    "matroska": "MKV/WebM",
    "aac": "AAC",
    "avi": "AVI",
    "asf": "WMA/ASF",
    "flv": "FLV",
    "mpegts": "MPEG-TS",
    "amr": "AMR",
    "ac3": "AC-3",
    "eac3": "E-AC-3",
}


def is_ffmpeg_container(head: bytes, suffix: str) -> bool:
    """Whether a file starting with ``head`` (or named ``*suffix``) is one libsndfile cannot read
    but FFmpeg can: MP4/M4A/MOV, Matroska/WebM, ADTS AAC, AVI, ASF/WMA, FLV, MPEG-TS."""
    if head[4:8] in (b"ftyp", b"moov", b"mdat", b"wide", b"free"):
        return True
    if head[:4] in (b"\x1aE\xdf\xa3", b"FLV\x01", b"0&\xb2u") or head[:6] == b"#!AMR\n":
        return True
    if head[:4] == b"RIFF" and head[8:12] == b"AVI ":
        return True
    if len(head) > 1 and head[0] == 0xFF and (head[1] & 0xF6) == 0xF0:  # ADTS sync word, layer 0
        return True
    if len(head) > 188 and head[0] == 0x47 and head[188] == 0x47:  # MPEG-TS packets
        return True
    return suffix.lower() in FFMPEG_SUFFIXES


def av_error(p: Path, exc: Exception) -> AudioError:
    text = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
    text = text.replace(f": '{p}'", "").replace(str(p), "").strip(" :;'")
    if "Invalid data" in text or "moov atom not found" in text:
        text = "its format is not recognised, or it is damaged"
    return AudioError(f"{p}: not an audio file Studio can read ({text}); convert it to {SUPPORTED}")


def open_av(p: Path):
    """The opened container and its first audio stream (``AudioError`` when there is none)."""
    import av

    try:
        with quiet_stderr():
            try:
                container = av.open(str(p), metadata_errors="ignore")  # PyAV 18: badly encoded tags
            except TypeError:  # PyAV 19 has no metadata_errors (its tags never raise)
                container = av.open(str(p))
    except Exception as exc:  # noqa: BLE001 - av.error.* (InvalidDataError, ...), OSError
        raise av_error(p, exc) from None
    if not container.streams.audio:
        kind = "a video file without sound" if container.streams.video else "a file with no audio track"
        container.close()
        raise AudioError(f"{p}: it is {kind}; give the voice-over itself or a video with sound")
    return container, container.streams.audio[0]


_FFMPEG_INFO: dict[tuple, AudioInfo] = {}  # (path, size, mtime): a source without a length is decoded once


def probe_ffmpeg(p: Path) -> AudioInfo:
    """Describe an FFmpeg source: an MP4/M4A/MOV's length of its first audio stream, or (other
    containers: ADTS, Matroska, AVI... where a length is missing or estimated from the bit rate)
    the decoded count (remembered while the file is unchanged)."""
    st = p.stat()
    key = (str(p), st.st_size, st.st_mtime_ns)
    if key in _FFMPEG_INFO:
        return _FFMPEG_INFO[key]
    info = _probe_now(p)
    if len(_FFMPEG_INFO) > 64:
        _FFMPEG_INFO.clear()
    _FFMPEG_INFO[key] = info
    return info


def _probe_now(p: Path) -> AudioInfo:
    container, stream = open_av(p)
    try:
        ctx = stream.codec_context
        rate, channels = int(ctx.sample_rate or stream.rate or 0), int(ctx.channels or 0)
        if rate <= 0 or channels <= 0:
            raise AudioError(f"{p}: its audio track has no sample rate or channels; export the voice-over again")
        n = 0
        fmt = (container.format.name or "").split(",")[0]
        if fmt == "mov" and stream.duration and stream.time_base:  # exact (the track's own length); other
            n = int(round(stream.duration * stream.time_base * rate))  # formats' may be a bit-rate estimate
        codec = (ctx.name or "").upper()
    finally:
        container.close()
    info = AudioInfo(str(p), _CONTAINERS.get(fmt, fmt.upper()), codec, rate, channels, n, decoder="ffmpeg")
    if n <= 0:  # no length in the header: count what decodes (no further than the limit allows)
        info = replace(info, source_frames=count_frames(info))
    return info


def count_frames(info: AudioInfo) -> int:
    """The frames of a source whose header does not say: decoded and counted, block by block (memory
    flat), no further than the voice-over limit allows."""
    limit, _ = max_audio_minutes()
    cap, n = int(limit * 60 * info.source_rate) + 1, 0
    try:
        for b in ffmpeg_blocks(info, READ_BLOCK, 0, None):
            n += len(b)
            if n > cap:
                raise too_long(info.path)
    except AudioError:
        raise
    except Exception as exc:  # noqa: BLE001 - av.error.* while decoding
        raise av_error(Path(info.path), exc) from None
    if n <= 0:
        raise AudioError(f"{info.path}: contains no audio samples; export the voice-over again")
    return n


def ffmpeg_blocks(info: AudioInfo, block: int, start: int, stop: int | None):
    """Decode an FFmpeg source's first audio stream: float32 ``[n, channels]`` blocks of about
    ``block`` source frames, frames ``start..stop`` of the decoded samples."""
    import av

    container, stream = open_av(Path(info.path))
    resampler = av.AudioResampler(format="fltp")  # any sample format -> planar float, same rate and layout
    pending: list[np.ndarray] = []
    have = pos = 0
    try:
        for frame in container.decode(stream):
            for f in resampler.resample(frame):
                data = f.to_ndarray().T  # [n, channels]
                first, pos = pos, pos + len(data)
                if pos <= start:
                    continue
                if stop is not None and first >= stop:
                    break
                data = data[max(0, start - first) : len(data) if stop is None else min(len(data), stop - first)]
                pending.append(data)
                have += len(data)
                if have >= block:
                    from studio.core.cancel import checkpoint

                    checkpoint()  # a cancelled render stops decoding
                    yield np.ascontiguousarray(np.concatenate(pending), np.float32)
                    pending, have = [], 0
            if stop is not None and pos >= stop:
                break
        if pending:
            yield np.ascontiguousarray(np.concatenate(pending), np.float32)
    finally:
        container.close()

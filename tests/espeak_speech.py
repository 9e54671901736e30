"""Speech with known phoneme times, for the classic engine's tests and benchmark.

espeak-ng's library (``libespeak-ng.so.1``, Debian's ``espeak-ng`` package) reports a PHONEME
event with the audio position of every phoneme it speaks; the command line can only print
those through an MBROLA voice, which Debian does not install. So this calls the library through
ctypes: one synthesis gives the samples and, for each phoneme, its mnemonic and start/end time.

    wave, phonemes = speak("Bob made a map.")      # float32 16 kHz mono, [Phoneme(...), ...]
    write_wav(path, wave)

Bilabial stops in espeak's output: the closure is the quiet stretch *before* the ``p``/``b``
event (the event marks the release); for ``m`` the lips are closed from its event to the next.
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

RATE = 16_000
BILABIAL = ("p", "b", "m")
OPEN = ("A:", "a", "aa", "A@", "0")  # father, trap, ...
SPREAD = ("i:", "i", "I")  # fleece, kit
ROUND = ("u:", "U", "w")  # goose, foot, w
_LOCK = threading.Lock()  # the library keeps global state


@dataclass(frozen=True)
class Phoneme:
    name: str
    start: float  # seconds
    end: float


class _Event(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_int),
        ("unique_identifier", ctypes.c_uint),
        ("text_position", ctypes.c_int),
        ("length", ctypes.c_int),
        ("audio_position", ctypes.c_int),
        ("sample", ctypes.c_int),
        ("user_data", ctypes.c_void_p),
        ("id", ctypes.c_char * 8),
    ]


_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.POINTER(_Event))
_lib = None
_lib_rate = 0  # the sample rate espeak_Initialize returned


def available() -> bool:
    try:
        ctypes.CDLL("libespeak-ng.so.1")
        return True
    except OSError:
        return False


def speak(text: str, voice: str = "en-us", speed: int = 160) -> tuple[np.ndarray, list[Phoneme]]:
    """Samples (float32, 16 kHz mono) and the phonemes of ``text`` with their times."""
    import soxr

    global _lib, _lib_rate
    with _LOCK:
        if _lib is None:
            _lib = ctypes.CDLL("libespeak-ng.so.1")
            _lib.espeak_Initialize.restype = ctypes.c_int
            _lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
            _lib_rate = _lib.espeak_Initialize(1, 0, None, 1)  # AUDIO_OUTPUT_RETRIEVAL, phoneme events
        chunks: list[np.ndarray] = []
        events: list[tuple[int, str]] = []

        def on_audio(wav, n, ev):
            if n > 0:
                chunks.append(np.ctypeslib.as_array(wav, (n,)).copy())
            i = 0
            while ev[i].type != 0:  # espeakEVENT_LIST_TERMINATED
                if ev[i].type == 7:  # espeakEVENT_PHONEME
                    events.append((ev[i].sample, ev[i].id.split(b"\0")[0].decode()))
                i += 1
            return 0

        cb = _CALLBACK(on_audio)
        _lib.espeak_SetSynthCallback(cb)
        _lib.espeak_SetVoiceByName(voice.encode())
        _lib.espeak_SetParameter(1, int(speed), 0)  # espeakRATE, absolute
        data = text.encode()
        _lib.espeak_Synth(data, len(data) + 1, 0, 0, 0, 0, None, None)
        _lib.espeak_Synchronize()
        rate = _lib_rate
    x = np.concatenate(chunks).astype(np.float32) / 32768.0 if chunks else np.zeros(0, np.float32)
    y = soxr.resample(x, rate, RATE).astype(np.float32)
    dur = len(x) / rate
    phonemes = []
    for k, (sample, name) in enumerate(events):
        start = sample / rate
        end = events[k + 1][0] / rate if k + 1 < len(events) else dur
        if name.startswith("_") or end <= start:
            continue
        phonemes.append(Phoneme(name, start, end))
    return y, phonemes


def write_wav(path: Path, samples: np.ndarray) -> Path:
    import soundfile as sf

    sf.write(path, samples, RATE, subtype="PCM_16")
    return path


def closure_span(p: Phoneme) -> tuple[float, float]:
    """When the lips are shut for a bilabial: the quiet stretch before a stop's release, or a nasal's length."""
    if p.name == "m":
        return p.start, p.end
    return p.start - 0.06, p.start + 0.01

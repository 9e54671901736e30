"""Schemathesis hooks for fuzzing ``studio serve`` (tests/test_api_fuzz.py; docs/api.md shows the command).

The document says which media types each upload takes (``encoding``); a fuzzer can only send a real
file of a type it knows how to make. These register the two kinds a render needs:

* ``audio/wav``: a real WAV (16-bit PCM), its length, rate, channels, pitch and loudness drawn by
  Hypothesis (a tone with pauses: speech and silence);
* ``image/png``: the bundled demo photo (a face: a photo without one is refused by design, 422 with its
  sentence), at one of a few sizes.

and a ``before_call`` hook makes every case a client that keeps the contract would send (the examples
and coverage phases draw uploads from Schemathesis' own samples, a 1-pixel PNG whatever the type):

* in positive cases only (a negative case is left as it was made: it is to be refused), an upload
  that is not a file of a type its field declares becomes one (a WAV, the photo);
* an empty string where the field's schema says ``minLength: 1`` becomes its example (Schemathesis
  4.32's coverage phase sends one in a case it calls valid);
* an end before its start (``trim_end``/``trim_start``, ``frame_end``/``frame_start``: the one rule
  between two fields a JSON Schema cannot state; their descriptions do) is put after it;
* a valid ``Idempotency-Key`` becomes a fresh UUID: a client sends a new key with a new request (a
  key reused for another request is 422 by design, and the tests of tests/test_api.py cover replays).

So the positive cases upload files the server must accept, and the stateful phase reaches the jobs
they make. Load with ``SCHEMATHESIS_HOOKS=fuzz_hooks`` with the repository's tests/ folder on PYTHONPATH.
"""

from __future__ import annotations

import io
import re
import uuid
import wave
from pathlib import Path

import numpy as np
import schemathesis
from hypothesis import strategies as st
from schemathesis.transport.serialization import Binary

PHOTO = Path(__file__).resolve().parent.parent / "resources" / "demo" / "astronaut.png"


def wav_bytes(seconds: float, rate: int, channels: int, pitch: float, level: float) -> bytes:
    n = max(1, int(seconds * rate))
    t = np.arange(n) / rate
    tone = level * np.sin(2 * np.pi * pitch * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t))
    tone[(t % 0.8) > 0.5] = 0.0  # pauses: the silence analysis has something to find
    pcm = (np.clip(tone, -1, 1) * 32767).astype("<i2")
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(np.repeat(pcm[:, None], channels, axis=1).tobytes())
    return buf.getvalue()


WAVS = st.builds(
    wav_bytes,
    seconds=st.floats(0.2, 1.6),
    rate=st.sampled_from([16000, 22050, 44100, 48000]),
    channels=st.sampled_from([1, 2]),
    pitch=st.floats(80.0, 400.0),
    level=st.floats(0.05, 0.9),
)


def _photos() -> list[bytes]:
    import PIL.Image

    img = PIL.Image.open(PHOTO).convert("RGB")
    out = []
    for size in (256, 320):  # small: a prepared avatar per accepted upload, and CI has 2 cores
        buf = io.BytesIO()
        img.resize((size, size)).save(buf, format="PNG")
        out.append(buf.getvalue())
    return out


SIGNATURES = {"audio": (b"RIFF", b"fLaC", b"OggS", b"ID3")}
KEY = re.compile(r"^[!-~]{1,255}$")
_wav = wav_bytes(0.9, 16000, 1, 180.0, 0.5)
PHOTOS = _photos()
_photo = PHOTOS[0]
schemathesis.openapi.media_type("audio/wav", WAVS)
schemathesis.openapi.media_type("image/png", st.sampled_from(PHOTOS))


def _declared(case) -> dict[str, str]:
    """Upload field -> "audio" or "image": what the document's multipart ``encoding`` says it takes."""
    try:
        media = case.operation.definition.raw["requestBody"]["content"]["multipart/form-data"]
    except (KeyError, TypeError, AttributeError):
        return {}
    out = {}
    for name, enc in (media.get("encoding") or {}).items():
        kinds = str(enc.get("contentType", ""))
        out[name] = "audio" if kinds.startswith("audio/") else "image"
    return out


def _properties(case) -> dict:
    try:
        ref = case.operation.definition.raw["requestBody"]["content"]["multipart/form-data"]["schema"]["$ref"]
        return case.operation.schema.raw_schema["components"]["schemas"][ref.rsplit("/", 1)[1]]["properties"]
    except (KeyError, TypeError, AttributeError):
        return {}


def _positive(case) -> bool:
    """A case made valid throughout (a negative case is left as it was made: it is to be refused)."""
    mode = getattr(getattr(getattr(case, "meta", None), "generation", None), "mode", None)
    return mode is None or bool(getattr(mode, "is_positive", False))


@schemathesis.hook
def before_call(context, case, kwargs):
    if not _positive(case):
        return
    headers = case.headers or {}
    if isinstance(headers.get("Idempotency-Key"), str) and KEY.match(headers["Idempotency-Key"]):
        headers["Idempotency-Key"] = str(uuid.uuid4())
    if not isinstance(case.body, dict):
        return
    for name, prop in _properties(case).items():  # Schemathesis 4.32's coverage phase sends '' for a
        if case.body.get(name) == "" and prop.get("minLength", 0) >= 1 and prop.get("examples"):  # field
            case.body[name] = prop["examples"][0]  # whose pattern forbids it, in a case it calls valid
    for low, high in (("trim_start", "trim_end"), ("frame_start", "frame_end")):  # the one rule a schema
        a, b = case.body.get(low), case.body.get(high)  # cannot state, and each field's description does:
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b <= a:  # the end after the start
            case.body[low], case.body[high] = (b, a) if b < a else (a - 1 if isinstance(a, int) else a / 2, a)
    for name, kind in _declared(case).items():
        value = case.body.get(name)
        if value is None:
            continue
        data = getattr(value, "data", value)
        if isinstance(data, str):
            data = data.encode("latin-1", "replace")
        if kind == "image" and data not in PHOTOS:  # a photo must show a face: ours
            case.body[name] = Binary(_photo)
        elif kind == "audio" and not (isinstance(data, bytes) and data.startswith(SIGNATURES["audio"])):
            case.body[name] = Binary(_wav)

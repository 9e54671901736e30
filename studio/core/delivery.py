"""Deliveries: named bundles of render settings (shipped with Studio, and the user's own), and the
checkers of the delivery-side settings (canvas, background, start timecode, markers).

    d = resolve("broadcast-hd")               # or "Broadcast HD": one sentence if there is none
    d.settings                                # {"canvas": "1920x1080", "fps": "25", "codec": "prores", ...}
    save("promo", {"canvas": "1080x1080", "crf": 18}, "square promo")   # <data>/deliveries/promo.json
    canvas_size("1920x1080") -> (1920, 1080); canvas_size("avatar") -> None
    parse_markers("12.5=Intro, 40") -> [(12.5, "Intro"), (40.0, "Marker 2")]

A delivery sets values; ``render.resolve`` applies it, once, where a request is built, under the values
given explicitly (those win).
The user's deliveries are JSON files in ``<data>/deliveries`` (``studio delivery save``, the window);
a user's delivery may not take a shipped one's name.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from studio.core.errors import InputError

MIN_SIDE, MAX_SIDE = 16, 8192
MAX_MARKERS = 1000


@dataclass(frozen=True)
class Delivery:
    name: str  # the key: lower case, dashes ("broadcast-hd")
    title: str  # how a list shows it ("Broadcast HD")
    description: str
    settings: dict[str, Any] = field(default_factory=dict)
    builtin: bool = True


# the audio each delivery names (``media.delivery_audio.AUDIO_FORMATS``): broadcast 48 kHz 24-bit PCM
# stereo, web and social AAC-LC 48 kHz stereo at 192 kb/s, the MXF deliveries 8 mono 24-bit tracks
_BROADCAST = {
    "codec": "prores", "loudness": -23.0, "true_peak": -1.0, "start_tc": "10:00:00:00", "audio_format": "stereo-48k",
}  # fmt: skip
# H.264 as platforms take it best (YouTube's upload recommendations: High profile, 2 consecutive B-frames,
# closed GOP, moov first; its "GOP of half the frame rate" is --keyint 0.5; 2 s keeps files smaller and is
# what live platforms ask for): x264's veryfast
# preset is the fastest that writes High profile with 3 B-frames (ultrafast, the default for plain
# renders, writes Constrained Baseline); every Studio MP4 has its moov first (+faststart).
_PLATFORM = {"codec": "h264", "preset": "veryfast", "keyint": 2.0, "audio_format": "stereo-48k"}
_WEB = {**_PLATFORM, "crf": 20, "loudness": -16.0, "true_peak": -1.0}
_SOCIAL = {**_PLATFORM, "crf": 20, "loudness": -14.0, "true_peak": -1.0, "fps": "30"}
# the newsroom's MXF OP1a deliveries (issue 49): 1920x1080, R128, 8 mono PCM tracks, timecode from 10:00:00:00
_MXF = {
    "canvas": "1920x1080", "fps": "25", "loudness": -23.0, "true_peak": -1.0, "start_tc": "10:00:00:00",
    "audio_format": "8-mono-48k", "scan": "interlaced",
}  # fmt: skip

BUILTIN: dict[str, Delivery] = {
    d.name: d
    for d in (
        Delivery(
            "broadcast-hd",
            "Broadcast HD",
            "1920x1080 25p, ProRes 422 HQ, 48 kHz 24-bit PCM stereo, -23 LUFS, -1 dBTP (EBU R128), timecode "
            "from 10:00:00:00",
            {"canvas": "1920x1080", "fps": "25", **_BROADCAST},
        ),
        Delivery(
            "broadcast-hd-2997",
            "Broadcast HD 29.97",
            "1920x1080 29.97p, ProRes 422 HQ, 48 kHz 24-bit PCM stereo, -24 LUFS, -2 dBTP (ATSC A/85), "
            "drop-frame timecode from 01:00:00;00",
            {
                "canvas": "1920x1080",
                "fps": "29.97",
                **_BROADCAST,
                "loudness": -24.0,
                "true_peak": -2.0,
                "start_tc": "01:00:00;00",
            },  # fmt: skip
        ),
        Delivery(
            "broadcast-uhd",
            "Broadcast UHD",
            "3840x2160 25p, ProRes 422 HQ, 48 kHz 24-bit PCM stereo, -23 LUFS, -1 dBTP, timecode from 10:00:00:00",
            {"canvas": "3840x2160", "fps": "25", **_BROADCAST},
        ),
        Delivery(
            "web-1080p",
            "Web 1080p",
            "1920x1080, H.264 High CRF 20 (B-frames, 2 s closed GOP), AAC-LC 48 kHz stereo 192 kb/s, -16 LUFS, -1 dBTP",
            {"canvas": "1920x1080", **_WEB},
        ),
        Delivery(
            "web-720p",
            "Web 720p",
            "1280x720, H.264 High CRF 21 (B-frames, 2 s closed GOP), AAC-LC 48 kHz stereo 192 kb/s, -16 LUFS, -1 dBTP",
            {"canvas": "1280x720", **_WEB, "crf": 21},
        ),
        Delivery(
            "social-vertical",
            "Social vertical",
            "1080x1920 30p, H.264 High CRF 20 (B-frames, 2 s closed GOP), AAC-LC 48 kHz stereo 192 kb/s, -14 LUFS, the crop following the face",
            {"canvas": "1080x1920", "fit": "face", **_SOCIAL},
        ),
        Delivery(
            "social-square",
            "Social square",
            "1080x1080 30p, H.264 High CRF 20 (B-frames, 2 s closed GOP), AAC-LC 48 kHz stereo 192 kb/s, -14 LUFS, the crop following the face",
            {"canvas": "1080x1080", "fit": "face", **_SOCIAL},
        ),
        Delivery(
            "overlay-alpha",
            "Overlay with alpha",
            "1920x1080 25p, ProRes 4444 on a transparent background (for a graphics layer), 48 kHz 24-bit PCM "
            "stereo, -23 LUFS",
            {
                "canvas": "1920x1080",
                "fps": "25",
                "codec": "prores4444",
                "background": "transparent",
                "loudness": -23.0,
                "true_peak": -1.0,
                "audio_format": "stereo-48k",
            },  # fmt: skip
        ),
        Delivery(
            "xdcam-hd422",
            "XDCAM HD422",
            "MXF OP1a, MPEG-2 4:2:2@HL 50 Mb/s CBR, closed GOP N=12 M=3 (RDD9), 1080i25 top field first, "
            "8 mono 24-bit 48 kHz PCM tracks (voice on 1-2), -23 LUFS (EBU R128), timecode from 10:00:00:00",
            {**_MXF, "codec": "xdcam-hd422"},
        ),
        Delivery(
            "xdcam-hd422-2997",
            "XDCAM HD422 29.97",
            "MXF OP1a, MPEG-2 4:2:2@HL 50 Mb/s CBR, closed GOP N=15 M=3 (RDD9), 1080i29.97 top field first, "
            "8 mono 24-bit 48 kHz PCM tracks (voice on 1-2), -24 LUFS (ATSC A/85), drop-frame timecode from "
            "01:00:00;00",
            {
                **_MXF,
                "codec": "xdcam-hd422",
                "fps": "29.97",
                "loudness": -24.0,
                "true_peak": -2.0,
                "start_tc": "01:00:00;00",
            },
        ),  # fmt: skip
        Delivery(
            "xdcam-hd422-25p",
            "XDCAM HD422 25p",
            "the progressive variant: MXF OP1a, MPEG-2 4:2:2@HL 50 Mb/s CBR, closed GOP N=12, 1080p25, 8 mono "
            "PCM tracks, -23 LUFS, timecode from 10:00:00:00",
            {**_MXF, "codec": "xdcam-hd422", "scan": "progressive"},
        ),
        Delivery(
            "avc-intra-100",
            "AVC-Intra 100",
            "MXF OP1a, AVC-Intra class 100 (H.264 High 4:2:2 Intra 10-bit, libx264), 1080i25 top field first, "
            "8 mono 24-bit 48 kHz PCM tracks (voice on 1-2), -23 LUFS, timecode from 10:00:00:00",
            {**_MXF, "codec": "avc-intra-100"},
        ),
    )
}


#: the settings a delivery saved from the window carries (those not at their default): where and how
#: the clip is delivered, never how its frames are generated (engine, device, silence)
DELIVERY_KEYS = (
    "canvas", "fit", "scale", "offset_x", "offset_y", "background", "max_upscale", "fps",
    "codec", "crf", "preset", "keyint", "loudness", "true_peak", "start_tc", "chapters", "audio_format", "scan",
    "captions", "caption_style", "otio",
)  # fmt: skip


def key_of(name: str) -> str:
    """``"Broadcast HD"`` -> ``"broadcast-hd"``."""
    return re.sub(r"[^a-z0-9.]+", "-", str(name).strip().lower()).strip("-")


def user_dir():
    """The folder of the user's saved deliveries (``store.deliveries`` writes there)."""
    from studio.core.env import sub_dir

    return sub_dir("deliveries")


def user_deliveries() -> dict[str, Delivery]:
    """The user's own deliveries (``<data>/deliveries/*.json``); an unreadable file is skipped with a log line."""
    import logging

    out: dict[str, Delivery] = {}
    try:
        folder = user_dir()
    except OSError:
        return out
    for path in sorted(folder.glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            d = Delivery(
                key_of(data.get("name") or path.stem),
                str(data.get("name") or path.stem),
                str(data.get("description") or ""),
                dict(data.get("settings") or {}),
                builtin=False,
            )
        except (OSError, ValueError, AttributeError, TypeError) as exc:
            logging.getLogger(__name__).warning("delivery %s skipped: %s", path, exc)
            continue
        if d.name and d.name not in BUILTIN:
            out[d.name] = d
    return out


def all_deliveries() -> dict[str, Delivery]:
    return {**BUILTIN, **user_deliveries()}


def resolve(name: str) -> Delivery:
    """The delivery called ``name`` (its key or its title, any case); one sentence naming them all if none."""
    key = key_of(name)
    found = all_deliveries()
    if key in found:
        return found[key]
    raise InputError(
        f"there is no delivery named {name!r}; the deliveries are {', '.join(found)} (studio delivery list)"
    )


# -- the checkers of the delivery-side settings (settings.py's ``validate``) --------------------------


# -- what the free-text settings accept, as regular expressions (JSON Schema / ECMA-262 syntax) for the
# documents (``Spec.pattern``: the OpenAPI document's ``pattern``, so a generated client or a fuzzer sends
# only values the checkers below take); the checkers stay the judges and say what is wrong in a sentence.

_EVEN_SIDE = "(1[68]|[2-9][02468]|[1-9][0-9][02468]|[1-7][0-9]{2}[02468]|80[0-9][02468]|81[0-8][02468]|819[02])"
CANVAS_PATTERN = rf"^(|avatar|{_EVEN_SIDE}x{_EVEN_SIDE})$"
TIMECODE_PATTERN = r"^([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9][:;.][0-9]{2}$"
_MARKER = "[0-9]{1,9}([.][0-9]{1,6})?(=[^,]*)?"  # a name is cut at 200 characters, not refused
MARKERS_PATTERN = rf"^({_MARKER}(, ?{_MARKER}){{0,{MAX_MARKERS - 1}}})?$"


def background_pattern() -> str:
    """A colour by name (Pillow's names) or ``#rgb``/``#rrggbb``, or transparent: what a client may
    send without a file on the server (an image file is a server path: refused when it is missing)."""
    from PIL import ImageColor

    names = sorted(n for n in ImageColor.colormap if n.isalpha())
    return rf"^(transparent|#[0-9a-fA-F]{{3}}|#[0-9a-fA-F]{{6}}|{'|'.join(names)})$"


def delivery_pattern() -> str:
    """The deliveries' keys (the built-in ones and those saved here), or empty (none)."""
    keys = [k for k in all_deliveries() if re.fullmatch(r"[a-z0-9.-]+", k)]
    return rf"^(|{'|'.join(k.replace('.', '[.]') for k in keys)})$"


def canvas_size(text: str) -> tuple[int, int] | None:
    """``"1920x1080"`` -> (1920, 1080); ``"avatar"`` -> None (the avatar's own size)."""
    t = str(text).strip().lower()
    if t in ("", "avatar"):
        return None
    m = re.fullmatch(r"(\d{1,6})\s*[x×*]\s*(\d{1,6})", t)
    if not m:
        raise InputError(f"canvas {text!r} is not avatar or WIDTHxHEIGHT (such as 1920x1080 or 1080x1920)")
    w, h = int(m.group(1)), int(m.group(2))
    if not (MIN_SIDE <= w <= MAX_SIDE and MIN_SIDE <= h <= MAX_SIDE):
        raise InputError(f"canvas {w}x{h} is out of range: each side must be {MIN_SIDE} to {MAX_SIDE} pixels")
    if w % 2 or h % 2:
        raise InputError(
            f"canvas {w}x{h} has an odd side; video is encoded in even sizes (such as {w + w % 2}x{h + h % 2})"
        )
    return w, h


def canvas_problem(value: Any) -> str | None:
    if not isinstance(value, str):
        return f"canvas {value!r} is not a text such as 1920x1080"
    try:
        canvas_size(value)
    except InputError as exc:
        return str(exc)
    return None


def background_rgb(text: str) -> tuple[int, int, int] | None:
    """A colour's RGB; None when ``text`` is not a colour (an image path, or transparent)."""
    from PIL import ImageColor

    try:
        return tuple(ImageColor.getrgb(str(text).strip()))[:3]  # type: ignore[return-value]
    except ValueError:
        return None


def background_is_file(value: Any) -> bool:
    """Whether a background names an image file (neither a colour nor transparent)."""
    from pathlib import PurePath

    text = str(value or "").strip()
    if not text or text.lower() == "transparent" or background_rgb(text) is not None:
        return False
    return "/" in text or "\\" in text or PurePath(text).suffix.lower() in IMAGE_SUFFIXES


IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".tif", ".tiff")


def background_problem(value: Any) -> str | None:
    from pathlib import Path

    if not isinstance(value, str) or not value.strip():
        return "background must be a colour (black, #1a2b3c), an image file, or transparent"
    if value.strip().lower() == "transparent" or background_rgb(value) is not None:
        return None
    p = Path(value).expanduser()
    if p.suffix.lower() in IMAGE_SUFFIXES:
        return None if p.is_file() else f"background image {value!r} does not exist"
    return f"background {value!r} is not a colour (black, #1a2b3c), an image file (PNG, JPEG) or transparent"


TC_RE = re.compile(r"(\d{2}):([0-5]\d):([0-5]\d)([:;.])(\d{2})")


def timecode_problem(value: Any) -> str | None:
    if not isinstance(value, str) or not TC_RE.fullmatch(value.strip()) or int(value.strip()[:2]) > 23:
        return f"start timecode {value!r} is not HH:MM:SS:FF (such as 10:00:00:00; 01:00:00;00 drop-frame)"
    return None


def parse_markers(text: str) -> list[tuple[float, str]]:
    """``"12.5=Intro, 40"`` -> ``[(12.5, "Intro"), (40.0, "Marker 2")]``, sorted by time."""
    import math

    out: list[tuple[float, str]] = []
    items = [t.strip() for t in str(text or "").split(",") if t.strip()]
    if len(items) > MAX_MARKERS:
        raise InputError(f"{len(items)} markers: give at most {MAX_MARKERS}")
    for k, item in enumerate(items, 1):
        when, _, name = item.partition("=")
        try:
            t = float(when)
        except ValueError:
            raise InputError(f"marker {item!r} is not SECONDS[=NAME] (such as 12.5=Intro)") from None
        if not math.isfinite(t) or t < 0:
            raise InputError(f"marker {item!r} must be at 0 seconds or later")
        out.append((t, name.strip()[:200] or f"Marker {k}"))
    return sorted(out)


def markers_problem(value: Any) -> str | None:
    if not isinstance(value, str):
        return "markers must be a text such as 12.5=Intro, 40=Weather"
    try:
        parse_markers(value)
    except InputError as exc:
        return str(exc)
    return None


def delivery_problem(value: Any) -> str | None:
    if not isinstance(value, str):
        return "delivery must be the name of a delivery (studio delivery list)"
    if not value.strip():
        return None
    try:
        resolve(value)
    except InputError as exc:
        return str(exc)
    return None

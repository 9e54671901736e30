"""Every render setting, declared once: type, default, choices or range, help, and the faces that show it.

    s = RenderSettings(engine="classic", crf=18)           # a frozen value, checked by ``check``
    for spec in SCHEMA.values(): spec.name, spec.kind, spec.default, spec.choices, spec.help, spec.faces
    s = from_dict({"engine": "classic", "crf": "18"})       # a job row, a form, JSON: one sentence if bad
    check(s)                                                # the checker every face uses

``RenderSettings`` is the declaration: each field's default comes with its ``Spec`` (``setting(...)``),
so the command line's options (``studio render``, ``studio queue add``, ``frame``, ``demo``), the HTTP
form, the window's widgets and saved defaults, the server client and the job store are all made by walking
``SCHEMA``. A new setting is added here and nowhere else; ``tests/test_settings.py`` proves every face
offers every setting it is declared for.

Faces: ``cli`` (the render commands), ``http`` (``studio serve``'s form), ``ui`` (the window), ``job``
(stored with a queued job and sent to a server). Groups: ``engine`` and ``silence`` change the frames
(``frame_at`` needs them: a scrub on a server sends them all), ``encode`` only the file.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from studio.core.constants import DEFAULT_MIN_SILENCE_FRAMES, DEFAULT_SILENCE_THRESHOLD, RATES
from studio.core.delivery import (
    CANVAS_PATTERN,
    MARKERS_PATTERN,
    TIMECODE_PATTERN,
    background_is_file,
    background_pattern,
    background_problem,
    canvas_problem,
    delivery_pattern,
    delivery_problem,
    markers_problem,
    timecode_problem,
)
from studio.core.errors import InputError
from studio.core.limits import GATE_PATTERN, Limits

T = TypeVar("T")

ALL_FACES = frozenset({"cli", "http", "ui", "job"})
GROUPS = ("engine", "silence", "encode", "output")

ENGINES = ("auto", "classic", "musetalk")
MUSETALK = ("musetalk",)  # settings only MuseTalk reads
PRECISIONS = ("auto", "fp32", "fp16", "bf16")
DECODERS = ("taesd", "sd-vae")
RUNTIMES = ("auto", "torch", "tensorrt")
ENCODERS = ("auto", "x264", "x264-parallel", "nvenc")
CODECS = ("h264", "hevc", "prores", "prores4444", "dnxhr", "vp9", "xdcam-hd422", "avc-intra-100")  # media.codecs.CODECS
AUDIO_FORMATS = ("source", "stereo-48k", "8-mono-48k")  # studio.core.media.delivery_audio.AUDIO_FORMATS
SCANS = ("progressive", "interlaced")
FRAME_RATES = ("auto", *RATES)  # auto: the video avatar's own rate, 25 for a photo
FITS = ("fit", "fill", "face")
CAPTIONS = ("off", "srt", "vtt", "burn", "scc")
CAPTION_STYLES = ("box", "outline")
PRESETS = ("ultrafast", "superfast", "veryfast", "faster", "fast", "medium", "slow", "slower", "veryslow")
# the encode defaults, once: the schema below and the writers (media.writer.open_video, codecs) use these
DEFAULT_ENCODER = "auto"
DEFAULT_CRF = 20
DEFAULT_PRESET = "ultrafast"


@dataclass(frozen=True)
class Spec:
    """What a face needs to show one setting."""

    name: str
    kind: type  # bool, int, float or str
    default: Any
    help: str
    label: str
    group: str
    choices: tuple[str, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    faces: frozenset[str] = ALL_FACES
    optional: bool = False  # None is a value (device: None = pick automatically)
    auto_label: str = ""  # how a face shows None (device: "auto")
    ui_default: Any = None  # the window's own default where it differs (check: on there, off elsewhere)
    validate: Any = None  # a text setting's own checker: value -> one sentence, or None when fine
    example: Any = None  # a valid value other than the default (a free text setting's: what help shows)
    pattern: Any = None  # a free text's accepted shape for documents: a regex, or a function making one
    engines: tuple[str, ...] = ()  # only these engines use it (empty: every engine); elsewhere only its default
    names_file: Any = None  # value -> whether it names a file (background: an image): servers check such paths

    @property
    def option(self) -> str:
        """The command line's option: ``--min-silence``."""
        return "--" + self.name.replace("_", "-")

    def parse(self, value: Any) -> Any:
        """``value`` (a string from a form or a command line, or JSON) as this setting's type; one
        sentence naming the setting when it is not one."""
        if value is None or (self.optional and value in ("", self.auto_label)):
            if self.optional:
                return None
            return self.default
        try:
            if self.kind is bool:
                if isinstance(value, str):
                    low = value.strip().lower()
                    if low in ("1", "true", "yes", "on"):
                        return True
                    if low in ("0", "false", "no", "off", ""):
                        return False
                    raise ValueError(value)
                if isinstance(value, (bool, int)) and value in (0, 1):
                    return bool(value)
                raise ValueError(value)
            if self.kind is int:
                if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                    raise ValueError(value)
                return int(value)
            if self.kind is float:
                if isinstance(value, bool):
                    raise ValueError(value)
                return float(value)
            if not isinstance(value, str):
                raise ValueError(value)
            return value
        except (TypeError, ValueError):
            what = {bool: "true or false", int: "a whole number", float: "a number", str: "a text"}[self.kind]
            raise InputError(f"the setting {self.name}={value!r} is not {what}") from None

    def problem(self, value: Any) -> str | None:
        """One sentence if ``value`` is not allowed, else None."""
        if value is None and self.optional:
            return None
        if self.kind is bool:
            return None if isinstance(value, bool) else f"{self.name} must be true or false"
        if self.kind in (int, float):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return f"{self.name} {value!r} is not a number"
            if self.kind is int and not float(value).is_integer():
                return f"{self.name} must be a whole number"
            if not math.isfinite(value):
                return f"{self.name} must be a finite number"
        if self.validate is not None:
            return self.validate(value)
        if self.choices is not None and value not in self.choices:
            return f"{self.name} {value!r} is not one of {', '.join(self.choices)}"
        low, high = self.minimum, self.maximum
        if (low is not None and value < low) or (high is not None and value > high):
            return f"{self.name} must be {_range_text(low, high)} ({self.help})"
        return None


def script_problem(value: Any) -> str | None:
    from studio.core.constants import MAX_CHARS

    if not isinstance(value, str):
        return "script must be the voice-over's text"
    if len(value) > MAX_CHARS:
        return f"the script is {len(value)} characters; a render's script holds at most {MAX_CHARS}"
    return None


def gate_problem(value: Any) -> str | None:
    """check_gate's checker: limits as ``studio check --fail-under`` takes them."""
    try:
        Limits.parse(str(value))
    except InputError as exc:
        return str(exc).replace("--fail-under", "check_gate", 1)
    return None


def setting(
    default: T,
    help: str,
    *,
    label: str = "",
    group: str = "engine",
    choices: tuple[str, ...] | None = None,
    minimum: float | None = None,
    maximum: float | None = None,
    faces: frozenset[str] = ALL_FACES,
    auto_label: str = "",
    ui_default: Any = None,
    kind: type | None = None,
    validate: Any = None,
    example: Any = None,
    pattern: Any = None,
    engines: tuple[str, ...] = (),
    names_file: Any = None,
) -> T:
    """A ``RenderSettings`` field: its default, carrying its ``Spec`` (completed by ``_schema``).
    ``label``: what the window calls it (default: its name in words, ``min_silence``: Min silence).
    ``kind``: the type of an optional setting's values (default None, e.g. loudness: a float or off)."""
    meta = {k: v for k, v in locals().items() if k != "default"}  # every argument of the Spec
    meta["faces"] = frozenset(faces)
    return field(default=default, metadata={"spec": meta})


@dataclass(frozen=True)
class RenderSettings:
    """How a clip is rendered (not what or where: that is the service's ``RenderRequest``)."""

    engine: str = setting(
        "auto",
        "lip-sync engine: auto picks MuseTalk when its weights are imported, else classic",
        choices=ENGINES,
    )
    device: str | None = setting(
        None, "torch device, e.g. cpu, cuda, cuda:1 (auto: cuda when present)", auto_label="auto"
    )
    precision: str = setting("auto", "MuseTalk arithmetic precision", choices=PRECISIONS, engines=MUSETALK)
    decoder: str = setting(
        "taesd",
        "MuseTalk image decoder: TAESD is fast, SD-VAE is the reference quality",
        choices=DECODERS,
        engines=MUSETALK,
    )
    runtime: str = setting(
        "auto",
        "MuseTalk runtime: TensorRT engines when built and valid (auto), or force one",
        choices=RUNTIMES,
        engines=MUSETALK,
    )
    batch: int = setting(0, "frames per engine call (0: the engine's preferred batch)", minimum=0, maximum=1024)
    compile: bool = setting(
        False,
        "MuseTalk: torch.compile the networks (about a minute to load once; then UNet + "
        "TAESD ran 1.75x and UNet + SD-VAE 2.1x faster on an H200: for long clips and warm "
        "servers)",
        label="Compile the networks",
        engines=MUSETALK,
    )
    fps: str = setting(
        "auto",
        "output frame rate: auto keeps a video avatar's own rate (25 for a photo); 29.97 and 59.94 "
        "are 30000/1001 and 60000/1001 exactly, with drop-frame timecode",
        label="Frame rate",
        choices=FRAME_RATES,
    )
    canvas: str = setting(
        "avatar",
        "output size: avatar (the avatar's own), or WxH such as 1280x720, 1920x1080, 3840x2160, 1080x1920 "
        "(vertical), 1080x1080 (square); even sides of 16 to 8192 pixels",
        validate=canvas_problem,
        pattern=CANVAS_PATTERN,
        example="1280x720",
    )
    fit: str = setting(
        "fit",
        "how the presenter sits on the canvas: fit (all of the avatar, bars of background), fill (the canvas "
        "covered, edges cropped) or face (covered, the crop follows the tracked face smoothly: vertical and "
        "square clips from a landscape source)",
        label="Placement",
        choices=FITS,
    )
    scale: float = setting(
        1.0, "the presenter's size on the canvas relative to the placement", minimum=0.1, maximum=4.0
    )
    offset_x: float = setting(
        0.0, "move the presenter right (+) or left (-), in canvas widths", label="Offset X", minimum=-1.0, maximum=1.0
    )
    offset_y: float = setting(
        0.0, "move the presenter down (+) or up (-), in canvas heights", label="Offset Y", minimum=-1.0, maximum=1.0
    )
    background: str = setting(
        "black",
        "what shows around the presenter on the canvas (and through a transparent avatar): a colour (black, "
        "white, #1a2b3c), an image file, or transparent (kept by --codec prores4444 or vp9)",
        validate=background_problem,
        pattern=background_pattern,
        names_file=background_is_file,
        example="white",
    )
    max_upscale: float = setting(
        2.0,
        "the most the presenter is enlarged to fill the canvas; beyond it the render is kept at this size "
        "and says so (a small avatar on a 4K canvas would be soft)",
        minimum=1.0,
        maximum=8.0,
    )
    threshold: float = setting(
        DEFAULT_SILENCE_THRESHOLD,
        "silence RMS threshold (frames quieter than this are silent and show the avatar itself)",
        group="silence",
        minimum=0.0,
        maximum=1.0,
    )
    min_silence: int = setting(
        DEFAULT_MIN_SILENCE_FRAMES,
        "shortest silence, in frames",
        group="silence",
        minimum=1,
        maximum=10_000,
    )
    crossfade: int = setting(
        3,
        "frames of crossfade at each speech/silence edge (the mouth eases to rest)",
        group="silence",
        minimum=0,
        maximum=25,
    )
    encoder: str = setting(
        DEFAULT_ENCODER,
        "video encoder: auto uses NVENC when a session opens, else libx264 in parallel",
        group="encode",
        choices=ENCODERS,
    )
    codec: str = setting(
        "h264",
        "video codec, and with it the container: h264 or hevc (.mp4, AAC), prores (422 HQ), prores4444 "
        "(with alpha) or dnxhr (HQ) (.mov, PCM audio), vp9 (.webm with alpha, Opus), xdcam-hd422 (MPEG-2 "
        "4:2:2 50 Mb/s long GOP) or avc-intra-100 (.mxf OP1a, 1920x1080 at 25 or 29.97, PCM tracks)",
        group="encode",
        choices=CODECS,
    )
    audio_format: str = setting(
        "source",
        "the delivered audio: source (the voice-over's own rate and channels), stereo-48k (48 kHz stereo: "
        "24-bit PCM in MOV/MXF, AAC-LC 192 kb/s in MP4; a mono voice-over on both channels), 8-mono-48k "
        "(eight mono 24-bit tracks in an MXF, the voice on 1 and 2); resampled with soxr",
        label="Audio format",
        group="encode",
        choices=AUDIO_FORMATS,
    )
    scan: str = setting(
        "progressive",
        "progressive frames, or interlaced (top field first; xdcam-hd422 and avc-intra-100 only): each "
        "frame's two fields come from the same rendered frame",
        group="encode",
        choices=SCANS,
    )
    crf: int = setting(
        DEFAULT_CRF,
        "x264/x265/NVENC/VP9 quality: lower is better and larger (18-23 is typical; ProRes and DNxHR "
        "have fixed quality)",
        label="CRF",
        group="encode",
        minimum=0,
        maximum=51,
    )
    preset: str = setting(
        DEFAULT_PRESET,
        "x264 speed/size trade-off (ultrafast: as sharp as the slower presets at the same CRF and the only "
        "one that keeps up with the GPU on 16 cores; larger files; docs/speed.md)",
        group="encode",
        choices=PRESETS,
    )
    keyint: float = setting(
        0.0,
        "seconds between key frames at most, each GOP closed (0: the encoder's own, 10 s for x264; the web "
        "deliveries use 2, what video platforms ask for)",
        label="Keyframe interval",
        group="encode",
        minimum=0.0,
        maximum=60.0,
    )
    loudness: float | None = setting(
        None,
        "normalise the audio to this integrated loudness in LUFS (ITU-R BS.1770; EBU R128 broadcast -23, "
        "web -16) with a true-peak limit (--true-peak); off: the voice-over as it is",
        group="encode",
        minimum=-70.0,
        maximum=-5.0,
        auto_label="off",
        kind=float,
    )
    true_peak: float = setting(
        -1.0,
        "the true-peak ceiling in dBTP when --loudness normalises (EBU R128: -1; some platforms ask -2)",
        group="encode",
        minimum=-9.0,
        maximum=0.0,
    )
    start_tc: str = setting(
        "00:00:00:00",
        "the timecode of the first frame, written as the MOV/MP4 timecode track (HH:MM:SS:FF; drop-frame "
        "HH:MM:SS;FF at 29.97 and 59.94; broadcast deliveries start at 10:00:00:00)",
        label="Start timecode",
        group="encode",
        validate=timecode_problem,
        pattern=TIMECODE_PATTERN,
        example="10:00:00:00",
    )
    chapters: bool = setting(
        True,
        "write the markers (yours, and each pause of a second or more) as chapters in an MP4/MOV",
        group="encode",
    )
    markers: str = setting(
        "",
        "your markers: SECONDS[=NAME] separated by commas (12.5=Intro, 40=Weather); they go into the "
        "chapters and the OpenTimelineIO file",
        group="output",
        # the window's markers are the timeline's own (M, the Markers menu): it hands them to the render
        faces=ALL_FACES - {"ui"},
        validate=markers_problem,
        pattern=MARKERS_PATTERN,
        example="1.5=Intro",
    )
    captions: str = setting(
        "off",
        "captions of the script beside the render: srt, vtt, burn (drawn into the picture, and an .srt "
        "beside it) or scc (CEA-608 for broadcast, timed to the clip's timecode); needs the script's text "
        "(--script, or a voice-over spoken from text)",
        group="output",
        choices=CAPTIONS,
    )
    script: str = setting(
        "",
        "the voice-over's text, for captions (the command line's --script takes a .txt file); empty: the text "
        "it was spoken from, or a .txt beside the voice-over",
        group="output",
        validate=script_problem,
        example="Good evening.",
    )
    caption_style: str = setting(
        "box",
        "burnt-in captions: white text on a dark box, or with a dark outline",
        group="output",
        choices=CAPTION_STYLES,
    )
    otio: bool = setting(
        False,
        "write an OpenTimelineIO timeline (OUT.otio) beside the render: the clip, the voice-over, the markers, "
        "the silences and the in/out, for Resolve, Premiere, Kdenlive",
        label="OTIO timeline",
        group="output",
    )
    aaf: bool = setting(
        False,
        "write an AAF (OUT.aaf) beside an MXF render that links it, for Avid Media Composer (pyaaf2)",
        label="AAF for Avid",
        group="output",
    )
    delivery: str = setting(
        "",
        "a named delivery (studio delivery list): its canvas, rate, codec, loudness and timecode; a "
        "setting given as well wins",
        group="output",
        validate=delivery_problem,
        pattern=delivery_pattern,
        example="web-1080p",
    )
    check: bool = setting(
        False,
        "after the file is written, measure its lip sync (studio check: offset, silence motion, sharpness, "
        "seam, drift) at low priority and add the verdict to the result",
        label="Check lip sync",
        group="output",
        ui_default=True,
    )
    check_gate: str = setting(
        "",
        "limits the lip-sync check must meet, as studio check --fail-under takes them (ok or check, "
        "NAME=VALUE: confidence, sharpness at least; offset, silence_motion, seam, drift, jitter at most); "
        "a render that misses them is marked so in its result (check.gate), with its report; turns the check on",
        label="Check gate",
        group="output",
        validate=gate_problem,
        example="ok,jitter=5",
        pattern=GATE_PATTERN,
    )
    preview_interval_s: float = setting(
        0.25,
        "seconds between preview frames in the progress",
        label="Preview every",
        group="output",
        minimum=0.0,
        faces=frozenset(),
    )

    def __post_init__(self):
        # coerce what a face may hand over (an int for a float setting); ``check`` says what is wrong
        for spec in SCHEMA.values():
            v = getattr(self, spec.name)
            if spec.kind is float and isinstance(v, int) and not isinstance(v, bool):
                object.__setattr__(self, spec.name, float(v))

    @property
    def checked(self) -> bool:
        """Whether the render is checked after it is written: ``check``, or a ``check_gate`` (a gate needs its check)."""
        return bool(self.check) or bool(str(self.check_gate or "").strip())

    def with_(self, **kw) -> RenderSettings:
        return replace(self, **kw)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def canvas_size(self) -> tuple[int, int] | None:
        """The canvas as (width, height); None: the avatar's own size."""
        from studio.core.delivery import canvas_size

        return canvas_size(self.canvas)

    def frame_settings(self) -> dict[str, Any]:
        """The settings that change the frames (everything but the encoding): what a scrub needs."""
        return {n: getattr(self, n) for n, s in SCHEMA.items() if s.group in ("engine", "silence")}


def _words(name: str) -> str:
    """A setting's name as its label: ``max_upscale`` -> Max upscale."""
    return name.replace("_", " ").capitalize()


def _schema() -> dict[str, Spec]:
    out = {}
    for f in dataclasses.fields(RenderSettings):
        meta = dict(f.metadata["spec"])
        default = f.default
        kind = meta.pop("kind") or (
            {bool: bool, int: int, float: float, str: str}[type(default)] if default is not None else str
        )
        out[f.name] = Spec(
            name=f.name,
            kind=kind,
            default=default,
            optional=default is None,
            label=meta.pop("label") or _words(f.name),
            **meta,
        )
    return out


#: every render setting by name, in declaration order
SCHEMA: dict[str, Spec] = _schema()


def specs(face: str, groups: tuple[str, ...] | None = None) -> list[Spec]:
    """The settings ``face`` shows (optionally only those of ``groups``), in declaration order."""
    return [s for s in SCHEMA.values() if face in s.faces and (groups is None or s.group in groups)]


def parse_dict(d: dict | None, *, strict: bool = False) -> RenderSettings:
    """``RenderSettings`` from a dict (a job row, a form, JSON) as given, a ``delivery`` kept as its name
    and not applied (a request's stored settings are resolved already); values may be strings. Unknown
    keys are ignored, or with ``strict`` one sentence naming them. Bad values: one ``InputError`` naming
    the setting."""
    d = check_alias(dict(d or {}))
    unknown = sorted(k for k in d if k not in SCHEMA)
    if strict and unknown:
        raise InputError(
            f"unknown setting{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}: the settings "
            f"are {', '.join(SCHEMA)}"
        )
    kw = {name: SCHEMA[name].parse(value) for name, value in d.items() if name in SCHEMA}
    s = RenderSettings(**kw)
    check(s)
    return s


def from_dict(d: dict | None, *, strict: bool = False, explicit: Any = None) -> RenderSettings:
    """``parse_dict``, with the ``delivery`` it names applied under the values given ``explicit``ly
    (``with_delivery``; None: those away from their default). What a form, a command line or a folder's
    settings mean; a request's own settings are resolved once where it is built (``render.resolve``)."""
    parsed = parse_dict(d, strict=strict)
    return with_delivery(parsed, explicit)[0]


def parse_values(values: RenderSettings | dict | None) -> dict[str, Any]:
    """Every setting's value (a mapping's strings parsed, the others at their default)."""
    if isinstance(values, RenderSettings):
        return {n: getattr(values, n) for n in SCHEMA}
    out = {n: s.default for n, s in SCHEMA.items()}
    for n, v in check_alias(dict(values or {})).items():
        if n in SCHEMA:
            out[n] = SCHEMA[n].parse(v)
    return out


def explicit_of(values: RenderSettings | dict | None) -> frozenset[str]:
    """Where no face says what was set explicitly: the settings away from their default."""
    v = parse_values(values)
    return frozenset(n for n, x in v.items() if x != SCHEMA[n].default)


def delivery_values(name: str) -> dict[str, Any]:
    """The settings the delivery ``name`` sets, parsed (one sentence when there is no such delivery)."""
    if not name:
        return {}
    from studio.core.delivery import resolve as find

    values = check_alias(dict(find(name).settings))  # check = "ok,jitter=5": the check with that gate
    return {n: SCHEMA[n].parse(v) for n, v in values.items() if n in SCHEMA and n != "delivery"}


def with_delivery(values: RenderSettings | dict | None, explicit: Any = None) -> tuple[RenderSettings, frozenset[str]]:
    """The settings with the delivery they name applied: for each setting a value set ``explicit``ly,
    else the delivery's value, else the value given; and the explicit names (None: those away from
    their default). Idempotent: applying it to its result with the same names gives that result. The
    delivery part of the one resolution (``render.resolve`` adds what the avatar decides)."""
    v = parse_values(values)
    given = frozenset(explicit) & set(SCHEMA) if explicit is not None else explicit_of(v)
    v.update({n: x for n, x in delivery_values(v.get("delivery") or "").items() if n not in given})
    return check(RenderSettings(**v)), given


_BOOL_WORDS = {"", "true", "false", "1", "0", "yes", "no", "on", "off"}


def check_alias(values: dict) -> dict:
    """``check = "ok,jitter=5"`` (a delivery's or a watch folder's gate, written as the check's value)
    is ``check = true`` with that ``check_gate`` (a ``check_gate`` given as well wins)."""
    v = values.get("check")
    if isinstance(v, str) and v.strip().lower() not in _BOOL_WORDS:
        values = {**values, "check": True}
        values.setdefault("check_gate", v.strip())
    return values


def check(s: RenderSettings) -> RenderSettings:
    """One sentence for the first bad value (the CLI, the window and the server say the same)."""
    for spec in SCHEMA.values():
        msg = spec.problem(getattr(s, spec.name))
        if msg:
            raise InputError(msg)
    return s


def _range_text(low: float | None, high: float | None) -> str:
    fmt = lambda v: f"{v:g}"  # noqa: E731
    if low is not None and high is not None:
        return f"between {fmt(low)} and {fmt(high)}"
    return f"at least {fmt(low)}" if low is not None else f"at most {fmt(high)}"

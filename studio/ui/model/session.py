"""The editor's state, Qt-free: one ``EditorSession`` owns it, the window's panels are its views.

    s = EditorSession()
    s.events.edited.connect(lambda key, before, after, scope: ...)  # an editor's change: one undo step
    s.events.changed.connect(lambda key, before, after: ...)        # every change (an undo, a restore too)
    s.set("crf", 18); s.value("crf") -> 18                           # every render setting of the schema ...
    s.set("folder", "/tmp/out"); s.set("target", "farm")             # ... the output and the placement
    s.select(avatar="anna", script="take.wav"); s.set_avatar_rate(Fraction(30))
    s.set_analysis(analysis, key)                                    # the voice-over's AudioAnalysis
    s.set_in(25); s.set_out(124); s.range_frames() -> (25, 125)
    s.add_marker(40, "Intro"); s.marker_span(40)
    s.request() -> RenderRequest                                     # what Render now queues
    s.range_label(), s.inout_label(), s.frame_caption(i, rate)        # every figure a label shows

Keys: every render setting the window shows (``studio.core.settings.specs("ui")``, the silence
settings among them: held here once), ``OUTPUT_KEYS`` (folder, pattern, overwrite, range only),
``PLACEMENT_KEYS`` (where jobs render) and the voice-over's marks ``"range"`` ((in, out), the out
frame included) and ``"markers"`` (sorted (frame, name) pairs).

Rates: ``rate`` is the rate the next render has (the Frame rate setting, or for auto the video
avatar's own, 25 for a photo); ``grid_rate`` is the rate of the frames on the timeline now (the
analysis's, until a changed rate's analysis arrives). Every label's figures come from here at the
rate that applies, so no view computes a timecode at a rate of its own.

Undo is on the model (as in Kdenlive and OpenShot): ``edited`` carries (key, before, after, scope)
for each change the editor made; ``apply(key, value, scope)`` puts a value back without recording
it; a value of a voice-over no longer on screen (``scope``) goes to that voice-over's memory.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from studio.core.errors import InputError
from studio.core.media.rates import DEFAULT_RATE, parse_rate
from studio.core.media.timecode import seconds_text, timecode
from studio.core.settings import SCHEMA, RenderSettings, specs
from studio.ui.model.events import EventGroup

DEFAULT_PATTERN = "{avatar}_{script}_{engine}_crf{crf}.mp4"  # "crf{crf}" reads "prores" for ProRes
TARGETS = ("local", "gpus", "farm", "server")
OUTPUT_KEYS = {"folder": "", "pattern": DEFAULT_PATTERN, "overwrite": False, "range_only": False}
PLACEMENT_KEYS = {"target": "local", "farm": "", "server": ""}
MARK_KEYS = {"range": (None, None), "markers": ()}
LABELS = {
    "folder": "Output folder",
    "pattern": "Output name",
    "overwrite": "Overwrite",
    "range_only": "Range only",
    "target": "Render on",
    "farm": "Farm address",
    "server": "Server",
    "range": "In/out",
    "markers": "Markers",
}
#: codecs with a fixed quality: CRF means nothing for them (ProRes, DNxHR)
FIXED_QUALITY = frozenset({"prores", "prores4444", "dnxhr"})


@dataclass(frozen=True)
class DeliveryState:
    """The delivery chosen, the render settings and which of them the editor set: the before and after
    of choosing a delivery (one undo step)."""

    name: str
    values: tuple[tuple[str, Any], ...]
    explicit: frozenset[str]


@dataclass(frozen=True, order=True)
class Marker:
    """A named point on the timeline (a frame of the voice-over)."""

    frame: int
    name: str = ""


def setting_keys() -> list[str]:
    """The render settings the window shows, in the schema's order (new ones appear by themselves)."""
    return [s.name for s in specs("ui")]


def session_attr(name: str, doc: str | None = None) -> Any:
    """A read-only property of a view (an object with ``self.session``): the session's ``name``.
    A view keeps no copy of what the session holds."""
    return property(lambda self: getattr(self.session, name), doc=doc)


def session_value(key: str, doc: str | None = None) -> Any:
    """A read-only property of a view (an object with ``self.session``): the session's setting ``key``."""
    return property(lambda self: self.session.value(key), doc=doc)


class EditorSession:
    def __init__(self, memory=None):
        self.events = EventGroup()
        self._values: dict[str, Any] = {}
        for spec in specs("ui"):
            self._values[spec.name] = spec.ui_default if spec.ui_default is not None else spec.default
        self._values.update(OUTPUT_KEYS)
        self._values.update(PLACEMENT_KEYS)
        self._values.update(MARK_KEYS)
        self.avatar = ""
        self.script = ""
        self.analysis = None  # the voice-over's AudioAnalysis (its frame grid: analysis.rate)
        self.avatar_rate: Fraction | None = None  # a video avatar's own rate; None: a photo (or not loaded)
        self.gpus: tuple[str, ...] = ()  # this machine's GPUs, for "All GPUs here"
        self.memory = memory  # a VoiceoverMemory: in/out and markers per voice-over, or None
        self.voice_key = ""  # the content key of the voice-over on screen ("" until it is read)
        self._quiet = 0
        self._mask_key: tuple | None = None
        self._mask = None
        self._explicit: set[str] = set()  # the settings the editor changed: they win over the delivery's

    # ---- values ---------------------------------------------------------------------------

    def value(self, key: str) -> Any:
        return self._values[key]

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def keys(self) -> list[str]:
        return list(self._values)

    def label(self, key: str) -> str:
        return SCHEMA[key].label if key in SCHEMA else LABELS.get(key, key)

    def set(self, key: str, value: Any) -> bool:
        """Set ``key`` (checked as the schema says: one sentence when not allowed); True when it changed.
        A render setting the editor sets wins over the delivery's value; choosing a delivery fills the
        settings with its values (``choose_delivery``: one step)."""
        if key not in self._values:
            raise InputError(f"the editor has no setting {key!r}")
        if key == "delivery" and not self._quiet:
            return self.choose_delivery(value)
        value = self._checked(key, value)
        if key in SCHEMA and key != "delivery" and not self._quiet:
            self._explicit.add(key)
        before = self._values[key]
        if before == value:
            return False
        rate_before = self.rate
        self._values[key] = value
        self.events.changed.emit(key, before, value)
        if not self._quiet:
            self.events.edited.emit(key, before, value, self._scope(key))
        if key in ("range", "markers"):
            self._remember()
        if self.rate != rate_before:
            self.events.rate.emit(self.rate)
        return True

    # ---- the delivery ------------------------------------------------------------------------

    @property
    def explicit(self) -> frozenset[str]:
        """The render settings the editor set (they win over the delivery's values)."""
        return frozenset(self._explicit)

    def set_explicit(self, names: Iterable[str]) -> None:
        """Which settings the editor set (saved settings being loaded)."""
        self._explicit = {n for n in names if n in SCHEMA and n != "delivery"}

    def choose_delivery(self, name: Any) -> bool:
        """Choose a delivery (its key or title, "" for none): one undoable step that fills the settings
        with its values, as an NLE's export preset fills its dialog (a setting changed afterwards wins);
        settings the delivery before it set go back to their default. True when anything changed."""
        from studio.core.delivery import resolve as find
        from studio.core.settings import delivery_values

        text = str(name or "").strip()
        key = find(text).name if text else ""  # one sentence when there is none
        try:
            old = delivery_values(self._values["delivery"])
        except InputError:  # removed meanwhile: nothing of it to take back
            old = {}
        new = delivery_values(key)
        before = self.delivery_state()
        with self.quiet():
            self._set_value("delivery", key)
            for k in old:
                if k not in new and k not in self._explicit and k in self._values:
                    spec = SCHEMA[k]
                    self._set_value(k, spec.ui_default if spec.ui_default is not None else spec.default)
            for k, v in new.items():
                if k in self._values:
                    self._set_value(k, v)
                    self._explicit.discard(k)
        after = self.delivery_state()
        if before == after:
            return False
        if not self._quiet:
            self.events.edited.emit("delivery", before, after, "")
        return True

    def fill_delivery(self) -> None:
        """The chosen delivery's values into the settings the editor did not set (not an edit)."""
        from studio.core.settings import delivery_values

        with self.quiet():
            for k, v in delivery_values(self._values["delivery"]).items():
                if k in self._values and k not in self._explicit:
                    self.set(k, v)

    def delivery_state(self) -> DeliveryState:
        """The delivery and every render setting with which of them the editor set: one undo step's value."""
        return DeliveryState(
            self._values["delivery"],
            tuple((k, self._values[k]) for k in setting_keys() if k != "delivery"),
            frozenset(self._explicit),
        )

    def _set_value(self, key: str, value: Any) -> None:
        with self.quiet():
            self.set(key, value)

    def _restore_delivery(self, state: DeliveryState) -> None:
        with self.quiet():
            self.set("delivery", state.name)
            for k, v in state.values:
                if k in self._values:
                    self.set(k, v)
        self._explicit = set(state.explicit)

    def resolved(self):
        """What a render of the selected avatar with the settings here uses (``render.resolve``): the
        settings, the rate, the frame size, the suffix, and a problem (an enlargement the render refuses)
        or notes; the same resolution the request gets."""
        from studio.core.render.resolve import resolve

        return resolve(self.render_settings(), self._explicit, self.avatar or None)

    def frame_settings(self) -> RenderSettings:
        """The settings a scrub frame is made with: resolved as the request's (the delivery's canvas,
        placement and rate under the settings the editor set), so the frame is the written one."""
        from studio.core.render.resolve import resolve

        return resolve(self.render_settings(), self._explicit).settings

    def update(self, values: dict) -> None:
        """Several values at once, none recorded (saved settings being loaded); bad ones are skipped."""
        with self.quiet():
            for k, v in values.items():
                if k in self._values and k not in MARK_KEYS:
                    try:
                        self.set(k, v)
                    except InputError:
                        continue

    def values(self, keys: Iterable[str] | None = None) -> dict[str, Any]:
        return {k: self._values[k] for k in (keys if keys is not None else self._values)}

    def _checked(self, key: str, value: Any) -> Any:
        spec = SCHEMA.get(key) if key not in MARK_KEYS else None  # "markers": the timeline's, not the text setting
        if spec is not None:
            value = spec.parse(value)
            msg = spec.problem(value)
            if msg:
                raise InputError(msg)
            return value
        if key == "target":
            if value not in TARGETS:
                raise InputError(f"render on {value!r} is not one of {', '.join(TARGETS)}")
        elif key in ("overwrite", "range_only"):
            return bool(value)
        elif key in ("folder", "pattern", "farm", "server"):
            return str(value or "")  # as typed (a field being edited keeps its cursor); stripped where used
        elif key == "range":
            a, b = value
            return (None if a is None else int(a), None if b is None else int(b))
        elif key == "markers":
            out: dict[int, str] = {}
            for m in value:
                frame, name = (m.frame, m.name) if isinstance(m, Marker) else (int(m[0]), str(m[1]))
                if self.analysis is None or 0 <= frame < max(1, self.frames):
                    out[int(frame)] = name
            return tuple(sorted(out.items()))
        return value

    @contextmanager
    def quiet(self) -> Iterator[None]:
        """Changes inside are no edits (a restore, a voice-over's remembered marks): nothing to undo."""
        self._quiet += 1
        try:
            yield
        finally:
            self._quiet -= 1

    def _scope(self, key: str) -> str:
        return self.voice_key if key in MARK_KEYS else ""

    def apply(self, key: str, value: Any, scope: str = "") -> None:
        """An undo or a redo: put ``value`` back without recording it; a mark of a voice-over that is
        no longer on screen (``scope``) changes that voice-over's memory instead."""
        if scope and scope != self.voice_key:
            if self.memory is not None:
                if key == "range":
                    self.memory.put(scope, in_frame=value[0], out_frame=value[1])
                elif key == "markers":
                    self.memory.put(scope, markers=list(value))
            return
        if key == "delivery" and isinstance(value, DeliveryState):
            self._restore_delivery(value)
            return
        with self.quiet():
            self.set(key, value)

    def render_settings(self) -> RenderSettings:
        """The settings the window holds, with the timeline's markers as the render's ``markers``
        setting (seconds at the grid's rate: chapters and the OpenTimelineIO file)."""
        values = {k: self._values[k] for k in setting_keys()}
        return RenderSettings(**values, markers=self.markers_setting())

    def delivery_values(self) -> dict[str, Any]:
        """What "Save as delivery" saves: the delivery-side settings (``delivery.DELIVERY_KEYS``) as a
        render would use them (the chosen delivery's values under the ones set here), those not at
        their default."""
        from studio.core.store.deliveries import delivery_values

        return delivery_values(self.resolved().settings)

    def markers_setting(self) -> str:
        """The timeline's markers as the ``markers`` setting's text: ``SECONDS=NAME`` separated by commas."""
        rate = float(self.grid_rate)
        return ",".join(
            f"{f / rate:.3f}".rstrip("0").rstrip(".") + (f"={_marker_name(n)}" if _marker_name(n) else "")
            for f, n in sorted(self._values["markers"])
        )

    # ---- what is selected -----------------------------------------------------------------

    def select(self, avatar: str | None = None, script: str | None = None) -> None:
        if avatar is not None and avatar != self.avatar:
            before = self.rate
            self.avatar = avatar
            self.avatar_rate = _recorded_rate(avatar)  # a library avatar's recorded rate; its assets confirm it
            self.events.avatar.emit(avatar)
            if self.rate != before:  # a video's rate left with it: the timeline follows (it stayed at 30)
                self.events.rate.emit(self.rate)
        if script is not None and script != self.script:
            self.script = script
            self.voice_key = ""  # nothing is saved under the old voice-over's key
            self.events.script.emit(script)

    def set_avatar_rate(self, rate) -> None:
        """The selected avatar's own rate (a video's), or None (a photo)."""
        before = self.rate
        self.avatar_rate = None if rate is None else parse_rate(rate)
        if self.rate != before:
            self.events.rate.emit(self.rate)

    @property
    def rate(self) -> Fraction:
        """The rate the next render has: the Frame rate setting, or for auto the video avatar's own."""
        fps = self._values.get("fps", "auto")
        if fps in (None, "", "auto"):
            return self.avatar_rate or DEFAULT_RATE
        return parse_rate(fps)

    @property
    def grid_rate(self) -> Fraction:
        """The rate of the frames on the timeline now (the analysis's)."""
        return Fraction(getattr(self.analysis, "rate", None) or self.rate)

    @property
    def stale(self) -> bool:
        """The voice-over was analysed at another rate than the next render's: analyse it again."""
        return self.analysis is not None and Fraction(self.analysis.rate) != self.rate

    def set_analysis(self, analysis, key: str = "") -> None:
        """Show ``analysis`` (the selected voice-over's); its in/out and markers are the ones remembered
        for ``key`` (its content key), none when nothing is."""
        held = (self.voice_key, self.grid_rate, self._values["range"], self._values["markers"])
        self.analysis = analysis
        self.voice_key = ""
        with self.quiet():
            self.set("range", (None, None))
            self.set("markers", ())
        self.events.analysis.emit(analysis)
        self.voice_key = key
        if key and key == held[0]:  # the same voice-over at another rate: the same moments, in time
            _, was, (a, b), markers = held
            now = self.grid_rate
            with self.quiet():
                self.set("markers", [(retime(f, was, now), n) for f, n in markers])
                self.set(
                    "range",
                    (None if a is None else retime(a, was, now), None if b is None else retime(b + 1, was, now) - 1),
                )
            self._remember()
        elif key and self.memory is not None:
            m = self.memory.get(key, rate=float(self.grid_rate))
            with self.quiet():
                self.set("markers", [tuple(x) for x in m["markers"]])
                self.set("range", (m["in"], m["out"]))

    def _remember(self) -> None:
        if not self.voice_key or self.memory is None:
            return
        a, b = self._values["range"]
        self.memory.put(
            self.voice_key,
            name=Path(self.script).name,
            rate=float(self.grid_rate),
            in_frame=a,
            out_frame=b,
            markers=[list(m) for m in self._values["markers"]],
        )

    @property
    def frames(self) -> int:
        """Frames of the voice-over on the timeline (0 without one)."""
        return int(self.analysis.frames) if self.analysis is not None else 0

    @property
    def mask(self):
        """The silent frames (bool [frames]) at the threshold and min silence held here; None without audio."""
        if self.analysis is None:
            return None
        key = (id(self.analysis), self._values["threshold"], self._values["min_silence"])
        if key != self._mask_key:
            self._mask = self.analysis.mask(self._values["threshold"], self._values["min_silence"])
            self._mask_key = key
        return self._mask

    def silent_spans(self) -> list[tuple[int, int]]:
        from studio.core.media.analysis import runs

        m = self.mask
        return runs(m) if m is not None else []

    # ---- in / out -------------------------------------------------------------------------

    @property
    def in_frame(self) -> int | None:
        return self._values["range"][0]

    @property
    def out_frame(self) -> int | None:
        """The last frame of the range (included), or None."""
        return self._values["range"][1]

    def set_in(self, frame: int) -> None:
        """``frame`` is the first frame of the range; an in point past the out point clears the out point."""
        if self.analysis is None:
            return
        frame = self._clamp(frame)
        out = self.out_frame if self.out_frame is None or self.out_frame >= frame else None
        self.set("range", (frame, out))

    def set_out(self, frame: int) -> None:
        """``frame`` is the last frame of the range (included, as in Premiere)."""
        if self.analysis is None:
            return
        frame = self._clamp(frame)
        first = self.in_frame if self.in_frame is None or self.in_frame <= frame else None
        self.set("range", (first, frame))

    def set_range(self, in_frame: int | None, out_frame: int | None) -> None:
        self.set("range", (in_frame, out_frame))

    def clear_in(self) -> None:
        self.set("range", (None, self.out_frame))

    def clear_out(self) -> None:
        self.set("range", (self.in_frame, None))

    def clear_range(self) -> None:
        self.set("range", (None, None))

    def range_frames(self) -> tuple[int, int] | None:
        """The in/out range as frames ``[start, end)``; None when neither point is set."""
        a, b = self._values["range"]
        if self.analysis is None or (a is None and b is None):
            return None
        start = a if a is not None else 0
        end = b + 1 if b is not None else self.frames
        return (max(0, start), min(self.frames, end))

    def render_range(self) -> tuple[int, int] | None:
        """The frames a render covers when "Render in/out range only" is on; None: the whole clip."""
        r = self.range_frames()
        return r if r is not None and self._values["range_only"] else None

    def _clamp(self, frame: int) -> int:
        return min(max(0, int(frame)), max(0, self.frames - 1))

    # ---- markers --------------------------------------------------------------------------

    @property
    def markers(self) -> list[Marker]:
        return [Marker(f, n) for f, n in self._values["markers"]]

    def marker_at(self, frame: int) -> Marker | None:
        return next((m for m in self.markers if m.frame == int(frame)), None)

    def add_marker(self, frame: int, name: str | None = None) -> Marker | None:
        """A marker at ``frame`` named ``name`` (default "Marker N"); one already there is returned."""
        if self.analysis is None:
            return None
        f = self._clamp(frame)
        old = self.marker_at(f)
        if old is not None:
            return old
        taken = {m.name for m in self.markers}
        n = len(taken) + 1
        while f"Marker {n}" in taken:
            n += 1
        marker = Marker(f, name if name is not None else f"Marker {n}")
        self.set("markers", [*self._values["markers"], (marker.frame, marker.name)])
        return marker

    def rename_marker(self, frame: int, name: str) -> None:
        if self.marker_at(frame) is not None:
            self.set("markers", [(f, name if f == int(frame) else n) for f, n in self._values["markers"]])

    def remove_marker(self, frame: int) -> None:
        self.set("markers", [(f, n) for f, n in self._values["markers"] if f != int(frame)])

    def marker_span(self, frame: int) -> tuple[int, int]:
        """Frames ``[marker, next marker)`` (or to the end) of the marker at ``frame``."""
        later = [f for f, _n in self._values["markers"] if f > frame]
        return (int(frame), later[0] if later else self.frames)

    def next_marker(self, frame: int, direction: int) -> int | None:
        frames = [f for f, _n in self._values["markers"]]
        if direction > 0:
            return next((x for x in frames if x > frame), None)
        return next((x for x in reversed(frames) if x < frame), None)

    # ---- output and placement -------------------------------------------------------------

    @property
    def crf_applies(self) -> bool:
        """CRF sets the quality of H.264, HEVC and VP9; ProRes and DNxHR have a fixed one."""
        return self._values.get("codec") not in FIXED_QUALITY

    def quality_text(self) -> str:
        """What ``{quality}`` says in a file name: ``crf20``, or the codec for a fixed-quality one."""
        return f"crf{self._values['crf']}" if self.crf_applies else str(self._values.get("codec"))

    def output_path(self, avatar: str | None = None, script: str | None = None) -> str:
        """The file a render of ``avatar`` x ``script`` (default: the selected ones) writes, before numbering."""
        from studio.core.env import sub_dir
        from studio.core.media.codecs import CODECS, SUFFIXES

        avatar = self.avatar if avatar is None else avatar
        script = self.script if script is None else script
        v = self._values
        folder = v["folder"].strip() or str(sub_dir("renders"))
        fields = {
            "avatar": avatar or "avatar",
            "script": Path(script).stem if script else "script",
            "engine": v["engine"],
            "crf": v["crf"] if self.crf_applies else "",
            "quality": self.quality_text(),
            "preset": v["preset"],
            "encoder": v["encoder"],
            "codec": v.get("codec", "h264"),
        }
        pattern = (v["pattern"].strip() or DEFAULT_PATTERN).replace("crf{crf}", "{quality}")
        try:
            name = pattern.format(**fields)
        except (KeyError, IndexError, ValueError):
            name = DEFAULT_PATTERN.format(**fields)
        spec = CODECS.get(v.get("codec", "h264"), CODECS["h264"])
        suffix = Path(name).suffix.lower()
        if suffix not in spec.suffixes:
            if suffix in SUFFIXES:
                name = name[: -len(suffix)]
            name += spec.suffix
        return str(Path(folder) / name)

    def placement(self):
        from studio.service.request import Placement

        v = self._values
        if v["target"] == "server":
            return Placement("server", server=v["server"].strip())
        if v["target"] == "farm":
            return Placement("farm", farm=v["farm"].strip())
        if v["target"] == "gpus" and len(self.gpus) >= 2:
            return Placement("gpus", devices=tuple(self.gpus))
        return Placement()

    def server_url(self) -> str | None:
        return self._values["server"].strip() if self._values["target"] == "server" else None

    def request(self, avatar: str | None = None, script: str | None = None, frames: tuple[int, int] | None = None):
        """The ``RenderRequest`` of ``avatar`` x ``script`` (default: the selected pair) with every setting
        held here (``frames``: this range instead of the in/out range when that is on)."""
        from studio.service.request import RenderRequest

        avatar = self.avatar if avatar is None else avatar
        script = self.script if script is None else script
        req = RenderRequest(
            avatar,
            script,
            self.output_path(avatar, script),
            self.render_settings(),
            self.placement(),
            overwrite=self._values["overwrite"],
            explicit=tuple(sorted(self._explicit)),  # the widgets changed win over the delivery's values
        )
        grid = frames if frames is not None else self.render_range()
        if grid is None:
            return req
        rate = parse_rate(req.rate) if req.rate else self.rate  # the avatar unreadable here: the rate in effect
        return req.with_(frames=self.frames_at(grid, rate))

    def frames_at(self, frames: tuple[int, int], rate) -> tuple[int, int]:
        """Frames ``[start, end)`` of the timeline as the same stretch of time at ``rate`` (the output's:
        an avatar or a rate changed since the voice-over was analysed), inside the voice-over."""
        grid = self.grid_rate
        a, b = retime(frames[0], grid, rate), retime(frames[1], grid, rate)
        info = getattr(self.analysis, "info", None)
        if info is not None:
            b = min(b, max(1, info.frames_at(rate)))
        return (a, max(a + 1, b))

    # ---- the figures the labels show --------------------------------------------------------

    def timecode(self, frame: int, rate=None) -> str:
        return timecode(frame, self.grid_rate if rate is None else rate)

    def range_label(self) -> str:
        """The Render panel's line: ``00:00:01:00–00:00:04:24 · 4.00 s`` at the timeline's rate."""
        r = self.range_frames()
        if r is None:
            return "set I / O on the timeline"
        a, b = r
        rate = self.grid_rate
        return f"{timecode(a, rate)}–{timecode(b - 1, rate)} · {seconds_text(b - a, rate)}"

    def inout_label(self, short: int = 0) -> str:
        """The timeline's line: ``in … · out … (4.00 s)``; ``short`` 1: ``…–… (4.00 s)``, 2: ``4.00 s``."""
        r = self.range_frames()
        if r is None:
            return ("no in/out range (I, O)", "no in/out (I, O)", "no in/out")[short]
        a, b = r
        rate = self.grid_rate
        length = seconds_text(b - a, rate)
        if short == 1:
            return f"{timecode(a, rate)}–{timecode(b - 1, rate)} ({length})"
        if short == 2:
            return f"in/out {length}"
        return f"in {timecode(a, rate)} · out {timecode(b - 1, rate)} ({length})"

    def time_caption(self, frame: int) -> str:
        total = self.frames
        return f"frame {frame} / {total}" if total else f"frame {frame}"

    def frame_caption(self, index: int, rate=None) -> str:
        """``00:00:10:00 · frame 250`` at ``rate`` (a finished file's own; default the timeline's)."""
        return f"{self.timecode(index, rate)} · frame {index}"

    def silence_summary(self, short: int = 0) -> str:
        """``28.24 s · 706 frames · 13 silences (21 % silent)``; ``short`` 1: ``13 silences (21 % silent)``,
        2: ``13 silences``."""
        m = self.mask
        if m is None:
            return "Import a voice-over to see its waveform and silences"
        spans = self.silent_spans()
        silent, total = int(m.sum()), max(1, len(m))
        if short == 2:
            return f"{len(spans)} silences"
        silences = f"{len(spans)} silences ({100 * silent / total:.0f} % silent)"
        return silences if short else f"{seconds_text(len(m), self.grid_rate)} · {len(m)} frames · {silences}"

    def step_text(self, key: str, before: Any, after: Any) -> str:
        """An undo step's words: "CRF 20 → 18", "Add marker “Intro”"."""
        if key == "markers":
            return markers_step(before, after)
        return f"{self.label(key)} {self.describe(key, before)} → {self.describe(key, after)}"

    def describe(self, key: str, value: Any) -> str:
        if isinstance(value, DeliveryState):
            value = value.name
        if key == "delivery":
            return delivery_title(value) or "none"
        if key == "range":
            a, b = value
            if a is None and b is None:
                return "no in/out"
            return f"{'—' if a is None else self.timecode(a)}–{'—' if b is None else self.timecode(b)}"
        if key == "threshold":
            return f"{value:g}"
        if key == "min_silence":
            return f"{value} frames"
        spec = SCHEMA.get(key)
        if spec is not None and value is None:
            return spec.auto_label or "none"
        if isinstance(value, bool):  # "Range only off → on", never False → True
            return "on" if value else "off"
        return str(value) if value != "" else "none"


def _recorded_rate(avatar: str) -> Fraction | None:
    """A library avatar's own rate as its metadata records it (None: a photo, or not known yet)."""
    from studio.core.avatars.assets import NAME_RE, library_dir

    if not avatar or not NAME_RE.match(avatar) or not (library_dir() / avatar / "meta.json").exists():
        return None
    from studio.core.avatars.library import avatar_rate
    from studio.core.errors import StudioError

    try:
        rate = avatar_rate(avatar)
    except (StudioError, OSError, ValueError):
        return None
    return None if rate == DEFAULT_RATE else Fraction(rate)


def retime(frame: int, was, now) -> int:
    """Frame ``frame`` of a ``was`` fps grid as the nearest frame of a ``now`` fps grid (the same moment)."""
    was, now = Fraction(was), Fraction(now)
    if was == now:
        return int(frame)
    return int(round(Fraction(int(frame)) * now / was))


def delivery_title(name: str) -> str:
    """A delivery's full name ("Broadcast HD") from its key; "" for none."""
    if not name:
        return ""
    from studio.core.delivery import resolve as find

    try:
        return find(name).title
    except InputError:
        return str(name)


def markers_step(before, after) -> str:
    """An undo step's words for a change of the markers: "Add marker “Intro”", "Rename marker ..."."""
    b, a = dict(before), dict(after)
    added = [a[f] for f in a if f not in b]
    gone = [b[f] for f in b if f not in a]
    renamed = [(b[f], a[f]) for f in a if f in b and a[f] != b[f]]
    if len(added) == 1 and not gone and not renamed:
        return f"Add marker “{added[0]}”"
    if len(gone) == 1 and not added and not renamed:
        return f"Delete marker “{gone[0]}”"
    if len(renamed) == 1 and not added and not gone:
        return f"Rename marker “{renamed[0][0]}” to “{renamed[0][1]}”"
    return "Change markers"


def _marker_name(name: str) -> str:
    """A marker's name as the markers setting can carry it (its separators, commas and =, are spaces)."""
    return " ".join(str(name or "").replace(",", " ").replace("=", " ").split())

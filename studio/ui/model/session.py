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

The session composes three sub-models and keeps the events and undo: ``settings`` (the values, which
of them the editor set, what a delivery changes: ``values.SettingValues``), ``marks`` (in/out and
markers, kept at their moments when the rate changes: ``marks.Marks``) and ``output`` (the file's
name, suffix and folder, the placement: ``output.Output``). Each changes a value only through ``set``.

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
from fractions import Fraction
from operator import attrgetter
from pathlib import Path
from typing import Any

from studio.core.errors import InputError
from studio.core.media.rates import DEFAULT_RATE, parse_rate
from studio.core.media.timecode import seconds_text, timecode
from studio.core.settings import SCHEMA, RenderSettings
from studio.ui.model.events import EventGroup
from studio.ui.model.marks import MARK_KEYS, Marks, markers_step, retime
from studio.ui.model.output import Output
from studio.ui.model.values import DeliveryState, SettingValues, delivery_title, setting_keys


def session_attr(name: str, doc: str | None = None) -> Any:
    """A read-only property of a view (an object with ``self.session``): the session's ``name`` (dotted:
    a sub-model's, "marks.in_frame"). A view keeps no copy of what the session holds."""
    get = attrgetter(f"session.{name}")
    return property(lambda self: get(self), doc=doc)


def session_value(key: str, doc: str | None = None) -> Any:
    """A read-only property of a view (an object with ``self.session``): the session's setting ``key``."""
    return property(lambda self: self.session.value(key), doc=doc)


class EditorSession:
    def __init__(self, memory=None):
        self.events = EventGroup()
        self.settings = SettingValues()
        self.marks = Marks(
            self.settings.get, self.set, lambda: self.frames if self.analysis is not None else None, self._grid
        )
        self.output = Output(self.settings.get)
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

    # ---- values ---------------------------------------------------------------------------

    def value(self, key: str) -> Any:
        return self.settings.data[key]

    def __getitem__(self, key: str) -> Any:
        return self.settings.data[key]

    def keys(self) -> list[str]:
        return self.settings.keys()

    def label(self, key: str) -> str:
        return self.settings.label(key)

    def values(self, keys: Iterable[str] | None = None) -> dict[str, Any]:
        return self.settings.values(keys)

    @property
    def explicit(self) -> frozenset[str]:
        """The render settings the editor set (they win over the delivery's values)."""
        return frozenset(self.settings.explicit)

    def set_explicit(self, names: Iterable[str]) -> None:
        """Which settings the editor set (saved settings being loaded)."""
        self.settings.set_explicit(names)

    def set(self, key: str, value: Any) -> bool:
        """Set ``key`` (checked as the schema says: one sentence when not allowed); True when it changed.
        A render setting the editor sets wins over the delivery's value; choosing a delivery fills the
        settings with its values (``choose_delivery``: one step)."""
        if key not in self.settings:
            raise InputError(f"the editor has no setting {key!r}")
        if key == "delivery" and not self._quiet:
            return self.choose_delivery(value)
        value = self._checked(key, value)
        if key in SCHEMA and key != "delivery" and not self._quiet:
            self.settings.explicit.add(key)
        before = self.settings.data[key]
        if before == value:
            return False
        rate_before = self.rate
        self.settings.data[key] = value
        self.events.changed.emit(key, before, value)
        if not self._quiet:
            self.events.edited.emit(key, before, value, self._scope(key))
        if key in MARK_KEYS:
            self._remember()
        if self.rate != rate_before:
            self.events.rate.emit(self.rate)
        return True

    def _checked(self, key: str, value: Any) -> Any:
        if key in MARK_KEYS:
            return self.marks.check(key, value)
        if self.settings.is_setting(key):
            return self.settings.check(key, value)
        return self.output.check(key, value)

    def update(self, values: dict) -> None:
        """Several values at once, none recorded (saved settings being loaded); bad ones are skipped."""
        with self.quiet():
            for k, v in values.items():
                if k in self.settings and k not in MARK_KEYS:
                    try:
                        self.set(k, v)
                    except InputError:
                        continue

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
            with self.quiet():
                self.set("delivery", value.name)
                for k, v in value.values:
                    if k in self.settings:
                        self.set(k, v)
            self.settings.explicit = set(value.explicit)
            return
        with self.quiet():
            self.set(key, value)

    # ---- the delivery ------------------------------------------------------------------------

    def choose_delivery(self, name: Any) -> bool:
        """Choose a delivery (its key or title, "" for none): one undoable step that fills the settings
        with its values, as an NLE's export preset fills its dialog (a setting changed afterwards wins);
        settings the delivery before it set go back to their default. True when anything changed."""
        writes = self.settings.delivery_writes(name)  # one sentence when there is none
        before = self.settings.state()
        with self.quiet():
            for k, v in writes:
                self.set(k, v)
        self.settings.explicit -= {k for k, _v in writes}
        after = self.settings.state()
        if before == after:
            return False
        if not self._quiet:
            self.events.edited.emit("delivery", before, after, "")
        return True

    def fill_delivery(self) -> None:
        """The chosen delivery's values into the settings the editor did not set (not an edit)."""
        with self.quiet():
            for k, v in self.settings.fill_writes():
                self.set(k, v)

    def delivery_state(self) -> DeliveryState:
        """The delivery and every render setting with which of them the editor set: one undo step's value."""
        return self.settings.state()

    def resolved(self):
        """What a render of the selected avatar with the settings here uses (``render.resolve``): the
        settings, the rate, the frame size, the suffix, and a problem (an enlargement the render refuses)
        or notes; the same resolution the request gets."""
        from studio.core.render.resolve import resolve

        return resolve(self.render_settings(), self.settings.explicit, self.avatar or None)

    def frame_settings(self) -> RenderSettings:
        """The settings a scrub frame is made with: resolved as the request's (the delivery's canvas,
        placement and rate under the settings the editor set), so the frame is the written one."""
        from studio.core.render.resolve import resolve

        return resolve(self.render_settings(), self.settings.explicit).settings

    def render_settings(self) -> RenderSettings:
        """The settings the window holds, with the timeline's markers as the render's ``markers``
        setting (seconds at the grid's rate: chapters and the OpenTimelineIO file)."""
        return RenderSettings(**self.settings.values(setting_keys()), markers=self.marks.markers_setting())

    def delivery_values(self) -> dict[str, Any]:
        """What "Save as delivery" saves: the delivery-side settings (``delivery.DELIVERY_KEYS``) as a
        render would use them (the chosen delivery's values under the ones set here), those not at
        their default."""
        from studio.core.store.deliveries import delivery_values

        return delivery_values(self.resolved().settings)

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
        fps = self.settings.get("fps") or "auto"
        if fps == "auto":
            return self.avatar_rate or DEFAULT_RATE
        return parse_rate(fps)

    @property
    def grid_rate(self) -> Fraction:
        """The rate of the frames on the timeline now (the analysis's)."""
        return Fraction(getattr(self.analysis, "rate", None) or self.rate)

    def _grid(self) -> Fraction:
        return self.grid_rate

    @property
    def stale(self) -> bool:
        """The voice-over was analysed at another rate than the next render's: analyse it again."""
        return self.analysis is not None and Fraction(self.analysis.rate) != self.rate

    def set_analysis(self, analysis, key: str = "") -> None:
        """Show ``analysis`` (the selected voice-over's); its in/out and markers are the ones remembered
        for ``key`` (its content key), none when nothing is."""
        held = (self.voice_key, self.grid_rate, self.value("range"), self.value("markers"))
        self.analysis = analysis
        self.voice_key = ""
        with self.quiet():
            self.set("range", (None, None))
            self.set("markers", ())
        self.events.analysis.emit(analysis)
        self.voice_key = key
        if key and key == held[0]:  # the same voice-over at another rate: the same moments, in time
            range_, markers = self.marks.retimed(held[2], held[3], held[1], self.grid_rate)
            with self.quiet():
                self.set("markers", markers)
                self.set("range", range_)
            self._remember()
        elif key and self.memory is not None:
            m = self.memory.get(key, rate=float(self.grid_rate))
            with self.quiet():
                self.set("markers", [tuple(x) for x in m["markers"]])
                self.set("range", (m["in"], m["out"]))

    def _remember(self) -> None:
        if not self.voice_key or self.memory is None:
            return
        a, b = self.value("range")
        self.memory.put(
            self.voice_key,
            name=Path(self.script).name,
            rate=float(self.grid_rate),
            in_frame=a,
            out_frame=b,
            markers=[list(m) for m in self.value("markers")],
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
        threshold, min_silence = self.value("threshold"), self.value("min_silence")
        key = (id(self.analysis), threshold, min_silence)
        if key != self._mask_key:
            self._mask = self.analysis.mask(threshold, min_silence)
            self._mask_key = key
        return self._mask

    def silent_spans(self) -> list[tuple[int, int]]:
        from studio.core.media.analysis import runs

        m = self.mask
        return runs(m) if m is not None else []

    # ---- the request --------------------------------------------------------------------------

    def output_path(self, avatar: str | None = None, script: str | None = None) -> str:
        """The file a render of ``avatar`` x ``script`` (default: the selected ones) writes, before numbering."""
        return self.output.path(self.avatar if avatar is None else avatar, self.script if script is None else script)

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
            self.output.placement(self.gpus),
            overwrite=self.value("overwrite"),
            explicit=tuple(sorted(self.settings.explicit)),  # the widgets changed win over the delivery's values
        )
        grid = frames if frames is not None else self.marks.render_range()
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

"""One resolution: what the user set (and which of it explicitly), the delivery and the avatar -> the
settings a render uses, once, where the request is built.

    r = resolve({"delivery": "social-vertical", "fit": "fit"}, explicit={"delivery", "fit"}, avatar="anna")
    r.settings        # RenderSettings: canvas 1080x1920, fps 30, crf 20, ... fit "fit" (given: it wins)
    r.rate, r.size, r.suffix      # "30", (1080, 1920), ".mp4": what the file will be
    r.problem         # one sentence when the canvas needs more enlargement than allowed (else None)
    r.notes           # what the render will say (a presenter kept smaller than its fit)

Precedence, for every setting: a value set explicitly > the delivery's value > the value given (the
face's default). "Explicit" is what the face knows: the command line's typed options, the HTTP fields
the client sent, the window's widgets the user changed. Without it (``explicit=None``: a job row of an
earlier version), a value away from its default counts as explicit. Resolving resolved settings again
with the same ``explicit`` gives them back unchanged, so a request read back from the queue, a farm job
or a scrub resolves to what the window showed. ``delivery`` stays in the settings as provenance.

Every face calls this (through ``RenderRequest``, the window's session, ``/v1/frame``): nothing below
re-derives a delivery's values.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from studio.core.errors import InputError, StudioError
from studio.core.settings import SCHEMA, RenderSettings, with_delivery


@dataclass(frozen=True)
class Resolved:
    """The settings a render uses, and what follows from them for this avatar."""

    settings: RenderSettings
    explicit: frozenset[str] = frozenset()
    rate: str = ""  # the output rate (``rates.rate_text``); "" while the avatar cannot be read here
    size: tuple[int, int] | None = None  # the written frames' (width, height); None: the avatar's, unknown here
    avatar_size: tuple[int, int] | None = None
    suffix: str = ".mp4"  # the container the codec writes
    problem: str | None = None  # the render would be refused: one sentence with the choices
    notes: tuple[str, ...] = field(default_factory=tuple)  # what the render will say about itself

    def check(self) -> Resolved:
        """``self``, or one ``InputError`` with the problem."""
        if self.problem:
            raise InputError(self.problem)
        return self

    @property
    def delivery_title(self) -> str:
        """The chosen delivery's full name ("Broadcast HD"), or ""."""
        name = self.settings.delivery
        if not name:
            return ""
        from studio.core.delivery import resolve as find

        try:
            return find(name).title
        except InputError:
            return name


def resolve(
    values: RenderSettings | Mapping[str, Any] | None,
    explicit: Iterable[str] | None = None,
    avatar: Any = None,
    rate: str = "",
) -> Resolved:
    """The settings a render of ``avatar`` (a library name, a path, ``AvatarAssets`` or None: not known
    here) uses, from ``values`` with the delivery they name applied under those set ``explicit``ly.
    ``rate``: the output rate resolved before (a request read back): the avatar is not asked again.
    Bad values: one ``InputError`` naming the setting."""
    settings, given = with_delivery(values if isinstance(values, RenderSettings) else dict(values or {}), explicit)
    from studio.core.media.codecs import spec as codec_spec

    out = Resolved(settings, given, suffix=codec_spec(settings.codec).suffix)
    if avatar is None or avatar == "":
        return out
    return _with_avatar(out, avatar, rate)


def _with_avatar(r: Resolved, avatar: Any, known: str = "") -> Resolved:
    from dataclasses import replace

    from studio.core.avatars.library import avatar_size, output_rate_for
    from studio.core.media.rates import rate_text

    s = r.settings
    rate = known
    try:
        rate = rate or rate_text(output_rate_for(s.fps, avatar))
    except (StudioError, OSError, ValueError):
        rate = ""
    try:
        own: tuple[int, int] | None = avatar_size(avatar)
    except (StudioError, OSError, ValueError, KeyError, TypeError):
        own = None
    size = s.canvas_size or own
    problem, notes = (None, ()) if own is None else enlargement(s, own)
    return replace(r, rate=rate, size=size, avatar_size=own, problem=problem, notes=notes)


def enlargement(s: RenderSettings, own: tuple[int, int]) -> tuple[str | None, tuple[str, ...]]:
    """A placement that covers the canvas (fill, face) and needs more enlargement than ``max_upscale``
    would leave bands: refused, with the choices; ``fit`` keeps the presenter smaller (a note)."""
    size = s.canvas_size
    if size is None:
        return None, ()
    from studio.core.render.canvas import needed_upscale

    aw, ah = own
    need = needed_upscale(s, aw, ah, size)
    if need <= s.max_upscale + 1e-9:
        return None, ()
    cw, ch = size
    what = f"the {s.delivery} delivery" if s.delivery else "the canvas"
    if s.fit == "fit":
        return None, (
            f"{what} shows the {aw}x{ah} avatar at {s.max_upscale:g}x on {cw}x{ch} (fit needs {need:.1f}x): "
            "a smaller presenter on the background (raise --max-upscale to enlarge it, softer)",
        )
    room = math.ceil(need * 10 - 1e-6) / 10
    top = SCHEMA["max_upscale"].maximum or 8.0
    softer = f"allow a softer enlargement (--max-upscale {room:g})" if room <= top else ""
    choices = [c for c in (softer, "fit it on a background (--fit fit)", "or use a larger avatar") if c]
    return (
        f"{what} needs the {aw}x{ah} avatar enlarged {need:.1f}x to {s.fit} {cw}x{ch} and at most "
        f"{s.max_upscale:g}x is allowed, which would leave bands: {', '.join(choices)}"
    ), ()

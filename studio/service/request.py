"""What to render and where, as data: ``RenderRequest`` and ``Placement``.

    req = RenderRequest("anna", "voice.flac", "out.mp4", RenderSettings(engine="classic"),
                        Placement("gpus", devices=("cuda:0", "cuda:1")), frames=(250, 500))
    RenderRequest.from_dict(req.to_dict()) == req          # what the job store and the HTTP API carry

A request is plain, frozen data: every front end (window, command line, server) builds one and
hands it to the service's driver or queue. Values are checked here (``InputError``, one sentence),
so a bad request fails before any work starts, wherever it came from.

The settings are resolved here, once, as the request is built (``studio.core.render.resolve``): the
delivery's values under those the user set explicitly (``explicit``: the command line's typed options,
the HTTP fields sent, the window's changed widgets), and the output's frame rate (``rate``: the ``fps``
setting, or for ``auto`` the avatar's own rate, read from its metadata). The request carries the resolved
settings (``settings.delivery`` stays as provenance) and ``explicit``, so a request read back from the
queue, a farm job or a server resolves to itself; the queue's estimates, the API's answers and every
placement read ``req.output_rate``, and the render runs with ``req.render_settings`` (``fps`` pinned to
that rate), so no layer below applies the delivery or loads the avatar for the rate again.
``req.resolution`` holds what else follows (frame size, suffix, an enlargement the render would refuse).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from fractions import Fraction

from studio.core.errors import InputError
from studio.core.settings import SCHEMA, RenderSettings, parse_dict

PLACEMENTS = ("local", "gpus", "chunks", "farm", "server")
WHERE_LOCAL = "this computer"


@dataclass(frozen=True)
class Placement:
    """Where a render runs.

    ``local``: this computer, one device (``settings.device``). ``gpus``: one clip split over
    ``devices`` of this machine (empty: every CUDA GPU). ``chunks``: ``chunks`` local processes.
    ``farm``: a Ray farm at ``farm`` (``""``: the one ``studio farm up`` started here), in
    ``chunks`` segments (0: one per worker). ``server``: a ``studio serve`` at the URL ``server``
    (its own queue renders it; the MP4 is downloaded here), in the lane ``priority`` there (breaking /
    normal / bulk or 0-100, ``scheduler.parse_priority``; None: the server's default).
    """

    kind: str = "local"
    devices: tuple[str, ...] = ()
    chunks: int = 0
    farm: str = ""
    server: str = ""
    priority: int | None = None

    def __post_init__(self):
        if self.kind not in PLACEMENTS:
            raise InputError(f"unknown placement {self.kind!r}: use {', '.join(PLACEMENTS)}")
        object.__setattr__(self, "devices", tuple(str(d) for d in (self.devices or ())))
        if not isinstance(self.chunks, int) or self.chunks < 0:
            raise InputError("chunks must be a positive number of segments (or 0 for automatic)")
        if self.kind == "chunks" and self.chunks == 1:
            raise InputError("local chunks need at least 2 segments (or render on this computer)")
        if self.kind == "farm":
            from studio.service.farm_link import check_address

            check_address(self.farm)
        if self.kind == "server":
            url = self.server.strip()
            host = url.split("://", 1)[-1].split("/", 1)[0]
            if not host:
                raise InputError("the Studio server needs an address such as http://gpu-box:8321")
            object.__setattr__(self, "server", url if "://" in url else f"http://{url}")
        if self.priority is not None:
            from studio.service.scheduler import parse_priority

            object.__setattr__(self, "priority", parse_priority(self.priority))

    @property
    def label(self) -> str:
        """How the queue names it before the job runs."""
        if self.kind == "gpus":
            return f"{len(self.devices)} GPUs here" if self.devices else "all GPUs here"
        if self.kind == "chunks":
            return f"{self.chunks or 2} local processes"
        if self.kind == "farm":
            return f"farm {self.farm}" if self.farm else "farm"
        if self.kind == "server":
            return f"Studio server {self.server}"
        return WHERE_LOCAL


@dataclass(frozen=True)
class RenderRequest:
    """One render: avatar x voice-over -> output, with every setting, a frame range and a placement.

    ``frames`` is ``(start, end)``: render only video frames ``start <= t < end`` (the in/out range),
    with the matching stretch of the original audio. ``overwrite``: the queue may replace an existing
    file at ``output``; otherwise it numbers the name (``_002``). ``rate``: the output's frame rate
    (``rates.rate_text``), worked out from ``settings.fps`` and the avatar when the request is built
    ("" while the avatar cannot be read: ``output_rate`` then tries again). ``explicit``: the settings
    the user set (they win over the delivery's); None: those away from their default.
    """

    avatar: str
    audio: str
    output: str
    settings: RenderSettings = field(default_factory=RenderSettings)
    placement: Placement = field(default_factory=Placement)
    frames: tuple[int, int] | None = None
    overwrite: bool = False
    rate: str = ""
    explicit: tuple[str, ...] | None = None

    def __post_init__(self):
        if not self.avatar or not self.audio:
            raise InputError("a render needs an avatar and a voice-over; choose both first")
        if not self.output:
            raise InputError("a render needs an output file name")
        object.__setattr__(self, "avatar", str(self.avatar))
        object.__setattr__(self, "audio", str(self.audio))
        object.__setattr__(self, "output", str(self.output))
        if self.frames is not None:
            a, b = (int(x) for x in self.frames)
            if a < 0 or b <= a:
                raise InputError(
                    f"the frame range {a}..{b} is empty or negative: the out point must come after the in point"
                )
            object.__setattr__(self, "frames", (a, b))
        from studio.core.render.resolve import resolve

        res = resolve(self.settings, self.explicit, self.avatar, self.rate)  # a rate resolved before is kept
        object.__setattr__(self, "settings", res.settings)
        object.__setattr__(self, "explicit", tuple(sorted(res.explicit)))
        if not self.rate:
            object.__setattr__(self, "rate", res.rate)
        object.__setattr__(self, "_resolution", res)

    @property
    def resolution(self):
        """What the resolution gave (``render.resolve.Resolved``): frame size, suffix, the problem or
        notes an enlargement brings."""
        return self.__dict__["_resolution"]

    @property
    def output_rate(self) -> Fraction:
        """The output's frame rate, exact (``Fraction(30000, 1001)`` at 29.97)."""
        from studio.core.media.rates import parse_rate

        if self.rate:
            return parse_rate(self.rate)
        from studio.core.avatars.library import output_rate_for

        return output_rate_for(self.settings.fps, self.avatar)  # the avatar was not readable when built

    @property
    def render_settings(self) -> RenderSettings:
        """The settings a render of this request runs with: ``fps`` pinned to the resolved rate
        (``auto`` becomes e.g. ``"29.97"``), so the renderer, its workers and the farm parse it
        instead of reading the avatar's metadata again (a rate the setting does not list stays ``auto``)."""
        from studio.core.constants import RATES

        if self.rate in RATES and self.settings.fps in (None, "", "auto"):
            return self.settings.with_(fps=self.rate)
        return self.settings

    def with_(self, **kw) -> RenderRequest:
        """A copy with ``kw`` replaced; the rate is resolved again only when what it follows changed
        (the ``fps`` setting, or the avatar: not an avatar file's path made absolute)."""
        s = kw.get("settings", self.settings)
        if "explicit" not in kw and s is not self.settings:  # a value changed now was set on purpose
            changed = {n for n in SCHEMA if getattr(s, n) != getattr(self.settings, n)}
            kw["explicit"] = tuple(sorted(set(self.explicit or ()) | changed))
        if "rate" not in kw and (
            s.fps != self.settings.fps or not _same_avatar(kw.get("avatar", self.avatar), self.avatar)
        ):
            kw["rate"] = ""
        return dataclasses.replace(self, **kw)

    def to_dict(self) -> dict:
        return {
            "avatar": self.avatar,
            "audio": self.audio,
            "output": self.output,
            "settings": self.settings.to_dict(),
            "placement": {
                "kind": self.placement.kind,
                "devices": list(self.placement.devices),
                "chunks": self.placement.chunks,
                "farm": self.placement.farm,
                "server": self.placement.server,
                **({} if self.placement.priority is None else {"priority": self.placement.priority}),
            },
            "frames": list(self.frames) if self.frames else None,
            "overwrite": self.overwrite,
            "rate": self.rate,
            "explicit": list(self.explicit or ()),
        }

    @classmethod
    def from_dict(cls, d: dict) -> RenderRequest:
        if not isinstance(d, dict):
            raise InputError("a render request must be a JSON object")
        p = d.get("placement") or {}
        frames = d.get("frames")
        return cls(
            avatar=d.get("avatar", ""),
            audio=d.get("audio", ""),
            output=d.get("output", ""),
            settings=parse_dict(d.get("settings") or {}),  # resolved already: resolved again alike
            placement=Placement(
                kind=p.get("kind", "local"),
                devices=tuple(p.get("devices") or ()),
                chunks=int(p.get("chunks") or 0),
                farm=str(p.get("farm") or ""),
                server=str(p.get("server") or ""),
                priority=p.get("priority"),
            ),
            frames=tuple(frames) if frames else None,
            overwrite=bool(d.get("overwrite", False)),
            rate=str(d.get("rate") or ""),
            explicit=explicit_field(d),
        )


def explicit_field(d: dict) -> tuple[str, ...] | None:
    """A stored request's (or job row's) ``explicit``: the names it lists; None for a row of an
    earlier version (which did not say: those away from their default count)."""
    e = d.get("explicit")
    if not isinstance(e, list | tuple):
        return None
    return tuple(sorted(str(n) for n in e if str(n) in SCHEMA))


def _same_avatar(a, b) -> bool:
    """Whether avatar references ``a`` and ``b`` name one avatar (a library name, or one file's paths)."""
    a, b = str(a), str(b)
    return a == b or os.path.abspath(os.path.expanduser(a)) == os.path.abspath(os.path.expanduser(b))

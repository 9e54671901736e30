"""Where a render goes, Qt-free: the output file's name, suffix and folder, and the placement (this
computer, its GPUs, the farm, a Studio server). The ``EditorSession`` owns one (``session.output``),
read from the session's values:

    out = Output(read=session.value)
    out.path("anna", "take.wav") -> "<renders>/anna_take_auto_crf20.mp4"   # before numbering
    out.placement(gpus) -> Placement("farm", farm="10.0.0.5:6379")
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

DEFAULT_PATTERN = "{avatar}_{script}_{engine}_crf{crf}.mp4"  # "crf{crf}" reads "prores" for ProRes
TARGETS = ("local", "gpus", "farm", "server")
OUTPUT_KEYS = {"folder": "", "pattern": DEFAULT_PATTERN, "overwrite": False, "range_only": False}
PLACEMENT_KEYS = {"target": "local", "farm": "", "server": ""}
#: codecs with a fixed quality: CRF means nothing for them (ProRes, DNxHR)
FIXED_QUALITY = frozenset({"prores", "prores4444", "dnxhr"})


class Output:
    """The output and placement of a render with the values ``read(key)`` gives."""

    def __init__(self, read: Callable[[str], Any]):
        self.read = read

    @staticmethod
    def check(key: str, value: Any) -> Any:
        """``value`` of an output or placement key as held (one sentence when not allowed)."""
        from studio.core.errors import InputError

        if key == "target":
            if value not in TARGETS:
                raise InputError(f"render on {value!r} is not one of {', '.join(TARGETS)}")
            return value
        if key in ("overwrite", "range_only"):
            return bool(value)
        return str(value or "")  # as typed (a field being edited keeps its cursor); stripped where used

    @property
    def crf_applies(self) -> bool:
        """CRF sets the quality of H.264, HEVC and VP9; ProRes and DNxHR have a fixed one."""
        return self.read("codec") not in FIXED_QUALITY

    def quality_text(self) -> str:
        """What ``{quality}`` says in a file name: ``crf20``, or the codec for a fixed-quality one."""
        return f"crf{self.read('crf')}" if self.crf_applies else str(self.read("codec"))

    def path(self, avatar: str, script: str) -> str:
        """The file a render of ``avatar`` x ``script`` writes, before numbering."""
        from studio.core.env import sub_dir
        from studio.core.media.codecs import CODECS, SUFFIXES

        v = self.read
        codec = v("codec") or "h264"
        folder = v("folder").strip() or str(sub_dir("renders"))
        fields = {
            "avatar": avatar or "avatar",
            "script": Path(script).stem if script else "script",
            "engine": v("engine"),
            "crf": v("crf") if self.crf_applies else "",
            "quality": self.quality_text(),
            "preset": v("preset"),
            "encoder": v("encoder"),
            "codec": codec,
        }
        pattern = (v("pattern").strip() or DEFAULT_PATTERN).replace("crf{crf}", "{quality}")
        try:
            name = pattern.format(**fields)
        except (KeyError, IndexError, ValueError):
            name = DEFAULT_PATTERN.format(**fields)
        spec = CODECS.get(codec, CODECS["h264"])
        suffix = Path(name).suffix.lower()
        if suffix not in spec.suffixes:
            if suffix in SUFFIXES:
                name = name[: -len(suffix)]
            name += spec.suffix
        return str(Path(folder) / name)

    def placement(self, gpus: tuple[str, ...] = ()):
        """Where a job renders: the Render on choice (``gpus``: this machine's, for "All GPUs here")."""
        from studio.service.request import Placement

        target = self.read("target")
        if target == "server":
            return Placement("server", server=self.read("server").strip())
        if target == "farm":
            return Placement("farm", farm=self.read("farm").strip())
        if target == "gpus" and len(gpus) >= 2:
            return Placement("gpus", devices=tuple(gpus))
        return Placement()

    def server_url(self) -> str | None:
        return self.read("server").strip() if self.read("target") == "server" else None

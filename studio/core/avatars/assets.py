"""The avatar's value types and the cache layout's constants (shared by the library, the cache checks and
the builder).

    AvatarParams(feather=30).check()     # how an avatar is prepared
    AvatarAssets                         # a prepared avatar: metadata + memory-mapped arrays
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from fractions import Fraction
from pathlib import Path

import numpy as np

from studio.core.avatars import faces
from studio.core.errors import AvatarError
from studio.core.media.rates import DEFAULT_RATE, parse_rate

log = logging.getLogger(__name__)


SCHEMA_VERSION = 2  # 2: per-block checksums (schema 1 caches are upgraded in place)


KEY_VERSION = 1  # in the stage keys: bumping it rebuilds every cache from its source


MAX_CACHE_GB = 24.0  # refuse bigger caches (override with $STUDIO_AVATAR_MAX_GB)


DISK_RESERVE = 512 << 20  # bytes left free on the disk after the cache


STAGES = (
    ("frames", ("frames", "face_ok", "raw_landmarks")),
    ("crops", ("landmarks", "boxes", "crops", "crop_landmarks")),
    ("masks", ("masks",)),
)


FULL_CHECKSUM_BYTES = 64 << 10  # files up to this size get a CRC of every byte at load; bigger: head +


# tail at load, then per-block CRCs as the arrays are read (avatar_check)
SAMPLE_BYTES = 32 << 10


NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"  # a library avatar's name (the server's document says it too)
NAME_RE = re.compile(NAME_PATTERN)


_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


Progress = Callable[[int, "int | None", str], None]


@dataclass(frozen=True)
class AvatarParams:
    """How an avatar is prepared. Units are MuseTalk's where MuseTalk has the parameter."""

    bbox_shift: int = 0  # pixels: moves the box's mirror line (nose bridge) down (+) or up (-)
    extra_margin: int = 10  # pixels added below the chin (v1.5 rule: added to y2)
    cheek_width: int = 90  # jaw mode: half-width of the central band, MuseTalk's 512-parsing pixels
    feather: float = 24.0  # width in 256-crop pixels of the mask's soft edge (0 = hard edge)
    mask_mode: str = "jaw"  # "jaw" (v1.5) | "raw" (the silhouette's lower half)
    smooth: float = 0.5  # temporal smoothing 0..1 of landmarks/boxes (video avatars)
    trim_start: float | None = None  # seconds into a video
    trim_end: float | None = None
    face: int | None = None  # photos/videos with several faces: the N-th from the left (1-based)
    matte: str | None = None  # a photo's alpha from this image (white: the presenter), --matte

    def __post_init__(self):  # one canonical type per field, so cache keys do not depend on 24 vs 24.0
        try:
            for name, kind in (
                ("bbox_shift", int),
                ("extra_margin", int),
                ("cheek_width", int),
                ("feather", float),
                ("smooth", float),
                ("mask_mode", str),
            ):
                object.__setattr__(self, name, kind(getattr(self, name)))
            for name in ("trim_start", "trim_end"):
                v = getattr(self, name)
                object.__setattr__(self, name, None if v is None else float(v))
            if self.face is not None:
                object.__setattr__(self, "face", int(self.face))
            if self.matte is not None:
                object.__setattr__(self, "matte", str(Path(self.matte).expanduser().resolve()))
        except (TypeError, ValueError) as exc:
            raise AvatarError(f"invalid avatar parameter ({exc}); use numbers for sizes and times") from None

    @classmethod
    def taken_from(cls, source) -> AvatarParams:
        """The parameters ``source`` (the command line's arguments, the API's form) has an attribute for;
        the others keep their defaults."""
        return cls(**{k: getattr(source, k) for k in cls.__dataclass_fields__ if hasattr(source, k)})

    def check(self) -> AvatarParams:
        """Return self, or raise ``AvatarError`` naming the bad parameter."""
        if abs(int(self.bbox_shift)) > 1000:
            raise AvatarError("--bbox-shift must be between -1000 and 1000 pixels")
        if self.extra_margin < 0:
            raise AvatarError("--extra-margin must be 0 or more pixels")
        if not 0 <= self.cheek_width <= 512:
            raise AvatarError("--cheek-width must be between 0 and 512")
        if not 0 <= self.feather <= 128:
            raise AvatarError("--feather must be between 0 and 128 crop pixels")
        if self.mask_mode not in faces.MASK_MODES:
            raise AvatarError(f"--mask-mode must be one of {', '.join(faces.MASK_MODES)}")
        if not 0.0 <= self.smooth <= 1.0:
            raise AvatarError("--smooth must be between 0 and 1")
        if self.trim_start is not None and self.trim_start < 0:
            raise AvatarError("--trim-start must be 0 or more seconds")
        if self.trim_end is not None and self.trim_end <= (self.trim_start or 0.0):
            raise AvatarError("--trim-end must be later than --trim-start (seconds into the video)")
        if self.face is not None and not 1 <= self.face <= faces.MAX_FACES:
            raise AvatarError(f"--face must be between 1 and {faces.MAX_FACES} (faces are numbered from the left)")
        if self.matte is not None and not Path(self.matte).is_file():
            from studio.core.avatars.sources import not_a_file

            raise AvatarError(
                f"--matte {self.matte}: {not_a_file(Path(self.matte))}; give a PNG whose white is the presenter"
            )
        return self

    @classmethod
    def from_json(cls, d: dict) -> AvatarParams:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclass(frozen=True, eq=False)
class AvatarAssets:
    """A prepared avatar: metadata plus stacked arrays (memory-mapped, read-only)."""

    name: str
    folder: Path
    meta: dict
    frames: np.ndarray  # [N,H,W,3] uint8 RGB
    boxes: np.ndarray  # [N,4] int32 x1,y1,x2,y2 (face-less frames: the nearest valid box)
    crops: np.ndarray  # [N,256,256,3] uint8 RGB
    masks: np.ndarray  # [N,256,256] uint8, 255 = take the generated face
    landmarks: np.ndarray  # [N,478,2] float32 frame pixels (smoothed)
    crop_landmarks: np.ndarray  # [N,478,2] float32 crop pixels
    face_ok: np.ndarray  # [N] bool
    raw_landmarks: np.ndarray | None = field(default=None, repr=False)  # [N,478,2] as tracked
    alpha: np.ndarray | None = field(default=None, repr=False)  # [N,H,W] uint8, 255 opaque; None: opaque

    @property
    def has_alpha(self) -> bool:
        """Whether the avatar is transparent somewhere (an RGBA PNG, a video with alpha, a --matte)."""
        return self.alpha is not None

    @property
    def N(self) -> int:  # noqa: N802 (the contract's name)
        return int(self.frames.shape[0])

    @property
    def width(self) -> int:
        return int(self.frames.shape[2])

    @property
    def height(self) -> int:
        return int(self.frames.shape[1])

    @property
    def fps(self) -> Fraction:
        """The rate of the avatar's frames, exact (``meta["rate"]``; caches made before rates: 25)."""
        try:
            return parse_rate(self.meta.get("rate") or self.meta.get("fps") or DEFAULT_RATE)
        except (TypeError, ValueError):
            return DEFAULT_RATE

    @property
    def kind(self) -> str:
        return self.meta["kind"]

    @property
    def params(self) -> AvatarParams:
        return AvatarParams.from_json(self.meta["params"])

    def cycle_index(self, t):
        """Avatar frame for output frame ``t``: ping-pong over frames + reversed(frames)."""
        n = self.N
        if n <= 1:
            return 0 if np.isscalar(t) else np.zeros_like(np.asarray(t))
        i = np.asarray(t) % (2 * n)
        out = np.where(i < n, i, 2 * n - 1 - i)
        return int(out) if np.isscalar(t) else out

    def engine_dir(self, key: str) -> Path:
        """``<folder>/engines/<key>/`` for per-engine arrays; emptied whenever the crops change."""
        if not _KEY_RE.match(key):
            raise ValueError(f"engine key {key!r} must be letters, digits, '.', '_' or '-'")
        if not self.folder.is_dir():  # removed while in use: its cache is not made again
            from studio.core.errors import AvatarError

            raise AvatarError(f"avatar '{self.name}' was removed while it was in use; add it again to use it")
        path = self.folder / "engines" / key
        path.mkdir(parents=True, exist_ok=True)
        return path


def library_dir() -> Path:
    from studio.core.env import sub_dir

    return sub_dir("avatars")


ARRAY_STAGE = {n: stage for stage, names in STAGES for n in names}


#: arrays only some avatars have, and the stage that makes them: ``alpha`` [N,H,W] uint8
OPTIONAL_ARRAYS = {"alpha": "frames"}


HEX64 = re.compile(r"^[0-9a-f]{64}$")

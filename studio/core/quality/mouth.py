"""Per-frame measurements of the checked video: the face mesh on the face box only, the mouth's
opening, the mouth region's detail, the luma step across the blend mask's border and the face's geometry,
each beside the same figure on the reference (the avatar's frame, or the video's own rest frame).

    finder = FaceFinder()
    lm = finder(frame)                            # [478,2] frame pixels, or None
    m = measure(frames, total, reference, ...)    # Measurements: per-frame arrays

Why hand-written: no library measures lip-sync renders offline. The pieces are OpenCV filters
(Laplacian, Sobel, distance transforms) and numpy over the face mesh's landmarks; the similarity
fit is the closed-form least-squares one (Umeyama), ten lines of numpy rather than OpenCV's
RANSAC estimators, whose random sampling would make two checks of one file differ.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from studio.core.avatars import faces
from studio.core.constants import FACE_SIZE
from studio.core.quality.video import luma_of_rgb

log = logging.getLogger(__name__)

LIP_TOP, LIP_BOTTOM = 13, 14  # inner lip midpoints: the lip gap
MOUTH_LEFT, MOUTH_RIGHT = 61, 291
EYE_OUTER = (33, 263)  # the face's scale: the outer eye corners' distance ("IOD")
#: The upper face, never inside a blend mask (it keeps the box's lower half, nose cut out):
#: what the video's own reference frame is aligned on.
ALIGN_POINTS = tuple(sorted(set(faces.EYES + faces.BROWS + (168, 6, 197))))
#: The geometry outside the mouth whose drift is measured: the jaw contour, the nose, the eyes
#: (each group's RMS distance from the reference's; the drift is the largest of the three).
DRIFT_GROUPS = {"jaw": faces.JAW, "nose": faces.NOSE, "eyes": faces.EYES}
#: The lips whose frame-to-frame shake the jitter measures (outer and inner contours).
LIP_POINTS = faces.LIPS_OUTER + faces.LIPS_INNER
WINDOW = 2.0  # the face box the mesh runs on: this many times the face's landmark extent, square
WINDOW_MARGIN = 0.15  # re-centre when the face comes closer to the box's side than this share
LOST_RETRY = 5  # frames between two whole-frame searches while no face is found
SEAM_SIGMA = 2.0  # crop pixels: the smoothing before luma is sampled across the border
SEAM_STEP = 3.0  # crop pixels past the soft edge, each side, where the step is read
SEAM_SPACING = 3  # crop pixels between two border points


class FaceFinder(faces.Closing):
    """The face mesh (static mode: every frame measured alone, so equal frames give equal
    landmarks) on a square box around the face; the whole frame only to find the face again."""

    def __init__(self):
        self._tracker = faces.FaceTracker(video=False)
        self._window: tuple[int, int, int, int] | None = None
        self._size = 0.0
        self._lost = 0

    def __call__(self, frame) -> np.ndarray | None:
        if self._window is not None:
            lm = self._on_box(frame)
            if lm is not None:
                return lm
            self._window = None
        if self._lost % LOST_RETRY:
            self._lost += 1
            return None
        lm = self._search(frame)
        if lm is None:
            self._lost += 1
            return None
        self._lost = 0
        self._follow(lm, *frame.size)
        if self._window is not None:  # measured again on its box: as precise as every other frame
            lm = self._on_box(frame, lm)
        return lm

    def _on_box(self, frame, found: np.ndarray | None = None) -> np.ndarray | None:
        """The landmarks measured on the face's box (in the frame's pixels; the box follows them), or
        ``found`` when the mesh finds no face there."""
        assert self._window is not None
        x0, y0, x1, y1 = self._window
        lm = self._tracker(frame.rgb(x0, y0, x1, y1))
        if lm is None:
            return found
        lm = lm + np.array([x0, y0], np.float32)
        self._follow(lm, *frame.size)
        return lm

    def near(self, frame, hint: np.ndarray) -> np.ndarray | None:
        """Landmarks of a frame outside the video's sequence (an avatar's frame) whose face is
        about where ``hint`` (landmarks) says; the video's own box is kept."""
        saved = self._window, self._size, self._lost
        try:
            self._window = None
            self._follow(np.asarray(hint, np.float32), *frame.size)
            return self(frame) if self._window is not None else None
        finally:
            self._window, self._size, self._lost = saved

    def _search(self, frame) -> np.ndarray | None:
        """The face anywhere in the frame: the whole frame, then squares of its short side, then
        of half of it (overlapping by half): the mesh's detector sees faces at 128 px, so a face
        that is small in a 1080p frame is found in a smaller square."""
        w, h = frame.size
        with faces.quiet_stderr():  # the graph's one-off warnings about a whole frame's shape
            lm = self._tracker(frame.rgb())
            if lm is not None:
                return lm
            short = min(w, h)
            for side in (short, short // 2):
                if side < 64:
                    break
                step = side // 2
                for y0 in range(0, max(1, h - side + step), step):
                    for x0 in range(0, max(1, w - side + step), step):
                        x0, y0 = min(x0, w - side) // 2 * 2, min(y0, h - side) // 2 * 2
                        lm = self._tracker(frame.rgb(x0, y0, x0 + side, y0 + side))
                        if lm is not None:
                            return lm + np.array([x0, y0], np.float32)
        return None

    def _follow(self, lm: np.ndarray, width: int, height: int) -> None:
        lo, hi = lm.min(0), lm.max(0)
        size = float((hi - lo).max())
        if self._window is not None:
            x0, y0, x1, y1 = self._window
            m = WINDOW_MARGIN * (x1 - x0)
            inside = lo[0] - x0 >= m and lo[1] - y0 >= m and x1 - hi[0] >= m and y1 - hi[1] >= m
            if inside and 0.75 <= size / max(self._size, 1e-6) <= 1.33:
                return
        # a square (the mesh's graph warns about other shapes), slid inside the frame at its edges
        c = (lo + hi) / 2
        side = int(min(WINDOW * size, width, height)) // 2 * 2
        x0 = int(np.clip(c[0] - side / 2, 0, width - side)) // 2 * 2
        y0 = int(np.clip(c[1] - side / 2, 0, height - side)) // 2 * 2
        self._window = (x0, y0, x0 + side, y0 + side) if side >= 16 else None
        self._size = size

    def once(self, frame) -> np.ndarray | None:
        """Landmarks of a frame outside the video's sequence (a reference frame): the whole frame
        is searched and the box the video's frames use is kept."""
        saved = self._window, self._size, self._lost
        self._window, self._lost = None, 0
        try:
            return self(frame)
        finally:
            self._window, self._size, self._lost = saved

    def close(self) -> None:
        self._tracker.close()


# --------------------------------------------------------------------------------------------
# Figures of one frame


def eye_distance(lm: np.ndarray) -> float:
    return float(np.linalg.norm(lm[EYE_OUTER[0]] - lm[EYE_OUTER[1]]))


def mouth_opening(lm: np.ndarray) -> float:
    """The inner lip gap in eye distances."""
    return float(np.linalg.norm(lm[LIP_TOP] - lm[LIP_BOTTOM])) / max(eye_distance(lm), 1e-6)


def detail_region(lm: np.ndarray, width: int, height: int) -> tuple[tuple[int, int, int, int], np.ndarray]:
    """The mouth region (lips, the skin around them, down to the chin) as a rectangle, and the mask
    of its pixels that count: all but the mouth's opening (teeth and cavity change with speech)."""
    import cv2

    mw = float(np.linalg.norm(lm[MOUTH_RIGHT] - lm[MOUTH_LEFT]))
    top = float(lm[faces.NOSE_TIP, 1] + 0.25 * (lm[faces.CHIN, 1] - lm[faces.NOSE_TIP, 1]))
    x0 = int(max(0, np.floor(min(lm[MOUTH_LEFT, 0], lm[MOUTH_RIGHT, 0]) - 0.3 * mw)))
    x1 = int(min(width, np.ceil(max(lm[MOUTH_LEFT, 0], lm[MOUTH_RIGHT, 0]) + 0.3 * mw)))
    y0 = int(max(0, np.floor(top)))
    y1 = int(min(height, np.ceil(lm[faces.CHIN, 1])))
    if x1 - x0 < 8 or y1 - y0 < 8:
        return (x0, y0, x1, y1), np.zeros((max(0, y1 - y0), max(0, x1 - x0)), bool)
    keep = np.full((y1 - y0, x1 - x0), 255, np.uint8)
    inner = np.round((lm[list(faces.LIPS_INNER)] - np.array([x0, y0])) * 4).astype(np.int32)
    cv2.fillPoly(keep, [inner], 0, lineType=cv2.LINE_8, shift=2)
    kept = cv2.erode(keep, np.ones((5, 5), np.uint8))  # and 2 pixels around the opening
    return (x0, y0, x1, y1), kept > 0


def detail(luma: np.ndarray, rect: tuple[int, int, int, int], keep: np.ndarray) -> float:
    """Mean squared Laplacian of the luma over the region's kept pixels (high-frequency energy)."""
    import cv2

    x0, y0, x1, y1 = rect
    if not keep.any():
        return float("nan")
    patch = np.asarray(luma[max(0, y0 - 1) : y1 + 1, max(0, x0 - 1) : x1 + 1], np.float32)
    lap = cv2.Laplacian(patch, cv2.CV_32F, ksize=3)
    lap = lap[(1 if y0 > 0 else 0) :, (1 if x0 > 0 else 0) :][: y1 - y0, : x1 - x0]
    return float(np.mean(lap[keep] ** 2))


@dataclass(frozen=True, eq=False)
class SeamProbe:
    """Where a blend border is read in a face box's 256 x 256 crop: points on the mask's hard
    edge, each with a point just inside and one just outside its soft edge (along the normal)."""

    inside: np.ndarray  # [P,2] int crop pixels (x, y)
    outside: np.ndarray

    @classmethod
    def of(cls, mask: np.ndarray, feather: float) -> SeamProbe | None:
        import cv2

        hard = (np.asarray(mask) >= 128).astype(np.uint8)
        if hard.sum() < 64 or hard.all():
            return None
        signed = cv2.distanceTransform(hard, cv2.DIST_L2, 5) - cv2.distanceTransform(1 - hard, cv2.DIST_L2, 5)
        d = cv2.GaussianBlur(signed, (0, 0), 2.0)  # a smooth field: its gradient is the edge's normal
        gx = cv2.Sobel(d, cv2.CV_32F, 1, 0, ksize=3)
        gy = cv2.Sobel(d, cv2.CV_32F, 0, 1, ksize=3)
        contours, _ = cv2.findContours(hard, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_NONE)
        if not contours:
            return None
        pts = np.concatenate([c.reshape(-1, 2) for c in contours])[::SEAM_SPACING]
        n = np.stack([gx[pts[:, 1], pts[:, 0]], gy[pts[:, 1], pts[:, 0]]], 1)
        n /= np.linalg.norm(n, axis=1, keepdims=True) + 1e-6
        r = max(float(feather), 0.0) / 2 + SEAM_STEP
        pin = np.round(pts + r * n).astype(np.int32)
        pout = np.round(pts - r * n).astype(np.int32)
        lo, hi = 2, FACE_SIZE - 3
        ok = ((pin >= lo) & (pin <= hi) & (pout >= lo) & (pout <= hi)).all(1)
        ok &= ((pts >= 6) & (pts <= FACE_SIZE - 7)).all(1)  # the crop's own edge is no seam
        if ok.sum() < 16:
            return None
        return cls(pin[ok], pout[ok])

    def steps(self, crop_luma: np.ndarray) -> np.ndarray:
        """The luma step across the border at every point (inside minus outside), smoothed luma."""
        import cv2

        g = cv2.GaussianBlur(np.asarray(crop_luma, np.float32), (0, 0), SEAM_SIGMA)
        return g[self.inside[:, 1], self.inside[:, 0]] - g[self.outside[:, 1], self.outside[:, 0]]

    def jump(self, crop_luma: np.ndarray, ref_luma: np.ndarray) -> float:
        """The step the blend adds across the border, in 8-bit luma levels: the median over the
        border of |the video's step - the reference's step at the same place|."""
        return float(np.median(np.abs(self.steps(crop_luma) - self.steps(ref_luma))))


def box_crop(luma: np.ndarray, box, m: np.ndarray | None = None) -> np.ndarray:
    """The face box of a luma plane stretched to 256 x 256 (the blend mask's coordinates); with
    ``m`` (a 2x3 similarity from the box's frame to this one), the box as moved by it."""
    import cv2

    x1, y1, x2, y2 = (float(v) for v in box)
    a = np.array([[(x2 - x1) / FACE_SIZE, 0.0, x1], [0.0, (y2 - y1) / FACE_SIZE, y1]])  # crop -> frame
    if m is not None:
        a = m[:, :2] @ a
        a[:, 2] += m[:, 2]
    # a half-pixel shift: crop pixel centres onto frame pixel centres
    a[:, 2] += 0.5 * (a[:, 0] + a[:, 1]) - 0.5
    return cv2.warpAffine(
        np.ascontiguousarray(luma),
        a,
        (FACE_SIZE, FACE_SIZE),
        flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP,
        borderMode=cv2.BORDER_REPLICATE,
    )


def similarity(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """The least-squares similarity (rotation, uniform scale, shift) taking ``src`` onto ``dst``,
    as a 2x3 matrix (Umeyama 1991, closed form)."""
    mu_s, mu_d = src.mean(0), dst.mean(0)
    a, b = src - mu_s, dst - mu_d
    cov = b.T @ a / len(src)
    u, s, vt = np.linalg.svd(cov)
    sign = np.ones(2)
    if np.linalg.det(u) * np.linalg.det(vt) < 0:
        sign[-1] = -1
    rot = u @ np.diag(sign) @ vt
    var = float((a * a).sum() / len(src))
    scale = float((s * sign).sum() / max(var, 1e-9))
    m = np.zeros((2, 3))
    m[:, :2] = scale * rot
    m[:, 2] = mu_d - scale * rot @ mu_s
    return m


def apply(m: np.ndarray, pts: np.ndarray) -> np.ndarray:
    return (pts @ m[:, :2].T + m[:, 2]).astype(np.float32)


# --------------------------------------------------------------------------------------------
# The reference


@dataclass(frozen=True, eq=False)
class RefFrame:
    """What a checked frame is compared with: the reference frame's luma (at the checked video's
    size), landmarks, blend mask, box and face-box crop, and its own figures."""

    luma: np.ndarray
    landmarks: np.ndarray
    box: np.ndarray
    mask: np.ndarray
    probe: SeamProbe | None
    crop: np.ndarray  # [256,256] uint8: the box of ``luma``
    opening: float
    detail: float  # its own detail, in its own mouth region


class Reference:
    """The avatar (its frame ``cycle_index(start + t)`` for frame ``t``: exactly what the renderer
    started from) or one frame of the checked video (its first rest frame: the face mapped onto
    each frame by the similarity of the upper faces). ``describe`` says which, for the report."""

    def __init__(
        self,
        kind: str,
        describe: str,
        get: Callable[[int], RefFrame | None],
        aligned: bool,
        feather: float,
        frame: int | None = None,
    ):
        self.kind = kind  # "avatar" | "video"
        self.frame = frame  # the video's own frame that is the reference (kind "video")
        self.describe = describe
        self._get = get
        self.aligned = aligned  # True: map the reference's geometry onto each frame
        self.feather = feather

    def at(self, t: int) -> RefFrame | None:
        return self._get(t)


def ref_frame(
    luma: np.ndarray,
    lm: np.ndarray,
    feather: float,
    mask: np.ndarray | None = None,
    box: np.ndarray | None = None,
) -> RefFrame:
    """A reference frame's figures; without ``mask``/``box``, Studio's own (``faces.blend_mask``
    with the default parameters) from its landmarks."""
    h, w = luma.shape[:2]
    if box is None or mask is None:
        box = faces.musetalk_box(lm, w, h)
        mask = faces.blend_mask(faces.to_crop(lm, box), box, feather=feather)
    rect, keep = detail_region(lm, w, h)
    return RefFrame(
        luma,
        lm,
        np.asarray(box),
        np.asarray(mask),
        SeamProbe.of(mask, feather),
        box_crop(luma, box),
        mouth_opening(lm),
        detail(luma, rect, keep),
    )


def avatar_reference(assets, finder: FaceFinder, width: int, height: int, start: int = 0) -> Reference:
    """The avatar's frames as the reference, resized to the checked video when its size differs.
    Landmarks come from the same face finder the video's frames go through (so equal pixels give
    equal figures); each avatar frame is measured once."""
    import cv2

    from studio.core.quality.video import Frame

    cache: dict[int, RefFrame | None] = {}
    scale = np.array([width / assets.width, height / assets.height], np.float32)
    same = assets.width == width and assets.height == height
    feather = float((assets.meta.get("params") or {}).get("feather", 24.0))  # in-memory avatars: the default

    def get(t: int) -> RefFrame | None:
        i = int(assets.cycle_index(start + t))
        if i in cache:
            return cache[i]
        if len(cache) > 4096:
            cache.clear()
        rgb = np.asarray(assets.frames[i])
        if not same:
            rgb = cv2.resize(rgb, (width, height), interpolation=cv2.INTER_AREA)
        luma = luma_of_rgb(rgb)
        hint = np.asarray(assets.landmarks[i], np.float32) * scale
        lm = finder.near(Frame.of_rgb(rgb, luma), hint) if bool(assets.face_ok[i]) else None
        if lm is None:
            cache[i] = None
            return None
        box = np.asarray(assets.boxes[i], np.float64)
        box = np.round(box * np.tile(scale, 2)).astype(np.int32)
        cache[i] = ref_frame(luma, lm, feather, np.asarray(assets.masks[i]), box)
        return cache[i]

    return Reference("avatar", f"the avatar '{assets.name}'", get, aligned=False, feather=feather)


def video_reference(frame, finder: FaceFinder, describe: str, feather: float) -> Reference | None:
    """One frame of the checked video as the reference (None when it shows no face)."""
    lm = finder.once(frame)
    if lm is None:
        return None
    ref = ref_frame(np.array(frame.luma), lm, feather)
    return Reference("video", describe, lambda t: ref, aligned=True, feather=feather, frame=frame.index)


# --------------------------------------------------------------------------------------------
# The whole video


@dataclass(frozen=True, eq=False)
class Measurements:
    """Per frame of the checked video (NaN where no face was found or nothing compares)."""

    fps: float
    width: int
    height: int
    face: np.ndarray  # [T] bool
    opening: np.ndarray  # [T] lip gap / eye distance
    rest: np.ndarray  # [T] the reference's opening (the mouth at rest)
    detail: np.ndarray  # [T] the video's mouth-region detail
    detail_ref: np.ndarray  # [T] the reference's: same region (avatar) or its own (video frame)
    seam: np.ndarray  # [T] luma levels the blend adds across the mask's border
    drift: np.ndarray  # [T] the largest group's RMS distance from the reference's, in eye distances
    drift_groups: dict[str, np.ndarray]  # [T] per group of DRIFT_GROUPS
    reference: str  # what the reference was, in words
    reference_kind: str  # "avatar" | "video" | "none"
    #: [T, len(LIP_POINTS), 2] the lips in the reference's upper-face frame, in eye distances
    #: (the head's own motion taken off); NaN where no face was found
    lips: np.ndarray | None = None
    #: the same of the reference's frame ``t`` (an avatar's moving head; a still one is constant)
    ref_lips: np.ndarray | None = None
    #: the video's frame that is the reference (``reference_kind`` "video"), for the report's pictures
    reference_frame: int | None = None

    @property
    def frames(self) -> int:
        return len(self.face)


COLUMNS = ("opening", "rest", "detail", "detail_ref", "seam", "drift") + tuple(f"drift_{g}" for g in DRIFT_GROUPS)


def measure(
    frames: Iterable,
    total: int,
    fps: float,
    reference_for: Callable[[FaceFinder], Reference | None],
    finder: FaceFinder,
    progress: Callable[[int, int], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> Measurements:
    """Measure every frame of ``frames`` (``video.Frame``s; ``total`` expected, for progress).

    ``reference_for(finder)`` gives the reference (``avatar_reference``/``video_reference``);
    when it gives None, the first frame with a face becomes it.
    """
    from studio.core.errors import Cancelled

    cols: dict[str, list[float]] = {k: [] for k in COLUMNS}
    face: list[bool] = []
    lips: list[np.ndarray] = []
    ref_lips: list[np.ndarray] = []
    canon: np.ndarray | None = None  # the upper face every frame's lips are mapped onto
    nan_lips = np.full((len(LIP_POINTS), 2), np.nan)
    ref = reference_for(finder)
    width = height = 0
    for k, frame in enumerate(frames):
        if cancelled is not None and cancelled():
            raise Cancelled("the check was cancelled")
        width, height = frame.size
        lm = finder(frame)
        if lm is not None and ref is None:
            ref = video_reference(
                frame,
                finder,
                f"the video's own frame {k} (its first with a face)",
                24.0,
            )
        rf = ref.at(k) if ref is not None else None
        row = _frame_figures(frame, lm, rf, ref)
        face.append(lm is not None)
        if canon is None:
            first = rf.landmarks if rf is not None else lm
            canon = None if first is None else _canonical(first)
        lips.append(nan_lips if lm is None or canon is None else lips_of(lm, canon))
        ref_lips.append(nan_lips if rf is None or canon is None else lips_of(rf.landmarks, canon))
        for name in COLUMNS:
            cols[name].append(row[name])
        if progress is not None and k % 25 == 0:
            progress(k + 1, max(total, k + 1))
    arr = {k: np.asarray(v, np.float64) for k, v in cols.items()}
    groups = {g: arr.pop(f"drift_{g}") for g in DRIFT_GROUPS}
    return Measurements(
        fps=fps,
        width=width,
        height=height,
        face=np.asarray(face, bool),
        drift_groups=groups,
        reference=ref.describe if ref is not None else "none (no face was found)",
        reference_kind=ref.kind if ref is not None else "none",
        lips=np.asarray(lips, np.float64).reshape(len(face), len(LIP_POINTS), 2),
        ref_lips=np.asarray(ref_lips, np.float64).reshape(len(face), len(LIP_POINTS), 2),
        reference_frame=ref.frame if ref is not None else None,
        **arr,
    )


def _canonical(lm: np.ndarray) -> np.ndarray:
    """The upper face's points scaled to one eye distance: where every frame's lips are mapped."""
    pts = np.asarray(lm, np.float64)[list(ALIGN_POINTS)]
    return (pts - pts.mean(0)) / max(eye_distance(lm), 1e-6)


def lips_of(lm: np.ndarray, canon: np.ndarray) -> np.ndarray:
    """The lips of ``lm`` moved by the similarity that puts its upper face on ``canon``: the head's
    own motion and size taken off, in eye distances."""
    m = similarity(np.asarray(lm, np.float64)[list(ALIGN_POINTS)], canon)
    return apply(m, np.asarray(lm, np.float64)[list(LIP_POINTS)])


def _frame_figures(frame, lm: np.ndarray | None, rf: RefFrame | None, ref: Reference | None) -> dict[str, float]:
    row = dict.fromkeys(COLUMNS, float("nan"))
    if lm is None:
        return row
    row["opening"] = mouth_opening(lm)
    rect, keep = detail_region(lm, *frame.size)
    row["detail"] = detail(frame.luma, rect, keep)
    if rf is None or ref is None:
        return row
    iod = max(eye_distance(lm), 1e-6)
    if ref.aligned:  # the video's own frame: its geometry moved onto this frame's upper face
        m = similarity(rf.landmarks[list(ALIGN_POINTS)], lm[list(ALIGN_POINTS)])
        ref_lm = apply(m, rf.landmarks)
        row["detail_ref"] = rf.detail
        crop = box_crop(frame.luma, rf.box, m)  # the reference's box, moved onto this face
    else:  # the avatar's frame: same place, same mask, same region
        ref_lm = rf.landmarks
        row["detail_ref"] = detail(rf.luma, rect, keep)
        crop = box_crop(frame.luma, rf.box)
    row["rest"] = rf.opening
    if rf.probe is not None:
        row["seam"] = rf.probe.jump(crop, rf.crop)
    worst = 0.0
    for g, pts in DRIFT_GROUPS.items():
        d = float(np.sqrt(np.mean(np.sum((lm[list(pts)] - ref_lm[list(pts)]) ** 2, 1)))) / iod
        row[f"drift_{g}"] = d
        worst = max(worst, d)
    row["drift"] = worst
    return row

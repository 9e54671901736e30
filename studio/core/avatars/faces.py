"""Face tracking, the MuseTalk crop box, blend masks and temporal smoothing (numpy + OpenCV).

    with FaceTracker(video=True) as tracker:
        lm = tracker(rgb)                       # [478,2] float32 frame pixels, or None (no face)
    box = musetalk_box(lm, w, h, bbox_shift=0, extra_margin=10)          # int32 x1,y1,x2,y2
    crop = crop_face(frame, box)                # [256,256,3] uint8, stretched, Lanczos
    alpha = blend_mask(to_crop(lm, box), box)   # [256,256] uint8, 255 = take the generated face

Landmarks come from MediaPipe's face mesh (478 points with the refined irises), run fully offline
(mediapipe 0.10.21 bundles its models). MuseTalk was trained on boxes built from the 68-point
iBUG layout (DWPose); ``musetalk_box`` maps that rule onto face-mesh indices (see ``IBUG_NOSE``).
The blend mask replaces MuseTalk's BiSeNet face parsing by face-mesh geometry: no extra weights.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import threading
from collections.abc import Iterator
from typing import Self

import numpy as np

from studio.core.constants import FACE_SIZE

_MEDIAPIPE_LOCK = threading.Lock()  # import_mediapipe: one import at a time
log = logging.getLogger(__name__)

# --------------------------------------------------------------------------------------------
# Face-mesh index groups (MediaPipe's 468/478-point topology; "left/right" = the subject's).

#: The face silhouette as a closed loop, clockwise in the image from the top of the forehead.
FACE_OVAL = (
    10,
    338,
    297,
    332,
    284,
    251,
    389,
    356,
    454,
    323,
    361,
    288,
    397,
    365,
    379,
    378,
    400,
    377,
    152,
    148,
    176,
    149,
    150,
    136,
    172,
    58,
    132,
    93,
    234,
    127,
    162,
    21,
    54,
    103,
    67,
    109,
)
#: The part of the silhouette that iBUG's contour points 0..16 cover: ear (eye level) - chin - ear.
JAW = (127, 234, 93, 132, 58, 172, 136, 150, 149, 176, 148, 152, 377, 400, 378, 379, 365, 397, 288, 361, 323, 454, 356)
BROWS = (46, 52, 53, 55, 63, 65, 66, 70, 105, 107, 276, 282, 283, 285, 293, 295, 296, 300, 334, 336)
#: The eyes' contours (MediaPipe's FACEMESH_RIGHT_EYE and _LEFT_EYE): the face's right eye, then its left.
RIGHT_EYE = (7, 33, 133, 144, 145, 153, 154, 155, 157, 158, 159, 160, 161, 163, 173, 246)
LEFT_EYE = (249, 263, 362, 373, 374, 380, 381, 382, 384, 385, 386, 387, 388, 390, 398, 466)
EYES = RIGHT_EYE + LEFT_EYE
NOSE = (1, 2, 4, 5, 6, 19, 45, 48, 64, 94, 97, 98, 115, 168, 195, 197, 220, 275, 278, 294, 326, 327, 344, 440)
#: Outer lip contour as a closed loop (corner 61 -> lower lip -> corner 291 -> upper lip).
LIPS_OUTER = (61, 146, 91, 181, 84, 17, 314, 405, 321, 375, 291, 409, 270, 269, 267, 0, 37, 39, 40, 185)
LIPS_INNER = (78, 95, 88, 178, 87, 14, 317, 402, 318, 324, 308, 415, 310, 311, 312, 13, 82, 81, 80, 191)
#: The lower nose (tip, alae, nostrils, columella): cut out of the blend mask.
NOSE_LOWER = (
    1,
    2,
    4,
    19,
    94,
    97,
    98,
    326,
    327,
    48,
    64,
    278,
    294,
    115,
    220,
    45,
    275,
    440,
    344,
    49,
    279,
    129,
    358,
    219,
    439,
    102,
    331,
    240,
    460,
    75,
    305,
    166,
    392,
    79,
    309,
    60,
    290,
    99,
    328,
    141,
    370,
    242,
    462,
    125,
    354,
    241,
    461,
    44,
    274,
    237,
    457,
    218,
    438,
)
#: The points that stand in for iBUG's 68 (contour, brows, eyes, nose, lips): the box's x range.
IBUG_LIKE = tuple(sorted(set(JAW + BROWS + EYES + NOSE + LIPS_OUTER)))
#: iBUG nose-bridge points 27..30 (evenly spaced from the nasion to the tip) on the face mesh:
#: 168 is the nasion and 1 the tip; 197 and 5 sit at one and two thirds of that span, as 28 and
#: 29 do (checked on the astronaut: 168 y=100.5, 197 110.4, 5 119.9, 1 130.0).
IBUG_NOSE = {27: 168, 28: 197, 29: 5, 30: 1}
BOX_MID = IBUG_NOSE[29]  # MuseTalk's "landmark 29, the lower nose bridge": the box's mirror line
CHIN = 152
NOSE_TIP = 1

MASK_MODES = ("jaw", "raw")
NOSE_FEATHER = 8.0  # crop pixels: the soft edge around the cut-out nose (at most ``feather``)
MAX_SMOOTH_SIGMA = 3.0  # frames: the Gaussian sigma at smoothing strength 1.0
MAX_FACES = 8  # faces looked for in a photo (or a video's first face frame) to say which one is used
QUIET_CALLS = 5  # first tracker calls run with fd 2 silenced (mediapipe's start-up warnings)
TRACK_MAX_SIDE = 1920  # frames larger than this are downscaled before tracking (landmarks are normalised)


# --------------------------------------------------------------------------------------------
# Tracking


class Closing:
    """A ``with`` block closes it at the end (``close`` is the class's own)."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class FaceTracker(Closing):
    """MediaPipe face mesh, 478 landmarks. ``video=True`` tracks between frames.

    Call it with an RGB uint8 frame; returns ``[478,2]`` float32 landmarks in that frame's
    pixels, or ``None`` when no face is found. ``all_faces(rgb)`` returns every face found (up
    to ``max_faces``), left to right. Use as a context manager (closes the graph).
    """

    def __init__(self, video: bool = False, min_confidence: float = 0.5, max_faces: int = 1):
        import warnings

        with quiet_stderr(), _swallow_excepthook(), warnings.catch_warnings():  # mediapipe's start-up noise
            warnings.simplefilter("ignore", DeprecationWarning)
            mp = import_mediapipe()

            self._mesh = mp.solutions.face_mesh.FaceMesh(
                static_image_mode=not video,
                refine_landmarks=True,
                max_num_faces=max_faces,
                min_detection_confidence=min_confidence,
                min_tracking_confidence=min_confidence,
            )
            # One blank frame while fd 2 is silenced: the graph's threads print their start-up
            # warnings during the first inference (no face in it, so no tracking state is kept).
            self._mesh.process(np.zeros((64, 64, 3), np.uint8))
        self._calls = 0

    def __call__(self, rgb: np.ndarray) -> np.ndarray | None:
        found = self.all_faces(rgb, sort=False)
        return found[0] if found else None

    def all_faces(self, rgb: np.ndarray, sort: bool = True) -> list[np.ndarray]:
        """Every face found, as ``[478,2]`` float32 frame pixels; sorted by the x of their centre."""
        h, w = rgb.shape[:2]
        small = rgb
        if max(h, w) > TRACK_MAX_SIDE:
            import cv2

            f = TRACK_MAX_SIDE / max(h, w)
            small = cv2.resize(rgb, (max(1, round(w * f)), max(1, round(h * f))), interpolation=cv2.INTER_AREA)
        small = np.ascontiguousarray(small)
        # The graph's threads log start-up warnings during the first inferences.
        ctx = quiet_stderr() if self._calls < QUIET_CALLS else contextlib.nullcontext()
        with ctx:
            result = self._mesh.process(small)
        self._calls += 1
        out = []
        for face in result.multi_face_landmarks or ():
            lm = np.array([(p.x, p.y) for p in face.landmark], np.float32)
            lm *= np.array([w, h], np.float32)  # normalised -> pixels of the original frame
            if np.isfinite(lm).all():  # never cache what a box cannot be built from
                out.append(lm)
        if sort:
            out.sort(key=lambda lm: float(lm[:, 0].mean()))
        return out

    def close(self) -> None:
        self._mesh.close()


def face_extent(lm: np.ndarray) -> tuple[float, float, float]:
    """``(x_min, x_max, area)`` of a face's landmark bounding box, in pixels."""
    x0, y0 = lm.min(0)
    x1, y1 = lm.max(0)
    return float(x0), float(x1), float((x1 - x0) * (y1 - y0))


def pick_face(found: list[np.ndarray], face: int | None) -> int:
    """Index into ``found`` (sorted left to right) of the face to use: the ``face``-th from the
    left (1-based) when given, else the largest."""
    if face is not None:
        return face - 1
    return max(range(len(found)), key=lambda i: face_extent(found[i])[2])


def nearest_face(found: list[np.ndarray], previous: np.ndarray) -> np.ndarray | None:
    """The face in ``found`` whose centre is nearest ``previous``'s (video: follow one face)."""
    if not found:
        return None
    c = previous.mean(0)
    return min(found, key=lambda lm: float(np.sum((lm.mean(0) - c) ** 2)))


# --------------------------------------------------------------------------------------------
# The MuseTalk crop box


def musetalk_box(lm: np.ndarray, width: int, height: int, bbox_shift: int = 0, extra_margin: int = 10) -> np.ndarray:
    """MuseTalk's crop box from face-mesh landmarks, as int32 ``[x1, y1, x2, y2]`` in frame pixels.

    MuseTalk's rule on iBUG-68 points: ``x1, x2`` = the points' x range; ``y2`` = their lowest
    point (the chin); ``y_mid = lm[29].y + bbox_shift``; ``y1 = max(0, y_mid - (y2 - y_mid))``;
    v1.5 then adds ``extra_margin`` pixels to ``y2``. Here the 68 points are ``IBUG_LIKE`` (jaw
    contour, brows, eyes, nose, lips of the mesh; not its forehead), point 29 is mesh point 5
    (``BOX_MID``) and the chin is the lowest jaw point. The box is clipped to the frame and is
    at least 2 pixels wide and high.
    """
    pts = lm[list(IBUG_LIKE)]
    x1 = float(pts[:, 0].min())
    x2 = float(pts[:, 0].max())
    y2 = float(lm[list(JAW), 1].max())
    y_mid = float(lm[BOX_MID, 1]) + bbox_shift
    y1 = max(0.0, y_mid - (y2 - y_mid))
    y2 = y2 + extra_margin
    box = np.array([round(x1), round(y1), round(x2), round(y2)], np.int64)
    box[[0, 2]] = np.clip(box[[0, 2]], 0, width)
    box[[1, 3]] = np.clip(box[[1, 3]], 0, height)
    # Degenerate boxes (a face almost entirely off-frame) are widened to at least 2 x 2.
    for lo, hi, size in ((0, 2, width), (1, 3, height)):
        if box[hi] - box[lo] < 2:
            box[lo] = max(0, min(box[lo], size - 2))
            box[hi] = box[lo] + 2
    return box.astype(np.int32)


def boxes_for(
    landmarks: np.ndarray, width: int, height: int, bbox_shift: int = 0, extra_margin: int = 10
) -> np.ndarray:
    """``musetalk_box`` for every frame of ``[N,478,2]`` landmarks -> ``[N,4]`` int32."""
    return np.stack([musetalk_box(lm, width, height, bbox_shift, extra_margin) for lm in landmarks]).astype(np.int32)


def bbox_shift_range(landmarks: np.ndarray) -> tuple[int, int]:
    """MuseTalk's printed "adjustable range" for ``bbox_shift``: ``[-mean(y30-y29), +mean(y29-y28)]``."""
    y = landmarks[..., 1].reshape(-1, landmarks.shape[-2])
    down = float(np.mean(y[:, IBUG_NOSE[30]] - y[:, IBUG_NOSE[29]]))
    up = float(np.mean(y[:, IBUG_NOSE[29]] - y[:, IBUG_NOSE[28]]))
    return -int(round(down)), int(round(up))


# --------------------------------------------------------------------------------------------
# Smoothing


def smooth_landmarks(landmarks: np.ndarray, face_ok: np.ndarray, strength: float) -> np.ndarray:
    """Zero-phase temporal smoothing of ``[N,478,2]`` landmarks, then face-less frames filled.

    Each run of consecutive frames with a face is filtered on its own (a gap may be a cut) by a
    Gaussian of sigma ``strength * MAX_SMOOTH_SIGMA`` frames, mirrored at the run's ends; there
    is no lag because the whole clip is known. Face-less frames get the nearest valid frame's
    landmarks (the earlier one on a tie), so boxes never collapse.
    """
    if not 0.0 <= strength <= 1.0:
        raise ValueError("strength must be within 0..1")
    out = np.array(landmarks, np.float32, copy=True)
    ok = np.asarray(face_ok, bool)
    sigma = strength * MAX_SMOOTH_SIGMA
    if sigma > 0.05:
        radius = int(math.ceil(3 * sigma))
        taps = np.exp(-0.5 * (np.arange(-radius, radius + 1) / sigma) ** 2)
        taps /= taps.sum()
        for start, end in _runs(ok):
            out[start:end] = _filter_run(out[start:end], taps, radius)
    return fill_nearest(out, ok)


def fill_nearest(values: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Copy, into every row where ``ok`` is False, the nearest row where it is True."""
    ok = np.asarray(ok, bool)
    valid = np.flatnonzero(ok)
    if len(valid) == 0 or ok.all():
        return values
    idx = np.arange(len(ok))
    pos = np.searchsorted(valid, idx)  # the first valid frame at or after each frame
    left = valid[np.clip(pos - 1, 0, len(valid) - 1)]
    right = valid[np.clip(pos, 0, len(valid) - 1)]
    nearest = np.where(np.abs(idx - left) <= np.abs(right - idx), left, right)
    values[~ok] = values[nearest[~ok]]
    return values


def _filter_run(run: np.ndarray, taps: np.ndarray, radius: int) -> np.ndarray:
    n = len(run)
    if n < 2:
        return run
    idx = np.arange(-radius, n + radius)
    # Mirror at the ends (reflect without repeating the edge), bounced for runs shorter than the kernel.
    period = 2 * (n - 1)
    idx = np.abs(idx) % period
    idx = np.where(idx >= n, period - idx, idx)
    padded = run[idx]
    out = np.zeros_like(run)
    for k, w in enumerate(taps):
        out += w * padded[k : k + n]
    return out


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    m = np.concatenate([[False], mask, [False]])
    edges = np.flatnonzero(m[1:] != m[:-1])
    return list(zip(edges[::2].tolist(), edges[1::2].tolist()))


# --------------------------------------------------------------------------------------------
# Crops and masks


def to_crop(lm: np.ndarray, box: np.ndarray) -> np.ndarray:
    """Frame-pixel landmarks -> coordinates in the 256x256 crop of ``box`` (stretched like the crop)."""
    x1, y1, x2, y2 = (float(v) for v in box)
    scale = np.array([FACE_SIZE / (x2 - x1), FACE_SIZE / (y2 - y1)], np.float32)
    return ((lm - np.array([x1, y1], np.float32)) * scale).astype(np.float32)


def crop_face(frame: np.ndarray, box: np.ndarray) -> np.ndarray:
    """``frame[y1:y2, x1:x2]`` stretched to 256x256 with Lanczos (MuseTalk spec 3.3)."""
    import cv2

    x1, y1, x2, y2 = (int(v) for v in box)
    return cv2.resize(
        np.ascontiguousarray(frame[y1:y2, x1:x2]), (FACE_SIZE, FACE_SIZE), interpolation=cv2.INTER_LANCZOS4
    )


def blend_mask(
    crop_lm: np.ndarray, box: np.ndarray, cheek_width: float = 90, feather: float = 24.0, mode: str = "jaw"
) -> np.ndarray:
    """The blend alpha of the lower face in crop coordinates: ``[256,256]`` uint8, 255 = generated.

    Geometry replaces MuseTalk's face parsing: the face silhouette (``FACE_OVAL``) stands for
    its skin label, the outer lips for its mouth/lip labels, the lower nose hull for its nose
    label. Then, as in MuseTalk:

    * ``raw``: silhouette + lips, nose removed, rows above the box's mid-height removed;
    * ``jaw`` (v1.5 default): as ``raw``, but inside a central band of half-width
      ``cheek_width`` the silhouette is grown (10 px sideways, 6 px down: covers the jaw line so
      an opening mouth's chin is taken), and outside it (the cheeks) shrunk by 34 px sideways,
      so the face edge over the cheeks stays the original. ``cheek_width`` and those pixel sizes
      are MuseTalk's units, pixels of its 512x512 parsing image of the 1.5x square around the
      box; they are converted to the crop through the box size (for a 3:4 box, 1 unit ~ 1 crop
      pixel horizontally).

    ``feather`` is the width, in crop pixels, of the soft edge: the alpha rises from 0 to 255
    over ``feather`` pixels centred on the hard edge (a Gaussian of sigma ``feather / 4``,
    truncated at ``feather / 2``); the nose cut-out uses at most ``NOSE_FEATHER``. The hard
    mask is kept ``feather / 2 + 1`` pixels inside the crop, so the alpha is exactly 0 on the
    crop border.
    """
    import cv2

    if mode not in MASK_MODES:
        raise ValueError(f"mask mode must be one of {MASK_MODES}")
    size = FACE_SIZE
    x1, y1, x2, y2 = (float(v) for v in box)
    w, h = max(x2 - x1, 1.0), max(y2 - y1, 1.0)
    region = np.zeros((size, size), np.uint8)
    _fill(region, crop_lm[list(FACE_OVAL)], 255)
    if mode == "jaw":
        side = 2 * int(max(w, h) // 2 * 1.5)  # MuseTalk's expanded square, in frame pixels
        sx, sy = side / 512 * size / w, side / 512 * size / h  # crop pixels per parsing pixel
        grown = cv2.dilate(region, _ellipse(10 * sx, 6 * sy))
        shrunk = cv2.erode(region, _ellipse(34 * sx, 2 * sy))
        centre_x = float(np.mean(crop_lm[[CHIN, BOX_MID], 0]))  # the face's midline
        band = np.abs(np.arange(size) + 0.5 - centre_x) <= cheek_width * sx
        region = np.where(band[None, :], grown, shrunk).astype(np.uint8)
    _fill(region, crop_lm[list(LIPS_OUTER)], 255)
    region[: size // 2] = 0  # MuseTalk keeps the lower half of the box only
    edge = int(math.ceil(max(feather, 0.0) / 2)) + 1
    region[:edge] = 0
    region[-edge:] = 0
    region[:, :edge] = 0
    region[:, -edge:] = 0
    alpha = _soften(region, feather)
    # The nose is cut out with a tighter edge of its own: the upper lip is only ~15 crop pixels
    # below the nostrils and must stay fully generated, the nose tip fully original.
    nose = np.zeros_like(region)
    _fill(nose, cv2.convexHull(crop_lm[list(NOSE_LOWER)].astype(np.float32)).reshape(-1, 2), 255)
    keep = 255 - _soften(nose, min(max(feather, 0.0), NOSE_FEATHER)).astype(np.uint16)
    return ((alpha.astype(np.uint16) * keep + 127) // 255).astype(np.uint8)


def overlay_image(
    frame: np.ndarray, box: np.ndarray, mask: np.ndarray, landmarks: np.ndarray | None = None, face_ok: bool = True
) -> np.ndarray:
    """Debug picture: the frame with the mask tinted magenta, the box in yellow, lips/jaw dots in cyan."""
    import cv2

    out = np.array(frame, np.uint8, copy=True)
    x1, y1, x2, y2 = (int(v) for v in box)
    alpha = cv2.resize(mask, (x2 - x1, y2 - y1), interpolation=cv2.INTER_LINEAR).astype(np.float32) / 255.0
    roi = out[y1:y2, x1:x2].astype(np.float32)
    tint = np.array([255, 0, 255], np.float32)
    a = (0.55 * alpha)[..., None]
    out[y1:y2, x1:x2] = (roi * (1 - a) + tint * a).round().astype(np.uint8)
    thick = max(1, round(max(out.shape[:2]) / 400))
    colour = (255, 220, 0) if face_ok else (255, 60, 60)
    cv2.rectangle(out, (x1, y1), (x2 - 1, y2 - 1), colour, thick)
    mid = (y1 + y2) // 2
    cv2.line(out, (x1, mid), (x2 - 1, mid), colour, 1)
    if landmarks is not None:
        for i in LIPS_OUTER + JAW + (BOX_MID, NOSE_TIP):
            x, y = landmarks[i]
            cv2.circle(out, (int(round(x)), int(round(y))), thick, (0, 255, 255), -1)
    return out


def _soften(hard: np.ndarray, feather: float) -> np.ndarray:
    """Gaussian of sigma ``feather / 4`` truncated at ``feather / 2`` pixels (no-op below 1 pixel)."""
    import cv2

    r = int(math.ceil(max(feather, 0.0) / 2))
    if r == 0:
        return hard
    return cv2.GaussianBlur(
        hard, (2 * r + 1, 2 * r + 1), sigmaX=feather / 4, sigmaY=feather / 4, borderType=cv2.BORDER_CONSTANT
    )


def _fill(img: np.ndarray, pts: np.ndarray, value: int) -> None:
    import cv2

    cv2.fillPoly(img, [np.round(np.asarray(pts) * 4).astype(np.int32)], value, lineType=cv2.LINE_8, shift=2)


def _ellipse(rx: float, ry: float) -> np.ndarray:
    import cv2

    return cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * max(0, round(rx)) + 1, 2 * max(0, round(ry)) + 1))


def import_mediapipe():
    """``import mediapipe`` on a thread of its own. MediaPipe keeps the ImportError of a module it can
    do without (``sounddevice``) in a module global, traceback and all, and that traceback holds
    every frame of the stack that first imported it: imported in a render (a library avatar tracked
    as a server job starts), it kept that render, its clip and its engine alive for good, so an
    evicted engine's memory never went back. A thread's stack holds nothing of the caller's.
    One import at a time: a second caller (another job's tracker) waits for the first instead of being
    handed the module half-imported ("partially initialized module 'mediapipe'")."""
    import sys

    with _MEDIAPIPE_LOCK:
        mod = sys.modules.get("mediapipe")
        if mod is not None and not getattr(getattr(mod, "__spec__", None), "_initializing", False):
            return mod
        return _import_mediapipe_on_a_thread()


def _import_mediapipe_on_a_thread():
    box: dict = {}

    def run() -> None:
        try:
            import mediapipe

            box["module"] = mediapipe
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            box["error"] = exc

    t = threading.Thread(target=run, name="studio-import-mediapipe", daemon=True)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["module"]


@contextlib.contextmanager
def _swallow_excepthook() -> Iterator[None]:
    """On protobuf 6, ``import mediapipe`` reports a harmless AttributeError ('MessageFactory' has
    no 'GetPrototype') through ``sys.excepthook``; an app-wide hook (the GUI's error dialog,
    pytest-qt) must not see it. It is logged at debug level instead."""
    import sys

    saved = sys.excepthook
    sys.excepthook = lambda kind, value, tb: log.debug("ignored during mediapipe start-up: %r", value)
    try:
        yield
    finally:
        sys.excepthook = saved


@contextlib.contextmanager
def quiet_stderr() -> Iterator[None]:
    """Silence C-level writes to fd 2 (mediapipe's start-up warnings); Python logging is unaffected
    because it runs in this thread and does not log inside the block."""
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
            try:
                yield
            finally:
                os.dup2(saved, 2)
    finally:
        os.close(saved)

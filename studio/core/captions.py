"""Captions of a script: cue times, line breaks at phrase boundaries, SubRip and WebVTT, burn-in.

    sents = script_sentences(audio, script_text)     # [Sentence(text, start_s, end_s)]: the synthesis's
                                                     # own times, else aligned to the recording
    cues = make_cues(sents)                          # [Cue(start_s, end_s, lines)]: <= 2 lines of <= 42
    write_captions(cues, "out.srt")                  # or .vtt (the ``srt`` and ``webvtt-py`` libraries)
    overlay = CaptionPainter(1920, 1080, "box")      # the burnt-in text of a cue, RGBA, in the safe area

**Times.** A voice-over spoken from text by ``media.speech`` knows its sentence times (the JSON beside
the WAV). A recorded voice-over with its text is aligned offline, without a model: read speech pauses
between sentences, so the sentence starts are speech onsets after pauses. ``align`` finds the pauses
(a 10 ms RMS envelope against a threshold set from the recording's own noise floor and level), then
picks, by dynamic programming, which pause ends each sentence: the one whose time is nearest where the
sentence's share of the script's characters puts it, long pauses preferred (a comma's short pause
rarely beats a full stop's). The cue starts at the onset after the chosen pause (10 ms resolution). A
model-based forced aligner would also place words, but every offline one needs acoustic-model weights
that Studio cannot download; captions need sentence and phrase times, which this gives (tests/
test_captions.py measures the cue-start error on speech with known sentence times).

**Lines.** A sentence longer than a cue holds (2 lines of 42 characters) is cut into phrases: after
punctuation first, then before a conjunction or preposition, never inside a word; each cue's time is
its share of the sentence's characters; lines are balanced at a phrase boundary.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from studio.core.errors import InputError
from studio.core.media.speech import Sentence, sentences_for, split_sentences

LINE_CHARS = 42
MAX_LINES = 2
MIN_CUE_S = 0.8
HOP_S = 0.01
MIN_PAUSE_S = 0.12
BREAK_WORDS = frozenset(
    "and but or nor so yet because although though while whereas if unless until when where which who whom "
    "whose that to in on at of for with from by about into over after before during without between".split()
)


@dataclass(frozen=True)
class Cue:
    start_s: float
    end_s: float
    lines: tuple[str, ...]

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


# -- times ------------------------------------------------------------------------------------------


def script_sentences(audio: str | Path, script: str = "") -> list[Sentence]:
    """The sentences of the voice-over with their times: the synthesis's (a WAV ``media.speech`` made,
    when no other script is given), else ``script`` (or the ``.txt`` beside the audio) aligned to it."""
    spoken = sentences_for(audio)
    text = (script or "").strip()
    if not text:
        if spoken is not None:
            return spoken
        beside = Path(audio).with_suffix(".txt")
        if beside.is_file():
            text = beside.read_text(encoding="utf-8", errors="replace").strip()
    if not text:
        raise InputError(
            "captions need the script's text: give --script SCRIPT.txt (or a .txt beside the voice-over, "
            "or speak it from text)"
        )
    if len(text) > 100_000:
        raise InputError(f"the script is {len(text)} characters; captions take at most 100000")
    if spoken is not None and " ".join(s.text for s in spoken) == " ".join(split_sentences(text)):
        return spoken
    return align(audio, text)


def _envelope(audio: str | Path) -> np.ndarray:
    """RMS per 10 ms of the voice-over (decoded as every voice-over is: mono 16 kHz, ``media.audio``)."""
    from studio.core.media.audio import decode, probe

    mono = np.concatenate(list(decode(probe(audio))) or [np.zeros(0, np.float32)])
    hop = round(16_000 * HOP_S)
    n = len(mono) // hop
    if n == 0:
        raise InputError(f"{audio}: the voice-over is empty")
    frames = mono[: n * hop].reshape(n, hop)
    return np.sqrt((frames.astype(np.float64) ** 2).mean(axis=1))


def speech_mask(env: np.ndarray) -> np.ndarray:
    """True where the 10 ms frame is speech: above a threshold between the noise floor and the level."""
    floor = np.percentile(env, 10)
    level = np.percentile(env, 90)
    thr = max(floor * 3.0, floor + 0.08 * (level - floor), 1e-4)
    voiced = env > thr
    # a frame of noise between silences is not speech; a short dip inside a word is not a pause
    from scipy.ndimage import binary_closing, binary_opening

    voiced = binary_opening(voiced, np.ones(3, bool))
    return binary_closing(voiced, np.ones(7, bool))


def align(audio: str | Path, text: str) -> list[Sentence]:
    """The sentences of ``text`` timed against the recording ``audio`` (see the module docstring)."""
    sentences = split_sentences(text)
    if not sentences:
        raise InputError("the script is empty; captions need its text")
    env = _envelope(audio)
    mask = speech_mask(env)
    on = np.flatnonzero(mask)
    if len(on) == 0:
        raise InputError(f"{audio}: no speech was heard, so the script cannot be timed to it")
    first, last = int(on[0]), int(on[-1]) + 1
    # pauses inside the speech: (start frame, end frame = the next onset)
    edges = np.flatnonzero(np.diff(mask[first:last].astype(np.int8))) + first + 1
    pauses = [(int(a), int(b)) for a, b in zip(edges[0::2], edges[1::2]) if (b - a) * HOP_S >= MIN_PAUSE_S]
    n = len(sentences)
    weights = np.array([_weight(s) for s in sentences], np.float64)
    share = np.cumsum(weights)[:-1] / weights.sum()  # where each boundary 1..n-1 is expected, 0..1
    span = last - first
    expect = first + share * span
    avg = span / n
    bounds = _choose(pauses, expect, avg)
    starts = [first] + [b for _, b in bounds]
    ends = [a for a, _ in bounds] + [last]
    return [
        Sentence(s, round(a * HOP_S, 3), round(max(b, a + 1) * HOP_S, 3)) for s, a, b in zip(sentences, starts, ends)
    ]


def _weight(sentence: str) -> float:
    """How long a sentence takes to say, roughly: its letters and digits, plus a little per word."""
    return sum(ch.isalnum() for ch in sentence) + 2.0 * len(sentence.split())


def _choose(pauses: list[tuple[int, int]], expect: np.ndarray, avg: float) -> list[tuple[int, int]]:
    """For each expected boundary (increasing), a pause (start, end) or a made-up point where none fits:
    the least total cost ((distance / avg)^2, less a reward for a long pause), in order."""
    k = len(expect)
    if k == 0:
        return []
    cand = [(a, b, min((b - a) * HOP_S, 1.0)) for a, b in pauses]
    m = len(cand)
    INF = float("inf")
    # cost[i][j]: the best for boundaries 0..i with boundary i at candidate j (j == m: no pause, at expect)
    best = np.full((k, m + 1), INF)
    back = np.full((k, m + 1), -1, np.int64)
    pos = np.array([b for _, b, _ in cand] + [0], np.float64)

    def cost(i: int, j: int) -> float:
        if j == m:
            return 2.5  # a boundary without a pause: allowed, but a pause nearby is better
        d = (pos[j] - expect[i]) / avg
        return d * d * 4.0 - 3.0 * cand[j][2] / 0.5

    for j in range(m + 1):
        best[0, j] = cost(0, j)
    for i in range(1, k):
        for j in range(m + 1):
            c = cost(i, j)
            if j == m:
                prev = best[i - 1].min()
                back[i, j] = int(best[i - 1].argmin())
            else:
                prev_row = best[i - 1, :j].tolist() + [best[i - 1, m]]
                p = int(np.argmin(prev_row))
                prev = prev_row[p]
                back[i, j] = p if p < j else m
            best[i, j] = prev + c
    j = int(best[k - 1].argmin())
    picks = []
    for i in range(k - 1, -1, -1):
        picks.append(j)
        j = int(back[i, j])
    picks.reverse()
    out = []
    for i, j in enumerate(picks):
        if j == m:
            t = int(round(expect[i]))
            out.append((t, t))
        else:
            out.append((cand[j][0], cand[j][1]))
    # keep them in order (a made-up point between two pauses)
    for i in range(1, len(out)):
        if out[i][0] < out[i - 1][1]:
            out[i] = (out[i - 1][1], max(out[i][1], out[i - 1][1]))
    return out


# -- cues and lines ---------------------------------------------------------------------------------


def phrases(sentence: str, limit: int = LINE_CHARS * MAX_LINES) -> list[str]:
    """``sentence`` cut into pieces of at most ``limit`` characters at phrase boundaries."""
    words = sentence.split()
    out: list[str] = []
    while words:
        text = " ".join(words)
        if len(text) <= limit:
            out.append(text)
            break
        # the last good place to cut within the limit: after punctuation, else before a break word
        best, best_score = 1, -1.0
        length = 0
        for i in range(1, len(words)):
            length += len(words[i - 1]) + (1 if i > 1 else 0)
            if length > limit:
                break
            score = length / limit
            if re.search(r"[,;:\u2014)]$", words[i - 1]):
                score += 2.0
            elif words[i].lower().strip("\"'(") in BREAK_WORDS:
                score += 1.0
            if length < limit * 0.35:
                score -= 1.5  # a stub of a phrase
            if score > best_score:
                best, best_score = i, score
        out.append(" ".join(words[:best]))
        words = words[best:]
    return out


def lines_of(text: str, width: int = LINE_CHARS) -> tuple[str, ...]:
    """One or two balanced lines (each <= ``width`` where the words allow), broken at a phrase boundary."""
    if len(text) <= width:
        return (text,)
    words = text.split()
    best: tuple[float, int] = (float("inf"), 1)
    for i in range(1, len(words)):
        a, b = " ".join(words[:i]), " ".join(words[i:])
        over = max(0, len(a) - width) + max(0, len(b) - width)
        score = over * 10 + abs(len(a) - len(b)) / width
        if re.search(r"[,;:]$", words[i - 1]):
            score -= 0.5
        elif words[i].lower() in BREAK_WORDS:
            score -= 0.25
        best = min(best, (score, i))
    i = best[1]
    return (" ".join(words[:i]), " ".join(words[i:]))


def make_cues(sentences: list[Sentence]) -> list[Cue]:
    """Cues of at most two lines; a long sentence's phrases share its time by their characters."""
    cues: list[Cue] = []
    for s in sentences:
        text = " ".join(_CONTROL.sub(" ", s.text).split())  # no control bytes (ESC, BEL ...) in a caption
        if not text:
            continue
        parts = phrases(text)
        total = sum(len(p) for p in parts) or 1
        t = s.start_s
        dur = max(s.end_s - s.start_s, MIN_CUE_S * len(parts))
        for p in parts:
            d = dur * len(p) / total
            cues.append(Cue(round(t, 3), round(t + d, 3), lines_of(p)))
            t += d
    return readable(cues)


_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def readable(cues: list[Cue]) -> list[Cue]:
    """Cues in order with no overlaps and no empty time (a player drops a cue that ends where it
    starts, and ``srt`` leaves it out: the count said is the count written). A cue shorter than
    ``MIN_CUE_S`` takes the next one's text while both fit in one cue (many tiny sentences, "A. A. A.",
    timed into a short voice-over); what still has no time of its own is shown with the next cue."""
    merged: list[Cue] = []
    for c in cues:
        if merged:
            prev = merged[-1]
            joined = f"{' '.join(prev.lines)} {' '.join(c.lines)}"
            short = prev.end_s - prev.start_s < MIN_CUE_S or c.end_s <= c.start_s
            if short and len(joined) <= LINE_CHARS * MAX_LINES:
                merged[-1] = Cue(prev.start_s, max(prev.end_s, c.end_s), lines_of(joined))
                continue
        merged.append(c)
    starts: list[float] = []
    for c in merged:  # in order: no cue starts before the one before it
        starts.append(max(c.start_s, starts[-1]) if starts else c.start_s)
    out: list[Cue] = []
    carry = ""  # the words of cues with no time of their own, shown with the next cue
    for i, c in enumerate(merged):
        end = min(c.end_s, starts[i + 1]) if i + 1 < len(merged) else max(c.end_s, starts[i] + MIN_CUE_S)
        text = f"{carry} {' '.join(c.lines)}".strip()
        if end - starts[i] < 0.001 and i + 1 < len(merged):
            carry = text
            continue
        carry = ""
        out.append(Cue(round(starts[i], 3), round(end, 3), lines_of(text)))
    return out


def write_captions(
    cues: list[Cue],
    path: str | Path,
    *,
    offset_s: float = 0.0,
    duration_s: float | None = None,
    timecode_s: float = 0.0,
    overwrite: bool = True,
) -> Path:
    """``cues`` as SubRip (.srt, the ``srt`` library) or WebVTT (.vtt, ``webvtt-py``), atomically;
    ``offset_s`` moves them (a render of an in/out range starts at its in point) and ``duration_s``
    (the clip's length) cuts them: a cue outside the clip is left out, one across its ends is cut there.
    ``.scc``: CEA-608 (Scenarist, ``pycaption``) for broadcast, timed to the clip's timecode: ``timecode_s``
    is its first frame's timecode in seconds (10:00:00:00 -> 36000), written as 29.97 drop-frame labels
    (which follow the clock), so a caption shows at the clip's own timecode of its start."""
    from datetime import timedelta

    from studio.core.store.fsutil import atomic_output

    p = Path(path)
    kind = p.suffix.lower()
    if kind not in (".srt", ".vtt", ".scc"):
        raise InputError(f"{p.name}: captions are written as .srt, .vtt or .scc")
    shown = clip_cues(cues, offset_s, duration_s)
    if kind == ".scc":
        body = _scc(shown, timecode_s)
    elif kind == ".srt":
        import srt

        body = srt.compose(
            [
                srt.Subtitle(i + 1, timedelta(seconds=c.start_s), timedelta(seconds=c.end_s), c.text)
                for i, c in enumerate(shown)
            ]
        )
    else:
        import webvtt

        vtt = webvtt.WebVTT()
        for c in shown:
            vtt.captions.append(webvtt.Caption(vtt_time(c.start_s), vtt_time(c.end_s), list(c.lines)))
        body = vtt.content
    with atomic_output(p, overwrite=overwrite) as written:
        Path(written.tmp).write_text(body, encoding="utf-8")
    return Path(str(written.final))


def _scc(cues: list[Cue], timecode_s: float) -> str:
    """Pop-on CEA-608 captions (``pycaption``'s SCC writer: its control codes, parity, 32-column rows)."""
    from pycaption import Caption, CaptionNode, CaptionSet, SCCWriter

    items = []
    for c in cues:
        nodes = []
        for k, line in enumerate(c.lines):
            if k:
                nodes.append(CaptionNode.create_break())
            nodes.append(CaptionNode.create_text(line))
        items.append(Caption(round((timecode_s + c.start_s) * 1e6), round((timecode_s + c.end_s) * 1e6), nodes))
    return SCCWriter(drop_frame=True).write(CaptionSet({"en-US": items}))


def clip_cues(cues: list[Cue], offset_s: float = 0.0, duration_s: float | None = None) -> list[Cue]:
    """The cues of the stretch ``[offset_s, offset_s + duration_s)``, in the clip's own time."""
    end = math.inf if duration_s is None else float(duration_s)
    out = []
    for c in cues:
        a, b = max(0.0, c.start_s - offset_s), min(end, c.end_s - offset_s)
        if b - a > 1e-6:
            out.append(Cue(a, b, c.lines))
    return out


def vtt_time(t: float) -> str:
    ms = round(t * 1000)
    h, rest = divmod(ms, 3_600_000)
    m, rest = divmod(rest, 60_000)
    s, ms = divmod(rest, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}.{ms:03d}"


# -- burn-in ---------------------------------------------------------------------------------------


class CaptionPainter:
    """The burnt-in look of a cue on a ``width`` x ``height`` frame: white text in the title-safe area
    (5 % in from each side, the lines' bottom at 90 % of the height), on a dark box or with a dark
    outline; the font's size follows the frame (42 characters fit the safe width). Each cue's overlay
    is drawn once (Pillow) and cached: RGBA uint8 and its top-left corner."""

    def __init__(self, width: int, height: int, style: str = "box"):
        self.width, self.height, self.style = int(width), int(height), style
        self.safe = (round(width * 0.05), round(height * 0.05), round(width * 0.95), round(height * 0.90))
        safe_w = self.safe[2] - self.safe[0]
        self.size = max(10, int(min(height * 0.05, safe_w / (LINE_CHARS * 0.56))))
        self._font: Any = None
        self._cache: dict[tuple[str, ...], tuple[np.ndarray, int, int]] = {}

    def font(self):
        if self._font is None:
            from PIL import ImageFont

            try:
                self._font = ImageFont.truetype("DejaVuSans-Bold.ttf", self.size)
            except OSError:
                self._font = ImageFont.load_default(self.size)  # Pillow's own font: no system font needed
        return self._font

    def overlay(self, lines: tuple[str, ...]) -> tuple[np.ndarray, int, int]:
        """(RGBA [h,w,4] uint8, x, y) of ``lines``, inside the safe area."""
        hit = self._cache.get(lines)
        if hit is not None:
            return hit
        from PIL import Image, ImageDraw

        font = self.font()
        pad = max(2, self.size // 4)
        gap = self.size // 5
        boxes = [font.getbbox(t) for t in lines]
        line_h = max(b[3] for b in boxes) + gap
        text_w = min(max(b[2] - b[0] for b in boxes), self.safe[2] - self.safe[0] - 2 * pad)
        w, h = text_w + 2 * pad, line_h * len(lines) + 2 * pad - gap
        img = Image.new("RGBA", (w, h), (0, 0, 0, 0))
        d = ImageDraw.Draw(img)
        if self.style == "box":
            d.rectangle((0, 0, w - 1, h - 1), fill=(0, 0, 0, 170))
        stroke = 0 if self.style == "box" else max(2, self.size // 12)
        for k, (t, b) in enumerate(zip(lines, boxes)):
            x = (w - (b[2] - b[0])) // 2 - b[0]
            d.text(
                (x, pad + k * line_h),
                t,
                font=font,
                fill=(255, 255, 255, 255),
                stroke_width=stroke,
                stroke_fill=(0, 0, 0, 255),
            )
        arr = np.asarray(img, np.uint8)
        x0 = self.safe[0] + (self.safe[2] - self.safe[0] - w) // 2
        y0 = self.safe[3] - h
        hit = (arr, max(self.safe[0], x0), max(self.safe[1], y0))
        if len(self._cache) > 512:
            self._cache.clear()
        self._cache[lines] = hit
        return hit


def cue_at(cues: list[Cue], t: float) -> Cue | None:
    """The cue shown at ``t`` seconds (start inclusive, end exclusive), or None."""
    import bisect

    i = bisect.bisect_right([c.start_s for c in cues], t) - 1
    if i >= 0 and cues[i].start_s <= t < cues[i].end_s:
        return cues[i]
    return None


def burn(frames, times: list[float], cues: list[Cue], painter: CaptionPainter):
    """Draw the cue of each frame's time into ``frames`` (uint8 torch [B,H,W,3|4], in place)."""
    import torch

    for k, t in enumerate(times):
        cue = cue_at(cues, t)
        if cue is None:
            continue
        arr, x, y = painter.overlay(cue.lines)
        h, w = arr.shape[:2]
        h, w = min(h, frames.shape[1] - y), min(w, frames.shape[2] - x)
        ov = torch.tensor(arr[:h, :w], device=frames.device).float()
        a = ov[..., 3:4] / 255.0
        dst = frames[k, y : y + h, x : x + w, :3].float()
        frames[k, y : y + h, x : x + w, :3] = (dst + a * (ov[..., :3] - dst)).round_().clamp_(0, 255).to(torch.uint8)
        if frames.shape[-1] == 4:  # a transparent frame: the caption is opaque where drawn
            fa = frames[k, y : y + h, x : x + w, 3:4].float()
            frames[k, y : y + h, x : x + w, 3:4] = (ov[..., 3:4] + fa * (1 - a)).round_().to(torch.uint8)
    return frames

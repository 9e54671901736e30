"""A script's text, bounded before any voice works on it: what can be said, in runs a voice can hold.

    plan = plan_script(text, speed=160)      # ScriptPlan: sentences, left_out, estimate_s, note
    plan.sentences                            # each at most MAX_SENTENCE_CHARS characters
    check_estimate(plan)                      # one sentence when it would speak longer than the limit
    split_sentences(text)                     # the same sentences, for captions

Every text face (``studio speak``, ``render --text``, the server's ``text`` fields, the window) goes
through ``plan_script`` before a voice is loaded, so its limits hold everywhere:

* **characters**: control characters are spaces; at most ``MAX_CHARS`` characters;
* **what a voice cannot say** (emoji, pictographs, private-use and unassigned code points, joiners and
  variation selectors): left out and named in the note (espeak-ng spells an emoji's name out, so one
  emoji costs a second of audio and a sentence of them gigabytes in Piper's network);
* **sentence length**: a sentence is cut after punctuation, else at commas or semicolons, else between
  words, else (a run without spaces) every ``MAX_SENTENCE_CHARS`` characters, so no run of the network
  is longer than one sentence (``speech`` also cuts a sentence's phonemes into runs of at most
  ``MAX_RUN_PHONEMES``);
* **expected duration**: estimated from the characters and sentence count (a lower bound, so a script
  is never refused for an over-estimate) and checked against the voice-over limit
  (``audio_info.max_audio_minutes``) before anything is synthesised.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from studio.core.constants import MAX_CHARS
from studio.core.errors import InputError

MAX_SENTENCE_CHARS = 200  # a sentence as one network run: about 15 s of speech, ~300 MB in Piper
MAX_RUN_PHONEMES = 160  # Piper's phonemes in one run (~10 s of audio: its memory grows with a run's audio)
CHARS_PER_S = 20.0  # faster than any voice here speaks at 160 words/min (Piper's joe: ~14): a lower bound
MIN_SENTENCE_S = 0.25  # the shortest sentence a voice says ("A.")
PAUSE_S = 0.3  # silence between sentences (``speech.PAUSE_S``)
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")  # nothing a voice says (NUL broke Piper's espeak)
_UNSAID = frozenset({"So", "Sk", "Co", "Cs", "Cn", "Cf", "Me"})  # symbols, private use, unassigned, format


@dataclass(frozen=True)
class ScriptPlan:
    text: str  # what will be spoken (cleaned)
    sentences: list[str]
    left_out: str  # the characters no voice says, once each, in order (emoji ...)
    left_out_count: int
    estimate_s: float  # at least this long, spoken

    @property
    def note(self) -> str:
        if not self.left_out_count:
            return ""
        shown = "".join(self.left_out[:8]) + ("..." if len(self.left_out) > 8 else "")
        return f"left out {self.left_out_count} characters no voice says (emoji and symbols such as {shown})"


def sayable(ch: str) -> bool:
    if unicodedata.category(ch) not in _UNSAID and not 0xFE00 <= ord(ch) <= 0xFE0F and not 0xE0100 <= ord(ch):
        return True
    return ch in "\n\t\r "


def clean(text: str) -> tuple[str, str, int]:
    """(the sayable text, the characters left out once each, how many were left out)."""
    text = _CONTROL.sub(" ", text or "")
    kept: list[str] = []
    gone: dict[str, None] = {}
    count = 0
    for ch in text:
        if sayable(ch):
            kept.append(ch)
        else:
            count += 1
            if ch not in gone and unicodedata.category(ch) not in ("Cf", "Mn", "Cn", "Cs"):
                gone[ch] = None
            kept.append(" ")
    return "".join(kept).strip(), "".join(gone), count


def split_sentences(text: str) -> list[str]:
    """The script's sentences: split after . ! ? (and …) followed by a space, and at blank lines; a
    long sentence is cut to at most ``MAX_SENTENCE_CHARS`` (at commas or semicolons, else between
    words, else anywhere)."""
    out: list[str] = []
    for para in re.split(r"\n\s*\n", (text or "").strip()):
        para = " ".join(para.split())
        for s in re.split(r"(?<=[.!?…])[\"')\]]?\s+(?=[\"'(\[]?[A-Z0-9À-Ý])", para):
            out.extend(cut_long(s.strip()))
    return out


def cut_long(s: str, most: int = MAX_SENTENCE_CHARS) -> list[str]:
    out = []
    while len(s) > most:
        cut = max(s.rfind(", ", 0, most), s.rfind("; ", 0, most))
        if cut > most // 5:
            cut += 1
        else:
            space = s.rfind(" ", 0, most + 1)
            cut = space if space > most // 5 else most
        out.append(s[:cut].strip())
        s = s[cut:].strip()
    if s:
        out.append(s)
    return out


def estimate_seconds(sentences: list[str], speed: int = 160) -> float:
    """At least how long the sentences take to say (with the pauses between them)."""
    if not sentences:
        return 0.0
    per_char = CHARS_PER_S * max(80, int(speed)) / 160
    said = sum(max(len(s) / per_char, MIN_SENTENCE_S) for s in sentences)
    return said + PAUSE_S * (len(sentences) - 1)


def plan_script(text: str, speed: int = 160) -> ScriptPlan:
    """The script bounded (see the module docstring); one sentence when nothing can be said or it is too long."""
    raw = (text or "").strip()
    if len(raw) > MAX_CHARS:
        raise InputError(f"the script text is {len(raw)} characters; speak at most {MAX_CHARS} at a time")
    said, gone, count = clean(raw)
    if not said:
        if count:
            raise InputError(
                "the script has nothing a voice can say (only emoji or symbols); type the words the presenter says"
            )
        raise InputError("the script text is empty; type what the presenter says")
    sentences = split_sentences(said)
    return ScriptPlan(said, sentences, gone, count, round(estimate_seconds(sentences, speed), 1))


def check_estimate(plan: ScriptPlan, most_bytes: int | None = None, rate: int = 22_050) -> None:
    """One sentence, before synthesis, when the script would speak longer than the voice-over limit (or,
    with ``most_bytes``, make a WAV larger than that: a server's upload limit)."""
    from studio.core.media.audio_info import max_audio_minutes

    limit, how = max_audio_minutes()
    if plan.estimate_s > limit * 60:
        raise InputError(
            f"the script would speak for at least {plan.estimate_s / 60:.0f} minutes; voice-overs here are at "
            f"most {limit:g} minutes ({how}): speak it in parts"
        )
    if most_bytes is not None and plan.estimate_s * rate * 2 > most_bytes:
        raise InputError(
            f"the script would speak for at least {plan.estimate_s / 60:.0f} minutes, a WAV larger than this "
            f"server's {most_bytes / 2**20:g} MB limit (--max-upload-mb): speak it in parts"
        )

"""A producer's words for what the core says: its sentences are written once for the command line, the
server and the window, and name command-line flags ("give --script SCRIPT.txt", "(--true-peak)") and
commands ("(studio delivery list)"). The window shows them in the words of its own fields:

    window_words("captions need the script's text: give --script SCRIPT.txt (or a .txt beside it)")
    # "captions need the script's text: fill in Script (or a .txt beside it)"
    window_words("a true-peak limit (--true-peak); off: as it is")      # "a true-peak limit; off: as it is"
    window_words("a named delivery (studio delivery list): its canvas") # "a named delivery: its canvas"

A flag becomes the label of the setting it sets (``studio.core.settings.SCHEMA``), a parenthesis that only
names a flag or a command goes, True and False read "on" and "off". ``problems(text)`` finds what a window
must never show (a test scans every string of the window with it).
"""

from __future__ import annotations

import re

#: a flag with its value's placeholder, if any: --script SCRIPT.txt, --true-peak, --codec prores4444
_FLAG = re.compile(r"--([a-z][a-z0-9-]*)(\s+[A-Z][A-Z0-9_]*(?:\.[a-z0-9]+)?)?")
#: a parenthesis that only names flags or a command: "(--true-peak)", "(studio delivery list)"
_ASIDE = re.compile(
    r"\s*\((?:(?:--[a-z][\w-]*(?:\s+[A-Z][\w.]*)?(?:,\s*)?)+"
    r"|studio [a-z][a-z -]*"
    r"|[^()]*\bthe command line\b[^()]*"
    r"|[^()]*\bstudio [a-z]+ --[^()]*)\)"
)
_COMMAND = re.compile(r"\bstudio [a-z]+(?: [a-z]+)?: ")  # "(studio check: offset, ...)" -> "(offset, ...)"
#: "limits ..., as studio check --fail-under takes them (...)": the command line's way, said for the window
_AS_COMMAND = re.compile(r",?\s*as studio [a-z]+(?: [a-z]+)? --[a-z][\w-]* takes (?:it|them)")
_BOOL = re.compile(r"\b(True|False)\b(?!\s+[a-z])")  # a value, not the words of "True peak"
_SNAKE = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+")


def _label(flag: str) -> str | None:
    from studio.core.settings import SCHEMA

    spec = SCHEMA.get(flag.replace("-", "_"))
    return spec.label if spec is not None else None


def window_words(text: str, names: bool = False) -> str:
    """``text`` in the window's words (see the module's docstring); other text is returned as it is.
    ``names``: a setting's help, whose snake_case value names (``silence_motion``) are written as the
    field takes them too (``silence-motion``)."""
    if names:
        text = " ".join(
            _SNAKE.sub(lambda m: m.group(0).replace("_", "-"), w) if _plain(w) else w for w in text.split(" ")
        )
    if not text or ("--" not in text and "studio " not in text and "True" not in text and "False" not in text):
        return text
    text = _AS_COMMAND.sub("", text)
    text = _ASIDE.sub("", text)
    text = _COMMAND.sub("", text)

    def give(m: re.Match) -> str:
        label = _label(m.group(1))
        return f"fill in {label}" if label else f"turn on “{m.group(1).replace('-', ' ')}”"

    text = re.sub(r"\bgive " + _FLAG.pattern, give, text)

    def flag(m: re.Match) -> str:
        label = _label(m.group(1))
        return label if label else m.group(1).replace("-", " ")

    text = _FLAG.sub(flag, text)
    return _BOOL.sub(lambda m: "on" if m.group(1) == "True" else "off", text)


def _plain(word: str) -> bool:
    """A word, not a path, a file name or a ``{placeholder}``."""
    return not any(c in word for c in "/.{}\\")


def problems(text: str) -> list[str]:
    """What ``text`` shows that a producer should not read: a flag (``--x``), a Python value (True, False,
    None), an internal name (``snake_case``; paths, file names and ``{placeholders}`` excepted)."""
    out = []
    if re.search(r"(?<![\w-])--[a-z]", text):
        out.append("a command-line flag")
    # "otio True", "Loudness None"; never "True peak", nor "None" alone (a choice: no delivery)
    if text.strip() != "None" and re.search(r"\b(True|False|None)\b(?!\s+[a-z])", text):
        out.append("a Python value")
    for token in text.split():
        token = token.strip("()[],;:“”\"'!?…")
        if any(c in token for c in "/.{}\\") or not token:
            continue  # a path, a file name, an output name's {placeholder}
        if _SNAKE.fullmatch(token):
            out.append(f"an internal name ({token})")
    return out

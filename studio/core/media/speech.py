"""Text to speech with espeak-ng (offline): the script text as a WAV in ``<data>/scripts``.

    path = speak("Good evening.")          # <data>/scripts/speech-<hash>.wav, reused for the same text

Qt-free, so the window's "Speak this text" and the server's ``text`` field can share it (the
window's ``studio/ui/speech.py`` re-exports it).
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

MAX_CHARS = 20_000  # about 20 minutes of speech


def available() -> bool:
    return shutil.which("espeak-ng") is not None


def speak(text: str, voice: str = "en-us", speed: int = 160) -> Path:
    """Write ``text`` spoken by espeak-ng to ``<data>/scripts/speech-<hash>.wav`` and return it."""
    from studio.core.env import sub_dir
    from studio.core.errors import InputError
    from studio.core.store.fsutil import atomic_path

    exe = shutil.which("espeak-ng")
    if exe is None:
        raise InputError("espeak-ng is not installed; install it (sudo apt install espeak-ng) or import a recording")
    text = (text or "").strip()
    if not text:
        raise InputError("the script text is empty; type what the presenter says")
    if len(text) > MAX_CHARS:
        raise InputError(f"the script text is {len(text)} characters; speak at most {MAX_CHARS} at a time")
    if not all(ch.isalnum() or ch in "-_" for ch in voice) or not 80 <= int(speed) <= 450:
        raise InputError("the voice must be an espeak-ng voice name (such as en-us) and the speed 80-450 words/min")
    digest = hashlib.sha1(f"{voice}|{speed}|{text}".encode()).hexdigest()[:12]
    target = sub_dir("scripts") / f"speech-{digest}.wav"
    if target.exists():
        return target
    with atomic_path(target) as tmp:
        r = subprocess.run(
            [exe, "-v", voice, "-s", str(int(speed)), "-w", str(tmp), "--stdin"],
            input=text,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if r.returncode != 0 or tmp.stat().st_size == 0:
            raise InputError(f"espeak-ng could not speak the text ({r.stderr.strip()[:120]}); try plain text")
    return target

"""'Speak this text': espeak-ng turns the script text into a WAV in the data folder (offline)."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path


def available() -> bool:
    return shutil.which("espeak-ng") is not None


def speak(text: str, voice: str = "en-us", speed: int = 160) -> Path:
    """Write ``text`` spoken by espeak-ng to ``<data>/scripts/speech-<hash>.wav`` and return it."""
    from studio.core.errors import InputError
    from studio.core.fsutil import atomic_path
    from studio.core.paths import sub_dir

    exe = shutil.which("espeak-ng")
    if exe is None:
        raise InputError("espeak-ng is not installed; install it (sudo apt install espeak-ng) or import a recording")
    text = text.strip()
    if not text:
        raise InputError("the script text is empty; type what the presenter says")
    digest = hashlib.sha1(f"{voice}|{speed}|{text}".encode()).hexdigest()[:12]
    target = sub_dir("scripts") / f"speech-{digest}.wav"
    if target.exists():
        return target
    with atomic_path(target) as tmp:
        r = subprocess.run([exe, "-v", voice, "-s", str(speed), "-w", str(tmp), "--stdin"],
                           input=text, capture_output=True, text=True, timeout=300)
        if r.returncode != 0 or tmp.stat().st_size == 0:
            raise InputError(f"espeak-ng could not speak the text ({r.stderr.strip()[:120]}); try plain text")
    return target

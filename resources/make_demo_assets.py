"""Regenerate the demo assets in resources/demo/ (run once by a developer; the outputs are committed).

- astronaut.png: scikit-image's ``data.astronaut()`` (NASA photo of Eileen Collins, public domain).
- voiceover.flac: espeak-ng (en-us) reading the news paragraph in voiceover.txt, with three
  clear pauses inserted between its parts, 16 kHz mono FLAC.

Usage: python resources/make_demo_assets.py   (needs scikit-image, soundfile and Debian espeak-ng)
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf

HERE = Path(__file__).resolve().parent / "demo"
PARTS = [
    "Good evening. Here is the news from the Studio newsroom.",
    "Engineers at the harbour finished the new tidal barrier on Monday, two months ahead of plan. "
    "The city says the barrier will protect forty thousand homes from winter storms.",
    "In sport, the national rowing team won silver at the championships in Lisbon.",
    "And finally, tomorrow will be dry and bright, with light winds from the west. That is all for tonight.",
]
PAUSES_S = [1.2, 0.9, 1.0]  # three clear pauses between the four parts
RATE = 16_000


def speak(text: str) -> np.ndarray:
    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "part.wav"
        subprocess.run(["espeak-ng", "-v", "en-us", "-s", "160", "-w", str(wav), text], check=True)
        data, rate = sf.read(wav, dtype="float32")
    import soxr

    data = soxr.resample(data, rate, RATE)
    # trim espeak's own leading/trailing silence so the inserted pauses are exact
    idx = np.flatnonzero(np.abs(data) > 0.01)
    return data[max(0, idx[0] - 160) : idx[-1] + 160]


def main() -> None:
    HERE.mkdir(exist_ok=True)
    import PIL.Image
    from skimage import data

    PIL.Image.fromarray(data.astronaut()).save(HERE / "astronaut.png", optimize=True)
    pieces = [np.zeros(int(0.4 * RATE), np.float32)]
    for i, text in enumerate(PARTS):
        pieces.append(speak(text) * 0.8)
        if i < len(PAUSES_S):
            pieces.append(np.zeros(int(PAUSES_S[i] * RATE), np.float32))
    pieces.append(np.zeros(int(0.5 * RATE), np.float32))
    audio = np.concatenate(pieces)
    sf.write(HERE / "voiceover.flac", audio, RATE, subtype="PCM_16")
    (HERE / "voiceover.txt").write_text("\n\n".join(PARTS) + "\n")
    print(f"voiceover: {len(audio) / RATE:.2f} s")


if __name__ == "__main__":
    main()

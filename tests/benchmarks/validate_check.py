"""``studio check`` on renders whose answer is known: the figures of docs/check.md.

    .venv/bin/python tests/benchmarks/validate_check.py [--seconds 28] [--out DIR]

The demo avatar (the astronaut photo) speaks the demo voice-over (espeak-ng, 28 s) with the classic
engine on the CPU (``--engine musetalk`` on a GPU machine with its weights). Then ``studio check`` measures, each with the avatar as the reference and
without it (the video's own rest frame):

* the render with its own voice-over (known offset 0);
* the same voice shifted by -8, -4, +4, +8 frames (a voice delayed by 4 frames makes the video
  4 frames early: the known offset is -4);
* three other scripts spoken by the same voice (espeak-ng, same settings): no sync to find;
* edited copies (tests/check_cases.py): a mouth talking through the silences, a blurred mouth,
  a skin-tone seam, a lower face slid 4 px down.

Frames are measured once per video; the voices are compared with the same measurements.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

OTHER_SCRIPTS = (
    (
        "The weather office expects heavy rain across the northern valleys tonight, with strong gusts near "
        "the coast. Farmers are advised to bring their animals indoors before midnight. Schools in the hills "
        "will open late tomorrow morning, and the ferry to the islands will not sail before noon."
    ),
    (
        "A small museum in the old town has opened an exhibition of maps, some of them five hundred years old. "
        "Visitors can see how sailors once imagined the shape of the world, and how much they got right. "
        "The exhibition is free on Sundays and runs until the end of the summer."
    ),
    (
        "Scientists at the university have grown a new kind of wheat that needs half the water of the old "
        "one. Trials on three farms gave the same harvest in a dry year. The seeds could reach the market "
        "within five years, once the safety tests are done."
    ),
)


def espeak(text: str, path: Path) -> Path:
    import soundfile as sf
    import soxr

    raw = path.with_suffix(".raw.wav")
    subprocess.run(["espeak-ng", "-v", "en-us", "-s", "160", "-w", str(raw), text], check=True)
    x, rate = sf.read(raw, dtype="float32")
    sf.write(path, soxr.resample(x, rate, 16_000), 16_000, subtype="PCM_16")
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--seconds",
        type=float,
        default=28.3,
        help="length of the voice-over used (default: all)",
    )
    ap.add_argument("--out", default=None, help="folder for the renders (default: a temporary one)")
    ap.add_argument(
        "--engine", default="classic", help="the render's engine (musetalk: on a GPU machine with its weights)"
    )
    ap.add_argument("--device", default=None, help="torch device (default: cpu for classic, else auto)")
    args = ap.parse_args()
    work = Path(args.out or tempfile.mkdtemp(prefix="validate_check_"))
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("STUDIO_HOME", str(work / "home"))

    import check_cases as cc

    from studio.core.avatars import library as avatar_mod
    from studio.core.media.audio import load
    from studio.core.quality import check_video, measure_video, speech_of
    from studio.core.quality.video import probe_video
    from studio.core.render.renderer import Renderer
    from studio.core.settings import RenderSettings

    demo = ROOT / "resources" / "demo"
    voice = load(demo / "voiceover.flac").samples[: int(args.seconds * 16_000)]
    wav = cc.write_wav(work / "voice.wav", voice)
    astro = avatar_mod.prepare("astro", demo / "astronaut.png", force=True)
    t0 = time.monotonic()
    render = work / "render.mp4"
    device = args.device or ("cpu" if args.engine == "classic" else None)
    for _ in Renderer(astro, wav, RenderSettings(engine=args.engine, device=device)).run(render):
        pass
    print(f"rendered {render} in {time.monotonic() - t0:.1f} s", file=sys.stderr)

    voices: list[tuple[str, Path]] = [("own voice (offset 0)", wav)]
    for s in (-8, -4, 4, 8):
        voices.append(
            (
                f"voice delayed {s:+d} (offset {-s:+d})",
                cc.write_wav(work / f"shift{s}.wav", cc.shifted_voice(voice, s)),
            )
        )
    for k, text in enumerate(OTHER_SCRIPTS):
        voices.append((f"another script #{k + 1}", espeak(text, work / f"other{k}.wav")))
    videos = [("render", render)]
    for kind in cc.EDITS:
        videos.append(
            (
                f"edit: {kind}",
                cc.edit_video(render, work / f"{kind}.mp4", wav, astro, kind),
            )
        )

    rows = []
    for vname, video in videos:
        for mode, av in (("avatar", astro), ("own frame", None)):
            _, silent = speech_of(voice, probe_video(video).frames or 0, 25.0)
            m = measure_video(video, silent, av)
            for aname, audio in voices if vname == "render" else voices[:1]:
                r = check_video(video, audio, av, measurements=m)
                rows.append((vname, mode, aname, r))
    print("| video | reference | voice | offset | confidence | silence_motion | sharpness | seam | drift | verdict |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for vname, mode, aname, r in rows:
        print(
            f"| {vname} | {mode} | {aname} | {r.offset_frames:+d} | {r.confidence:.2f} | {r.silence_motion:.2f} | "
            f"{r.sharpness:.2f} | {r.seam:.1f} | {100 * r.drift:.1f} % | {r.verdict} |"
        )
    print()
    for vname, mode, aname, r in rows:
        if r.verdict != "ok":
            print(f"- {vname}, {mode}, {aname}: {r.verdict}: {r.reason}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

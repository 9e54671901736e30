"""Make ``resources/classic-mouths.png``: mouth crops of the classic engine before and after issue 17.

    .venv/bin/python resources/make_classic_strip.py [-o resources/classic-mouths.png]

Faces: the demo photo (public domain, teeth showing) and the same photo with its lips closed by
the engine itself (ours). Speech: espeak-ng saying a sentence whose phoneme times it reports
(``tests/espeak_speech.py``). Each column is the rendered frame at one phoneme: /a/ (father),
/i/ (cheese), /u/ (moon), /m/ (mama), /f/ (five), /s/ (see). "Before" is the engine as it was
(``tests/benchmarks/classic_v1.py``), "after" the current one; both through the real renderer.
Needs espeak-ng (Debian) and the face tracker (mediapipe).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
TEXT = "Father saw a large car. Keep the cheese. Blue moon, two shoes. Mama made pumpkin pie. Five fine fish. See?"
PICK = (
    ("A:", "a as in father"),
    ("i:", "i as in cheese"),
    ("u:", "u as in moon"),
    ("m", "m (lips shut)"),
    ("f", "f (lip to teeth)"),
    ("s", "s"),
)
TILE_W, TILE_H = 168, 142


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-o", "--output", default=str(ROOT / "resources" / "classic-mouths.png"))
    args = ap.parse_args()
    sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "benchmarks"), str(ROOT)]
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["STUDIO_HOME"] = tmp
        import classic_v1
        import cv2
        import espeak_speech as es
        import PIL.Image
        import torch

        from studio.core import avatar as avatar_mod
        from studio.core.composite import Compositor
        from studio.core.engines.classic import ClassicEngine, rig_geometry, warp_mouth
        from studio.core.render import Renderer, RenderSettings

        samples, phonemes = es.speak(TEXT)
        wav = es.write_wav(Path(tmp) / "speech.wav", samples)
        from studio.core.engines.classic_visemes import edge_weights

        inside = edge_weights(samples, int(np.ceil(len(samples) / 640))) == 1  # not at a phrase's edge
        frames = {}
        for p in phonemes:
            a, b = es.closure_span(p) if p.name in es.BILABIAL else (p.start, p.end)
            t = int((a + b) / 2 * 25)
            if p.name not in frames and t < len(inside) and inside[t]:
                frames[p.name] = t
        astro = avatar_mod.prepare("astro", ROOT / "resources" / "demo" / "astronaut.png")
        rig = rig_geometry(np.asarray(astro.crop_landmarks), astro.crops)
        face = warp_mouth(
            torch.from_numpy(np.array(astro.crops[:1])), *rig.rows([0]), np.array([[0, 0, 1, 0, 0]], np.float32), "cpu"
        )
        shut = Compositor(astro.frames, astro.boxes, astro.masks).paste(face, [0], [1.0])[0].numpy()
        PIL.Image.fromarray(shut).save(Path(tmp) / "closed.png")
        closed = avatar_mod.prepare("closed", Path(tmp) / "closed.png")
        rows, labels = [], []
        for title, av in (("closed-mouth face", closed), ("demo photo", astro)):
            lm = np.asarray(av.landmarks[0])
            mx, my = lm[[61, 291], 0].mean(), lm[[13, 14], 1].mean()
            half = abs(lm[291, 0] - lm[61, 0]) * 0.8
            engines = (("before", classic_v1.ClassicEngine(device="cpu")), ("after", ClassicEngine(device="cpu")))
            for version, engine in engines:
                r = Renderer(av, wav, RenderSettings(engine="classic", device="cpu"), engine=engine)
                tiles = []
                for name, _ in PICK:
                    f = r.frame(frames[name])
                    tile = f[int(my - half * 0.75) : int(my + half * 0.95), int(mx - half) : int(mx + half)]
                    tiles.append(cv2.resize(tile, (TILE_W, TILE_H), interpolation=cv2.INTER_AREA))
                rows.append(np.concatenate(tiles, 1))
                labels.append(f"{title}, {version}")
        head = np.full((28, rows[0].shape[1], 3), 255, np.uint8)
        for k, (_, text) in enumerate(PICK):
            cv2.putText(head, text, (6 + TILE_W * k, 19), cv2.FONT_HERSHEY_SIMPLEX, 0.42, (30, 30, 30), 1, cv2.LINE_AA)
        out = [head]
        for row, text in zip(rows, labels):
            band = np.full((22, row.shape[1], 3), 255, np.uint8)
            cv2.putText(band, text, (8, 16), cv2.FONT_HERSHEY_SIMPLEX, 0.48, (30, 30, 30), 1, cv2.LINE_AA)
            out += [band, row]
        # 256 colours (dithered) keep the picture under 300 KB
        img = PIL.Image.fromarray(np.concatenate(out, 0)).quantize(256, dither=PIL.Image.Dither.FLOYDSTEINBERG)
        tmp_out = Path(args.output).with_suffix(".tmp.png")
        img.save(tmp_out, optimize=True)
        tmp_out.replace(args.output)
        print(f"{args.output}: {img.size[0]}x{img.size[1]}, {Path(args.output).stat().st_size // 1024} KB")


if __name__ == "__main__":
    main()

"""``studio features AUDIO -o OUT.npy``: MuseTalk's whisper tokens, to check them in isolation."""

from __future__ import annotations


def register(sub) -> None:
    from studio.cli._common import runs

    p = sub.add_parser("features", help="write MuseTalk's per-frame audio tokens [T,50,384] to a .npy file")
    p.add_argument("audio", help="WAV, FLAC, OGG or MP3 file")
    p.add_argument("-o", "--output", required=True, help="the .npy file to write (float32 [T,50,384], PE included)")
    p.add_argument("--whisper", metavar="DIR", help="a Hugging Face whisper-tiny folder (default: the imported one)")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    runs(p, run)


def run(args) -> int:
    from pathlib import Path

    import numpy as np

    from studio.cli._common import emit_json
    from studio.core.engines import weights
    from studio.core.engines.whisper_features import WhisperFeatures
    from studio.core.errors import InputError, ModelError
    from studio.core.media.audio import load
    from studio.core.store.fsutil import atomic_path

    out = Path(args.output)
    if out.suffix != ".npy":
        raise InputError(f"{out}: the output must be a .npy file")
    if not out.parent.is_dir():
        raise InputError(f"{out.parent}: no such folder; create it first")
    folder = Path(args.whisper) if args.whisper else weights.resolve().whisper
    if folder is None:
        raise ModelError("no whisper model imported; pass --whisper DIR or run studio models import DIR")
    if not folder.is_dir():
        raise ModelError(f"{folder}: no such folder; give the Hugging Face whisper-tiny folder")
    weights.check_component("whisper", folder)
    wave = load(args.audio)
    feats = WhisperFeatures(folder, device=args.device)(wave)
    arr = feats.array()
    with atomic_path(out) as tmp, open(tmp, "wb") as fh:
        np.save(fh, arr)
    info = {
        "output": str(out),
        "shape": list(arr.shape),
        "frames": wave.frames,
        "duration_s": wave.duration_s,
        "dtype": str(arr.dtype),
    }
    if args.json:
        emit_json(info)
    else:
        print(f"wrote {out}: float32 {list(arr.shape)} ({wave.frames} frames, {wave.duration_s:.3f} s)")
    return 0

"""whisper features: transformers' extractor + WhisperEncoder (the old path) against our whisper_net.

    .venv/bin/python tests/benchmarks/bench_whisper.py [--seconds 27] [--repeat 5] [--children 3] [--device cpu|cuda|all]

A random-weight whisper folder of the real whisper-tiny sizes (``random_models.write_whisper``) and
a speech-like clip. Prints, in this one process, the best-of-``--repeat`` time of the log-mel and of
the encoder for each path (old: numpy/torch extractor on the CPU, encoder on the device; new: both
on the device), then, each in a fresh subprocess after ``import torch``, the time to import each
path's modules and to build a ready ``WhisperFeatures`` (old: the extractor and HF encoder loaded
from the folder). Not collected by pytest.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from studio.core.constants import SAMPLE_RATE  # noqa: E402

OLD_IMPORT = (
    "from transformers import WhisperConfig, WhisperFeatureExtractor\n"
    "from transformers.models.whisper.modeling_whisper import WhisperEncoder\n"
)
NEW_IMPORT = (
    "from studio.core.engines.whisper_features import WhisperFeatures\n"
    "from studio.core.engines.whisper_net import WhisperEncoderNet, log_mel\n"
)
OLD_BUILD = OLD_IMPORT + (
    "import json, torch\n"
    "from studio.core.engines import weights\n"
    "ext = WhisperFeatureExtractor.from_pretrained(FOLDER, local_files_only=True)\n"
    "with torch.device('meta'):\n"
    "    enc = WhisperEncoder(WhisperConfig.from_dict(json.load(open(FOLDER + '/config.json'))))\n"
    "state = weights.normalize_keys('whisper', weights.read_state_dict(FOLDER + '/pytorch_model.bin'))\n"
    "enc.load_state_dict(state, strict=True, assign=True)\n"
    "enc = enc.eval().to(DEVICE)\n"
)
NEW_BUILD = NEW_IMPORT + "feats = WhisperFeatures(FOLDER, device=DEVICE)\n"


def child_time(body: str, folder: str, device: str) -> float:
    """Seconds ``body`` takes in a fresh interpreter that has already imported torch."""
    code = (
        "import sys, time\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "import torch\n"
        f"FOLDER, DEVICE = {folder!r}, {device!r}\n"
        "t0 = time.perf_counter()\n" + body + "sys.stdout.write(repr(time.perf_counter() - t0) + '\\n')\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    return float(res.stdout.strip().splitlines()[-1])


def best_pair(old, new, repeat: int, sync) -> tuple[float, float]:
    """Best-of-``repeat`` seconds of ``old`` and ``new``, run alternately (the CPU is shared)."""
    times = ([], [])
    for fn in (old, new):  # warm-up (allocator, kernels, the mel filters' cache)
        fn()
        sync()
    for _ in range(repeat):
        for fn, out in zip((old, new), times):
            t0 = time.perf_counter()
            fn()
            sync()
            out.append(time.perf_counter() - t0)
    return min(times[0]), min(times[1])


def bench_device(folder: Path, samples: np.ndarray, device: str, repeat: int) -> None:
    import torch
    from transformers import WhisperConfig, WhisperFeatureExtractor
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    from studio.core.engines import weights
    from studio.core.engines.whisper_features import WhisperFeatures

    dev = torch.device(device)
    sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else (lambda: None)
    new = WhisperFeatures(folder, device=dev)
    ext = WhisperFeatureExtractor.from_pretrained(str(folder), local_files_only=True)
    old = WhisperEncoder(WhisperConfig.from_dict(json.loads((folder / "config.json").read_text())))
    old.load_state_dict(weights.normalize_keys("whisper", weights.read_state_dict(folder / "pytorch_model.bin")))
    old = old.eval().to(dev)
    pieces = [samples]

    def old_mel():
        return ext(pieces, sampling_rate=SAMPLE_RATE, return_tensors="pt").input_features.to(dev)

    mel_old = old_mel()
    mel_new = new.log_mel(pieces)
    diff = (mel_old - mel_new).abs().max().item()
    with torch.inference_mode():
        t_mel_old, t_mel_new = best_pair(old_mel, lambda: new.log_mel(pieces), repeat, sync)
        t_enc_old, t_enc_new = best_pair(
            lambda: old(mel_old, output_hidden_states=True), lambda: new.encoder(mel_new), repeat, sync
        )
        t_all_old, t_all_new = best_pair(
            lambda: old(old_mel(), output_hidden_states=True), lambda: new.hidden_states(samples), repeat, sync
        )
    print(f"[{device}] {len(samples) / SAMPLE_RATE:.0f} s clip, best of {repeat} (mel max |diff| {diff:.2e}):")
    print(
        f"  log-mel     old (HF extractor, CPU) {t_mel_old * 1e3:8.1f} ms   new (torch, {device}) {t_mel_new * 1e3:8.1f} ms"
    )
    print(
        f"  encoder     old (HF WhisperEncoder) {t_enc_old * 1e3:8.1f} ms   new (WhisperEncoderNet) {t_enc_new * 1e3:8.1f} ms"
    )
    print(
        f"  mel+encoder old                     {t_all_old * 1e3:8.1f} ms   new (hidden_states)     {t_all_new * 1e3:8.1f} ms"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=27.0)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--children", type=int, default=3, help="fresh processes per import/load figure")
    ap.add_argument("--device", default="all", help="cpu, cuda, or all (cpu, plus cuda when present)")
    args = ap.parse_args()

    import torch
    from conftest import speechlike

    from studio.core.engines.random_models import write_whisper

    devices = ["cpu", "cuda"] if args.device == "all" else [args.device]
    devices = [d for d in devices if d != "cuda" or torch.cuda.is_available()]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; devices: {', '.join(devices)}")
    samples = speechlike(args.seconds, SAMPLE_RATE)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "whisper"
        write_whisper(folder)  # the real whisper-tiny sizes, random weights
        for device in devices:
            bench_device(folder, samples, device, args.repeat)
        for device in devices:
            runs = {body: [] for body in (OLD_IMPORT, NEW_IMPORT, OLD_BUILD, NEW_BUILD)}
            for _ in range(args.children):  # alternated, best of each
                for body, out in runs.items():
                    out.append(child_time(body, str(folder), device))
            imp_old, imp_new, build_old, build_new = (min(v) for v in runs.values())
            print(f"[{device}] fresh process, after import torch (best of {args.children}):")
            print(f"  import      old (transformers whisper) {imp_old:6.2f} s   new (whisper_net) {imp_new:6.2f} s")
            print(
                f"  import+load old (extractor + encoder)  {build_old:6.2f} s   new (WhisperFeatures) {build_new:6.2f} s"
            )


if __name__ == "__main__":
    main()

"""Benchmark: studio's own UNet / SD-VAE / TAESD (studio/core/engines/nets.py) against diffusers'.

    .venv/bin/python tests/benchmarks/bench_nets.py [--runs 5] [--imports 3] [--threads 1] [--no-real]

Prints one table:

* import: a fresh interpreter imports torch, then (timed) either diffusers' three classes (the
  attribute access makes diffusers import its model modules) or ``studio.core.engines.nets``;
  the median of ``--imports`` processes, plus which heavy modules that import left loaded;
* build on meta: constructing each real architecture under ``torch.device("meta")`` (what
  ``models.load_module`` does before assigning the weights);
* forward: batch 1 on the CPU with the same weights in both (diffusers' random init, loaded
  strictly into ours): the tiny test configs and the real architectures (UNet on 32x32 latents
  with 50 audio tokens, as MuseTalk runs; the decoders on 32x32 latents -> 256x256 faces), the
  median of ``--runs`` after one warm-up (the two timed alternately), and the largest absolute
  difference of the outputs.

Absolute times depend on the machine; the figures in the report came from the 2-core CPU box.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

IMPORTS = {
    "diffusers": "from diffusers import UNet2DConditionModel, AutoencoderKL, AutoencoderTiny",
    "nets": "from studio.core.engines import nets",
}
CHILD = """
import json, sys, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
{stmt}
t2 = time.perf_counter()
heavy = sorted(m for m in ("diffusers", "transformers", "torch._dynamo") if m in sys.modules)
sys.stdout.write(json.dumps({{"torch": t1 - t0, "import": t2 - t1, "heavy": heavy}}) + "\\n")
"""


def import_times(n: int) -> dict:
    out = {}
    for name, stmt in IMPORTS.items():
        runs = []
        for _ in range(n):
            r = subprocess.run(
                [sys.executable, "-c", CHILD.format(stmt=stmt)], capture_output=True, text=True, cwd=ROOT, check=True
            )
            runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
        out[name] = {
            "torch_s": statistics.median(x["torch"] for x in runs),
            "import_s": statistics.median(x["import"] for x in runs),
            "heavy": runs[-1]["heavy"],
        }
    return out


def timed_pair(fa, fb, runs: int) -> tuple[float, float, object, object]:
    """Medians of ``fa`` and ``fb`` timed alternately (first one, then the other), so a busy
    shared machine slows both alike."""
    a, b = fa(), fb()  # warm-up
    ta, tb = [], []
    for i in range(runs):
        for fn, times in ((fa, ta), (fb, tb))[:: 1 if i % 2 == 0 else -1]:
            t0 = time.perf_counter()
            out = fn()
            times.append(time.perf_counter() - t0)
            a, b = (out, b) if fn is fa else (a, out)
    return statistics.median(ta), statistics.median(tb), a, b


def pair(kind: str, config: dict):
    import torch
    from diffusers import AutoencoderKL, AutoencoderTiny, UNet2DConditionModel

    from studio.core.engines import nets

    cls = {"unet": UNet2DConditionModel, "vae": AutoencoderKL, "taesd": AutoencoderTiny}[kind]
    torch.manual_seed(0)
    ref = cls.from_config(config).eval()
    with torch.device("meta"):
        mine = nets.build(kind, config)
    mine.load_state_dict(ref.state_dict(), strict=True, assign=True)
    return ref, mine.eval()


def meta_build(kind: str, config: dict, runs: int) -> dict:
    import torch
    from diffusers import AutoencoderKL, AutoencoderTiny, UNet2DConditionModel

    from studio.core.engines import nets

    cls = {"unet": UNet2DConditionModel, "vae": AutoencoderKL, "taesd": AutoencoderTiny}[kind]

    def theirs():
        with torch.device("meta"):
            return cls.from_config(config)

    def ours():
        with torch.device("meta"):
            return nets.build(kind, config)

    t_theirs, t_ours, _, _ = timed_pair(theirs, ours, runs)
    return {"diffusers": t_theirs, "nets": t_ours}


def forward(kind: str, config: dict, runs: int, width: int) -> dict:
    import torch

    ref, mine = pair(kind, config)
    g = torch.Generator().manual_seed(1)
    if kind == "unet":
        lat = torch.randn(1, 8, 32, 32, generator=g)
        audio = torch.randn(1, 50, width, generator=g)
        t = torch.zeros(1, dtype=torch.long)

        def call(m):
            return lambda: m(lat, t, encoder_hidden_states=audio, return_dict=False)[0]
    else:
        z = torch.randn(1, 4, 32, 32, generator=g)

        def call(m):
            return lambda: m.decode(z, return_dict=False)[0]

    with torch.inference_mode():
        t_ref, t_mine, a, b = timed_pair(call(ref), call(mine), runs)
    return {"diffusers": t_ref, "nets": t_mine, "max_abs_diff": float((a - b).abs().max())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--imports", type=int, default=3)
    # 1: what a render takes on this 2-core box (runtime_torch.limit_cpu_threads: a quarter of the
    # cores); 2 threads beside other busy processes spin in OpenMP and time the contention instead
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-real", action="store_true", help="skip the real architectures' forwards")
    args = ap.parse_args()

    imp = import_times(args.imports)  # before this process imports anything heavy

    import torch

    from studio.core.engines import random_models as rm

    torch.set_num_threads(args.threads)
    rows = [("import (after torch)", imp["diffusers"]["import_s"], imp["nets"]["import_s"], "")]
    real = {"unet": rm.MUSETALK_UNET_CONFIG, "vae": rm.SD_VAE_CONFIG, "taesd": rm.TAESD_CONFIG}
    tiny = {"unet": rm.UNET_TINY, "vae": rm.VAE_TINY, "taesd": rm.TAESD_TINY}
    for kind, cfg in real.items():
        m = meta_build(kind, cfg, args.runs)
        rows.append((f"build {kind} on meta", m["diffusers"], m["nets"], ""))
    cases = [(f"{k} tiny", k, c, rm.WIDTH) for k, c in tiny.items()]
    if not args.no_real:
        cases += [(f"{k} real", k, c, rm.MUSETALK_UNET_CONFIG["cross_attention_dim"]) for k, c in real.items()]
    for label, kind, cfg, width in cases:
        f = forward(kind, cfg, args.runs, width)
        rows.append((f"forward {label} b1", f["diffusers"], f["nets"], f"{f['max_abs_diff']:.1e}"))

    print(
        f"torch {torch.__version__}, {args.threads} threads, median of {args.runs} runs "
        f"(imports: {args.imports} processes; torch itself {imp['nets']['torch_s']:.2f} s)"
    )
    print(f"after the diffusers import: {imp['diffusers']['heavy']}; after nets: {imp['nets']['heavy']}")
    print(f"{'what':<28}{'diffusers ms':>14}{'nets ms':>12}{'ratio':>8}{'max |diff|':>12}")
    for what, a, b, diff in rows:
        print(f"{what:<28}{a * 1e3:>14.1f}{b * 1e3:>12.1f}{a / b if b else float('inf'):>7.1f}x{diff:>12}")


if __name__ == "__main__":
    main()

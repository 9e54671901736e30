#!/bin/bash
# Device calls for issue 16, round three. Run from the repository root with the Python 3.12 wheels
# in .whl/ (see shared/design/environment.md).
#   MODE=a: import times, GPU tests of the changed files, a 672 + 15,000-frame TAESD bench with the
#           render thread's stacks sampled (STUDIO_STACKS), then the engine variants (eager / graphs /
#           cuDNN benchmark / torch.compile).
#   MODE=b: the whole `studio bench` (every issue-16 row, cold processes, the official loop);
#   MODE=bc: the same, then its MuseTalk rows again with --compile.
#   MODE=final: torch's import profile, this round's GPU tests, bench_whisper, the whole bench.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
start=$(date +%s)
{ pip install --no-deps -q --target /tmp/pyd .whl/*.whl || pip install --no-deps -q --break-system-packages .whl/*.whl; } > "$OUT/env.txt" 2>&1
export PYTHONPATH=.:/tmp/pyd STUDIO_HOME=/tmp/shome
{ python3 -c "import av, soundfile, soxr, platformdirs, torch; print('av', av.__version__, 'torch', torch.__version__)";
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader; nproc; df -h /dev/shm /tmp | tail -2; } >> "$OUT/env.txt" 2>&1
tail -4 "$OUT/env.txt"
el() { echo $(( $(date +%s) - start )); }
if [ "${MODE:-a}" = a ]; then
  for i in 1 2; do python3 -c "
import time; t=time.time(); import torch; a=time.time(); torch.zeros(1, device='cuda'); b=time.time()
import studio.core.render.renderer, studio.core.engines.musetalk, studio.core.engines.nets, studio.core.engines.whisper_net; c=time.time()
import diffusers.models.unets.unet_2d_condition; d=time.time(); import transformers.models.whisper.modeling_whisper; e=time.time()
print(f'import torch {a-t:.2f}s, CUDA init {b-a:.2f}s, studio engine modules {c-b:.2f}s, (diffusers UNet {d-c:.2f}s, transformers whisper {e-d:.2f}s)')"; done | tee "$OUT/imports.txt"
  timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_nets.py tests/test_whisper_net.py \
    tests/test_musetalk.py tests/test_render.py tests/test_encode.py tests/test_streaming_mux.py tests/test_fast_load.py \
    > "$OUT/tests.txt" 2>&1
  echo "tests rc=$? after $(el) s"; tail -3 "$OUT/tests.txt"
  STUDIO_STACKS=1 timeout 200 python3 -m studio bench --workdir /tmp/bw --decoders taesd --no-classic --no-official \
    --long 15000 --json "$OUT/bench_a.json" > "$OUT/bench_a.txt" 2> "$OUT/bench_a.log"
  echo "bench rc=$? after $(el) s"; cat "$OUT/bench_a.txt" | cut -c1-260
  timeout $(( 560 - $(el) )) python3 tests/benchmarks/bench_engine_variants.py --models /tmp/bw/store --compile \
    --json "$OUT/variants.json" > "$OUT/variants.txt" 2> "$OUT/variants.log"
  echo "variants rc=$? after $(el) s"; cat "$OUT/variants.txt"; tail -3 "$OUT/variants.log"
elif [ "${MODE}" = final ]; then  # what torch's import spends, GPU tests of this round, the whole bench
  python3 -X importtime -c "import torch" 2> "$OUT/torch_importtime.txt"; sort -t'|' -k2 -n "$OUT/torch_importtime.txt" | tail -12 | cut -c1-150
  timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_nets.py tests/test_whisper_net.py \
    tests/test_musetalk.py tests/test_fast_load.py tests/test_render.py tests/test_hints.py > "$OUT/tests.txt" 2>&1
  echo "tests rc=$? after $(el) s"; tail -3 "$OUT/tests.txt"
  timeout 60 python3 tests/benchmarks/bench_whisper.py > "$OUT/whisper.txt" 2>&1; tail -8 "$OUT/whisper.txt"
  STUDIO_STACKS= timeout $(( 560 - $(el) )) python3 -m studio bench --json "$OUT/bench.json" \
    --long 15000 --photo --cold --official-frames 100 > "$OUT/bench.txt" 2> "$OUT/bench.log"
  echo "bench rc=$? after $(el) s"; cat "$OUT/bench.txt"; grep -i "warn" "$OUT/bench.log" | tail -3
else
  timeout 90 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_musetalk.py > "$OUT/tests.txt" 2>&1
  echo "tests rc=$? after $(el) s"; tail -2 "$OUT/tests.txt"
  mkdir -p /tmp/tr
  STUDIO_TRACE_DIR=/tmp/tr timeout $(( 570 - $(el) )) python3 -m studio bench --json "$OUT/bench.json" \
    --long 15000 --photo --cold --official-frames 100 > "$OUT/bench.txt" 2> "$OUT/bench.log"
  echo "bench rc=$? after $(el) s"
  tar czf "$OUT/traces.tgz" -C /tmp/tr . 2>/dev/null
  cat "$OUT/bench.txt"; tail -3 "$OUT/bench.log"
  if [ "${MODE}" = bc ]; then  # the same MuseTalk rows with torch.compile (default mode) under the graphs
    timeout $(( 590 - $(el) )) python3 -m studio bench --json "$OUT/bench_compiled.json" --compile --no-classic \
      --long 15000 --photo --official-frames 100 > "$OUT/bench_compiled.txt" 2> "$OUT/bench_compiled.log"
    echo "compiled bench rc=$? after $(el) s"; cat "$OUT/bench_compiled.txt"; tail -3 "$OUT/bench_compiled.log"
  fi
fi

#!/bin/bash
# Issue 48 items 6 and 7 on one GPU (~3 minutes): tests/benchmarks/bench_cold.py (cold `studio render`
# rows with their timelines, preload on and off, the heaviest imports; an evicted engine's memory),
# and `python -X importtime -c 'import torch'`. From /work/main with .whl/ and .gpu-gpu carried:
#   OUT=/tmp/out bash .gpu-gpu/tests/benchmarks/gpu_cold.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  > "$OUT/env.txt" 2>&1 || { tail -5 "$OUT/env.txt"; exit 1; }
export PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nproc
  PYTHONPATH=/tmp/site python3 -c 'import torch, av; print(torch.__version__, torch.version.cuda, av.__version__)'; } >> "$OUT/env.txt" 2>&1
tail -3 "$OUT/env.txt"
cd .gpu-gpu || exit 1
for i in 1 2; do PYTHONPATH=/tmp/site python3 -X importtime -c 'import torch' 2> "$OUT/importtime-torch-$i.txt"; done
PYTHONPATH=.:/tmp/site python3 -c "
import sys; from studio.service.bench import heaviest_imports
for r in heaviest_imports(open(sys.argv[1]).read(), 12): print('  import torch: %-40s %6.3f s (own %.3f)' % r)" "$OUT/importtime-torch-2.txt"
PYTHONPATH=.:/tmp/site timeout ${LIMIT:-420} python3 tests/benchmarks/bench_cold.py --device cuda --workdir /tmp/bc \
  --json "$OUT/cold.json" > "$OUT/cold.txt" 2>&1
echo "rc=$?"; grep -v "^\s*$" "$OUT/cold.txt" | tail -40

#!/bin/bash
# Issue 48's table on one GPU (~4-5 minutes): `studio bench --user --table` with the server's stage trace
# (tests/benchmarks/trace_service.py reports it: where each burst's time went), and where a cold
# `import torch` spends its time (python -X importtime). From /work/main with .whl/ (the Python 3.12 wheels,
# shared/design/environment.md) and a copy of the checkout in .gpu-gpu carried:
#   OUT=/tmp/out bash .gpu-gpu/tests/benchmarks/gpu_table.sh          (MODE=cold: tests/benchmarks/bench_cold.py only)
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  > "$OUT/env.txt" 2>&1 || { tail -5 "$OUT/env.txt"; exit 1; }
export PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nproc
  PYTHONPATH=/tmp/site python3 -c 'import torch, av; print(torch.__version__, torch.version.cuda, av.__version__)'; } >> "$OUT/env.txt" 2>&1
tail -3 "$OUT/env.txt"
cd .gpu-gpu || exit 1
if [ "${MODE:-table}" = cold ]; then  # items 6 and 7 alone (~2.5 minutes): cold commands and memory after an eviction
  PYTHONPATH=.:/tmp/site timeout ${LIMIT:-200} python3 tests/benchmarks/bench_cold.py --device cuda --workdir /tmp/bc \
    --json "$OUT/cold.json" ${COLD_ARGS:-} > "$OUT/cold.txt" 2>&1
  echo "rc=$?"; grep -v "^\s*$" "$OUT/cold.txt" | tail -45; exit 0
fi
PYTHONPATH=/tmp/site python3 -X importtime -c "import torch" 2> "$OUT/importtime-torch.txt"
PYTHONPATH=.:/tmp/site timeout ${LIMIT:-480} python3 -m studio bench --user --table --workdir /tmp/bt \
  --json "$OUT/table.json" --trace-dir /tmp/trace > "$OUT/table.txt" 2> "$OUT/table.log"
echo "rc=$?"
PYTHONPATH=.:/tmp/site python3 tests/benchmarks/trace_service.py "$OUT/table.json" /tmp/trace > "$OUT/trace.txt" 2>&1
PYTHONPATH=.:/tmp/site python3 -c "
import sys; from studio.service.bench import heaviest_imports
for r in heaviest_imports(open(sys.argv[1]).read(), 12): print('  import torch: %-40s %6.3f s (own %.3f)' % r)" "$OUT/importtime-torch.txt"
grep -i -B2 -A8 "Traceback" "$OUT/table.log" | tail -20
grep -v "^\s*$" "$OUT/table.txt" | tail -60

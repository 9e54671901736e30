#!/bin/bash
# Issue 48's table on one GPU, before and after in one device call (~7 minutes of command):
#   tests/benchmarks/bench_service.py on two checkouts of the same main, the one before the scheduler
#   (.gpu-before) and the one with it (.gpu-promises): cold `studio render` (MuseTalk, classic), a fresh
#   server's first requests and the warm 672-frame POST /generate, 8 and 16 clients at once (the fastest
#   and slowest client; after: a 5 s breaking clip posted into each burst, every job's first frame), 14
#   requests varying decoder and precision (GPU memory reserved after each: evictions), and after, the
#   same bursts with STUDIO_PREFETCH_JOBS=0 (the next jobs not prepared ahead).
# From /work/main with .whl/ (the Python 3.12 wheels, shared/design/environment.md, plus opentelemetry-api:
# FastAPI 0.165 imports it, and `studio serve` exits without it), .gpu-before and
# .gpu-promises carried:  OUT=/tmp/out bash .gpu-promises/tests/benchmarks/gpu_promises.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
start=$(date +%s)
el() { echo $(( $(date +%s) - start )); }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  > "$OUT/env.txt" 2>&1 || { tail -5 "$OUT/env.txt"; exit 1; }
export PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nproc
  PYTHONPATH=/tmp/site python3 -c 'import torch, av; print(torch.__version__, torch.version.cuda, av.__version__)'; } >> "$OUT/env.txt" 2>&1
cat "$OUT/env.txt" | tail -3; echo "set up after $(el) s"
for label in before promises; do
  case $label in
    before) limit=${LIMIT_BEFORE:-250}; variants=""; extra=${EXTRA_BEFORE:-} ;;
    promises) limit=${LIMIT_AFTER:-290}; variants=${VARIANTS-noprefetch:STUDIO_PREFETCH_JOBS=0}; extra=${EXTRA_AFTER:-} ;;
  esac
  ( cd ".gpu-$label" && PYTHONPATH=.:/tmp/site timeout "$limit" python3 tests/benchmarks/bench_service.py --device cuda \
      --clients 8,16 --workdir "/tmp/bs-$label" --json "$OUT/$label.json" --variants "$variants" $extra \
      > "$OUT/$label.txt" 2>&1 )
  echo "== $label: rc=$? after $(el) s"
  grep -v "^\s*$" "$OUT/$label.txt" | tail -30
  grep -i "Traceback" -A3 "$OUT/$label.txt" | tail -8
done

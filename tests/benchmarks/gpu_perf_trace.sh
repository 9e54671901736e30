#!/bin/bash
# Issue 38's two misses, traced on one H200 in one device call (~2.5 min of command, ~4 min held):
#   the fresh server's first requests and bursts of 8 and 16 clients on three servers: the default
#   (one job a device), --jobs-per-device 2 (merged batches) and --jobs-per-device 2 --no-batching;
#   every request its own new voice-over; each server's stage trace (STUDIO_STAGE_TRACE: host spans per
#   job and thread, GPU spans from CUDA events); nvidia-smi samples; py-spy of each first burst when
#   PYSPY=1 (two samplers at 100 a second each: leave it off for the figures).
# Run from the repository root with the Python 3.12 wheels in .whl/ (tests/benchmarks/gpu_round5.sh):
#   OUT=/tmp/out bash tests/benchmarks/gpu_perf_trace.sh
# Writes $OUT/service.json, service.txt, report.txt (tests/benchmarks/trace_service.py) and trace.tgz.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
WHL=${WHL:-.whl}
{ pip install --no-deps -q --target /tmp/pyd "$WHL"/*.whl || pip install --no-deps -q --break-system-packages "$WHL"/*.whl; } > "$OUT/env.txt" 2>&1
export PYTHONPATH=.:/tmp/pyd PYTHONUNBUFFERED=1
[ "${PYSPY:-0}" = 1 ] && export PATH=/tmp/pyd/bin:$PATH
{ git log -1 --oneline 2>/dev/null; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc
  python3 -c 'import torch, av; print(torch.__version__, av.__version__)'; } >> "$OUT/env.txt" 2>&1
tail -3 "$OUT/env.txt"
timeout "${LIMIT:-300}" python3 tests/benchmarks/bench_service.py --device cuda --no-cold --no-cache --no-handoff \
  --clients 8,16 --workdir /tmp/bs --trace-dir /tmp/tr --json "$OUT/service.json" \
  --variants "${VARIANTS:-two:--jobs-per-device 2;twonb:--jobs-per-device 2 --no-batching}" > "$OUT/service.txt" 2>&1
echo "rc=$?"; grep -v '^\s*$' "$OUT/service.txt" | tail -16
cp /tmp/bs/service/server.log /tmp/tr/ 2>/dev/null
tar czf "$OUT/trace.tgz" -C /tmp tr
python3 tests/benchmarks/trace_service.py "$OUT/service.json" /tmp/tr > "$OUT/report.txt" 2>&1
grep -v "^  [0-9]" "$OUT/report.txt" | head -c 6000

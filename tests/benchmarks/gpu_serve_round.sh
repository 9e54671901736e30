#!/bin/bash
# One device call for issue 38 (the server as a service): the cross-job batching test on CUDA, then
# tests/benchmarks/bench_service.py (cold `studio render`, a fresh server's time to ready and first
# requests, the engine cache bound, 8/16 clients with batching on/off). Run from the repository
# root with the Python 3.12 wheels in .whl/ (see shared/design/environment.md).
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
start=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > "$OUT/env.txt" 2>&1 || { cat "$OUT/env.txt"; exit 1; }
export PYTHONPATH=.:/tmp/site STUDIO_HOME=/tmp/shome PYTHONUNBUFFERED=1
git log -1 --oneline 2>/dev/null; git rev-parse --abbrev-ref HEAD 2>/dev/null
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nproc
[ -f studio/service/batching.py ] || { echo "NOT THE serve WORKTREE"; ls; exit 3; }
true  # (the CUDA sharing test needs mediapipe for its avatar: not on that image)
timeout $(( ${BUDGET:-570} - ($(date +%s) - start) )) python3 tests/benchmarks/bench_service.py --device cuda ${ARGS} \
  --workdir /tmp/bs --json "$OUT/service.json" 2>&1 | tee "$OUT/service.txt"
echo "bench rc=${PIPESTATUS[0]} after $(( $(date +%s) - start )) s"
cp /tmp/bs/service/server.log "$OUT/server.log" 2>/dev/null
# where a cold in-process `studio render` (classic, 15 s) spends its time: imports and a profile
V=$(ls /tmp/bs/clips/voice_wav48_375_1.wav 2>/dev/null)
if [ -n "$V" ] && [ $(( $(date +%s) - start )) -lt 560 ]; then
  export STUDIO_HOME=/tmp/bs/home STUDIO_LOCAL_SERVER=0
  timeout 30 python3 -X importtime -m studio render --avatar bench-photo --audio "$V" -o /tmp/cold.mp4 --engine classic --device cuda --overwrite 2> "$OUT/importtime.txt" >/dev/null
  sort -t'|' -k2 -n "$OUT/importtime.txt" | tail -12
fi

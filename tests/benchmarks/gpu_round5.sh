#!/bin/bash
# One device call after this round's merges (issues 33-36, 38-40), at most ~9 minutes on one H200:
#   1. the CUDA-marked tests of this round's files (canvas on CUDA, shared-memory rings, batching);
#   2. `studio bench --user` rows on the merged main: the 1080p photo/video rows and, in the same
#      run, the new 1920x1080 and 1080x1920 canvas rows (issue 35's speed target: within 10 %);
#   3. tests/benchmarks/bench_service.py (issue 38's server rows) with what time is left.
# Run from the repository root with the Python 3.12 wheels in .whl/ (shared/design/environment.md).
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
start=$(date +%s)
el() { echo $(( $(date +%s) - start )); }
{ pip install --no-deps -q --target /tmp/pyd .whl/*.whl || pip install --no-deps -q --break-system-packages .whl/*.whl; } > "$OUT/env.txt" 2>&1
export PYTHONPATH=.:/tmp/pyd STUDIO_HOME=/tmp/shome PYTHONUNBUFFERED=1
{ git log -1 --oneline 2>/dev/null; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; df -h /dev/shm | tail -1; } >> "$OUT/env.txt" 2>&1
tail -4 "$OUT/env.txt"; echo "set up after $(el) s"
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_delivery.py tests/test_hostile_media.py \
  tests/test_engine_sharing.py tests/test_composite.py > "$OUT/tests.txt" 2>&1
echo "tests rc=$? after $(el) s"; tail -4 "$OUT/tests.txt"
timeout $(( ${LIMIT1:-330} - $(el) )) python3 -m studio bench --workdir /tmp/bw --decoders taesd --no-classic \
  --no-official --user --presets "" --no-serve --no-cold-cli --no-queue --no-service \
  --json "$OUT/bench.json" > "$OUT/bench.txt" 2> "$OUT/bench.log"
echo "bench rc=$? after $(el) s"; cat "$OUT/bench.txt"; grep "user-" "$OUT/bench.log" | tail -12
grep -i "Traceback\|Error" "$OUT/bench.log" | tail -5
timeout $(( ${LIMIT:-560} - $(el) )) python3 tests/benchmarks/bench_service.py --device cuda --no-cold --clients 8 \
  --workdir /tmp/bs --json "$OUT/service.json" > "$OUT/service.txt" 2>&1
echo "service rc=$? after $(el) s"; tail -30 "$OUT/service.txt"

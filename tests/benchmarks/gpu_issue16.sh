#!/bin/bash
# One device call for issue 16: GPU tests of the changed files, then `studio bench` with every row
# (672 frames TAESD/SD-VAE/classic, photo avatar with and without video hints, 15,000 frames,
# cold processes without and with fp16 fast copies, the official loop on 100 frames for the ratios).
# Run from the repository root with the Python 3.12 wheels in .whl/ (see shared/design/environment.md).
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
start=$(date +%s)
{ pip install --no-deps -q --target /tmp/pyd .whl/*.whl || pip install --no-deps -q --break-system-packages .whl/*.whl; } > "$OUT/env.txt" 2>&1
export PYTHONPATH=.:/tmp/pyd STUDIO_HOME=/tmp/shome
{ python3 -c "import av, soundfile, diffusers, soxr, platformdirs, torch; print('av', av.__version__, 'torch', torch.__version__)";
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; df -h /dev/shm /tmp | tail -2; } >> "$OUT/env.txt" 2>&1
tail -6 "$OUT/env.txt"
timeout 80 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_encode.py tests/test_streaming_mux.py \
  tests/test_fast_load.py tests/test_musetalk.py tests/test_render.py > "$OUT/tests.txt" 2>&1
echo "tests rc=$? after $(( $(date +%s) - start )) s"; tail -4 "$OUT/tests.txt"
mkdir -p /tmp/tr
STUDIO_TRACE_DIR=/tmp/tr timeout $(( 400 - ($(date +%s) - start) )) python3 -m studio bench --json "$OUT/bench.json" \
  --long 15000 --photo --cold --official-frames 100 > "$OUT/bench.txt" 2> "$OUT/bench.log"
echo "bench rc=$? after $(( $(date +%s) - start )) s"
tar czf "$OUT/traces.tgz" -C /tmp/tr . 2>/dev/null
cat "$OUT/bench.txt"; tail -3 "$OUT/bench.log"

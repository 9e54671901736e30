#!/bin/bash
# Issue 28 (delivery formats) on the GPU machine: a `studio bench` row per codec (the classic engine
# on the GPU renders the reference clip, 672 frames of a 1080p video avatar, in each codec; the row is
# the codec's throughput over the CPU cores), the MuseTalk TAESD row for comparison, and the GPU tests
# of the files the formats work touched. Run from the repository root, as the other gpu_*.sh scripts
# (the Python 3.12 wheels in .whl/, see shared/design/environment.md); figures land in $OUT.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
start=$(date +%s)
{ pip install --no-deps -q --target /tmp/pyd .whl/*.whl || pip install --no-deps -q --break-system-packages .whl/*.whl; } > "$OUT/env.txt" 2>&1
export PYTHONPATH=.:/tmp/pyd STUDIO_HOME=/tmp/shome
{ python3 -c "import av, pyloudnorm, scipy; print('av', av.__version__, 'pyloudnorm', pyloudnorm.__version__)";
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; } >> "$OUT/env.txt" 2>&1
tail -3 "$OUT/env.txt"
el() { echo $(( $(date +%s) - start )); }
timeout 300 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_render.py tests/test_encode.py \
  tests/test_streaming_mux.py > "$OUT/tests.txt" 2>&1
echo "gpu tests rc=$? after $(el) s"; tail -3 "$OUT/tests.txt"
timeout 420 python3 -m studio bench --workdir /tmp/bw --decoders taesd --no-official \
  --codecs h264,hevc,prores,prores4444,dnxhr,vp9 --json "$OUT/bench_formats.json" \
  > "$OUT/bench_formats.txt" 2> "$OUT/bench_formats.log"
echo "bench rc=$? after $(el) s"; cut -c1-200 "$OUT/bench_formats.txt"

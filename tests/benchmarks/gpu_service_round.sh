#!/bin/bash
# One device call for the service round (issues 17, 19, 20): the service's tests on a CUDA machine,
# the classic engine's speed on the GPU (old vs new engine, one process), and how much scrubbing
# during a render slows it there. Run from the repository root with the Python 3.12 wheels in .whl/
# (see shared/design/environment.md).
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
start=$(date +%s)
{ pip install --no-deps -q --target /tmp/pyd .whl/*.whl || pip install --no-deps -q --break-system-packages .whl/*.whl; } > "$OUT/env.txt" 2>&1
export PYTHONPATH=.:/tmp/pyd STUDIO_HOME=/tmp/shome PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_jobs.py tests/test_env.py \
  > "$OUT/service_tests.txt" 2>&1  # test_service needs the face tracker (mediapipe), not on that image
echo "service tests rc=$? after $(( $(date +%s) - start )) s"; tail -3 "$OUT/service_tests.txt"
timeout 60 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_render.py tests/test_multigpu.py > "$OUT/gpu_tests.txt" 2>&1
echo "gpu tests rc=$? after $(( $(date +%s) - start )) s"; tail -3 "$OUT/gpu_tests.txt"
timeout 150 python3 tests/benchmarks/bench_classic.py --device cuda --json "$OUT/h200-classic.json" > "$OUT/classic.txt" 2>&1
echo "classic bench rc=$? after $(( $(date +%s) - start )) s"; tail -12 "$OUT/classic.txt"
timeout 120 python3 tests/benchmarks/bench_scrub_during_render.py --device cuda --rate 5 --json "$OUT/h200-scrub.json" > "$OUT/scrub.txt" 2>&1
echo "scrub bench rc=$? after $(( $(date +%s) - start )) s"; tail -4 "$OUT/scrub.txt"

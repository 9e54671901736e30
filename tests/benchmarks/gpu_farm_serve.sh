#!/bin/bash
# One device call for issue 37 (studio serve --farm): studio.bench.farm_serve on the GPU machine's
# 16 CPU cores (1 and 2 `ray start --address` worker nodes of CPU actors, 12 clients x 10 s), then
# the one-GPU farm against a plain `studio serve` (--device cuda --plain). Run from the repository
# root with the Python 3.12 wheels in .whl/ (docs/speed.md) and Ray's: its wheel (79 MB) is larger
# than one call carries (64 MiB), so bring it in two pieces (`split -b 40M ray-*.whl .ray/part.`),
# one a call, each copied to /root/ray-parts by the call that carries it (the machine stays warm
# 30 s between calls); this script joins them into /tmp/ray-*.whl when RAY_WHEEL names that file.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
start=$(date +%s)
mkdir -p /root/ray-parts && cp .ray/part.* /root/ray-parts/ 2>/dev/null
if [ -n "$RAY_WHEEL" ] && [ ! -f "/tmp/$RAY_WHEEL" ]; then cat /root/ray-parts/part.* > "/tmp/$RAY_WHEEL"; fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
  .whl/*.whl ${RAY_WHEEL:+/tmp/$RAY_WHEEL} > "$OUT/env.txt" 2>&1 || { cat "$OUT/env.txt"; exit 1; }
export PYTHONPATH=.:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
git log -1 --oneline 2>/dev/null; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc
python3 -c "import ray; print('ray', ray.__version__)" || exit 3
left() { echo $(( ${BUDGET:-570} - ($(date +%s) - start) )); }
timeout "$(left)" python3 -m studio.bench.farm_serve --workers 1,2 --clients 12 --seconds 10 \
  --workdir /tmp/fs-cpu --json "$OUT/farm_cpu.json" 2>&1 | tee "$OUT/farm_cpu.txt"
timeout "$(left)" python3 -m studio.bench.farm_serve --workers 1 --device cuda --plain --clients 12 --seconds 10 \
  --workdir /tmp/fs-gpu --json "$OUT/farm_gpu.json" 2>&1 | tee "$OUT/farm_gpu.txt"
for f in /tmp/fs-cpu/farm-2/serve.log /tmp/fs-gpu/farm-1/serve.log; do tail -c 200000 "$f" > "$OUT/$(basename $(dirname $f))-serve.log" 2>/dev/null; done
echo "done after $(( $(date +%s) - start )) s"

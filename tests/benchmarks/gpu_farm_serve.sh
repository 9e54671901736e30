#!/bin/bash
# Device calls for issue 37 (studio serve --farm): studio.bench.farm_serve on the GPU machine's 16
# CPU cores (1 and 2 `ray start --address` worker nodes of CPU actors, 12 clients x 10 s), then the
# one-GPU farm against a plain `studio serve` (--device cuda --plain).
#
# Everything travels in the ignored .whl/ over three consecutive calls (a warm machine keeps
# /root/stash 30 s between calls; each call copies what it carried there): the Python 3.12 wheels
# (docs/speed.md, without diffusers and py-spy: 41 MB), the four Ray needs that the image lacks
# (jsonschema, jsonschema-specifications, referencing, rpds-py; it has msgpack, attrs, protobuf,
# pyyaml, requests, filelock, click, packaging, psutil) and Ray's own wheel (79 MB, more than one
# call carries: 64 MiB with the tree) cut by `split -b 18000000 -a 2 ray-2.60.0-cp312-*.whl part.`:
#   call 1: .whl = the wheels + ray/part.aa              bash tests/benchmarks/gpu_farm_serve.sh stash
#   call 2: .whl = ray/part.ab ray/part.ac ray/part.ad   bash tests/benchmarks/gpu_farm_serve.sh stash
#   call 3: .whl = ray/part.ae + the four Ray needs      bash tests/benchmarks/gpu_farm_serve.sh
# The last call joins the parts, installs and measures (the JSON lands in $OUT). Not run yet.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" /root/stash/ray
start=$(date +%s)
cp -r .whl/. /root/stash/
ls /root/stash /root/stash/ray | tr '\n' ' '; echo
[ "$1" = stash ] && exit 0
RAY=/tmp/ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl
cat /root/stash/ray/part.* > "$RAY" && sha256sum "$RAY"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
  /root/stash/*.whl "$RAY" > "$OUT/env.txt" 2>&1 || { cat "$OUT/env.txt"; exit 1; }
export PYTHONPATH=$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
git log -1 --oneline 2>/dev/null; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc
python3 -c "import ray, av, fastapi; print('ray', ray.__version__)" || exit 3
left() { echo $(( ${BUDGET:-575} - ($(date +%s) - start) )); }
timeout "$(left)" python3 -m studio.bench.farm_serve --workers 1,2 --clients 12 --seconds 10 \
  --workdir /tmp/fs-cpu --json "$OUT/farm_cpu.json" 2>&1 | tee "$OUT/farm_cpu.txt"
timeout "$(left)" python3 -m studio.bench.farm_serve --workers 1 --device cuda --plain --clients 12 --seconds 10 \
  --workdir /tmp/fs-gpu --json "$OUT/farm_gpu.json" 2>&1 | tee "$OUT/farm_gpu.txt"
for f in /tmp/fs-cpu/farm-2/serve.log /tmp/fs-gpu/farm-1/serve.log /tmp/fs-gpu/plain/serve.log; do
  [ -f "$f" ] && tail -c 100000 "$f" > "$OUT/$(basename "$(dirname "$f")")-serve.log"
done
echo "done after $(( $(date +%s) - start )) s"

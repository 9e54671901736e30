#!/bin/bash
# One device call for issue 46 (Studio Live): `studio bench --live N` on the GPU, MuseTalk with random
# weights of the real architecture (TAESD decoder) on the bench's 1080p photo avatar, 1 session then N,
# then the classic engine for comparison if time is left. Run from the repository root with the Python
# 3.12 wheels in .whl/ (shared/design/environment.md) and aiortc's in $LIVE_WHL.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
start=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl ${LIVE_WHL:-.gpu-live-whl}/*.whl > "$OUT/env.txt" 2>&1 || { cat "$OUT/env.txt"; exit 1; }
export PYTHONPATH=.:/tmp/site PYTHONUNBUFFERED=1
git log -1 --oneline 2>/dev/null
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nproc
python3 -c "import aiortc, av; print('aiortc', aiortc.__version__, 'av', av.__version__)"
left() { echo $(( ${BUDGET:-560} - ($(date +%s) - start) )); }
for n in ${COUNTS:-1 ${N:-24}}; do
  [ "$(left)" -gt 60 ] || break
  timeout "$(left)" python3 -m studio bench --live "$n" --live-seconds "${SECONDS_EACH:-12}" --live-viewers "${VIEWERS:-2}" \
    --device cuda --workdir /tmp/bl > "$OUT/live-musetalk-$n.json" 2> "$OUT/live-musetalk-$n.log"
  echo "musetalk n=$n rc=$? after $(( $(date +%s) - start )) s"; tail -3 "$OUT/live-musetalk-$n.log"
  python3 -c "import json,sys; d=json.load(open('$OUT/live-musetalk-$n.json')); d.pop('server_log_tail',None); print(json.dumps(d))" 2>/dev/null
done
if [ -z "$NO_CLASSIC" ] && [ "$(left)" -gt 90 ]; then
  n=${N:-24}
  timeout "$(left)" python3 -m studio bench --live "$n" --live-engine classic --live-seconds "${SECONDS_EACH:-12}" \
    --live-viewers "${VIEWERS:-2}" --device cuda --workdir /tmp/bl > "$OUT/live-classic-$n.json" 2> "$OUT/live-classic-$n.log"
  echo "classic n=$n rc=$? after $(( $(date +%s) - start )) s"
  python3 -c "import json,sys; d=json.load(open('$OUT/live-classic-$n.json')); d.pop('server_log_tail',None); print(json.dumps(d))" 2>/dev/null
fi
cp /tmp/bl/home/server.log "$OUT/server.log" 2>/dev/null

#!/bin/bash
# Issue 48 item 5 before/after in one device call (~3 minutes of command): tests/benchmarks/bench_service.py
# (8 and 16 clients at once with a breaking clip, the warm 672-frame POST /generate) on the main before this
# round's second session (30d9dd9: no finishing worker, no prefetch) in .gpu-before, then on this checkout,
# with a variant of --jobs-per-device 2. From /work/main with .whl/ (shared/design/environment.md) and
# `git archive 30d9dd9 | tar -x -C .gpu-before` carried:  OUT=/tmp/out bash .gpu-before/compare.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > "$OUT/env.txt" 2>&1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for label in before main; do
  case $label in before) v="";; main) v="two:--jobs-per-device 2";; esac
  ( cd $([ $label = main ] && echo . || echo .gpu-$label) && PYTHONPATH=.:/tmp/site timeout 230 python3 tests/benchmarks/bench_service.py --device cuda --no-cold --no-cache \
      --no-handoff --clients 8,16 --workdir /tmp/bc-$label --json "$OUT/$label.json" --variants "$v" > "$OUT/$label.txt" 2>&1 )
  echo "== $label rc=$?"; grep -v "^\s*$" "$OUT/$label.txt" | grep -i "clients at once\|ready\|POST\|Traceback\|Error" | tail -12
done

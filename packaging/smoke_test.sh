#!/usr/bin/env bash
# Smoke test of the frozen app built by packaging/build.sh (headless; no display needed):
#
#   packaging/smoke_test.sh [dist/studio/studio]
#
#  1. the binary answers --version and --help (every sub-command module is in the bundle);
#  2. the window opens offscreen (STUDIO_QUIT_AFTER_MS closes it), its first paint is logged;
#  3. `studio demo` renders the demo clip (face tracking with mediapipe's bundled models, the
#     classic engine, libx264 + AAC), then once more with --encoder x264-parallel, whose encoder
#     workers are the frozen binary re-launched with `__studio_x264_worker__ FD`;
#  4. `studio render --chunks 2` of the same clip (multiprocessing spawn re-launches the binary);
#  5. `studio bench --device cpu` on tiny random-weight MuseTalk models: studio's own UNet, TAESD
#     and whisper encoder are written, loaded and run in the frozen app (no diffusers/transformers);
#  6. each MP4 is checked with PyAV (packaging/check_mp4.py, run with the build venv's Python):
#     706 frames, h264 + aac.
# Everything goes to a temporary data folder (STUDIO_HOME), removed at the end unless it failed.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BIN=$(realpath "${1:-$ROOT/dist/studio/studio}")
PY=${STUDIO_VENV:-$ROOT/.venv}/bin/python
[ -x "$BIN" ] || { echo "smoke: $BIN not found: run packaging/build.sh first" >&2; exit 2; }
[ -x "$PY" ] || PY=python3
WORK=$(mktemp -d "${TMPDIR:-/tmp}/studio-smoke.XXXXXX")
export STUDIO_HOME=$WORK/home QT_QPA_PLATFORM=offscreen
t0=$(date +%s)
fail() { echo "smoke: FAILED: $*  (files kept in $WORK)" >&2; exit 1; }
step() { echo "smoke: $* ($(( $(date +%s) - t0 )) s)" >&2; }

"$BIN" --version | grep -q "^studio " || fail "--version"
for cmd in analyze avatar demo doctor frame gui models render; do
  "$BIN" --help | grep -qw "$cmd" || fail "--help does not list '$cmd'"
done
step "version and help ok"

STUDIO_QUIT_AFTER_MS=${STUDIO_SMOKE_GUI_MS:-3000} timeout 180 "$BIN" gui >"$WORK/gui.out" 2>&1 \
  || { cat "$WORK/gui.out" >&2; fail "the window did not open and close cleanly"; }
grep -q "first paint after" "$STUDIO_HOME/logs/studio.log" || fail "no first paint in $STUDIO_HOME/logs/studio.log"
step "window opened offscreen ($(grep -o 'first paint after [0-9.]* s' "$STUDIO_HOME/logs/studio.log" | tail -1))"

for enc in auto x264-parallel; do
  out=$WORK/demo-$enc.mp4
  timeout 600 "$BIN" demo -o "$out" --encoder "$enc" --json >"$WORK/demo-$enc.json" 2>"$WORK/demo-$enc.err" \
    || { cat "$WORK/demo-$enc.err" >&2; fail "studio demo --encoder $enc"; }
  summary=$("$PY" - "$WORK/demo-$enc.json" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"{r['engine']} + {r['encoder']}, {r['frames']} frames in {r['seconds']:.1f} s ({r['fps']:.1f} fps)")
PYEOF
)
  if [ "$enc" = x264-parallel ]; then
    echo "$summary" | grep -q "parallel" || fail "--encoder x264-parallel did not encode in parallel: $summary"
  fi
  "$PY" packaging/check_mp4.py "$out" --frames 706 >&2 || fail "$out"
  ! grep -q "Traceback\|resource_tracker" "$WORK/demo-$enc.err" || { cat "$WORK/demo-$enc.err" >&2; fail "warnings from --encoder $enc"; }
  step "demo, --encoder $enc: $summary"
done

# --chunks: multiprocessing's spawn re-launches the frozen binary (served by freeze_support()).
DEMO=$(dirname "$BIN")/_internal/resources/demo
timeout 600 "$BIN" render --avatar "$DEMO/astronaut.png" --audio "$DEMO/voiceover.flac" --chunks 2 \
  -o "$WORK/chunks.mp4" >"$WORK/chunks.out" 2>&1 || { cat "$WORK/chunks.out" >&2; fail "studio render --chunks 2"; }
"$PY" packaging/check_mp4.py "$WORK/chunks.mp4" --frames 706 >&2 || fail "$WORK/chunks.mp4"
step "render --chunks 2 (spawned worker processes)"

# MuseTalk's networks (studio's own torch modules, safetensors for the weight files): the CPU
# benchmark writes tiny random-weight models, then loads and runs them inside the frozen app.
timeout 600 "$BIN" bench --device cpu --frames 8 --height 240 --decoders taesd --official-frames 4 --no-classic \
  --json "$WORK/bench.json" >"$WORK/bench.out" 2>&1 || { cat "$WORK/bench.out" >&2; fail "studio bench (MuseTalk modules)"; }
grep -q "^musetalk-taesd " "$WORK/bench.out" && grep -q "^official " "$WORK/bench.out" \
  || { cat "$WORK/bench.out" >&2; fail "studio bench did not time MuseTalk"; }
step "MuseTalk modules (bench on random tiny weights): $(grep '^musetalk-taesd ' "$WORK/bench.out" | awk '{print $2}') frames/s"

rm -rf "$WORK"
echo "smoke: OK in $(( $(date +%s) - t0 )) s" >&2

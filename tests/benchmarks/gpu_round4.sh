#!/bin/bash
# One device call for issue 26 (speed where users are), at most ~8 minutes on one H200 (16 cores).
# Run from the repository root with the Python 3.12 wheels in .whl/ (see docs/speed.md, "Running
# the GPU round"): every figure of the issue's Targets list comes out of one `studio bench --user`
# run, against baselines measured in the same run:
#   - the reference rows (bench avatar, 16 kHz mono, ultrafast: 672 and 15,000 frames) and the
#     official loop (100 frames): the "x official" and "x base" ratios;
#   - the user's path: weights written in the official .pth/.bin layout and imported with
#     `studio models import` (which writes the fast layout), library avatars added from a real JPEG
#     and a real MP4, 48 kHz stereo WAV / MP3 / AAC voice-overs at 672 and 15,000 frames, default
#     settings and ultrafast, a fresh Renderer per job on the warm engine (audio_wait per format);
#   - the x264 preset comparison (ultrafast / superfast / veryfast with the hints, photo and video
#     avatar): PSNR / SSIM against the uncompressed frames, bytes, encoder frames/s, x264 ms/frame;
#   - the queue on one warm engine: 8 jobs of 15 s serial against pipelined, same files;
#   - cold `studio render` of 15 s: MuseTalk from the fast layout, from the official pickles
#     (STUDIO_FAST_COPIES=0), classic; and import torch alone;
#   - a real `studio serve`: POST /generate (default and ultrafast, 3 each: request wall and the
#     server's render seconds), then 8 clients posting 15 s at once (frames/s together).
# MODE=tests also runs this round's tests on the device first (~40 s); MODE=bench (default) does not.
# Results: $OUT/bench.json (written after each part, so a cut-short run keeps what it measured),
# $OUT/bench.txt (the tables), $OUT/bench.log (every row as it is measured), $OUT/server.log.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
start=$(date +%s)
el() { echo $(( $(date +%s) - start )); }
{ pip install --no-deps -q --target /tmp/pyd .whl/*.whl || pip install --no-deps -q --break-system-packages .whl/*.whl; } > "$OUT/env.txt" 2>&1
export PYTHONPATH=.:/tmp/pyd STUDIO_HOME=/tmp/shome PYTHONUNBUFFERED=1
{ python3 -c "import av, soundfile, soxr, platformdirs, fastapi, uvicorn, httpx, torch; print('av', av.__version__, 'torch', torch.__version__, 'fastapi', fastapi.__version__)";
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader; nproc; free -g | head -2; df -h /dev/shm /tmp | tail -2; } >> "$OUT/env.txt" 2>&1
tail -6 "$OUT/env.txt"
echo "set up after $(el) s"
if [ "${MODE:-bench}" = tests ]; then
  timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_voiceovers.py tests/test_fast_load.py \
    > "$OUT/tests.txt" 2>&1
  echo "tests rc=$? after $(el) s"; tail -3 "$OUT/tests.txt"
fi
# EXTRA: more bench options (the lead's last run: --no-cold-cli, measured in the run before)
timeout $(( ${LIMIT:-470} - $(el) )) python3 -m studio bench --workdir /tmp/bw --decoders taesd --no-classic \
  --official-frames 100 --long 15000 --user --clients 8 --clip-frames 375 --repeats 3 \
  --codecs "${CODECS:-none}" ${EXTRA:-} --json "$OUT/bench.json" > "$OUT/bench.txt" 2> "$OUT/bench.log"
echo "bench rc=$? after $(el) s"
cat "$OUT/bench.txt"
grep -i "warn\|error\|Traceback" "$OUT/bench.log" | tail -5
tail -40 /tmp/bw/serve/server.log > "$OUT/server.log" 2>/dev/null
[ -s "$OUT/bench.txt" ] || tail -40 "$OUT/bench.log"  # cut short: the rows measured so far

#!/usr/bin/env bash
# Build the desktop app: a PyInstaller one-folder bundle in dist/studio/ (run it from anywhere).
#
#   packaging/build.sh            # uses .venv (made by ./dev setup when missing)
#   STUDIO_VENV=~/gpu-venv packaging/build.sh     # another venv, e.g. one with a CUDA torch
#
# Result: dist/studio/studio (the app: window and sub-commands), dist/studio/share/ (desktop entry
# and icons) and dist/studio/install-desktop.sh (adds Studio to the user's application menu).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
VENV=${STUDIO_VENV:-$ROOT/.venv}
DIST=$ROOT/dist
APP=$DIST/studio
t0=$(date +%s)

if [ ! -x "$VENV/bin/python" ]; then
  if [ -n "${STUDIO_VENV:-}" ]; then echo "build: $VENV is not a venv" >&2; exit 2; fi
  ./dev setup
fi
PY=$VENV/bin/python
"$PY" -c "import PyInstaller" 2>/dev/null \
  || "$PY" -m pip install -q --disable-pip-version-check "pyinstaller>=6.10" "pyinstaller-hooks-contrib>=2024.8"
"$PY" -c "import PySide6, pyqtgraph, torch, av, mediapipe, soundfile, soxr" >/dev/null 2>&1 \
  || { echo "build: $VENV lacks the app's packages (./dev setup installs them)" >&2; exit 2; }

echo "build: pyinstaller ($("$PY" -m PyInstaller --version)), torch $("$PY" -c 'import torch; print(torch.__version__)')" >&2
"$PY" -m PyInstaller --noconfirm --log-level WARN --distpath "$DIST" --workpath "$ROOT/build/pyinstaller" \
  packaging/studio.spec

# Desktop entry and icons (PNG sizes rendered from resources/icons/studio.svg with Qt's SVG renderer).
SHARE=$APP/share
mkdir -p "$SHARE/applications" "$SHARE/icons/hicolor/scalable/apps"
cp packaging/studio.desktop "$SHARE/applications/studio.desktop"
cp resources/icons/studio.svg "$SHARE/icons/hicolor/scalable/apps/studio.svg"
QT_QPA_PLATFORM=offscreen "$PY" - "$ROOT/resources/icons/studio.svg" "$SHARE/icons/hicolor" <<'PYEOF'
import sys
from pathlib import Path
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication, QImage, QPainter
from PySide6.QtSvg import QSvgRenderer

app = QGuiApplication([])
svg, out = QSvgRenderer(sys.argv[1]), Path(sys.argv[2])
if not svg.isValid():
    sys.exit(f"build: {sys.argv[1]} is not a valid SVG")
for n in (16, 32, 48, 64, 128, 256, 512):
    img = QImage(n, n, QImage.Format.Format_ARGB32_Premultiplied)
    img.fill(Qt.GlobalColor.transparent)
    p = QPainter(img)
    svg.render(p)
    p.end()
    d = out / f"{n}x{n}" / "apps"
    d.mkdir(parents=True, exist_ok=True)
    if not img.save(str(d / "studio.png")):
        sys.exit(f"build: could not write the {n}px icon")
PYEOF
install -m 755 packaging/install-desktop.sh "$APP/install-desktop.sh"

# The pieces that only show up as failures at run time: check that they are in the bundle.
INT=$APP/_internal
missing=0
for pattern in \
  "PySide6/Qt/plugins/platforms/libqoffscreen.so" "PySide6/Qt/plugins/platforms/libqxcb.so" \
  "PySide6/Qt/plugins/imageformats/libqsvg.so" "PySide6/Qt/plugins/iconengines/libqsvgicon.so" \
  "PySide6/Qt/plugins/multimedia/libffmpegmediaplugin.so" \
  "mediapipe/modules/face_landmark/face_landmark_front_cpu.binarypb" \
  "mediapipe/modules/face_landmark/face_landmark_with_attention.tflite" \
  "mediapipe/modules/face_detection/face_detection_short_range.tflite" \
  "_soundfile_data/libsndfile*" "av.libs/libx264*" "av.libs/libavcodec*" "soxr/soxr_ext*.so" \
  "torch/lib/libtorch_cpu.so" "safetensors/_safetensors_rust*.so" "resources/demo/voiceover.flac" "resources/icons/studio.svg" "resources/style.qss"; do
  # shellcheck disable=SC2086
  if ! compgen -G "$INT/$pattern" >/dev/null; then echo "build: missing from the bundle: $pattern" >&2; missing=1; fi
done
# ... and the Hugging Face libraries that studio.spec excludes (the app's networks are studio's own;
# the dev venv holds these for the tests): neither as a folder nor as modules in the archive.
TOC=$ROOT/build/pyinstaller/studio/PYZ-00.toc
for pkg in diffusers transformers tokenizers huggingface_hub; do
  if compgen -G "$INT/$pkg*" >/dev/null || grep -qE "\('$pkg[.']" "$TOC"; then
    echo "build: $pkg is in the bundle (studio.spec excludes it)" >&2; missing=1
  fi
done
[ "$missing" = 0 ] || exit 1

echo "build: $APP ($(du -sh "$APP" | cut -f1)) in $(( $(date +%s) - t0 )) s; check it with packaging/smoke_test.sh" >&2

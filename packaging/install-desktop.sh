#!/usr/bin/env sh
# Add Studio to this user's application menu: run it from the unpacked dist/studio/ folder
# (wherever it lives now; run it again after moving the folder). Nothing outside ~/.local changes.
set -eu
APP=$(cd "$(dirname "$0")" && pwd)
DATA=${XDG_DATA_HOME:-$HOME/.local/share}
mkdir -p "$DATA/applications"
cp -R "$APP/share/icons" "$DATA/"
sed -e "s|^Exec=.*|Exec=\"$APP/studio\"|" -e "s|^TryExec=.*|TryExec=$APP/studio|" \
  "$APP/share/applications/studio.desktop" > "$DATA/applications/studio.desktop"
command -v update-desktop-database >/dev/null 2>&1 && update-desktop-database -q "$DATA/applications" || true
command -v gtk-update-icon-cache >/dev/null 2>&1 && gtk-update-icon-cache -q -t "$DATA/icons/hicolor" || true
echo "Studio is in the application menu ($DATA/applications/studio.desktop)."

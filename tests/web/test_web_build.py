"""The page's built files (``studio/api/static``, what ``studio serve`` answers and the wheel ships)
are what ``web/`` builds: ``npm ci`` (when ``web/node_modules`` is missing or older than the lock
file) and ``vite build`` into a temporary folder, compared byte for byte. Fails when someone changed
``web/src`` without rebuilding (``cd web && npm ci && npm run build``) or edited the built files."""

from __future__ import annotations

import gzip
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT

WEB = ROOT / "web"
STATIC = ROOT / "studio" / "api" / "static"
NPM = shutil.which("npm")


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def node_modules() -> None:
    """``npm ci`` when ``web/node_modules`` is missing or older than the lock file."""
    stamp = WEB / "node_modules" / ".package-lock.json"
    if not stamp.exists() or stamp.stat().st_mtime < (WEB / "package-lock.json").stat().st_mtime:
        subprocess.run([str(NPM), "ci", "--no-audit", "--no-fund"], cwd=WEB, check=True, timeout=600)


@pytest.mark.skipif(NPM is None, reason="node and npm are not installed (the built files are still tested)")
def test_the_committed_page_is_what_web_builds(tmp_path):
    node_modules()
    out = tmp_path / "built"
    vite = WEB / "node_modules" / ".bin" / "vite"
    subprocess.run([str(vite), "build", "--outDir", str(out), "--emptyOutDir"], cwd=WEB, check=True, timeout=300)
    built, committed = files(out), files(STATIC)
    assert sorted(built) == sorted(committed), "rebuild the page: cd web && npm ci && npm run build"
    for name, data in built.items():
        assert committed[name] == data, f"{name} differs from what web/ builds: cd web && npm run build"


@pytest.mark.skipif(NPM is None, reason="node and npm are not installed")
@pytest.mark.parametrize("script", ["lint", "test"])
def test_the_page_source_passes_biome_and_vitest(script):
    """Biome's recommended lint rules and the page's logic (web/test, Vitest): a few seconds."""
    node_modules()
    r = subprocess.run([str(NPM), "run", "--silent", script], cwd=WEB, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]


def test_node_version_is_named():
    import json

    engines = json.loads((WEB / "package.json").read_text())["engines"]["node"]
    assert engines == ">=20.19" and (WEB / ".nvmrc").read_text().strip() == "20.19"  # Vite 8 needs 20.19


def test_the_built_page_is_small_and_self_contained():
    page = files(STATIC)
    assert "index.html" in page and any(n.startswith("assets/") and n.endswith(".js") for n in page)
    assert sum(len(gzip.compress(b)) for b in page.values()) < 60_000  # first load <= 100 KB with the lists
    html = page["index.html"].decode()
    assert "<script>" not in html and "<style>" not in html  # the CSP allows no inline script or style
    for name, data in page.items():  # nothing loaded from another host: no absolute URLs in src/href
        text = data.decode(errors="replace")
        assert 'src="http' not in text and 'href="http' not in text and "@import" not in text, name
    # a server on the LAN is no secure context: crypto.randomUUID is undefined there
    assert not any(b"randomUUID" in data for data in page.values())
    # the wheel carries them
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert '"studio.api" = ["static/*.html", "static/*.svg", "static/assets/*"]' in pyproject

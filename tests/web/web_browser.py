"""Debian's Chromium driven by Playwright's Python client, for the web page's tests and screenshots.

    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 800}, accept_downloads=True)

Playwright's own browser download is never used (nothing is downloaded here): the Chromium of the
Debian package ``chromium`` (``./dev`` installs it), headless, with a fresh profile and its
background networking off (the machine's network is closed).
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


def available() -> str | None:
    """None when the browser tests can run here, else why not."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright (the Python client) is not installed"
    if not Path(CHROMIUM).exists() and shutil.which("chromium") is None:
        return "Debian's chromium is not installed (./dev setup installs it)"
    return None


@contextlib.contextmanager
def chromium():
    """The browser (Playwright's launch gives it a fresh, empty profile folder each time)."""
    from playwright.sync_api import sync_playwright

    exe = CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=exe, headless=True, args=FLAGS)
        try:
            yield browser
        finally:
            browser.close()

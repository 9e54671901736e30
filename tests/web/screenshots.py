"""Screenshots of the web page at 1600x900 and 390x844, in Debian's chromium against a real
``studio serve`` (classic engine) with the demo avatar and voice-over.

    python tests/web/screenshots.py [OUT_DIR]     # default: resources/; writes web-1600.png,
                                                  # web-1600-render.png, web-1600-done.png and the
                                                  # same three at 390 (web-390*.png)

The library, the waveform with its silences and threshold, a scrubbed frame and an in/out range;
then the same page while it renders (the preview, frames/s, ETA, the queue); then the finished job
(its video, the check's verdict, its side files).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from conftest import DEMO_AUDIO, DEMO_AVATAR, ROOT  # noqa: E402
from served import Server  # noqa: E402
from web_browser import chromium  # noqa: E402


def scrub_to(page, fraction: float) -> None:
    wave = page.get_by_test_id("waveform")
    box = wave.bounding_box()
    page.mouse.click(box["x"] + box["width"] * fraction, box["y"] + 10)
    page.wait_for_function(
        "() => { const i = document.querySelector('[data-testid=frame]'); const w = document.querySelector('[data-testid=waveform]');"
        " return i && w && i.dataset.frame === w.getAttribute('aria-valuenow'); }"
    )


def shoot(out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    with tempfile.TemporaryDirectory(prefix="studio-web-shots-") as home, chromium() as browser:
        server = Server(Path(home))
        try:
            for width, height in ((1600, 900), (390, 844)):
                ctx = browser.new_context(viewport={"width": width, "height": height})
                page = ctx.new_page()
                page.set_default_timeout(120_000)
                page.goto(server.url + "/")
                page.get_by_text("Add photo or video…").wait_for()
                if width == 1600:
                    page.get_by_test_id("avatar-file").set_input_files(str(DEMO_AVATAR))
                    page.locator(".item.selected").wait_for()
                    page.get_by_test_id("audio-file").set_input_files(str(DEMO_AUDIO))
                else:  # the library and the voice-overs are the server's: a second browser sees them
                    page.locator(".pick .item").first.click()
                    page.locator(".pick .item", has_text=DEMO_AUDIO.name).click()
                page.get_by_test_id("frame").wait_for()
                scrub_to(page, 0.2)
                page.keyboard.press("i")
                scrub_to(page, 0.62)
                page.keyboard.press("o")
                scrub_to(page, 0.41)
                if page.get_by_test_id("message").count():  # the last message, dismissed
                    page.get_by_role("button", name="Dismiss the message").click()
                page.get_by_test_id("waveform").focus()
                name = f"web-{width}.png"
                page.screenshot(path=str(out / name))
                written.append(out / name)
                page.get_by_role("button", name="Render", exact=True).click()
                page.wait_for_function(
                    "() => { const p = document.querySelector('[data-testid=progress]');"
                    " return p && p.textContent.includes('frames/s') && document.querySelector('[data-testid=preview]'); }"
                )
                page.wait_for_timeout(1500)
                name = f"web-{width}-render.png"
                page.screenshot(path=str(out / name))
                written.append(out / name)
                page.get_by_test_id("followed-state").filter(has_text="done").wait_for()
                page.get_by_test_id("followed").get_by_test_id("check").wait_for()
                page.evaluate("() => document.querySelector('[data-testid=video]').pause()")
                name = f"web-{width}-done.png"
                page.screenshot(path=str(out / name))
                written.append(out / name)
                ctx.close()
        finally:
            server.stop()
    return written


if __name__ == "__main__":
    os.environ.setdefault("PYTHONPATH", str(ROOT))
    for p in shoot(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "resources"):
        print(p)

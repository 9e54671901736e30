"""The page's Live view in a real browser (Debian's chromium through Playwright) against a real
``studio serve`` on 127.0.0.1: pick the avatar, Start (the browser's fake microphone, a beeping tone,
is the voice: sendrecv), the presenter plays in the page over WebRTC, the figures show, typed text is
said (Piper), Stop ends the session on the server."""

from __future__ import annotations

import time

import pytest
from conftest import prepare_demo_avatar
from served import Server
from web_browser import CHROMIUM, FLAGS, available

httpx = pytest.importorskip("httpx")
pytestmark = pytest.mark.skipif(available() is not None, reason=str(available()))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("web_live_home")
    prepare_demo_avatar(home, "astro")
    s = Server(home)
    deadline = time.monotonic() + 120
    while httpx.get(f"{s.url}/v1/ready").status_code != 200:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    yield s
    s.stop()


def test_live_view_start_watch_say_stop(server, tmp_path):
    from playwright.sync_api import sync_playwright

    args = [
        *FLAGS,
        "--use-fake-ui-for-media-stream",  # the microphone is granted without asking
        "--use-fake-device-for-media-stream",  # and is Chromium's test tone
        "--disable-features=WebRtcHideLocalIpsWithMdns",  # 127.0.0.1 candidates, not .local names
    ]
    errors: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=args)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(server.url)
            page.get_by_role("button", name="Live").click()
            page.wait_for_function("() => document.querySelector('[data-testid=live-avatar]')?.value === 'astro'")
            page.get_by_role("button", name="Start").click()
            # the presenter plays: decoded frames of the avatar's size
            page.wait_for_function(
                "() => { const v = document.querySelector('video.live-video');"
                " return v && v.videoWidth === 512 && v.getVideoPlaybackQuality().totalVideoFrames > 25; }",
                timeout=60_000,
            )
            page.wait_for_function(
                "() => document.querySelector('[data-testid=live-figures]').textContent.includes('frames/s')",
                timeout=30_000,
            )
            (sid,) = [s["id"] for s in httpx.get(f"{server.url}/v1/live").json()["sessions"]]
            # the fake microphone's tone is a voice: the engine draws the mouth
            deadline = time.monotonic() + 60
            while httpx.get(f"{server.url}/v1/live/{sid}").json()["figures"]["engine_frames"] == 0:
                assert time.monotonic() < deadline, "the microphone's voice never reached the presenter"
                time.sleep(0.2)
            page.get_by_label("Text to say").fill("Good evening.")
            page.get_by_role("button", name="Say").click()
            page.wait_for_function("() => document.querySelector('[aria-label=\"Text to say\"]').value === ''")
            page.screenshot(path=str(tmp_path / "live.png"))
            page.get_by_role("button", name="Stop").click()
            deadline = time.monotonic() + 30
            while httpx.get(f"{server.url}/v1/live").json()["sessions"]:
                assert time.monotonic() < deadline, "Stop left the session open"
                time.sleep(0.2)
            page.get_by_role("button", name="Start").wait_for(state="visible", timeout=10_000)
        finally:
            browser.close()
    assert not errors, errors

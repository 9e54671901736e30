"""The web page in a real browser (Debian's chromium, driven by Playwright) against a real
``studio serve`` on 127.0.0.1 (classic engine): a first render in 3 clicks, the exact frame under the
playhead (the page's bytes are ``/v1/frame``'s), keyboard scrubbing and in/out, the threshold dragged
on the waveform, progress from the events stream within 1 s, the video playing, the queue (download,
cancel, retry), the lip-sync verdict; every API error shown as its one sentence; labels and visible
focus; the token asked once per tab and the read token's view-only page. About a minute on 2 cores.
"""

from __future__ import annotations

import hashlib
import math
import re
import statistics
import threading
import time

import pytest
from conftest import DEMO_AVATAR, speech_pause_speech
from served import Server
from web_browser import available, chromium

httpx = pytest.importorskip("httpx")
pytestmark = pytest.mark.skipif(available() is not None, reason=str(available()))

TOKEN = "page-token-0123456789"
READ = "page-read-token-0123456789"


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    return speech_pause_speech(tmp_path_factory.mktemp("web_clip") / "take1.wav", 1.0, 0.8, 1.0)  # 70 frames


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("web_home"))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def browser():
    with chromium() as b:
        yield b


class Page:
    """A fresh tab (its own storage) that counts clicks and collects console errors."""

    def __init__(self, browser, url, width=1280, height=800):
        self.ctx = browser.new_context(viewport={"width": width, "height": height}, accept_downloads=True)
        self.page = self.ctx.new_page()
        self.url = url
        self.clicks = 0
        self.errors: list[str] = []
        # console errors and exceptions; a failed request as its status and URL (the console's own
        # line for it, "Failed to load resource", names no URL)
        self.page.on(
            "console",
            lambda m: m.type == "error" and not m.text.startswith("Failed to load") and self.errors.append(m.text),
        )
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("response", lambda r: r.status >= 400 and self.errors.append(f"{r.status} {r.url}"))
        self.frames: list = []  # the scrub frames the browser fetched (their responses)
        self.page.on("response", lambda r: "/v1/frame?" in r.url and self.frames.append(r))
        self.page.set_default_timeout(30_000)

    def click(self, locator):
        self.clicks += 1
        locator.click()

    def upload(self, button_text, path):
        """A click on the upload button, then the file in the chooser it opens."""
        with self.page.expect_file_chooser() as chooser:
            self.click(self.page.get_by_text(button_text))
        chooser.value.set_files(str(path))

    def message(self) -> str:
        return self.page.get_by_test_id("message").inner_text()

    def close(self):
        self.ctx.close()


def follow_events(url: str, seen: list, stop: threading.Event, connected: threading.Event) -> None:
    """The server's progress events with the time each arrived (the page's own stream is compared);
    ``connected`` is set once the stream is open."""
    import json

    from httpx_sse import connect_sse

    with httpx.Client(base_url=url, timeout=60) as c:
        while not stop.is_set():
            jobs = c.get("/v1/renders").json()["renders"]
            if jobs:
                break
            time.sleep(0.02)
        else:
            return
        with connect_sse(c, "GET", f"/v1/renders/{jobs[0]['id']}/events") as events:
            connected.set()
            for ev in events.iter_sse():
                if ev.event == "progress":
                    seen.append((time.time(), json.loads(ev.data)))
                elif json.loads(ev.data)["state"] in ("done", "failed", "cancelled"):
                    return


def test_first_render_scrub_progress_queue_download(browser, server, clip):
    from studio.core.media.timecode import timecode

    t = Page(browser, server.url)
    page = t.page
    try:
        response = page.goto(server.url + "/")
        assert "default-src 'self'" in response.headers["content-security-policy"]
        # 1-2: the avatar and the voice-over, each one click (and the file chooser)
        t.upload("Add photo or video…", DEMO_AVATAR)
        page.locator(".item.selected", has_text="astronaut").wait_for()
        t.upload("Add voice-over…", clip)
        frame_img = page.get_by_test_id("frame")
        frame_img.wait_for()
        wave = page.get_by_test_id("waveform")
        assert wave.get_attribute("aria-valuemax") == "69"
        assert "1 silences" in page.get_by_test_id("silence").inner_text()

        # scrub: a click shows the exact frame under it, with its timecode; the bytes are /v1/frame's
        box = wave.bounding_box()
        page.mouse.click(box["x"] + box["width"] * (12.5 / 70), box["y"] + 12)
        page.wait_for_function("() => document.querySelector('[data-testid=frame]').dataset.frame === '12'")
        assert page.get_by_test_id("frame-timecode").inner_text() == timecode(12) == "00:00:00:12"
        src, url = frame_img.get_attribute("src"), frame_img.get_attribute("data-url")
        assert src == url and url.startswith("/v1/frame?")  # by URL (the browser's own GET), no blob
        fetched = [r for r in t.frames if r.url == server.url + url]
        assert len(fetched) == 1  # asked once: the <img> shows the image loaded before it
        shown = fetched[0].body()
        assert shown[:8] == b"\x89PNG\r\n\x1a\n" and shown == httpx.get(server.url + url).content
        assert page.evaluate("() => [...document.images].filter((i) => i.src.startsWith('blob:')).length") == 0

        # the keyboard: a frame on, I; a second on, O
        page.keyboard.press("ArrowRight")
        page.wait_for_function("() => document.querySelector('[data-testid=frame]').dataset.frame === '13'")
        page.keyboard.press("i")
        page.keyboard.press("Shift+ArrowRight")
        page.keyboard.press("PageDown")
        page.keyboard.press("o")
        assert wave.get_attribute("aria-valuenow") == "63"
        assert page.get_by_test_id("in").inner_text() == "In 00:00:00:13"
        assert page.get_by_test_id("out").inner_text() == "Out 00:00:02:13"
        page.wait_for_function("() => document.querySelector('[data-testid=frame]').dataset.frame === '63'")

        # the threshold, dragged on the waveform: the silences are the server's at the new value
        threshold = page.locator("#setting-threshold")
        assert float(threshold.input_value()) == 0.008
        y_of = lambda v: box["y"] + box["height"] * (1 - (20 * math.log10(v) + 60) / 60)  # noqa: E731 (dB scale)
        page.mouse.move(box["x"] + box["width"] - 6, y_of(0.008))
        page.mouse.down()
        page.mouse.move(box["x"] + box["width"] - 6, y_of(0.3), steps=4)
        page.mouse.up()
        dragged = float(threshold.input_value())
        assert 0.2 < dragged < 0.45, dragged
        audio_id = hashlib.sha256(clip.read_bytes()).hexdigest()[:16]
        want = httpx.get(f"{server.url}/v1/audio/{audio_id}/waveform", params={"threshold": dragged}).json()
        frames = sum(b - a for a, b in want["silent_spans"])
        assert frames > 40  # above the speech's RMS: nearly all of it is silence now
        page.wait_for_function(
            "(n) => document.querySelector('[data-testid=silence]').textContent.includes(`, ${n} frames`)", arg=frames
        )
        page.locator("#setting-threshold").fill("0.008")
        page.locator("#setting-threshold").dispatch_event("change")
        page.wait_for_function(
            "() => document.querySelector('[data-testid=silence]').textContent.startsWith('1 silences')"
        )

        # 3: Render; the page's progress follows the server's events
        page.evaluate(
            """() => { window.__progress = []; let last = '';
               new MutationObserver(() => { const el = document.querySelector('[data-testid=progress]');
                 if (document.querySelector('[data-testid=preview]')) window.__preview = true;
                 if (el && el.textContent !== last) { last = el.textContent; window.__progress.push([Date.now() / 1000, last]); }
               }).observe(document.body, {subtree: true, childList: true, characterData: true}); }"""
        )
        seen: list = []
        stop, connected = threading.Event(), threading.Event()
        listener = threading.Thread(target=follow_events, args=(server.url, seen, stop, connected), daemon=True)
        listener.start()
        # the render holds after its first batch until the page and the test's own listener both follow
        # it: the progress they compare never depends on how long the render takes
        with server.hold:
            t.click(page.get_by_role("button", name="Render", exact=True))
            server.hold.wait_held()
            assert connected.wait(60), "the test's event stream never opened"
            page.wait_for_function("() => window.__progress.length > 0", timeout=60_000)
        assert t.clicks == 3  # upload avatar, upload voice-over, Render: at most 5
        video = page.get_by_test_id("video")
        video.wait_for(timeout=60_000)
        stop.set()
        listener.join(30)
        page.wait_for_function("() => document.querySelector('[data-testid=video]').readyState >= 1")
        assert abs(page.evaluate("() => document.querySelector('[data-testid=video]').duration") - 51 / 25) < 0.1
        page.evaluate("() => document.querySelector('[data-testid=video]').play()")
        page.wait_for_function("() => document.querySelector('[data-testid=video]').currentTime > 0.2")  # it plays
        job = httpx.get(f"{server.url}/v1/renders/1").json()
        assert job["state"] == "done" and job["frame_range"] == [13, 64] and job["settings"]["check"] is True
        assert page.get_by_test_id("followed-state").inner_text() == "done"
        page_log = page.evaluate("() => window.__progress")
        lags = []
        for at, ev in seen:
            shown_at = [p for p, text in page_log if text.startswith(f"{ev['done']}/{ev['total']} frames")]
            if shown_at:
                lags.append(shown_at[0] - at)
        assert lags, (seen, page_log)
        print(
            f"page progress behind the server's events: median {statistics.median(lags) * 1000:.0f} ms, max {max(lags) * 1000:.0f} ms over {len(lags)} events"
        )
        assert max(lags) < 1.0 and statistics.median(lags) < 0.5, lags
        assert any("frames/s · ETA" in text for _, text in page_log)
        assert page.evaluate("() => window.__preview === true")  # a live preview frame was shown

        # the lip-sync check's verdict, as the server has it
        check = page.get_by_test_id("followed").get_by_test_id("check")
        check.wait_for(timeout=60_000)
        verdict = httpx.get(f"{server.url}/v1/renders/1").json()["result"]["check"]
        assert check.inner_text().startswith(f"lip sync: {verdict['verdict']}")
        assert page.get_by_test_id("check-reason").inner_text() == verdict["reason"]
        # its visual report with the result: a link that opens the page (served sandboxed: no script runs)
        link = page.get_by_test_id("file-check_report").first
        link.wait_for(timeout=60_000)
        with page.context.expect_page() as opened:
            link.click()
        report = opened.value
        report.wait_for_load_state()
        assert report.title().startswith("Lip-sync check") and report.locator(".strip svg").count() == 1
        assert report.locator("img").count() >= 2  # the worst second's mouth beside the reference's
        report.close()

        # the queue: download the video (the server's bytes), two more jobs, cancel the waiting one, retry it
        row = page.get_by_test_id("job-1")
        with page.expect_download() as dl:
            t.click(row.get_by_role("link", name="Download job 1's video"))
        assert dl.value.suggested_filename == job["output"]
        assert open(dl.value.path(), "rb").read() == httpx.get(f"{server.url}/v1/renders/1/video").content
        t.click(page.get_by_role("button", name="Back to the frame"))
        t.click(page.get_by_role("button", name="Clear in/out"))
        t.click(page.get_by_role("button", name="Add to queue"))
        t.click(page.get_by_role("button", name="Add to queue"))
        page.get_by_test_id("job-3").wait_for()
        t.click(page.get_by_role("button", name="Cancel job 3"))
        page.get_by_test_id("job-3").locator(".badge.cancelled").wait_for()
        assert httpx.get(f"{server.url}/v1/renders/3").json()["state"] == "cancelled"
        assert "Job 3 cancelled" in t.message()
        t.click(page.get_by_role("button", name="Retry job 3"))
        page.get_by_test_id("job-4").wait_for()
        assert httpx.get(f"{server.url}/v1/renders/4").json()["retry_of"] == 3
        # the one error a browser may log: a preview asked for as the job ended (the page shows the
        # video then; the server keeps no preview of a finished job)
        late = re.compile(r"404 .*/preview(\?at=\d+)?$")
        assert [e for e in t.errors if not late.match(e)] == []
        assert len(t.errors) <= 1, t.errors
    finally:
        t.close()


def test_every_api_error_is_its_one_sentence(browser, server, clip, tmp_path):
    t = Page(browser, server.url)
    page = t.page
    try:
        page.goto(server.url + "/")
        notes = tmp_path / "notes.txt"
        notes.write_text("not a picture")
        t.upload("Add photo or video…", notes)
        with open(notes, "rb") as fh:
            api = httpx.post(f"{server.url}/v1/avatars", data={"name": "notes-2"}, files={"file": ("notes.txt", fh)})
        assert api.status_code == 415
        page.locator(".status.error").wait_for()
        assert t.message() == api.json()["error"]

        empty = tmp_path / "empty.wav"
        empty.write_bytes(b"")
        t.upload("Add voice-over…", empty)
        page.wait_for_function("() => document.querySelector('[data-testid=message]').textContent.includes('empty')")
        assert t.message() == "'empty.wav' is empty (0 bytes); send the file itself"

        # a value out of the schema's range is the server's 422, word for word
        t.upload("Add photo or video…", DEMO_AVATAR)  # the same file again: its avatar is offered, no copy made
        page.locator("[data-testid=duplicate], .item.selected").first.wait_for(timeout=60_000)
        if page.get_by_test_id("duplicate").count():  # the first test made it already
            t.click(page.get_by_role("button", name="Use astronaut"))
        name = page.locator(".item.selected strong").inner_text()
        assert name == "astronaut"
        t.upload("Add voice-over…", clip)
        page.locator(".item.selected", has_text="take1.wav").wait_for()
        page.get_by_label("CRF").fill("99")
        page.get_by_label("CRF").dispatch_event("change")
        audio_id = hashlib.sha256(clip.read_bytes()).hexdigest()[:16]  # the same bytes are the same id
        api = httpx.post(f"{server.url}/v1/renders", data={"avatar": name, "audio_id": audio_id, "crf": 99})
        assert api.status_code == 422
        page.get_by_role("button", name="Render", exact=True).click()
        page.locator(".status.error").wait_for()
        assert t.message() == api.json()["error"]
        # on the field too (focused, marked invalid), and gone once the value changes
        assert page.get_by_test_id("error-crf").inner_text() == api.json()["error"]
        assert page.evaluate("() => document.activeElement.id") == "setting-crf"
        assert page.get_by_label("CRF").get_attribute("aria-invalid") == "true"
        page.get_by_label("CRF").fill("20")
        page.get_by_label("CRF").dispatch_event("change")
        page.get_by_test_id("error-crf").wait_for(state="detached")
    finally:
        t.close()


def test_a_video_avatar_is_uploaded(browser, server, tmp_path):
    import av
    import numpy as np
    from PIL import Image

    video = tmp_path / "presenter clip.mp4"
    still = np.asarray(Image.open(DEMO_AVATAR).convert("RGB").resize((256, 256)))
    with av.open(str(video), "w") as out:
        stream = out.add_stream("libx264", rate=25)
        stream.width, stream.height, stream.pix_fmt = 256, 256, "yuv420p"
        for i in range(25):  # one second, the face moving a little
            frame = np.roll(still, i // 5, axis=1)
            out.mux(stream.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24")))
        out.mux(stream.encode())
    t = Page(browser, server.url)
    try:
        t.page.goto(server.url + "/")
        t.upload("Add photo or video…", video)
        item = t.page.locator(".item.selected", has_text="presenter-clip")
        item.wait_for(timeout=120_000)
        assert "video, 25 frames at 25" in item.inner_text()
        listed = httpx.get(f"{server.url}/v1/avatars").json()["avatars"]
        assert any(a["name"] == "presenter-clip" and a["kind"] == "video" for a in listed)
        assert t.errors == []
    finally:
        t.close()


def test_labels_focus_keyboard_and_the_settings_from_the_schema(browser, server):
    t = Page(browser, server.url, 390, 844)
    page = t.page
    try:
        page.goto(server.url + "/")
        page.get_by_text("Add photo or video…").wait_for()
        page.get_by_role("button", name="Render", exact=True).wait_for()
        unlabelled = page.evaluate(
            """() => [...document.querySelectorAll('input, select, textarea, button, [tabindex]')].filter((el) => {
                const name = (el.getAttribute('aria-label') || '').trim() || [...(el.labels || [])].map((l) => l.textContent.trim()).join('')
                  || (el.tagName === 'BUTTON' ? el.textContent.trim() : '');
                return !name; }).map((el) => el.outerHTML.slice(0, 80))"""
        )
        assert unlabelled == []
        # the settings are RenderForm's: every setting, its label, help and choices
        form = httpx.get(f"{server.url}/openapi.json").json()["components"]["schemas"]["RenderForm"]["properties"]
        settings = {k: p for k, p in form.items() if "x-group" in p}
        shown = page.evaluate("() => [...document.querySelectorAll('.settings [name]')].map((el) => el.name)")
        assert sorted(shown) == sorted(settings)  # every setting, the output group first, the engine's last
        assert shown[0] == "delivery" and shown.index("canvas") < shown.index("crf") < shown.index("engine")
        advanced = page.locator("details", has=page.locator("#setting-engine"))
        assert (
            advanced.locator("summary").inner_text() == "Advanced (engine)" and advanced.get_attribute("open") is None
        )
        assert page.locator("#setting-delivery option").all_inner_texts()[1:] == settings["delivery"]["pattern"][
            3:-2
        ].split("|")
        codec = page.locator("#setting-codec")
        assert codec.locator("option").all_inner_texts() == settings["codec"]["enum"]
        assert page.locator("#setting-crf-help").inner_text().startswith(settings["crf"]["description"])
        assert page.locator("#setting-crf").get_attribute("max") == "51"
        assert page.locator("label[for=setting-crf]").inner_text() == settings["crf"]["title"]
        # the keyboard reaches the controls, and focus is visible where it lands
        page.locator("body").focus()
        outlines = []
        for _ in range(6):
            page.keyboard.press("Tab")
            outlines.append(
                page.evaluate(
                    """() => { const el = document.activeElement; const s = getComputedStyle(el);
                       const host = el.closest('.file') ? getComputedStyle(el.closest('.file')) : s;
                       return [el.tagName, s.outlineStyle !== 'none' ? s.outlineWidth : host.outlineWidth]; }"""
                )
            )
        assert all(tag != "BODY" and width not in ("0px", "") for tag, width in outlines), outlines
        # a typed script, spoken by the server, becomes this tab's voice-over
        page.get_by_label("Or type what the presenter says").fill("Good evening.")
        page.get_by_role("button", name="Speak").click()
        page.locator(".item.selected", has_text="Good_evening..wav").wait_for()
        page.wait_for_function(
            "() => +document.querySelector('[data-testid=waveform]').getAttribute('aria-valuemax') > 10"
        )
        # an avatar chosen with the keyboard
        first = page.locator(".pick .item").first
        if first.count():
            first.focus()
            page.keyboard.press("Enter")
            assert first.get_attribute("aria-pressed") == "true"
        assert t.errors == []
    finally:
        t.close()


def test_the_token_is_asked_once_per_tab_and_the_read_token_only_views(browser, tmp_path):
    s = Server(tmp_path / "home", "--token", TOKEN, "--read-token", READ, token=TOKEN)
    try:
        t = Page(browser, s.url)
        page = t.page
        page.goto(s.url + "/")
        page.get_by_label("Server token").fill("wrong-token-000")
        page.get_by_role("button", name="Connect").click()
        page.get_by_role("alert").wait_for()
        assert (
            page.get_by_role("alert").inner_text() == "this server needs its token: send 'Authorization: Bearer TOKEN'"
        )
        page.get_by_label("Server token").fill(TOKEN)
        page.get_by_role("button", name="Connect").click()
        page.get_by_text("Add photo or video…").wait_for()
        page.reload()  # kept for the tab: not asked again
        page.get_by_text("Add photo or video…").wait_for()
        assert page.get_by_label("Server token").count() == 0
        t.close()

        t = Page(browser, s.url)  # another tab of another session: asked again
        page = t.page
        page.goto(s.url + "/")
        page.get_by_label("Server token").fill(READ)
        page.get_by_role("button", name="Connect").click()
        page.get_by_text("View only: this token may only read").wait_for()
        assert page.get_by_text("Add photo or video…").count() == 0
        assert page.get_by_role("button", name="Render", exact=True).is_disabled()
        assert page.get_by_role("heading", name="Queue").is_visible()
        t.close()
    finally:
        s.stop()

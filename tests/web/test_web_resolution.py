"""What you see is what renders, on the web page (issue 44), in a real browser (Debian's chromium via
Playwright) against a real ``studio serve``: a script typed and spoken on the page renders with captions
(the spoken voice-over keeps its text; the job failed before: "captions need the script's text"), a
note the render gives (a presenter kept smaller than its fit) shows on the job's row, and a setting
changed on the page wins over the delivery's value even at its default."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import DEMO_AVATAR
from served import Server
from web_browser import available, chromium

httpx = pytest.importorskip("httpx")
pytestmark = pytest.mark.skipif(available() is not None, reason=str(available()))


def test_speak_captions_and_a_renders_note_on_the_page(tmp_path):
    import srt

    server = Server(tmp_path / "home")
    try:
        with chromium() as browser:
            ctx = browser.new_context(viewport={"width": 1280, "height": 900})
            page = ctx.new_page()
            page.set_default_timeout(60_000)
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(server.url + "/")
            page.get_by_label("Or type what the presenter says").fill("Good evening. Here is the news.")
            page.get_by_role("button", name="Speak").press("Enter")  # the keyboard: the layout's overlaps aside
            page.locator(".item.selected", has_text="Good_evening").wait_for()
            with page.expect_file_chooser() as chooser:
                page.get_by_text("Add photo or video…").click()
            chooser.value.set_files(str(DEMO_AVATAR))
            page.locator(".item.selected", has_text="astronaut").wait_for()
            page.locator("#setting-captions").select_option("srt")
            page.locator("#setting-delivery").select_option("broadcast-hd")
            page.get_by_role("button", name="Render", exact=True).press("Enter")
            row = page.get_by_test_id("job-1")
            row.locator(".badge.done").wait_for(timeout=240_000)
            # the note the render gave: the 512x512 photo is kept at 2x on the 1920x1080 canvas
            note = row.get_by_test_id("note")
            assert note.inner_text().startswith("note: the 512x512 avatar would be enlarged 2.1x to fit")
            # a setting changed on the page wins over the delivery's, even when set back to its default
            page.locator("#setting-codec").select_option("prores")
            page.locator("#setting-codec").select_option("h264")
            page.get_by_role("button", name="Render", exact=True).press("Enter")
            page.get_by_test_id("job-2").wait_for()
            second = httpx.get(f"{server.url}/v1/renders/2").json()
            assert (second["settings"]["codec"], second["settings"]["delivery"]) == ("h264", "broadcast-hd")
            assert second["output"].endswith(".mp4") and second["settings"]["canvas"] == "1920x1080"
            assert errors == []
        job = httpx.get(f"{server.url}/v1/renders/1").json()
        assert job["state"] == "done" and job["settings"]["delivery"] == "broadcast-hd"
        assert job["output"].endswith(".mov") and job["settings"]["canvas"] == "1920x1080"
        written = Path(job["result"]["files"]["captions"])
        path = written if written.is_absolute() else tmp_path / "home" / "renders" / written
        cues = list(srt.parse(path.read_text()))
        assert [c.content for c in cues] == ["Good evening.", "Here is the news."]
    finally:
        server.stop()

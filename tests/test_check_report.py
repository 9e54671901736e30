"""``studio check --report``: the visual report (HTML in Debian's Chromium, the PNG sheet) and the
jitter score, on a real 10 s classic-engine render of the demo avatar and edited copies of it.

* a voice whose second half is 6 frames late shows offset 0 on the strip's first seconds and -6 on
  its last ones, at those seconds of the page's SVG;
* a render whose lower face shakes from frame to frame (tests/check_cases.py ``shake``) scores a
  higher jitter than the steady render, and ``--fail-under jitter=`` tells them apart.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import check_cases as cc
import numpy as np
import pytest
from check_render import astro, home, render, voice, work  # noqa: F401 - fixtures

SPLIT_S = 4.2  # inside the voice's pause at 3.7-4.8 s: the late half starts there
LATE = 6  # frames


def _browser():
    spec = importlib.util.spec_from_file_location("web_browser", Path(__file__).parent / "web" / "web_browser.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def half_late(work, voice):
    """The voice with ``LATE`` frames of silence put in its pause at ``SPLIT_S``: from there on the
    video is ``LATE`` frames early (offset -LATE), before it in sync."""
    x = voice[0]
    cut = int(SPLIT_S * 16_000)
    gap = np.zeros(LATE * 640, np.float32)
    return cc.write_wav(work / "half-late.wav", np.concatenate([x[:cut], gap, x[cut:]])[: len(x)])


@pytest.fixture(autouse=True)
def _home(home, monkeypatch):
    monkeypatch.setenv("STUDIO_HOME", str(home))


def _svg_marks(page, row: str) -> dict[int, dict]:
    """Second -> the bounding box (page pixels) of the strip's mark of ``row`` for that second."""
    boxes = page.evaluate(
        """(row) => {
        const out = {};
        document.querySelectorAll('g[id^="' + row + '-"]').forEach(g => {
            const k = parseInt(g.id.slice(row.length + 1), 10);
            const r = g.getBoundingClientRect();
            out[k] = {x: r.x + r.width / 2, y: r.y + r.height / 2, top: r.top, bottom: r.bottom, h: r.height};
        });
        return out;
    }""",
        row,
    )
    return {int(k): v for k, v in boxes.items()}


def test_the_html_report_in_chromium_shows_a_known_offset_at_its_second(render, half_late, work, capsys):
    browser_mod = _browser()
    why = browser_mod.available()
    if why:
        pytest.skip(why)
    from studio.cli import main

    page_path = work / "late.html"
    rc = main(
        ["check", str(render), "--audio", str(half_late), "--avatar", "astro", "--frames", "2,6"]
        + ["--report", str(page_path), "--json"]
    )
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["report_files"] == [str(page_path)]
    per = out["per_second"]
    offsets = [r["offset"] for r in per]
    assert offsets[0] == 0 and offsets[1] == 0, offsets  # windows before the split: in sync
    assert all(o == -LATE for o in offsets[7:] if o is not None) and offsets[8] == -LATE, offsets
    text = page_path.read_text()
    import re

    assert not re.search(r"""(src|href)=["']?(https?:|//)|url\(\s*['"]?(https?:|//)|@import""", text)

    errors: list[str] = []
    requests: list[str] = []
    with browser_mod.chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.on("console", lambda m: errors.append(m.text) if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("request", lambda r: requests.append(r.url) if not r.url.startswith(("file:", "data:")) else None)
        page.goto(page_path.as_uri())
        page.wait_for_load_state("load")
        data = json.loads(page.locator("#studio-report").text_content())
        assert data["per_second"] == per  # the page carries the same report
        marks = _svg_marks(page, "offset")
        sync = _svg_marks(page, "sync")
        # every second with an offset has its mark, and only those
        assert sorted(marks) == [r["second"] for r in per if r["offset"] is not None]
        assert sorted(sync) == [r["second"] for r in per if r["sync"] is not None]
        xs = [marks[k]["x"] for k in sorted(marks)]
        steps = np.diff(xs) / np.diff(sorted(marks))
        assert np.all(steps > 0) and np.ptp(steps) < 1.0  # left to right, one second apart
        # the marks' heights follow the values: y is linear in the offset, lower for negative
        ks = sorted(marks)
        ys = np.array([marks[k]["y"] for k in ks])
        vals = np.array([per[k]["offset"] for k in ks], float)
        a, b = np.polyfit(vals, ys, 1)
        assert a < 0 and np.abs(ys - (a * vals + b)).max() < 1.5
        # the sync bars' heights are in proportion to their values (positive ones)
        pos = [k for k in sync if per[k]["sync"] > 0.05]
        ratio = [sync[k]["h"] / per[k]["sync"] for k in pos]
        assert pos and np.ptp(ratio) / np.mean(ratio) < 0.03
        # a click on second 8 shows its figures
        page.locator("g#offset-8").click()
        assert page.locator("#second").text_content().startswith("second 8:")
        assert "offset=-6" in page.locator("#second").text_content()
        # the pictures: the worst second, 2 s and 6 s, each beside the reference
        imgs = page.evaluate("() => Array.from(document.images).map(i => [i.alt, i.naturalWidth, i.complete])")
        assert len(imgs) == 6 and all(w == 176 and ok for _, w, ok in imgs), imgs
        assert [alt for alt, _, _ in imgs].count("reference") == 3
        page.screenshot(path=str(work / "late.png"), full_page=True)
    assert errors == [] and requests == []


def test_the_png_sheet_and_its_strip_axis(render, work, capsys):
    from PIL import Image

    from studio.cli import main

    sheet = work / "sheet.png"
    assert main(["check", str(render), "--avatar", "astro", "--report", str(sheet)]) == 0
    assert f"report:          {sheet}" in capsys.readouterr().out
    with Image.open(sheet) as im:
        assert im.format == "PNG" and im.width >= 1000 and im.height >= 1000
        x0, x1, seconds = im.text["studio-strip"].split(",")
    assert 0.05 < float(x0) < float(x1) <= 1.0 and int(seconds) == 10
    # an existing report is kept: the next one gets a numbered name
    assert main(["check", str(render), "--avatar", "astro", "--report", str(sheet)]) == 0
    assert (work / "sheet_002.png").is_file()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--report", "notes.txt"], ".html or .png"),
        (["--report", "/nonexistent-folder/r.html"], "does not exist"),
        (["--frames", "2,x"], "--frames"),
        (["--frames", "2,-1"], "--frames"),
        (["--frames", "99", "--report", "REPORT"], "the video lasts"),
    ],
)
def test_bad_report_options_are_one_sentence(render, work, capsys, args, words):
    from studio.cli import main

    args = [str(work / "bad.html") if a == "REPORT" else a for a in args]
    assert main(["check", str(render), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and err.count("\n") == 0 and err.startswith("studio: error:")
    assert not (work / "bad.html").exists()


def test_jitter_ranks_a_shaken_render_below_a_steady_one(render, work, voice, astro, capsys):
    from studio.cli import main
    from studio.core.quality import check_video, speech_of
    from studio.core.quality.video import probe_video

    silent = speech_of(voice[0], probe_video(render).frames, 25.0)[1]
    shaken = cc.edit_video(render, work / "shake.mp4", voice[1], astro, "shake", silent=silent)
    steady = check_video(render, None, astro)
    shook = check_video(shaken, None, astro)
    assert shook.jitter > 1.6 * steady.jitter > 0, (steady.jitter, shook.jitter)
    per_steady = [r["jitter"] for r in steady.per_second if r["jitter"] is not None]
    per_shook = [r["jitter"] for r in shook.per_second if r["jitter"] is not None]
    assert len(per_steady) == len(per_shook) == 10
    assert np.median(per_shook) > np.median(per_steady)
    # the other figures do not take the shake for something else
    assert shook.offset_frames == steady.offset_frames == 0
    limit = f"jitter={(steady.jitter + shook.jitter) / 2:.2f}"
    assert main(["check", str(render), "--avatar", "astro", "--fail-under", limit]) == 0
    capsys.readouterr()
    assert main(["check", str(shaken), "--avatar", "astro", "--fail-under", limit]) == 3
    assert "jitter" in capsys.readouterr().err

"""The check's per-second strip under the player: read from the report beside the video, one column
per second, a click on a column asks for that second (the player seeks there)."""

from __future__ import annotations

import json

from PySide6.QtCore import QPoint, Qt
from PySide6.QtTest import QTest


def _report(video, seconds: int, worst: int):
    per = [
        {
            "second": k,
            "speech": 0.0 if k == 0 else 1.0,
            "sync": 0.5 + 0.04 * k,
            "offset": 0 if k < 4 else -6,
            "jitter": 1.0 + k,
        }
        for k in range(seconds)
    ]
    data = {"per_second": per, "worst_second": worst, "verdict": "out of sync"}
    page = f'<html><body><script id="studio-report" type="application/json">{json.dumps(data)}</script></body></html>'
    video.with_name(video.stem + ".check.html").write_text(page)
    return data


def test_the_strip_reads_the_report_and_a_click_names_the_second(qtbot, tmp_path):
    from studio.ui.check_strip import CheckStrip

    video = tmp_path / "out.mp4"
    strip = CheckStrip()
    qtbot.addWidget(strip)
    strip.resize(600, 90)
    strip.load(str(video))  # no report beside it: hidden
    assert not strip.isVisible() and strip.seconds == 0
    _report(video, 8, 5)
    strip.load(str(video))
    strip.show()
    qtbot.waitExposed(strip)
    assert strip.seconds == 8 and strip.data["worst_second"] == 5
    for k in range(8):
        assert strip.second_at(strip.x_of(k)) == k
    with qtbot.waitSignal(strip.secondClicked, timeout=2000) as got:
        QTest.mouseClick(strip, Qt.MouseButton.LeftButton, pos=QPoint(int(strip.x_of(6)), 45))
    assert got.args == [6]
    img = strip.grab().toImage()  # painted: the worst second's red frame is on its column's edge
    x = int(strip.x_of(5) - (strip.width() - 48) / 16) + 1
    c = img.pixelColor(x, 45)
    assert c.red() > 150 and c.green() < 100, c.name()
    # a damaged report: hidden again, no error
    video.with_name("out.check.html").write_text("<html>not a report")
    strip.load(str(video))
    assert not strip.isVisible()

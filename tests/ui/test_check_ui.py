"""The lip-sync check in the window: on by default, its verdict in the Live panel and the Queue's row
(a badge, the sentence as its tooltip), and the jump to the worst second."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtTest import QTest
from ui_helpers import clip, load_demo, window  # noqa: F401 (fixture)

from studio.core.store import jobs


def test_a_render_is_checked_and_the_window_jumps_to_its_worst_second(window, qtbot, tmp_path):
    from studio.ui.queue_panel import CHECK_COL, ID_COL

    panel = window.render_panel
    assert panel.check_box.isChecked()  # on by default in the window (off on the command line)
    load_demo(window, qtbot, audio=clip(tmp_path, 6.0))
    panel.encoder.setCurrentText("x264")
    panel.preset.setCurrentText("ultrafast")
    panel.folder.setText(str(tmp_path / "renders"))
    with qtbot.waitSignal(window.worker.finished, timeout=180_000):
        job_id = window.render_now()
    assert window.store.get(job_id).settings["check"] is True

    def check():
        return (window.store.get(job_id).result or {}).get("check") or {}

    qtbot.waitUntil(lambda: check().get("state") == "done", timeout=240_000)
    c = check()
    assert c["verdict"] == "ok" and c["offset_frames"] == 0, c
    # the Live panel: the verdict and its sentence, and a button to the worst second
    qtbot.waitUntil(lambda: panel.live.check_label.text().startswith("check: ok"), timeout=10_000)
    assert c["reason"] in panel.live.check_label.text()
    assert panel.live.worst_btn.isVisible() == (c["worst_second"] is not None)
    # the Queue's row: a badge, the sentence as its tooltip
    q = window.queue_panel
    q.refresh()
    row = next(r for r in range(q.table.rowCount()) if int(q.table.item(r, ID_COL).text()) == job_id)
    badge = q.table.item(row, CHECK_COL)
    assert badge.text() == "✓ ok"
    assert c["reason"] in badge.toolTip()
    # double-click on the badge asks for the worst second
    if c["worst_second"] is not None:
        q.table.scrollToItem(badge)
        rect = q.table.visualItemRect(badge)
        with qtbot.waitSignal(q.worstClicked, timeout=5000) as asked:
            QTest.mouseClick(q.table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
            QTest.mouseDClick(q.table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
        assert asked.args == [window.store.get(job_id).output, float(c["worst_second"])]

    # the jump: the render plays in the app from that second
    output = window.store.get(job_id).output
    window.play_from(output, 3.0)
    player = window.player
    assert window.preview.stack.currentWidget() is player
    qtbot.waitUntil(lambda: player.player.duration() > 0, timeout=10_000)
    qtbot.waitUntil(lambda: player.player.position() >= 2900, timeout=10_000)
    assert player.player.position() < 6000

    # the check's report is a side file of the job, and its strip shows under the player: one column
    # per second of the report; a click on a column plays from that second
    files = window.store.get(job_id).result["files"]
    assert files["check_report"].endswith(".check.html")
    strip = player.strip
    assert strip.isVisible() and strip.seconds == 6 and strip.data["worst_second"] == c["worst_second"]
    player.player.pause()
    qtbot.waitUntil(lambda: not player.playing, timeout=5000)
    QTest.mouseClick(strip, Qt.MouseButton.LeftButton, pos=QPoint(int(strip.x_of(1)), strip.height() // 2))
    qtbot.waitUntil(lambda: 1000 <= player.player.position() < 1500, timeout=10_000)
    window.grab().save(str(tmp_path / "window-strip.png"))


def test_the_check_line_says_what_it_is_doing(window):
    panel = window.render_panel
    panel.live.show_check({"state": "running"}, "x.mp4")
    assert panel.live.check_label.text() == "check: measuring the lip sync…" and not panel.live.worst_btn.isVisible()
    panel.live.show_check({"state": "failed", "reason": "x.mp4: no face was found in any frame"}, "x.mp4")
    assert "no face was found" in panel.live.check_label.text()
    panel.live.show_check(
        {
            "state": "done",
            "verdict": "out of sync",
            "reason": "The video is 4 frames (160 ms) late.",
            "worst_second": 7,
        },
        "x.mp4",
    )
    assert panel.live.check_label.text().startswith("check: out of sync")
    assert not panel.live.worst_btn.isHidden() and "0:07" in panel.live.worst_btn.text()
    panel.live.show_check(None, "")
    assert panel.live.check_label.text() == "" and panel.live.worst_btn.isHidden()


@pytest.mark.parametrize("state", [jobs.DONE])
def test_the_setting_is_saved_with_the_window(window, state):
    from studio.ui import settings as cfg

    panel = window.render_panel
    panel.check_box.setChecked(False)
    panel.save()
    assert cfg.value(cfg.settings(), "render/check", bool) is False

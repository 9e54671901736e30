"""Every dock's contents fit its width at 1280x720, 1366x768 and 1920x1080, also after a render with
a long output name; the Queue shows three rows and elides long paths in the middle (the full path
is the tooltip); the first window fits the available screen area."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint
from PySide6.QtWidgets import QAbstractButton, QAbstractSpinBox, QComboBox, QLineEdit, QWidget
from ui_helpers import QUICK, window  # noqa: F401 (fixture)

# the window inside a screen of that size, less a 30 px title bar and a 28 px desktop panel
SIZES = [(1280, 720 - 58), (1366, 768 - 58), (1920, 1080 - 58)]


def _clipped(area) -> list[str]:
    """Inputs and buttons of a scroll area's contents that stick out past its visible width."""
    viewport = area.viewport()
    out = []
    for w in area.widget().findChildren(QWidget):
        if not isinstance(w, (QAbstractButton, QAbstractSpinBox, QComboBox, QLineEdit)) or not w.isVisibleTo(area):
            continue
        left = w.mapTo(viewport, QPoint(0, 0)).x()
        right = left + w.width()
        if left < 0 or right > viewport.width() + 1:
            out.append(f"{w.objectName() or type(w).__name__}{(left, right)} > {viewport.width()}")
    return out


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_docks_fit_their_width_and_the_queue_shows_three_rows(window, qtbot, tmp_path, size):
    w = window
    w.resize(*size)
    qtbot.waitUntil(lambda: w.size().width() == size[0], timeout=QUICK)
    assert w.minimumSizeHint().width() <= 1280 and w.minimumSizeHint().height() <= 720 - 58
    # a finished render with a long name, a long folder, a long stage line: nothing widens the dock
    p = w.render_panel
    long = tmp_path / ("a-very-long-folder-name-" * 4) / ("presenter_" * 8 + "final_take_crf20.mp4")
    long.parent.mkdir()
    p.folder.setText(str(long.parent))
    p.start("job")
    p.live.stage_label.setText("decode 12.0 s (40%) · " * 6)
    p.stop("done · 706 frames", str(long), "706 frames in 31.2 s · 22.6 fps · classic · libx264 · " * 3)
    from conftest import DEMO_AUDIO

    for _ in range(3):  # three jobs for one name: numbered _002, _003
        w.service.add(w.queue.request("anna", str(DEMO_AUDIO)).with_(output=str(long)), state="draft")
    w.queue_panel.refresh()
    qtbot.wait(0)
    qtbot.waitUntil(
        lambda: not _clipped(w.render_dock.widget()) and not _clipped(w.library_dock.widget()), timeout=QUICK
    )
    assert not _clipped(w.render_dock.widget())
    assert w.render_dock.widget().horizontalScrollBar().maximum() == 0  # it fits: no sideways scrolling
    for name in ("cancel_btn", "batch", "decoder", "crf", "queue_btn", "render_btn"):
        widget = getattr(p, name)
        assert widget.isVisibleTo(w), name
    # the Queue: three whole rows under its header, the output elided in the middle, full path as tooltip
    t = w.queue_panel.table
    rows_shown = (t.viewport().height()) // t.verticalHeader().defaultSectionSize()
    assert rows_shown >= 3, (t.viewport().height(), w.queue_dock.height())
    assert t.rowCount() == 3
    out = t.item(0, 7)  # the file's name; the full path is the tooltip
    assert out.toolTip().startswith(str(long.parent)) and out.text() == out.toolTip().rpartition("/")[2]
    from studio.ui.queue_panel import elide_path

    shown = elide_path(out.text(), t.fontMetrics(), t.columnWidth(7) - 12)  # elided in the middle where it must
    assert shown.startswith("presenter") and shown.endswith("crf20.mp4"), shown
    assert t.horizontalHeader().length() <= t.viewport().width() + 2  # no column cut off at the edge
    # the Queue's buttons are all reachable: shown, or behind the tool bar's » button
    bar = w.queue_panel.buttons
    assert bar.width() <= w.queue_dock.width()


def test_the_first_window_fits_the_available_screen(qtbot):
    from studio.ui.app import create_app
    from studio.ui.main_window import MainWindow

    create_app([])
    w = MainWindow()  # a fresh data folder: the first launch
    qtbot.addWidget(w)
    avail = w.screen().availableGeometry()
    allow_w, allow_h = w.state.FRAME_ALLOWANCE
    assert w.width() + allow_w <= avail.width() and w.height() + allow_h <= avail.height()
    assert avail.contains(w.geometry())
    w.show()
    qtbot.waitExposed(w)
    frame = w.frameGeometry()
    assert avail.top() <= frame.top() and frame.bottom() <= avail.bottom()  # the title and status bars show
    if avail.width() >= w.minimumSizeHint().width():  # (the offscreen screen is narrower than 1280)
        assert avail.left() <= frame.left() and frame.right() <= avail.right()
    w.close_confirmed = True


def test_a_long_output_path_keeps_its_file_name_when_elided(qtbot):
    from PySide6.QtGui import QFont, QFontMetrics

    from studio.ui.app import create_app
    from studio.ui.queue_panel import elide_path

    create_app([])
    fm = QFontMetrics(QFont())
    path = "/home/producer/projects/2026/evening-news/renders/anna_intro_auto_crf20.mp4"
    width = fm.horizontalAdvance("…/renders/anna_intro_auto_crf20.mp4") + 4
    shown = elide_path(path, fm, width)
    assert shown.endswith("/anna_intro_auto_crf20.mp4") and "…" in shown and shown.startswith("/")
    assert fm.horizontalAdvance(shown) <= width
    assert elide_path(path, fm, 10_000) == path  # room enough: whole
    tiny = elide_path(path, fm, fm.horizontalAdvance("anna…mp4") + 2)
    assert (
        tiny.startswith("an")
        and tiny.endswith("mp4")
        and fm.horizontalAdvance(tiny) <= fm.horizontalAdvance("anna…mp4") + 2
    )

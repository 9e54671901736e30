"""The render panel's "Compile the networks" box: a real click, saved with the settings, restored,
and carried by the jobs it queues (the service then keeps a compiling engine warm apart)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from ui_helpers import window  # noqa: F401 (fixture)


def test_the_compile_box_is_saved_restored_and_travels_with_queued_jobs(window, qtbot):
    from studio.ui.render_panel import RenderPanel

    panel = window.render_panel
    assert not panel.compile_box.isChecked() and panel.render_settings().compile is False
    plain = window.queue.add("astronaut", "/x/a.wav", start=False)
    qtbot.mouseClick(panel.compile_box, Qt.MouseButton.LeftButton)
    assert panel.compile_box.isChecked() and panel.render_settings().compile is True
    compiled = window.queue.add("astronaut", "/x/a.wav", start=False)
    assert window.store.get(plain).settings.get("compile") in (False, None)
    assert window.store.get(compiled).settings["compile"] is True
    from studio.ui.queue_panel import settings_text

    panel.engine.setCurrentText("musetalk")
    shown = window.queue.add("astronaut", "/x/a.wav", start=False)
    assert "taesd compiled" in settings_text(window.store.get(shown))
    assert "compiled" not in settings_text(window.store.get(plain))
    panel.save()
    again = RenderPanel()
    qtbot.addWidget(again)
    assert again.compile_box.isChecked() and again.render_settings().compile is True

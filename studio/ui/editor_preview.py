"""What the preview shows while editing: the selected avatar's frame, the exact frame at the playhead
(scrubbed on the render worker), a running render's previews, with the face box and blend mask when
asked; and the timeline's faceless band of a video avatar.

    p = EditorPreview(session, library, timeline, preview, queue, controls, worker, transport, parent=window)
    p.error.connect(show_error)    # follows the session (avatar, analysis, rate) and the playhead

It is handed exactly what it reads and drives: the ``EditorSession``, the Library (its face box and
blend mask boxes), the timeline view, the preview, the render queue (is a job rendering?), the
transport controls (is the finished render shown? seek it), the render worker (scrub frames) and the
transport (is it playing?). It tells the window things by signals: ``error``, ``avatarLoaded``,
``scrubShown``.

Every caption's timecode and frame number come from the ``EditorSession`` at the rate of the frames
shown: a scrub frame at the timeline's rate, a render's at its job's. A change of avatar or rate
shows the new frame (or the avatar) at once, never the old caption.
"""

from __future__ import annotations

import time

from PySide6.QtCore import QObject, QTimer, Signal

from studio.ui.workers import error_text, run_in_background

NO_AVATAR = "No avatar yet: import or drop a photo or a video (and a voice-over)"


class EditorPreview(QObject):
    SCRUB_HOLD_S = 3.0  # a frame scrubbed during a render stays on screen this long before previews resume

    error = Signal(str)  # one readable sentence (the window's banner)
    avatarLoaded = Signal(object)  # AvatarAssets of the selected avatar
    scrubShown = Signal(float, int)  # seconds, frame index of a scrub frame now on screen

    def __init__(self, session, library, timeline, preview, queue, controls, worker, transport, parent=None):
        super().__init__(parent)
        self.session, self.library, self.timeline, self.preview = session, library, timeline, preview
        self.queue, self.controls, self.worker, self.transport = queue, controls, worker, transport
        self.assets = None  # the selected avatar's AvatarAssets (loaded in the background)
        self.last_scrub: tuple[float, int] | None = None
        self._scrub_hold_until = 0.0
        self._rescrub = QTimer(self)
        self._rescrub.setSingleShot(True)
        self._rescrub.setInterval(250)
        self._rescrub.timeout.connect(self.refresh)
        self.session.events.changed.connect(self._session_changed)

    @property
    def preview_free(self) -> bool:
        """No render runs and the finished render is not on screen: the preview shows the editor's frames."""
        return self.queue.current is None and not self.controls.player_shown

    # ---- the avatar ---------------------------------------------------------------------

    def avatar_selected(self, name: str) -> None:
        self.assets = None
        self.last_scrub = None  # an old avatar's frame and timecode never stay on screen
        self.session.set_avatar_rate(None)
        if not name:
            if self.preview_free:
                self.preview.clear(NO_AVATAR)
            return
        from studio.core.avatars.library import load

        if self.preview_free:
            self.preview.caption.setText(f"loading avatar “{name}”…")

        def loaded(assets) -> None:
            if self.session.avatar != name:
                return
            self.assets = assets
            self.session.set_avatar_rate(assets.fps if getattr(assets, "kind", "") == "video" else None)
            self.show_avatar_frame()
            self.mark_faceless()
            self.avatarLoaded.emit(assets)
            if self.session.script and not self.session.stale:
                self.scrub(self.timeline.position)

        def failed(message: str) -> None:
            if self.session.avatar == name:  # not for an avatar the user has since left or removed
                self.error.emit(message)

        run_in_background(load, name, on_done=loaded, on_error=failed)

    def avatar_preparing(self, name: str) -> None:
        if self.assets is None and self.preview_free:
            self.preview.caption.setText(f"preparing avatar “{name}”…")

    def show_avatar_frame(self) -> None:
        if self.assets is None or self.queue.current is not None:
            return
        a = self.assets
        index = 0
        if self.last_scrub is not None:
            index = self.avatar_index(self.last_scrub[1]) if hasattr(a, "cycle_index") else 0
        frame = a.frames[index]
        if getattr(a, "alpha", None) is not None:  # a transparent presenter: over the checkerboard
            import numpy as np

            frame = np.dstack([frame, a.alpha[index]])
        image, extra = self.decorate(frame, index)
        caption = f"{self.session.avatar} · {a.width}x{a.height} · {a.N} frame(s){extra}"
        self.preview.show_now(image, caption, -1)

    def decorate(self, image, avatar_index: int):
        """``image`` with the face box and/or blend mask of avatar frame ``avatar_index`` drawn on it,
        as the Library's two boxes say; and the caption's note."""
        a, lib = self.assets, self.library
        box, mask = lib.show_box.isChecked(), lib.show_mask.isChecked()
        if a is None or not (box or mask) or image.shape[:2] != a.frames.shape[1:3]:
            return image, ""
        try:
            import numpy as np

            from studio.core.avatars.faces import overlay_image

            i = int(avatar_index)
            blend = a.masks[i] if mask else np.zeros_like(a.masks[i])
            rgb = image[..., :3]
            out = overlay_image(rgb, a.boxes[i], blend, a.landmarks[i] if mask else None, bool(a.face_ok[i]))
            if image.shape[-1] == 4:  # the drawing on a transparent presenter keeps its alpha
                out = np.dstack([out, image[..., 3]])
        except Exception as exc:  # noqa: BLE001
            self.error.emit(error_text(exc))
            return image, ""
        return out, " · " + " + ".join(n for n, on in (("face box", box), ("blend mask", mask)) if on)

    def overlay_toggled(self) -> None:
        if self.last_scrub is not None and self.session.analysis is not None and self.queue.current is None:
            self.scrub(self.timeline.position)  # the scrub frame comes back decorated
        else:
            self.show_avatar_frame()

    def mark_faceless(self) -> None:
        """Mark the output frames whose avatar frame has no face (video avatars) on the timeline."""
        a, analysis, tl = self.assets, self.session.analysis, self.timeline
        if a is None or analysis is None:
            tl.set_faceless([])
            return
        import numpy as np

        from studio.core.media.analysis import runs

        ok = np.asarray(a.face_ok, bool)
        if ok.all():
            tl.set_faceless([])
            return
        bad = ~ok[np.asarray(self.avatar_index(np.arange(analysis.frames)))]
        tl.set_faceless(runs(bad))

    def avatar_index(self, frame):
        """The avatar frame output frame ``frame`` (an int or an array) shows, at the timeline's rate."""
        from studio.core.media.rates import map_frames

        a, rate = self.assets, self.session.grid_rate
        return a.cycle_index(map_frames(frame, rate, getattr(a, "fps", rate)))

    # ---- scrub frames -------------------------------------------------------------------

    def scrub(self, seconds: float) -> None:
        """The playhead moved: the exact frame there (or the finished render's, while it is shown)."""
        if self.controls.player_shown:  # the finished render is on screen: the timeline seeks it
            self.controls.seek_seconds(seconds)
            return
        s = self.session
        if not s.avatar or not s.script or s.analysis is None:
            return
        self.worker.request_frame(s.avatar, s.script, s.frame_settings(), seconds)

    def refresh(self) -> None:
        """Show what is current now: the frame at the playhead, else the avatar (never a stale caption)."""
        if not self.preview_free:
            return
        s = self.session
        if s.analysis is not None and s.avatar and s.script and not s.stale:
            self.scrub(self.timeline.position)
        else:
            self.show_avatar_frame()

    def _session_changed(self, key, _before, _after) -> None:
        if key in ("threshold", "min_silence", "crossfade"):  # they change which frames are the plain avatar
            self._rescrub.start()  # the frame at the playhead depends on it: shown again shortly

    def frame_ready(self, seconds: float, index: int, image) -> None:
        """A scrub frame: shown also during a render (the render's previews wait a few seconds)."""
        from studio.core.render.plan import frame_index

        # the caption names the timeline's frame at that time, as the transport does (the render's index
        # counts at the output rate, which differs while a changed rate's analysis is on its way)
        index = frame_index(seconds, self.session.grid_rate)
        self.last_scrub = (seconds, index)
        extra = ""
        if self.assets is not None:
            image, extra = self.decorate(image, self.avatar_index(index))
        during = " · while rendering" if self.queue.current is not None else ""
        if self.transport.playing and index != self.timeline.frame:
            during += " · playing (the picture catches up)"
        if self.queue.current is not None:
            self._scrub_hold_until = time.monotonic() + self.SCRUB_HOLD_S
        caption = f"{self.session.frame_caption(index)} · exact render preview{extra}{during}"
        self.preview.offer(image, caption, index)

    def render_preview(self, image, caption: str, index: int) -> None:
        """The running render's preview, unless the editor scrubbed a frame a moment ago."""
        if time.monotonic() < self._scrub_hold_until:
            return
        self.preview.offer(image, caption, index)

    def shown(self, index: int) -> None:
        if self.last_scrub is not None and index == self.last_scrub[1]:
            self.scrubShown.emit(*self.last_scrub)

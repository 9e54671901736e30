"""Rendering one clip: the plan (which frames need the engine, crossfades, batches), the renderer's one
batch loop and ``frame_at``, and compositing."""

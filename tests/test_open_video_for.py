"""One way from the settings to a writer (issue 34 item 3): ``render.outputs.open_video_for``, and one
set of encode defaults (the settings schema's)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from types import SimpleNamespace

import av
import numpy as np

from studio.core.render.outputs import open_video_for
from studio.core.settings import RenderSettings

ROOT = Path(__file__).resolve().parent.parent


def test_the_writers_default_to_the_schema():
    from studio.core.media.codec_writer import open_codec_writer
    from studio.core.media.writer import open_video

    schema = RenderSettings()
    for fn in (open_video, open_codec_writer):
        params = inspect.signature(fn).parameters
        assert params["preset"].default == schema.preset == "ultrafast", fn.__name__
        assert params["crf"].default == schema.crf, fn.__name__
    assert inspect.signature(open_video).parameters["encoder"].default == schema.encoder


def test_the_settings_pick_the_writer(tmp_path):
    """The encoder follows the settings' codec and preset (ProRes: prores_ks from "slow" on), and an
    explicit codec overrides the setting (a chunk is H.264)."""
    frames = np.random.default_rng(3).integers(0, 255, (4, 64, 96, 3), dtype=np.uint8)
    a = SimpleNamespace(width=96, height=64)  # the avatar's size; nothing of it is said to stay still
    names = {}
    for preset in ("ultrafast", "slow"):
        out = tmp_path / f"{preset}.mov"
        s = RenderSettings(codec="prores", preset=preset)
        with open_video_for(s, out, a, fps=25, total_frames=4, workers=1, changing=None) as w:
            names[preset] = w.name
            w.write(frames, indices=np.arange(4))
        with av.open(str(out)) as c:
            assert c.streams.video[0].codec_context.name == "prores" and len(list(c.decode(video=0))) == 4
    assert names == {"ultrafast": "prores_aw", "slow": "prores_ks"}
    out = tmp_path / "chunk.mp4"
    s = RenderSettings(codec="prores", encoder="x264")
    with open_video_for(s, out, a, fps=25, total_frames=4, codec="h264", changing=None) as w:
        w.write(frames, indices=np.arange(4))
    with av.open(str(out)) as c:
        assert c.streams.video[0].codec_context.name == "h264"


def test_no_render_path_copies_the_encode_settings():
    """The renderer, the several-GPU render and the chunks open their writers through open_video_for;
    none calls open_video itself or passes encoder/crf/preset."""
    for rel in ("studio/core/render/renderer.py", "studio/core/scale/multigpu.py", "studio/core/scale/chunks.py"):
        tree = ast.parse((ROOT / rel).read_text())
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
        names = [c.func.id for c in calls]
        assert "open_video_for" in names and "open_video" not in names, rel
        for c in calls:
            if c.func.id == "open_video_for":
                assert not {k.arg for k in c.keywords} & {"encoder", "crf", "preset"}, rel

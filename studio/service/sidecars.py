"""The files a render writes beside its video: captions (.srt/.vtt/.scc), the OpenTimelineIO timeline (.otio)
and, beside an MXF, the Avid AAF linking it (.aaf).

    result = write_sidecars(result, request)       # RenderResult with ``files`` naming what was written
    add_worst_second(result, request, 12)          # the check's worst second into the .otio, once known

Every placement's result goes through here (``driver.Render.run``), except a render on a Studio
server: that server writes its own beside its output. The sidecars take the video's final name
(``out_002.srt`` beside ``out_002.mp4``); an existing file is replaced only with ``overwrite``.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from studio.core.render.results import RenderResult

log = logging.getLogger(__name__)


def check_captions(request) -> None:
    """Before any work, one sentence for: a side file that would replace one of the command's inputs
    (``render --script out/b.srt --captions srt -o out/b.mp4``, with or without ``--overwrite``), or
    captions asked for without a script to caption."""
    from studio.core.store.fsutil import refuse_input

    s = request.settings
    out = Path(request.output)
    for wanted, suffix in ((s.captions in ("srt", "burn"), ".srt"), (s.captions == "vtt", ".vtt"), (s.otio, ".otio")):
        if wanted:
            refuse_input(out.with_suffix(suffix))
    if s.captions == "off":
        return
    from studio.core.captions import script_sentences

    script_sentences(request.audio, s.script)


def write_sidecars(result: RenderResult, request, worst_second: int | None = None) -> RenderResult:
    s = request.settings
    if s.captions == "off" and not s.otio and not s.aaf:
        return result
    from studio.core.media.rates import parse_rate

    rate = parse_rate(result.frame_rate or "25")
    first = int(request.frames[0]) if request.frames else 0
    end = first + int(result.frames)
    out = Path(result.output)
    files = dict(result.files)
    if s.captions != "off":
        from studio.core.captions import make_cues, script_sentences, write_captions

        cues = make_cues(script_sentences(request.audio, s.script))
        kind = {"vtt": "vtt", "scc": "scc"}.get(s.captions, "srt")
        from studio.core.render.markers import start_frame

        tc_s = float((start_frame(s.start_tc, rate) + first) / rate)  # the file's first frame's timecode
        files["captions"] = str(
            write_captions(
                cues,
                out.with_suffix(f".{kind}"),
                offset_s=float(first / rate),
                duration_s=float((end - first) / rate),  # cut to the clip: no cue past its end
                timecode_s=tc_s,
                overwrite=request.overwrite,
            )
        )
    if s.otio:
        files["otio"] = str(_otio(result, request, rate, first, end, worst_second))
    if s.aaf:  # Avid: an AAF linking the MXF (render.aaf)
        from studio.core.render.aaf import write_aaf
        from studio.core.render.markers import start_label

        files["aaf"] = str(
            write_aaf(
                out.with_suffix(".aaf"),
                mxf=out,
                rate=rate,
                start_tc=start_label(s.start_tc, rate, first),
                frames=int(result.frames),
                interlaced=s.scan == "interlaced",
                overwrite=request.overwrite,
            )
        )
    return dataclasses.replace(result, files=files)


def _otio(result: RenderResult, request, rate, first: int, end: int, worst_second: int | None) -> Path:
    from studio.core.render.clip import Clip
    from studio.core.render.handoff import write_otio
    from studio.core.render.markers import markers_of

    clip = Clip(request.avatar, request.audio, request.render_settings)
    plan = clip.plan
    path = Path(result.output).with_suffix(".otio")
    existing = result.files.get("otio")
    return write_otio(
        existing or path,
        overwrite=bool(existing) or request.overwrite,
        video=result.output,
        audio=request.audio,
        rate=rate,
        first=first,
        end=end,
        audio_frames=plan.frames,
        start_tc=request.settings.start_tc,
        markers=markers_of(request.settings, plan, rate),
        worst_second=None if worst_second is None else float(worst_second) + float(first / rate),
        name=Path(result.output).stem,
    )


def add_worst_second(result: RenderResult, request, worst_second: int | None) -> RenderResult:
    """The check's worst second (seconds into the written file) added to the render's .otio."""
    if worst_second is None or not request.settings.otio or "otio" not in result.files:
        return result
    from studio.core.media.rates import parse_rate

    rate = parse_rate(result.frame_rate or "25")
    first = int(request.frames[0]) if request.frames else 0
    _otio(result, request, rate, first, first + int(result.frames), worst_second)
    return result

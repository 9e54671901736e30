"""Hand-off to an editor's NLE: an OpenTimelineIO timeline of a render (``opentimelineio``).

    write_otio("out.otio", video="out.mp4", audio="voice.wav", rate=Fraction(25), first=0, end=880,
               start_tc="10:00:00:00", markers=[Marker(...)], worst_second=12)

The timeline starts at the file's own timecode (``global_start_time``: the start timecode, or for an
in/out range its in point's) and holds two tracks: V1, the rendered clip (its media range starts at the
file's own timecode, as its ``tmcd`` track says), and
A1, the voice-over (the stretch of the original file the render used: an in/out range starts at its in
point). Markers (the user's, each pause of a second or more, the check's worst second) are timeline
markers on the frames they mark, coloured by kind; the in/out range is kept in the timeline's metadata.
The ``.otio`` JSON is what Resolve 18.5+, Premiere 25+ (through its OTIO import) and Kdenlive 25.04+ read.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

from studio.core.render.markers import Marker, start_frame

COLORS = {"user": "GREEN", "silence": "BLUE", "check": "RED"}


def timeline(
    *,
    video: str | Path,
    audio: str | Path,
    rate: Fraction,
    first: int,
    end: int,
    audio_frames: int,
    start_tc: str = "00:00:00:00",
    markers: list[Marker] | None = None,
    worst_second: float | None = None,
    name: str = "",
):
    """The ``otio.schema.Timeline`` of a render of frames ``[first, end)``."""
    import opentimelineio as otio

    fps = float(rate)
    T = end - first
    # the file's first frame's timecode, as a frame count: a range starts at its in point's timecode (the
    # file's timecode track says so too), so every range of the timeline is in the file's own timecode
    tc0 = start_frame(start_tc, rate) + int(first)

    def rt(frames: float):
        return otio.opentime.RationalTime(frames, fps)

    def tr(start: float, dur: float):
        return otio.opentime.TimeRange(rt(start), rt(dur))

    video = Path(video).resolve()
    audio = Path(audio).resolve()
    tl = otio.schema.Timeline(name=name or video.stem, global_start_time=rt(tc0))
    tl.metadata["studio"] = {"in": int(first), "out": int(end), "rate": str(rate), "start_tc": start_tc}
    v1 = otio.schema.Track(name="V1", kind=otio.schema.TrackKind.Video)
    v1.append(
        otio.schema.Clip(
            name=video.name,
            media_reference=otio.schema.ExternalReference(target_url=video.as_uri(), available_range=tr(tc0, T)),
            source_range=tr(tc0, T),
        )
    )
    a1 = otio.schema.Track(name="A1", kind=otio.schema.TrackKind.Audio)
    a1.append(
        otio.schema.Clip(
            name=audio.name,
            media_reference=otio.schema.ExternalReference(
                target_url=audio.as_uri(), available_range=tr(0, max(audio_frames, end))
            ),
            source_range=tr(first, T),
        )
    )
    tl.tracks.append(v1)
    tl.tracks.append(a1)
    marks = list(markers or [])
    if worst_second is not None:
        marks.append(Marker(int(round(worst_second * fps)), "Check: worst second", "check", max(1, round(fps))))
    for m in sorted(marks, key=lambda m: m.frame):
        if not first <= m.frame < end:
            continue
        tl.tracks.markers.append(
            otio.schema.Marker(
                name=m.name,
                marked_range=tr(m.frame - first, min(m.frames, end - m.frame)),
                color=getattr(otio.schema.MarkerColor, COLORS.get(m.kind, "YELLOW")),
                metadata={"studio": {"kind": m.kind, "frame": int(m.frame)}},
            )
        )
    return tl


def write_otio(path: str | Path, *, overwrite: bool = True, **kw) -> Path:
    """``timeline(**kw)`` written to ``path`` (atomically); returns the name written."""
    import opentimelineio as otio

    from studio.core.store.fsutil import atomic_output

    tl = timeline(**kw)
    with atomic_output(Path(path), overwrite=overwrite) as written:
        Path(written.tmp).write_text(otio.adapters.write_to_string(tl, "otio_json"), encoding="utf-8")
    return Path(str(written.final))

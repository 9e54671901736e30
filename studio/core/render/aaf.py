"""An Avid hand-off: an AAF that links a rendered MXF (``pyaaf2``), as the ``.otio`` does for other NLEs.

    write_aaf("news.aaf", mxf="news.mxf", rate=Fraction(25), start_tc="10:00:00:00", frames=60)

The AAF holds a master mob (the clip a bin shows, named after the file) whose slots point at a file source
mob: that mob has the MXF's own file package UMID (read from the MXF's header by pyaaf2's MXF reader), its
tracks' slot IDs (picture, the 8 sound tracks), a timecode slot at the clip's start timecode, and a
multiple descriptor (a CDCI picture descriptor, a PCM descriptor a track) whose network locator is the
MXF's ``file://`` URL: what Media Composer relinks by. pyaaf2's own ``link_external_mxf`` takes OP-Atom
files only (and its OP1a path fails on the MPEG-2 descriptor), so the mobs are made here with its
object model. Not tried in Media Composer here.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path


def mxf_tracks(mxf: str | Path) -> tuple[object, list[tuple[int, str]]]:
    """The MXF's file package UMID and its essence tracks as ``(slot_id, "picture"|"sound")``."""
    import aaf2.mxf

    m = aaf2.mxf.MXFFile(str(mxf))
    package = next(p for p in m.packages() if type(p).__name__ == "MXFSourcePackage")
    tracks = []
    for track in package.iter_strong_refs("Slots"):
        try:
            kind = str(track.resolve_ref("Segment").data.get("DataDef", ""))
        except Exception:  # noqa: BLE001 - a static or event track without a sequence
            continue
        if kind in ("DataDef_Picture", "DataDef_Sound"):
            tracks.append((int(track.data["SlotID"]), "picture" if kind == "DataDef_Picture" else "sound"))
    return package.mob_id, tracks


def write_aaf(
    path: str | Path,
    *,
    mxf: str | Path,
    rate: Fraction,
    start_tc: str,
    frames: int,
    interlaced: bool = False,
    name: str = "",
    overwrite: bool = True,
) -> Path:
    """The AAF linking ``mxf`` written to ``path`` (atomically); returns the name written."""
    import aaf2

    from studio.core.media.rates import nominal
    from studio.core.render.markers import start_frame
    from studio.core.store.fsutil import atomic_output

    mxf = Path(mxf).resolve()
    mob_id, tracks = mxf_tracks(mxf)
    rate = Fraction(rate)
    edit_rate = f"{rate.numerator}/{rate.denominator}"
    T = int(frames)
    with atomic_output(Path(path), overwrite=overwrite) as written:
        with aaf2.open(str(written.tmp), "w") as f:
            src = f.create.SourceMob(mxf.name)
            src.mob_id = mob_id
            desc = f.create.MultipleDescriptor()
            desc["SampleRate"].value = edit_rate
            desc["Length"].value = T
            loc = f.create.NetworkLocator()
            loc["URLString"].value = mxf.as_uri()
            desc["Locator"].append(loc)
            for _, kind in tracks:
                desc["FileDescriptors"].append(
                    _picture(f, edit_rate, T, interlaced) if kind == "picture" else _pcm(f, edit_rate, T)
                )
            src.descriptor = desc
            f.content.mobs.append(src)
            for slot_id, kind in tracks:
                src.create_empty_slot(edit_rate, media_kind=kind, slot_id=slot_id).segment.length = T
            tc = f.create.Timecode(nominal(rate), drop=";" in start_tc)
            tc.start = start_frame(start_tc, rate)
            tc.length = T
            tc_slot = src.create_empty_slot(edit_rate, media_kind="timecode", slot_id=max(s for s, _ in tracks) + 1)
            tc_slot.segment = tc
            master = f.create.MasterMob(name or mxf.stem)
            f.content.mobs.append(master)
            for slot_id, _ in tracks:
                slot = master.create_timeline_slot(edit_rate, slot_id=slot_id)
                slot.segment = src.create_source_clip(slot_id, length=T)
    return Path(str(written.final))


def _picture(f, edit_rate: str, frames: int, interlaced: bool):
    v = f.create.CDCIDescriptor()
    v["SampleRate"].value = edit_rate
    v["Length"].value = frames
    v["StoredWidth"].value = 1920
    v["StoredHeight"].value = 540 if interlaced else 1080
    v["FrameLayout"].value = "SeparateFields" if interlaced else "FullFrame"
    v["VideoLineMap"].value = [21, 584] if interlaced else [42, 0]
    v["ImageAspectRatio"].value = "16/9"
    v["ComponentWidth"].value = 8
    v["HorizontalSubsampling"].value = 2
    return v


def _pcm(f, edit_rate: str, frames: int):
    a = f.create.PCMDescriptor()
    a["SampleRate"].value = edit_rate
    a["Length"].value = frames
    a["AudioSamplingRate"].value = 48_000
    a["Channels"].value = 1
    a["QuantizationBits"].value = 24
    a["BlockAlign"].value = 3
    a["AverageBPS"].value = 144_000
    return a

"""What a job in the Queue makes, in a producer's words: its delivery, picture size, frame rate, codec,
loudness, captions and OpenTimelineIO file, from the job's settings with its delivery applied
(``studio.core.settings.with_delivery``, the rule every render follows).

    short, full = makes(job)   # "web-720p · 1280x720 · 30 fps · H.264 · captions (SRT) · OTIO"
                               # full: one line each ("Delivery: web-720p", "Picture: 1280x720", ...)
"""

from __future__ import annotations

CODECS = {
    "h264": "H.264",
    "hevc": "HEVC",
    "prores": "ProRes 422 HQ",
    "prores4444": "ProRes 4444",
    "dnxhr": "DNxHR",
    "vp9": "VP9",
}
CAPTIONS = {"srt": "captions (SRT)", "vtt": "captions (WebVTT)", "burn": "captions burnt in"}


def makes(job) -> tuple[str, str]:
    """(one line for the cell, the whole of it for the tooltip) of ``job`` (a ``studio.service`` job)."""
    from studio.core.media.rates import rate_text

    settings = job.settings or {}
    try:
        from studio.core.settings import parse_dict, with_delivery
        from studio.service.request import explicit_field

        # the row's settings are resolved (its explicit names kept); a row of an earlier Studio is resolved here
        s = with_delivery(parse_dict(settings), explicit_field(settings))[0]
    except Exception:  # noqa: BLE001 - a damaged row or a delivery removed since: its own words
        s = None
    rate = job_rate(job)
    width, height = _size(job, s)
    codec = CODECS.get(getattr(s, "codec", "h264"), str(getattr(s, "codec", "")))
    delivery = getattr(s, "delivery", "") or ""
    captions = CAPTIONS.get(getattr(s, "captions", "off"), "")
    otio = bool(getattr(s, "otio", False))
    loud = getattr(s, "loudness", None)
    size = f"{width}x{height}" if width and height else "the avatar's size"
    short = [delivery, size, f"{rate_text(rate)} fps" if rate else "", codec]
    short += [f"{loud:g} LUFS" if loud is not None else "", captions, "OTIO" if otio else ""]
    full = [
        f"Delivery: {delivery or 'none'}",
        f"Picture: {size}",
        f"Frame rate: {rate_text(rate)} fps" if rate else "",
        f"Codec: {codec}" + (f", CRF {s.crf}" if s is not None and s.codec in ("h264", "hevc", "vp9") else ""),
        f"Loudness: {loud:g} LUFS" if loud is not None else "Loudness: as recorded",
        f"Captions: {captions or 'none'}",
        f"Timeline for editors (OTIO): {'yes' if otio else 'no'}",
        f"Engine: {getattr(s, 'engine', 'auto')}",
        f"Output: {job.output}",
    ]
    return " · ".join(x for x in short if x), "\n".join(x for x in full if x)


def job_rate(job):
    """The job's frame rate: its result's, else the one resolved when it was queued, else its setting
    (for auto, its avatar's own); the default grid where none can be read (a server's avatar)."""
    from studio.core.media.rates import DEFAULT_RATE, parse_rate

    result, settings = job.result or {}, job.settings or {}
    for value in (result.get("frame_rate"), settings.get("rate")):
        if value:
            try:
                return parse_rate(value)
            except Exception:  # noqa: BLE001 - a damaged row: the next source
                continue
    try:
        from studio.core.avatars.library import output_rate_for

        return output_rate_for(settings.get("fps"), job.avatar)
    except Exception:  # noqa: BLE001 - an avatar not here (a server's)
        return DEFAULT_RATE


def _size(job, s) -> tuple[int, int]:
    """The picture's (width, height): the result's, the canvas, or the avatar's own size (0, 0: unknown)."""
    result = job.result or {}
    if result.get("width") and result.get("height"):
        return int(result["width"]), int(result["height"])
    canvas = getattr(s, "canvas_size", None)
    if canvas:
        return int(canvas[0]), int(canvas[1])
    try:
        from studio.core.avatars.cache import read_meta
        from studio.core.avatars.library import library_dir

        meta = read_meta(library_dir() / str(job.avatar)) if "/" not in str(job.avatar) else None
        return int((meta or {}).get("width") or 0), int((meta or {}).get("height") or 0)
    except Exception:  # noqa: BLE001 - no library here
        return 0, 0

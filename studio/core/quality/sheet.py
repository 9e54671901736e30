"""The check's visual report: a self-contained HTML page (no network) and a one-page PNG sheet.

    pics = pictures(report, video, avatar, at_seconds=(2, 6, 12))  # mouth crops beside the reference's
    html = report_html(report, pics)                               # str: one file, pictures inlined
    png = report_png(report, pics)                                 # bytes: the one-page sheet
    write_report(report, "report.html", pics)                      # by its suffix, atomically

The strip (one row per figure, a column per second; the silences shaded, the worst second marked)
is drawn by matplotlib (its SVG inlined into the page, its PNG in the sheet): the
sync per second (the local correlation at the clip's offset, and each second's own best offset),
the mouth's opening against the voice's energy per frame, silence motion, sharpness and jitter.
Each second's mark in the SVG has an id (``offset-3``, ``sync-3``, ... for second 3) and the page
carries the report's JSON (``<script id="studio-report" type="application/json">``), so a click on
a second shows its figures (the window's strip reads the same JSON). The PNG carries the strip's x
axis as text (``studio-strip``: ``x0,x1,seconds`` as fractions of the image's width), so a program
can map a point of the sheet to a second.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from studio.core.errors import InputError
from studio.core.quality.report import Report

THUMB = 176  # px: a mouth picture's side
ROWS = ("sync", "offset", "opening", "silence_motion", "sharpness", "jitter")
ROW_TITLES = {
    "sync": "sync (local r)",
    "offset": "offset (frames)",
    "opening": "mouth vs voice",
    "silence_motion": "silence motion",
    "sharpness": "sharpness",
    "jitter": "jitter (%/f²)",
}
COLOURS = {"ok": "#1a7f37", "check": "#b7791f", "out of sync": "#c62828"}
SUFFIXES = (".html", ".htm", ".png")


@dataclass(frozen=True)
class Picture:
    """The mouth at one second of the video, beside the reference's mouth (PNG bytes each)."""

    label: str
    second: float
    frame: int
    video_png: bytes | None
    reference_png: bytes | None


# --------------------------------------------------------------------------------------------
# The pictures


def pictures(
    report: Report,
    video: str | os.PathLike,
    avatar=None,
    at_seconds: tuple[float, ...] = (),
    avatar_start: int = 0,
) -> list[Picture]:
    """The mouth at the worst second (its middle frame) and at each of ``at_seconds``, each beside
    the reference (the avatar's frame the renderer started from, else the video's rest frame)."""
    from studio.core.quality import mouth
    from studio.core.quality.video import frame_at, probe_video

    info = probe_video(video)
    want: list[tuple[str, float]] = []
    if report.worst_second is not None:
        want.append(("worst second", report.worst_second + 0.5))
    duration = report.frames / report.fps
    for s in at_seconds:
        if not math.isfinite(s) or s < 0 or s >= duration:
            raise InputError(f"--frames {s:g}: the video lasts {duration:.1f} s; give seconds inside it")
        want.append((f"{s:g} s", float(s)))
    if not want:
        return []
    from studio.core.quality import avatar_assets

    assets = avatar_assets(avatar)
    ref_video = None
    if assets is None and report.reference_frame is not None:
        ref_video = frame_at(video, report.reference_frame, info)
    out: list[Picture] = []
    with mouth.FaceFinder() as finder:
        ref_once = None
        if ref_video is not None:
            ref_once = (ref_video.rgb(), finder.once(ref_video))
        for label, s in want:
            idx = min(report.frames - 1, int(s * report.fps))
            frame = frame_at(video, idx, info)
            if frame is None:
                out.append(Picture(label, s, idx, None, None))
                continue
            rgb = frame.rgb()
            lm = finder.once(frame)
            if assets is not None:
                ref_rgb = _avatar_rgb(assets, avatar_start + idx, *frame.size)
                ref_lm = lm  # the renderer's frame: the same place
            elif ref_once is not None:
                ref_rgb, ref_lm = ref_once
            else:
                ref_rgb, ref_lm = None, None
            out.append(
                Picture(
                    label,
                    s,
                    idx,
                    _crop_png(rgb, lm),
                    None if ref_rgb is None else _crop_png(ref_rgb, ref_lm if ref_lm is not None else lm),
                )
            )
    return out


def _avatar_rgb(assets, t: int, width: int, height: int) -> np.ndarray:
    import cv2

    rgb = np.asarray(assets.frames[int(assets.cycle_index(t))])
    if rgb.shape[1] != width or rgb.shape[0] != height:
        rgb = cv2.resize(rgb, (width, height), interpolation=cv2.INTER_AREA)
    return rgb


def _crop_png(rgb: np.ndarray, lm: np.ndarray | None) -> bytes | None:
    """The mouth and chin (a square of 1.3 eye distances around the lips), ``THUMB`` px, as PNG."""
    import cv2

    from studio.core.quality import mouth

    if lm is None:
        return None
    c = np.asarray(lm, np.float64)[list(mouth.LIP_POINTS)].mean(0)
    half = 0.65 * max(mouth.eye_distance(lm), 8.0)
    h, w = rgb.shape[:2]
    x0, y0 = int(max(0, c[0] - half)), int(max(0, c[1] - half * 0.8))
    x1, y1 = int(min(w, c[0] + half)), int(min(h, c[1] + half * 1.2))
    if x1 - x0 < 4 or y1 - y0 < 4:
        return None
    crop = cv2.resize(np.ascontiguousarray(rgb[y0:y1, x0:x1]), (THUMB, THUMB), interpolation=cv2.INTER_AREA)
    ok, buf = cv2.imencode(".png", cv2.cvtColor(crop, cv2.COLOR_RGB2BGR))
    return bytes(buf) if ok else None


# --------------------------------------------------------------------------------------------
# The strip


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    from studio.core.media.analysis import runs

    return [(int(a), int(b)) for a, b in runs(np.asarray(mask, bool))]


def _col(report: Report, name: str) -> np.ndarray:
    return np.array([np.nan if r.get(name) is None else float(r[name]) for r in report.per_second], np.float64)


def draw_strip(fig, report: Report, gridspec=None) -> tuple[float, float]:
    """The strip's rows on ``fig`` (in ``gridspec`` when given); ``(x0, x1)``: where second 0 and the
    clip's end sit, as fractions of the figure's width."""
    n = len(report.per_second)
    end = report.frames / report.fps
    gs = gridspec if gridspec is not None else fig.add_gridspec(len(ROWS), 1, hspace=0.12)
    silent = np.asarray(report.trace.get("silent", np.zeros(0)), bool)
    axes: list = []
    for i, row in enumerate(ROWS):
        ax = fig.add_subplot(gs[i, 0], sharex=axes[0] if axes else None)
        axes.append(ax)
        for a, b in _runs(silent):
            ax.axvspan(a / report.fps, b / report.fps, color="#d0d7de", alpha=0.55, lw=0, zorder=0)
        if report.worst_second is not None:
            w = report.worst_second
            ax.axvspan(w, min(w + 1, end), facecolor="none", edgecolor="#c62828", lw=1.6, zorder=5)
        ax.set_ylabel(ROW_TITLES[row], rotation=0, ha="right", va="center", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(axis="x", color="#eaeef2", lw=0.5)
        if row == "opening":
            _draw_trace(ax, report)
            continue
        vals = _col(report, row)
        colour = {"sync": "#0969da", "offset": "#8250df", "jitter": "#bc4c00"}.get(row, "#1f883d")
        for k in range(n):
            if not np.isfinite(vals[k]):
                continue
            if row == "offset":  # a mark at the value (0 is a mark too, not an empty bar)
                (mark,) = ax.plot([k + 0.5], [vals[k]], "o", ms=5, color=colour, zorder=6)
                mark.set_gid(f"{row}-{k}")
                continue
            (bar,) = ax.bar(k + 0.5, vals[k], width=0.8, color=colour, zorder=3)
            bar.set_gid(f"{row}-{k}")
        limit = _limit(report, row)
        if limit is not None:
            for y in limit:
                ax.axhline(y, color="#cf222e", lw=0.7, ls="--", zorder=4)
        if row == "offset":
            lim = max(3.0, float(np.nanmax(np.abs(vals))) + 1 if np.isfinite(vals).any() else 3.0)
            ax.set_ylim(-lim, lim)
            ax.axhline(0, color="#57606a", lw=0.6, zorder=4)
    axes[-1].set_xlim(0, max(end, 1.0))
    axes[-1].set_xlabel("seconds", fontsize=8)
    for ax in axes[:-1]:
        ax.tick_params(labelbottom=False)
    x0 = axes[-1].transData.transform((0, 0))[0] / fig.bbox.width
    x1 = axes[-1].transData.transform((max(end, 1.0), 0))[0] / fig.bbox.width
    return float(x0), float(x1)


def _limit(report: Report, row: str) -> tuple[float, ...] | None:
    th = report.thresholds
    return {
        "offset": (-th.max_offset - 0.5, th.max_offset + 0.5),
        "silence_motion": (th.max_silence_motion,),
        "sharpness": (th.min_sharpness,),
    }.get(row)


def _draw_trace(ax, report: Report) -> None:
    """The mouth's opening and the voice's energy per frame, each scaled to its own 99th percentile."""
    t = (np.arange(report.frames) + 0.5) / report.fps
    for key, colour, label in (("voice", "#9a6700", "voice"), ("opening", "#0969da", "mouth")):
        y = np.asarray(report.trace.get(key, np.full(report.frames, np.nan)), np.float64)[: report.frames]
        if not np.isfinite(y).any():
            continue
        lo = float(np.nanmin(y))
        top = float(np.nanpercentile(y, 99)) - lo
        ax.plot(t[: len(y)], (y - lo) / max(top, 1e-9), color=colour, lw=0.8, label=label, zorder=3)
    ax.set_ylim(-0.05, 1.15)
    ax.set_yticks([])
    ax.legend(loc="upper right", fontsize=6, frameon=False, ncol=2)


def _figure(report: Report, height_in: float):
    from matplotlib.figure import Figure

    seconds = max(len(report.per_second), 1)
    width = min(max(8.0, 0.28 * seconds + 2.0), 30.0)
    return Figure(figsize=(width, height_in), dpi=100)


def strip_svg(report: Report) -> str:
    fig = _figure(report, 6.0)
    fig.subplots_adjust(left=0.16, right=0.99, top=0.98, bottom=0.08)
    draw_strip(fig, report)
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None})
    svg = buf.getvalue()
    return svg[svg.index("<svg") :]


def _png(fig, x: tuple[float, float], seconds: int) -> bytes:
    buf = io.BytesIO()
    end = f"{x[0]:.5f},{x[1]:.5f},{seconds}"
    fig.savefig(buf, format="png", metadata={"studio-strip": end})
    return buf.getvalue()


# --------------------------------------------------------------------------------------------
# The HTML page and the PNG sheet


def _figures(report: Report) -> list[tuple[str, str, str]]:
    th = report.thresholds

    def f(v, fmt):
        return "n/a" if v is None or not math.isfinite(float(v)) else format(v, fmt)

    return [
        ("offset", f"{report.offset_frames:+d} frames ({report.offset_ms:+.0f} ms)", f"within ±{th.max_offset}"),
        ("confidence", f(report.confidence, ".2f"), f"≥ {th.weak_confidence:.2f}"),
        ("silence motion", f(report.silence_motion, ".2f"), f"≤ {th.max_silence_motion:.2f}"),
        ("sharpness", f(report.sharpness, ".2f"), f"≥ {th.min_sharpness:.2f}"),
        ("seam", f(report.seam, ".1f") + " luma levels", f"≤ {th.max_seam:.1f}"),
        ("drift", f(100 * report.drift, ".1f") + " % eye distance", f"≤ {100 * th.max_drift:.1f} %"),
        ("jitter", f(report.jitter, ".2f") + " % eye distance / frame²", "--fail-under jitter=N"),
    ]


def _img(data: bytes | None, alt: str) -> str:
    if data is None:
        return f'<div class="none">{html.escape(alt)}: no face</div>'
    b64 = base64.b64encode(data).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{b64}" width="{THUMB}" height="{THUMB}">'


_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px;color:#1f2328;max-width:1200px}
h1{font-size:20px;margin:0 0 4px} .verdict{display:inline-block;padding:2px 10px;border-radius:12px;color:#fff}
table{border-collapse:collapse;margin:12px 0} td,th{padding:3px 10px;border-bottom:1px solid #d0d7de;text-align:left}
.strip svg{width:100%;height:auto} .pics{display:flex;flex-wrap:wrap;gap:18px}
.pic{border:1px solid #d0d7de;border-radius:6px;padding:8px} .pic .pair{display:flex;gap:6px}
.pic figure{margin:0;text-align:center;font-size:12px} .none{width:176px;height:176px;background:#f6f8fa;
display:flex;align-items:center;justify-content:center;color:#57606a} .note{color:#57606a}
#second{min-height:1.5em;font-family:ui-monospace,monospace;font-size:12px;background:#f6f8fa;padding:6px}
[id^="sync-"],[id^="offset-"],[id^="silence_motion-"],[id^="sharpness-"],[id^="jitter-"]{cursor:pointer}
"""

_JS = """
(function(){
  var data = JSON.parse(document.getElementById('studio-report').textContent);
  var out = document.getElementById('second');
  function show(k){
    var r = data.per_second[k]; if(!r){return;}
    var parts = [];
    for (var key in r){ parts.push(key + '=' + (r[key] === null ? 'n/a' : r[key])); }
    out.textContent = 'second ' + k + ': ' + parts.join('  ');
  }
  document.querySelectorAll('g[id]').forEach(function(g){
    var m = /^(sync|offset|silence_motion|sharpness|jitter)-(\\d+)$/.exec(g.id);
    if(m){ g.addEventListener('click', function(){ show(parseInt(m[2], 10)); }); }
  });
  if (data.worst_second !== null) { show(data.worst_second); }
})();
"""


def report_html(report: Report, pics: Sequence[Picture] = (), lse: dict | None = None) -> str:
    """The whole report as one HTML page (the strip as inline SVG, the pictures as data URIs)."""
    data = report.to_json()
    if lse is not None:
        data["lse"] = lse
    colour = COLOURS.get(report.verdict, "#57606a")
    rows = "".join(
        f"<tr><th>{html.escape(a)}</th><td>{html.escape(b)}</td><td class=note>{html.escape(c)}</td></tr>"
        for a, b, c in _figures(report)
    )
    lse_html = _lse_html(lse)
    notes = "".join(f"<p class=note>{html.escape(n)}</p>" for n in report.notes)
    worst = "" if report.worst_second is None else f"{report.worst_second // 60}:{report.worst_second % 60:02d}"
    pic_html = "".join(
        f'<div class="pic"><div><b>{html.escape(p.label)}</b> (frame {p.frame}, {p.second:.1f} s)</div>'
        f'<div class="pair"><figure>{_img(p.video_png, "video")}<figcaption>the video</figcaption></figure>'
        f"<figure>{_img(p.reference_png, 'reference')}<figcaption>the reference</figcaption></figure></div></div>"
        for p in pics
    )
    payload = json.dumps(data, allow_nan=False, default=_jsonable).replace("</", "<\\/")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'">
<title>Lip-sync check: {html.escape(Path(report.video).name)}</title><style>{_CSS}</style></head>
<body>
<h1>Lip-sync check: {html.escape(Path(report.video).name)}</h1>
<p><span class="verdict" style="background:{colour}">{html.escape(report.verdict)}</span>
{html.escape(report.reason)}</p>
<p class=note>Voice: {html.escape(report.audio)}. Reference: {html.escape(report.reference)}.
{report.frames} frames at {report.fps:g} fps ({report.frames / report.fps:.1f} s), {report.speech_s:.1f} s of speech.
{f"Worst second: {worst}." if worst else ""}</p>
{notes}
<table>{rows}</table>
{lse_html}
<h2>Per second</h2>
<p class=note>Grey: the voice's silences. Red frame: the worst second. Click a bar for that second's figures.</p>
<div class="strip">{strip_svg(report)}</div>
<div id="second"></div>
<h2>The mouth</h2>
<div class="pics">{pic_html or "<p class=note>No pictures (no worst second and no --frames).</p>"}</div>
<script id="studio-report" type="application/json">{payload}</script>
<script>{_JS}</script>
</body></html>
"""


def _lse_html(lse: dict | None) -> str:
    if lse is None:
        return ""
    if lse.get("lse_c") is None:
        return f"<p class=note><b>LSE-C / LSE-D</b>: {html.escape(str(lse.get('note', '')))}</p>"
    return (
        f"<p><b>LSE-C</b> {lse['lse_c']:.3f} &nbsp; <b>LSE-D</b> {lse['lse_d']:.3f} "
        f"(SyncNet offset {lse['offset_frames']:+d} frames) <span class=note>{html.escape(str(lse.get('note', '')))}"
        "</span></p>"
    )


def _jsonable(v):
    if isinstance(v, np.generic):
        return v.item()
    raise TypeError(type(v).__name__)


def report_png(report: Report, pics: Sequence[Picture] = ()) -> bytes:
    """The one-page sheet: the verdict and figures, the strip, the mouth pictures."""
    import cv2

    fig = _figure(report, 11.0)
    fig.set_figwidth(max(fig.get_figwidth(), 11.0))
    gs = fig.add_gridspec(len(ROWS) + 2, 1, height_ratios=[1.6] + [1] * len(ROWS) + [2.6], hspace=0.18)
    fig.subplots_adjust(left=0.12, right=0.99, top=0.98, bottom=0.02)
    head = fig.add_subplot(gs[0, 0])
    head.axis("off")
    head.text(
        0, 1, f"{Path(report.video).name}: {report.verdict}", fontsize=13, weight="bold", va="top",
        color=COLOURS.get(report.verdict, "#1f2328"), transform=head.transAxes,
    )  # fmt: skip
    head.text(0, 0.62, _wrap(report.reason, 150), fontsize=8, va="top", transform=head.transAxes)
    head.text(
        0, 0.08, "   ".join(f"{a}: {b}" for a, b, _ in _figures(report)), fontsize=7.5, va="bottom",
        transform=head.transAxes,
    )  # fmt: skip
    x = draw_strip(fig, report, gs[1 : 1 + len(ROWS), :].subgridspec(len(ROWS), 1, hspace=0.12))
    pics = list(pics)
    if pics:
        sub = gs[-1, 0].subgridspec(1, 2 * len(pics), wspace=0.05)
        for i, p in enumerate(pics):
            for j, (data, who) in enumerate(((p.video_png, "video"), (p.reference_png, "reference"))):
                ax = fig.add_subplot(sub[0, 2 * i + j])
                ax.axis("off")
                ax.set_title(f"{p.label}: {who}", fontsize=7)
                img = None if data is None else cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
                if img is not None:
                    ax.imshow(img[..., ::-1])
    return _png(fig, x, len(report.per_second))


def _wrap(text: str, width: int) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width)[:3])


def write_report(
    report: Report,
    path: str | os.PathLike,
    pics: Sequence[Picture] = (),
    *,
    overwrite: bool = True,
    lse: dict | None = None,
) -> Path:
    """Write the report by ``path``'s suffix (``.html`` or ``.png``), atomically; the path written
    (without ``overwrite`` a taken name gets the next number)."""
    from studio.core.store.fsutil import atomic_output

    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise InputError(f"--report {path}: give a file ending in .html or .png")
    if not path.parent.is_dir():
        raise InputError(f"--report {path}: the folder {path.parent} does not exist")
    data = report_png(report, pics) if suffix == ".png" else report_html(report, pics, lse).encode("utf-8")
    with atomic_output(path, overwrite=overwrite) as out:
        out.tmp.write_bytes(data)
    assert out.final is not None
    return out.final

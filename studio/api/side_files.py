"""A job's side files as a client sees them: names and URLs, never the server's paths.

    side_files(st, job)        # [{"name", "kind", "url", "bytes", "media_type"}] for models.SideFile
    find(st, job, "out.srt")   # (path or None, JSON bytes or None, media type) for the route

What a finished render wrote beside its video is in its result's ``files`` (kind -> path: captions,
otio, and whatever a later version adds, e.g. a lip-sync report): each is listed by its file name
and served by ``GET /v1/renders/{id}/files/{name}``. Two more are made from the job itself: the
job's JSON (``job.json``, what ``GET /v1/renders/{id}`` answers) and, once its lip-sync check ended,
the check report (``check.json``). A file listed but no longer on disk is left out.
"""

from __future__ import annotations

import json
from pathlib import Path

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._ -]{0,127}$"
TYPES = {
    ".srt": "application/x-subrip",
    ".vtt": "text/vtt",
    ".otio": "application/json",
    ".json": "application/json",
    ".html": "text/html",
    ".csv": "text/csv",
    ".txt": "text/plain",
}
MEDIA_TYPES = "application/x-subrip text/vtt application/json text/html text/csv text/plain"
JOB_JSON, CHECK_JSON = "job.json", "check.json"


def media_type(name: str) -> str:
    return TYPES.get(Path(name).suffix.lower(), "application/octet-stream")


def written(job) -> dict[str, Path]:
    """kind -> path of the files the job's render wrote beside its video (those still on disk)."""
    files = (job.result or {}).get("files") or {}
    out = {}
    for kind, path in files.items():
        p = Path(str(path))
        if p.is_absolute() and p.is_file():
            out[str(kind)] = p
    return out


def side_files(job) -> list[dict]:
    base = f"/v1/renders/{job.id}/files"
    rows = [
        {
            "name": p.name,
            "kind": kind,
            "url": f"{base}/{p.name}",
            "bytes": p.stat().st_size,
            "media_type": media_type(p.name),
        }
        for kind, p in written(job).items()
    ]
    rows.append(
        {"name": JOB_JSON, "kind": "job", "url": f"{base}/{JOB_JSON}", "bytes": None, "media_type": "application/json"}
    )
    check = (job.result or {}).get("check")
    if isinstance(check, dict) and check.get("state") not in (None, "pending", "running"):
        rows.append(
            {
                "name": CHECK_JSON,
                "kind": "check",
                "url": f"{base}/{CHECK_JSON}",
                "bytes": None,
                "media_type": "application/json",
            }
        )
    return rows


def public_files(files: dict | None) -> dict | None:
    """A result's ``files`` (kind -> path) as kind -> file name."""
    if not isinstance(files, dict):
        return files
    return {str(k): Path(str(v)).name for k, v in files.items()}


def find(st, job, name: str) -> tuple[Path | None, bytes | None]:
    """The file ``name`` of ``job`` (a path), or the bytes of a JSON side file; (None, None) if none."""
    if name == JOB_JSON:
        return None, json.dumps(st.job_json(job), indent=2).encode()
    if name == CHECK_JSON:
        check = (job.result or {}).get("check")
        if isinstance(check, dict) and check.get("state") not in (None, "pending", "running"):
            return None, json.dumps({"id": job.id, **check}, indent=2).encode()
        return None, None
    for p in written(job).values():
        if p.name == name:
            return p, None
    return None, None

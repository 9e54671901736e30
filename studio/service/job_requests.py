"""A job row <-> a ``RenderRequest``, and the names of a job's files: what the queue stores for a
request (``job_settings``) and the request a row holds (``request_of``, rows of earlier versions
included); a request made absolute before it is queued; the free numbered output name a new job gets;
the identity a finished job records of its file, so a job never serves another's file."""

from __future__ import annotations

import os
from pathlib import Path

from studio.core.errors import InputError
from studio.core.settings import parse_dict
from studio.core.store import jobs as J
from studio.core.store.files import numbered_names
from studio.service.request import Placement, RenderRequest, explicit_field


def request_of(job: J.Job) -> RenderRequest:
    """The ``RenderRequest`` a job row holds (rows of earlier versions included)."""
    s = dict(job.settings)
    frames = s.get("frames")
    return RenderRequest(
        job.avatar,
        job.audio,
        job.output,
        parse_dict(s),  # the stored (resolved) settings, the delivery not applied again
        request_of_settings(s),
        tuple(frames) if frames else None,
        bool(s.get("overwrite", False)),
        str(s.get("rate") or ""),  # resolved when the request was built (rows of earlier versions: again)
        explicit_field(s),  # the settings are the resolved ones: resolving them again gives them back
    )


def request_of_settings(s: dict) -> Placement:
    """Where a job's stored settings say it renders."""
    place = s.get("placement")
    if isinstance(place, dict):
        return Placement(
            kind=place.get("kind", "local"),
            devices=tuple(place.get("devices") or ()),
            chunks=int(place.get("chunks") or 0),
            farm=str(place.get("farm") or ""),
            server=str(place.get("server") or ""),
        )
    if s.get("render_on") == "farm":  # rows written by the window before the service
        return Placement("farm", farm=str(s.get("farm_address") or ""))
    if s.get("render_on") == "gpus":
        return Placement("gpus", devices=tuple(s.get("devices") or ()))
    return Placement()


def job_settings(req: RenderRequest) -> dict:
    """What the store keeps for a request: the render settings flat (as earlier rows), plus where
    and which frames."""
    d = req.to_dict()
    out = dict(d["settings"])
    out.update(
        placement=d["placement"], frames=d["frames"], overwrite=d["overwrite"], rate=d["rate"], explicit=d["explicit"]
    )
    return out


def unique_output(path: str, taken: set[str]) -> str:
    """``path`` if no file and no other job has it, else the first free ``_002``, ``_003`` ...

    What the queue shows for a new job; the name is only claimed when the file is written
    (``studio.core.store.fsutil.claim``), so a file that appears meanwhile is never replaced."""
    for name in numbered_names(path):
        if not name.exists() and str(name.resolve()) not in taken:
            return str(name)
    raise InputError(f"no free name like {Path(path).name} in {Path(path).parent}")


def absolute_request(req: RenderRequest) -> RenderRequest:
    """``req`` with absolute paths (the voice-over, the output, an avatar that is a file), so a job
    means the same files whichever folder the process that runs it started in. A library
    avatar's name stays a name."""
    import os

    from studio.core.avatars.assets import library_dir

    avatar = req.avatar
    if not (library_dir() / avatar / "meta.json").exists() and (os.sep in avatar or Path(avatar).exists()):
        avatar = os.path.abspath(os.path.expanduser(avatar))
    return req.with_(
        avatar=avatar,
        audio=os.path.abspath(os.path.expanduser(req.audio)),
        output=os.path.abspath(os.path.expanduser(req.output)),
    )


def relative_paths(job: J.Job) -> list[str]:
    """Paths a job row holds that are not absolute (rows queued by an earlier Studio)."""
    from studio.core.avatars.assets import NAME_RE

    out = [p for p in (job.audio, job.output) if p and not Path(p).is_absolute()]
    if job.avatar and not Path(job.avatar).is_absolute() and not NAME_RE.match(job.avatar):
        out.append(job.avatar)
    return out


def file_identity(path: str | Path) -> str:
    """What a finished job records about its file (device, inode, size, modification time): a file
    replaced or moved in later no longer matches, so a job never serves another's file."""
    st = os.stat(path)
    return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"


def owned_output(job: J.Job) -> Path | None:
    """The file a done job wrote, while it is still that file (None: gone, or replaced by another
    job's or anyone's); rows of earlier versions, which recorded no identity, by name only."""
    if job.state != J.DONE or not job.output:
        return None
    path = Path(job.output)
    want = (job.result or {}).get("output_id")
    try:
        if not path.is_file():
            return None
        return path if not want or file_identity(path) == want else None
    except OSError:
        return None


def promises(job: J.Job, running: dict | None = None) -> dict:
    """A job's lane, deadline and the estimate it was accepted with, and how long it waited in the
    queue and until its first frame: from its result once it ran, while it runs from ``running`` (the
    runner's timings of it). ``studio queue --json`` and the server's jobs show these."""
    from studio.service.scheduler import job_level, level_name

    s = job.settings or {}
    timing = {**(running or {}), **(job.result or {})}
    return {
        "priority": level_name(job_level(s)),
        "deadline": s.get("deadline"),
        "promised_s": s.get("promised_s"),
        "queue_s": timing.get("queue_s"),
        "first_frame_s": timing.get("first_frame_s"),
    }

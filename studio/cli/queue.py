"""``studio queue add|list|show|run|cancel|retry|hold|resume|move|rm|prune``: the render queue from a terminal.

The same queue the window and ``studio serve`` use (``<data folder>/jobs.sqlite``), through the
service: ``add`` takes ``studio render``'s options and prints the new job's id as its last word;
``run`` processes queued jobs until none is left, with a progress bar (Ctrl-C cancels the running
job cleanly: no file is left, the job is marked cancelled).
"""

from __future__ import annotations

import sys


def register(sub) -> None:
    from studio.cli._common import runs
    from studio.cli.render import job_options, priority_option

    p = sub.add_parser("queue", help="the render queue: add, list, show, run, cancel, retry, hold, move, rm")
    qs = p.add_subparsers(dest="queue_command", metavar="ACTION")
    qs.required = True

    add = qs.add_parser("add", help="queue a render (the options of `studio render`); prints the job id last")
    job_options(add, "output MP4 path (numbered _002 when taken)")
    add.add_argument("--draft", action="store_true", help="keep it as a draft (not queued)")
    priority_option(add)
    add.add_argument(
        "--deadline",
        type=float,
        default=None,
        metavar="SECONDS",
        help="it must be done within SECONDS: refused now when the queue ahead leaves no room, cancelled then if not done",
    )
    add.set_defaults(func=run_add)

    runs(
        qs.add_parser("list", help="every job: id, state, progress, output, reason"), run_list, json="print a JSON list"
    )

    show = qs.add_parser(
        "show", help="one job in full (JSON): its lane, deadline, queue time and time to its first frame included"
    )
    show.add_argument("id", type=job_id)
    show.set_defaults(func=run_show)

    runs(
        qs.add_parser("run", help="render queued jobs until none is left"),
        run_run,
        json="print the finished jobs as a JSON list",
    )

    for name, helptext in (
        ("cancel", "cancel a queued, held or running job"),
        ("retry", "render a finished job again as a new job (a new numbered file; the original stays)"),
        ("hold", "keep a queued job waiting"),
        ("resume", "queue a held job again"),
        ("rm", "remove a job that is not running (its file stays unless --purge)"),
    ):
        c = qs.add_parser(name, help=helptext)
        c.add_argument("id", type=job_id)
        if name == "rm":
            c.add_argument("--purge", action="store_true", help="a finished job: remove its video file too")
        c.set_defaults(func=run_action, action=name)

    prune = qs.add_parser(
        "prune",
        help="apply retention now: renders and uploads in the data folder past the age or size limit go, "
        "their jobs stay expired (files you named are never removed)",
    )
    prune.add_argument("--keep-renders", metavar="DURATION", help="e.g. 7d, 12h (default: $STUDIO_KEEP_RENDERS)")
    prune.add_argument("--max-storage-gb", type=float, metavar="N", help="default: $STUDIO_MAX_STORAGE_GB")
    prune.set_defaults(func=run_prune)

    mv = qs.add_parser("move", help="put a job at a place in the queue order (0 = first)")
    mv.add_argument("id", type=job_id)
    mv.add_argument("position", type=job_id)
    mv.set_defaults(func=run_move)


def job_id(text: str) -> int:
    """A job id (or a position) as argparse reads it: a whole number that fits in 64 bits (SQLite's
    integers), else one sentence and exit 2, never an overflow inside the store."""
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a job id; see studio queue list") from None
    if not 0 <= value < 2**63:
        raise argparse.ArgumentTypeError(
            f"{text[:40]} is not a job id (they are 1 to {2**63 - 1}); see studio queue list"
        )
    return value


def _service():
    from studio.service.queue import QueueService

    return QueueService(in_process_farm=True)


def job_json(job, progress=None) -> dict:
    from studio.core.progress import fraction_percent
    from studio.service.job_requests import promises

    frac = progress.fraction if progress is not None else job.progress
    return {
        "id": job.id,
        "state": job.state,
        "avatar": job.avatar,
        "audio": job.audio,
        "output": job.output,
        "progress": round(frac, 4),
        "percent": fraction_percent(frac),
        "reason": job.reason,
        "created": job.created,
        "updated": job.updated,
        "settings": job.settings,
        "result": job.result,
        "retry_of": job.retry_of,
        **promises(job),
    }


def run_add(args) -> int:
    from studio.cli.render import request_from_args

    req = request_from_args(args.avatar, args.audio, args.output, args)
    job = _service().add(
        req, state="draft" if args.draft else "queued", priority=args.priority, deadline_s=args.deadline
    )
    print(f"{job.state} {job.output} as job {job.id}")
    return 0


def run_list(args) -> int:
    from studio.cli._common import emit_json
    from studio.core.progress import fraction_percent

    jobs = _service().list()
    if args.json:
        emit_json([job_json(j) for j in jobs])
        return 0
    if not jobs:
        print("the queue is empty")
        return 0
    for j in jobs:
        reason = f"  ({j.reason})" if j.reason else ""
        print(f"{j.id:4d}  {j.state:<11} {fraction_percent(j.progress):3d}%  {j.output}{reason}")
    return 0


def run_show(args) -> int:
    from studio.cli._common import emit_json

    emit_json(job_json(_service().get(args.id)))
    return 0


FINAL = ("done", "failed", "cancelled", "interrupted", "expired")


def run_action(args) -> int:
    qs = _service()
    if args.action == "rm":
        if args.purge and qs.get(args.id).state in FINAL:
            _, files = qs.delete(args.id, purge=True)
            print(f"removed job {args.id}" + (f" and {', '.join(files)}" if files else ""))
            return 0
        qs.remove(args.id)
        print(f"removed job {args.id}")
        return 0
    job = getattr(qs, args.action)(args.id)
    print(f"job {job.id}: {job.state} {job.output}")
    return 0


def run_move(args) -> int:
    job = _service().move(args.id, args.position)
    print(f"job {job.id} moved to {args.position}")
    return 0


def run_run(args) -> int:
    """Every queued job, one after another; Ctrl-C (or TERM) cancels the running one and stops."""
    from studio.cli._common import ProgressBar, emit_json, fmt_seconds

    qs = _service()
    bar = [None]

    def on_event(ev):
        if ev.kind == "progress" and ev.progress is not None:
            if bar[0] is None:
                bar[0] = ProgressBar(f"job {ev.job_id}")
            p = ev.progress
            if not p.finished:
                bar[0].update(p.done, p.total, f"{p.fps:6.1f} fps  ETA {fmt_seconds(p.eta_s)}")
        elif ev.kind == "state" and ev.job is not None and ev.job.state in ("done", "failed", "cancelled"):
            if bar[0] is not None:
                bar[0].close()
                bar[0] = None
            j = ev.job
            tail = f": {j.reason}" if j.reason and j.state != "done" else ""
            print(f"job {j.id} {j.state}: {j.output}{tail}", file=sys.stderr)

    try:
        finished = qs.run_until_empty(on_event)
    finally:
        if bar[0] is not None:
            bar[0].close()
    if args.json:
        emit_json([job_json(j) for j in finished if j is not None])
    else:
        states = [j.state for j in finished if j is not None]
        print(
            f"queue empty: {len(states)} job(s) run, {states.count('done')} done, {states.count('failed')} failed, "
            f"{states.count('cancelled')} cancelled"
        )
    return 0


def run_prune(args) -> int:
    from studio.service.queue import QueueService
    from studio.service.retention import Retention, gb, parse_duration

    base = Retention.from_env()
    retention = Retention(
        parse_duration(args.keep_renders) if args.keep_renders else base.keep_s,
        gb(args.max_storage_gb) if args.max_storage_gb is not None else base.max_bytes,
    )
    if not retention.active:
        from studio.core.errors import InputError

        raise InputError("give --keep-renders or --max-storage-gb (or set STUDIO_KEEP_RENDERS / STUDIO_MAX_STORAGE_GB)")
    swept = QueueService(retention=retention).apply_retention()
    print(
        f"retention ({retention.describe()}): {len(swept.jobs)} job(s) expired, {len(swept.removed)} file(s) "
        f"removed, {swept.freed / 2**20:.1f} MB freed"
    )
    return 0

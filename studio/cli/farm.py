"""``studio farm up|status|down``: a Ray cluster for ``studio render --farm``.

studio farm up                          # a head on this host, listening on 127.0.0.1 only
studio farm up --host 10.0.0.5          # a head other hosts can join (on that address)
studio farm up --address 10.0.0.5:6379 --host 10.0.0.6   # this host joins as a worker node
studio farm status [--json]           # nodes, CPUs, GPUs; the render actors of `studio serve --farm` heads
studio farm status --server http://head:8321   # what that `studio serve --farm` says (GET /v1/farm)
studio farm down
"""

from __future__ import annotations

DEFAULT_PORT = 6379  # as studio.service.farm_admin's (kept here: --help must not import the service)


def register(sub) -> None:
    p = sub.add_parser("farm", help="start, join, inspect or stop a Ray render farm")
    fs = p.add_subparsers(dest="farm_command", metavar="ACTION")
    fs.required = True

    up = fs.add_parser("up", help="start a head node here (127.0.0.1 unless --host), or join --address")
    up.add_argument("--address", default=None, help="join the head at HOST:PORT instead of starting one")
    up.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"head port (default {DEFAULT_PORT})")
    up.add_argument(
        "--host", default=None, help="this node's address that other hosts reach (default: 127.0.0.1, this host only)"
    )
    up.add_argument("--num-cpus", type=int, default=None, help="CPU slots to offer (default: all)")
    up.add_argument("--num-gpus", type=int, default=None, help="GPUs to offer (default: all)")
    up.set_defaults(func=run_up)

    st = fs.add_parser("status", help="nodes, CPUs, GPUs and render actors of the farm")
    st.add_argument("--address", default=None, help="the head's HOST:PORT (default: the farm started here)")
    st.add_argument(
        "--server",
        default=None,
        metavar="URL",
        help="ask a running `studio serve --farm` (http://HOST:PORT; token from $STUDIO_SERVER_TOKEN): its "
        "actors' jobs and frames/s as its dispatcher sees them",
    )
    st.add_argument("--json", action="store_true", help="print one JSON object")
    st.set_defaults(func=run_status)

    down = fs.add_parser("down", help="stop the Ray processes this host runs for the farm")
    down.set_defaults(func=run_down)


def run_up(args) -> int:
    from studio.service.farm_admin import farm_up

    where = farm_up(
        address=args.address, port=args.port, host=args.host, num_cpus=args.num_cpus, num_gpus=args.num_gpus
    )
    print(
        f"farm {'joined' if args.address else 'head started'}: {where}; render with "
        f"`studio render ... --farm{'' if args.host is None and not args.address else ' ' + where}`"
    )
    return 0


def run_status(args) -> int:
    from studio.cli._common import emit_json

    if args.server and args.address:
        from studio.core.errors import InputError

        raise InputError("--server asks a studio serve --farm, --address the Ray cluster itself: give one of them")
    if args.server:
        from studio.core import env
        from studio.service.client import StudioClient

        with StudioClient(args.server, token=env.get("STUDIO_SERVER_TOKEN") or None) as c:
            info = c.farm()
        if args.json:
            emit_json(info)
            return 0
        nodes = [n for n in info["nodes"] if n["alive"]]
        print(
            f"farm {info['address']} (via {args.server}): {len(nodes)} node(s), "
            f"{sum(n['cpus'] for n in nodes):g} CPUs, {sum(n['gpus'] for n in nodes):g} GPUs; "
            f"{info['jobs_in_flight']} job(s) in flight, {info['frames_per_s']:g} frames/s"
        )
        for n in info["nodes"]:
            print(
                f"  {n['host']} ({n['id'][:8]}): {n['cpus']:g} CPUs, {n['gpus']:g} GPUs{'' if n['alive'] else ', gone'}"
            )
        print_actors(info["actors"])
        return 0
    from studio.service.farm_admin import farm_status

    info = farm_status(args.address or "auto")
    if args.json:
        emit_json(info)
        return 0
    print(
        f"farm: {info['nodes']} node(s), {info['cpus']:g} CPUs ({info['free_cpus']:g} free), "
        f"{info['gpus']:g} GPUs ({info['free_gpus']:g} free)"
    )
    for n in info["node_list"]:
        print(f"  {n['ip']}: {n['cpus']:g} CPUs, {n['gpus']:g} GPUs")
    print_actors(info["actors"])
    return 0


def print_actors(actors: list[dict]) -> None:
    """One line per render actor (none: nothing printed, a farm without `studio serve --farm`)."""
    if not actors:
        return
    print(f"render actors: {len(actors)}")
    for a in actors:
        jobs = a["jobs_in_flight"]
        jobs_text = ", ".join(map(str, jobs)) if isinstance(jobs, list) else str(jobs)
        print(
            f"  {a['name']} on node {a['node'][:8]}: {a['device']}, {a['state']}, "
            f"warm: {', '.join(a['warm_engines']) or 'none'}; jobs in flight: {jobs_text or 'none'}; "
            f"{a['frames_per_s']:g} frames/s"
        )


def run_down(args) -> int:
    from studio.service.farm_admin import farm_down

    farm_down()
    print("farm stopped on this host")
    return 0

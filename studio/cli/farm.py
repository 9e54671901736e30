"""``studio farm up|status|down``: a Ray cluster for ``studio render --farm``.

studio farm up                          # a head on this host, listening on 127.0.0.1 only
studio farm up --host 10.0.0.5          # a head other hosts can join (on that address)
studio farm up --address 10.0.0.5:6379 --host 10.0.0.6   # this host joins as a worker node
studio farm status [--json]
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

    st = fs.add_parser("status", help="nodes, CPUs and GPUs of the farm")
    st.add_argument("--address", default="auto", help="the head's HOST:PORT (default: the farm started here)")
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
    from studio.service.farm_admin import farm_status

    info = farm_status(args.address)
    if args.json:
        emit_json(info)
        return 0
    print(
        f"farm: {info['nodes']} node(s), {info['cpus']:g} CPUs ({info['free_cpus']:g} free), "
        f"{info['gpus']:g} GPUs ({info['free_gpus']:g} free)"
    )
    for n in info["node_list"]:
        print(f"  {n['ip']}: {n['cpus']:g} CPUs, {n['gpus']:g} GPUs")
    return 0


def run_down(args) -> int:
    from studio.service.farm_admin import farm_down

    farm_down()
    print("farm stopped on this host")
    return 0

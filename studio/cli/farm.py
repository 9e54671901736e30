"""``studio farm up|status|down``: a Ray cluster for ``studio render --farm``.

studio farm up                          # a head on this host, listening on 127.0.0.1 only
studio farm up --host 10.0.0.5          # a head other hosts can join (on that address)
studio farm up --address 10.0.0.5:6379 --host 10.0.0.6   # this host joins as a worker node
studio farm status [--json]
studio farm down
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

DEFAULT_PORT = 6379


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
    from studio.core.errors import InputError

    if not 1 <= args.port <= 65535:
        raise InputError("--port must be between 1 and 65535")
    cmd = ["start", "--disable-usage-stats"]
    env = dict(os.environ)
    if args.host is None:  # this host only: every Ray server listens on 127.0.0.1
        from studio.core.scale.farm import loopback_only

        env.update(loopback_only())
        cmd += ["--node-ip-address", "127.0.0.1"]
    else:
        cmd += ["--node-ip-address", args.host]
    if args.address:
        cmd += ["--address", args.address]
    else:
        cmd += ["--head", "--port", str(args.port), "--include-dashboard=false"]
    if args.num_cpus is not None:
        cmd += ["--num-cpus", str(args.num_cpus)]
    if args.num_gpus is not None:
        cmd += ["--num-gpus", str(args.num_gpus)]
    _ray(cmd, env)
    where = args.address or f"{args.host or '127.0.0.1'}:{args.port}"
    print(
        f"farm {'joined' if args.address else 'head started'}: {where}; render with "
        f"`studio render ... --farm{'' if args.host is None and not args.address else ' ' + where}`"
    )
    return 0


def run_status(args) -> int:
    from studio.cli._common import emit_json
    from studio.core.scale.farm import init_ray

    init_ray(args.address)  # raises a one-line StudioError when ray is missing or unreachable
    import ray

    try:
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        res = ray.cluster_resources()
        free = ray.available_resources()
    finally:
        ray.shutdown()
    info = {
        "address": args.address,
        "nodes": len(nodes),
        "cpus": res.get("CPU", 0),
        "gpus": res.get("GPU", 0),
        "free_cpus": free.get("CPU", 0),
        "free_gpus": free.get("GPU", 0),
        "node_list": [
            {
                "ip": n.get("NodeManagerAddress"),
                "cpus": n["Resources"].get("CPU", 0),
                "gpus": n["Resources"].get("GPU", 0),
            }
            for n in nodes
        ],
    }
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
    _ray(["stop"], dict(os.environ))
    print("farm stopped on this host")
    return 0


def _ray(argv: list[str], env: dict) -> None:
    from studio.core.errors import RenderError
    from studio.core.scale.farm import ray_available

    ok, why = ray_available()
    if not ok:
        raise RenderError(f"The render farm needs Ray: {why}.")
    exe = Path(sys.executable).with_name("ray")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "ray.scripts.scripts"]
    r = subprocess.run(cmd + argv, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        last = (r.stderr.strip() or r.stdout.strip() or "no output").splitlines()[-1]
        raise RenderError(f"`ray {argv[0]}` failed ({last}): see `ray {argv[0]} --help`.")

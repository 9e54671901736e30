"""Starting, inspecting and stopping a Ray render farm on this host (``studio farm up|status|down``).

    farm_up(port=6379)                               # a head on 127.0.0.1 only: "127.0.0.1:6379"
    farm_up(address="10.0.0.5:6379", host="10.0.0.6")  # this host joins as a worker node
    farm_status("auto")                              # {"nodes": 1, "cpus": 16.0, "gpus": 1.0, ...}
    farm_down()

Ray's own ``ray start`` / ``ray stop`` do the work (as subprocesses of this interpreter's Ray);
every failure is one ``StudioError`` sentence. The front ends reach the farm only through the
service; this module is where the command line does.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from studio.core.env import child

DEFAULT_PORT = 6379


def farm_up(
    *,
    address: str | None = None,
    port: int = DEFAULT_PORT,
    host: str | None = None,
    num_cpus: int | None = None,
    num_gpus: int | None = None,
) -> str:
    """Start a head node here (listening on 127.0.0.1 only unless ``host``), or join the head at
    ``address``; answers the farm's address."""
    from studio.core.errors import InputError

    if not 1 <= port <= 65535:
        raise InputError("--port must be between 1 and 65535")
    cmd = ["start", "--disable-usage-stats"]
    env = child()
    if host is None:  # this host only: every Ray server listens on 127.0.0.1
        from studio.core.scale.farm import loopback_only

        env.update(loopback_only())
        cmd += ["--node-ip-address", "127.0.0.1"]
    else:
        cmd += ["--node-ip-address", host]
    if address:
        cmd += ["--address", address]
    else:
        cmd += ["--head", "--port", str(port), "--include-dashboard=false"]
    if num_cpus is not None:
        cmd += ["--num-cpus", str(num_cpus)]
    if num_gpus is not None:
        cmd += ["--num-gpus", str(num_gpus)]
    _ray(cmd, env)
    return address or f"{host or '127.0.0.1'}:{port}"


def farm_status(address: str = "auto") -> dict:
    """The farm at ``address``: its live nodes, CPUs and GPUs (all and free), per node."""
    from studio.core.scale.farm import init_ray

    init_ray(address)  # raises a one-line StudioError when ray is missing or unreachable
    import ray

    try:
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        res = ray.cluster_resources()
        free = ray.available_resources()
    finally:
        ray.shutdown()
    return {
        "address": address,
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


def farm_down() -> None:
    """Stop the Ray processes this host runs for the farm."""
    _ray(["stop"], child())


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

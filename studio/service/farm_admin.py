"""Starting, inspecting and stopping a Ray render farm on this host (``studio farm up|status|down``).

    farm_up(port=6379)                               # a head on 127.0.0.1 only: "127.0.0.1:6379"
    farm_up(address="10.0.0.5:6379", host="10.0.0.6")  # this host joins as a worker node
    farm_status("auto")                              # {"nodes": 1, "cpus": 16.0, "gpus": 1.0, ..., "actors": [...]}
    farm_down()

Ray's own ``ray start`` / ``ray stop`` do the work (as subprocesses of this interpreter's Ray);
every failure is one ``StudioError`` sentence. The front ends reach the farm only through the
service; this module is where the command line does.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

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
        from studio.core.scale.cluster import loopback_only

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
    from studio.core.scale.cluster import init_ray

    init_ray(address)  # raises a one-line StudioError when ray is missing or unreachable
    import ray

    try:
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        res = ray.cluster_resources()
        free = ray.available_resources()
        actors = serve_actors()
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
        "actors": actors,
    }


SERVE_ACTOR = re.compile(r"^studio-(serve-[0-9a-f]+|farm)-(?P<node>[0-9a-f]{8})-(?P<kind>cpu|gpu)\d+(-[0-9a-f]{4})?$")


def serve_actors(timeout: float = 5.0) -> list[dict]:
    """The farm's replicas on the connected cluster (every ``studio serve --farm`` head's, and the warm
    ones ``studio render --placement farm`` and the window leave on a ``studio farm up`` cluster), as Ray sees
    them: name, node (its id's first 8 digits), device, warm engines, jobs in flight (a count: the
    job ids are the head's, ``GET /v1/farm``), frames/s now (its jobs' together). An actor that does
    not answer within ``timeout`` is listed with ``state`` "no answer"."""
    import ray

    from studio.core.scale.cluster import NAMESPACE

    found = []
    for a in ray.util.list_named_actors(all_namespaces=True):
        m = SERVE_ACTOR.match(a.get("name", "")) if a.get("namespace") == NAMESPACE else None
        if m is not None:
            found.append((a["name"], m))
    refs: dict[str, Any] = {}
    for name, _ in found:
        with contextlib.suppress(Exception):  # gone meanwhile: not listed
            refs[name] = ray.get_actor(name, namespace=NAMESPACE).progress.remote()
    ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout) if refs else ([], [])
    rows = []
    for name, m in found:
        if name not in refs:
            continue
        info: dict = {}
        if refs[name] in ready:
            with contextlib.suppress(Exception):
                info = ray.get(refs[name])
        jobs: dict = info.get("tasks") or {}
        rows.append(
            {
                "name": name,
                "node": m["node"],
                "device": "cuda" if m["kind"] == "gpu" else "cpu",
                "state": ("busy" if jobs else "idle") if info else "no answer",
                "warm_engines": list(info.get("warm_engines") or []),
                "jobs_in_flight": len(jobs),
                "frames_per_s": round(sum(float(j[2] or 0) for j in jobs.values()), 2),
                "frames_done": int(info.get("frames_done") or 0),
            }
        )
    return rows


def farm_down() -> None:
    """Stop the Ray processes this host runs for the farm."""
    _ray(["stop"], child())


def _ray(argv: list[str], env: dict) -> None:
    from studio.core.errors import RenderError
    from studio.core.scale.cluster import ray_available

    ok, why = ray_available()
    if not ok:
        raise RenderError(f"The render farm needs Ray: {why}.")
    exe = Path(sys.executable).with_name("ray")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "ray.scripts.scripts"]
    r = subprocess.run(cmd + argv, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        last = (r.stderr.strip() or r.stdout.strip() or "no output").splitlines()[-1]
        raise RenderError(f"`ray {argv[0]}` failed ({last}): see `ray {argv[0]} --help`.")

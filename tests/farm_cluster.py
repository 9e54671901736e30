"""A local multi-node Ray cluster for tests, in a child process of its own (``ray.cluster_utils.Cluster``).

    with LocalCluster(tmp, token) as c:        # a head without CPUs and no worker node yet
        a = c.add(num_cpus=1, env={"STUDIO_HOME": "/tmp/w"})     # a node's id
        c.address                               # "127.0.0.1:PORT" for studio serve --farm
        c.remove(a)                             # its raylet and workers killed (a node lost)

Ray reads its token mode when it is imported, so the cluster runs in a child that sets
``RAY_TMPDIR`` (its sessions and address file under the test's folder, not the machine's
/tmp/ray), ``RAY_AUTH_MODE=token`` and the test's own ``RAY_AUTH_TOKEN`` first; the pytest process
never joins it. The child talks JSON lines on stdin/stdout; ``close`` shuts every node it started
down (the Cluster checks none is left alive), and Ray's reaper kills them if the child itself dies.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

FAST_HEALTH = {"health_check_period_ms": 500, "health_check_failure_threshold": 3, "health_check_initial_delay_ms": 0}


class LocalCluster:
    def __init__(self, root: Path, token: str, timeout: float = 120):
        self.root = Path(root)
        self.env = dict(os.environ, RAY_TMPDIR=str(self.root), RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)
        self.log = open(self.root / "cluster.log", "a")
        self.proc = subprocess.Popen(
            [sys.executable, __file__],
            env=self.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )
        self.timeout = timeout
        self.address = self._read()["address"]

    def _read(self) -> dict:
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line:
            raise RuntimeError(f"the test cluster ended: {(self.root / 'cluster.log').read_text()[-2000:]}")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(answer["error"])
        return answer

    def _ask(self, **op) -> dict:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(op) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def add(self, num_cpus: int = 1, env: dict | None = None, resources: dict | None = None) -> str:
        """A worker node (its id, hex); ``env``: its raylet's, which its workers inherit."""
        return self._ask(op="add", num_cpus=num_cpus, env=env or {}, resources=resources or {})["id"]

    def remove(self, node_id: str) -> None:
        """Kill the node's processes at once (no drain): a host lost."""
        self._ask(op="remove", id=node_id)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self._ask(op="quit")
                self.proc.wait(60)
            except (OSError, RuntimeError, subprocess.TimeoutExpired, ValueError):
                self.proc.kill()
                self.proc.wait()
        self.log.close()

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _serve() -> None:
    """The child: start the head, answer its address, then add/remove nodes until "quit"."""
    from ray.cluster_utils import Cluster

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from studio.core.scale.farm import loopback_only

    loopback_only()

    def say(**answer) -> None:
        print(json.dumps(answer), flush=True)

    cluster = Cluster(
        initialize_head=True,
        connect=False,
        head_node_args=dict(
            num_cpus=0, node_ip_address="127.0.0.1", include_dashboard=False, _system_config=FAST_HEALTH
        ),
    )
    nodes: dict = {}
    try:
        say(address=cluster.address)
        for line in sys.stdin:
            op = json.loads(line)
            try:
                if op["op"] == "add":
                    n = cluster.add_node(
                        num_cpus=op["num_cpus"],
                        node_ip_address="127.0.0.1",
                        resources=op["resources"],
                        env_vars=op["env"] or None,
                    )
                    cluster.wait_for_nodes()
                    nodes[n.node_id] = n
                    say(id=n.node_id)
                elif op["op"] == "remove":
                    cluster.remove_node(nodes.pop(op["id"]), allow_graceful=False)
                    say(ok=True)
                else:
                    break
            except Exception as exc:  # noqa: BLE001 - said to the test, which fails with it
                say(error=f"{type(exc).__name__}: {exc}")
    finally:
        cluster.shutdown()
        say(ok=True)


if __name__ == "__main__":
    _serve()

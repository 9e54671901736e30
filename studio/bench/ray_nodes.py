"""A real Ray cluster of separate ``ray start`` nodes on this machine, and stopping processes by the ids
recorded when they started (never ``ray stop``: it kills every Ray process of every session here).

    with RayNodes(workdir) as c:                    # a head with no CPUs, listening on 127.0.0.1 only
        c.add_node(cpus=4, env={"STUDIO_HOME": ...})  # `ray start --address HEAD --num-cpus 4 --block`
        c.address                                   # "127.0.0.1:PORT"
    # every process the nodes started (raylets, GCS, agents, workers) is gone

Each node is a ``ray start --block`` process: it stays in the foreground, so its pid is ours, and
every Ray process of that node is its descendant. Stopping records the whole tree first (again just
before the kill, so late-started workers are included), SIGKILLs it and waits, within a bound. The
nodes keep their session files in a private folder (``RAY_TMPDIR``): the shared /tmp/ray's
"current cluster" file, which other sessions' ``ray.init("auto")`` read, is not touched. Every port
a node would otherwise take from Ray's fixed defaults (the client server, the dashboard agent) is a
free one, so that several nodes, and other sessions' clusters, share the machine.

Written here because no library starts a multi-node cluster as separate ``ray start`` nodes and
stops exactly its own processes (``ray.cluster_utils.Cluster``, what the tests use, runs every node
from the calling process; the benchmark wants the ``ray start --address`` nodes of a real deployment).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from studio.core.env import child

START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 20.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ray_env(temp_dir: str, token: str) -> dict:
    """What a node, or a driver of its cluster, gets beside this process's environment: the private
    session folder, no usage report, and the cluster's own token (Ray's token authentication, as
    across hosts: docs/farm.md). Ray's loopback-only setting (``studio farm up``'s on one host) is off:
    with it ``ray start --address`` refuses to add a node; the nodes' address is 127.0.0.1."""
    return {
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1",
        "RAY_TMPDIR": temp_dir,
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": token,
    }


class RayNodes:
    def __init__(self, workdir: Path, head_cpus: int = 0, head_gpus: int = 0):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.temp_dir = tempfile.mkdtemp(prefix="rn", dir="/tmp")  # short: Ray's socket paths < 108 bytes
        import secrets

        self.env = ray_env(self.temp_dir, secrets.token_hex(32))  # a node's, and a driver's, beside os.environ
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.nodes: list[subprocess.Popen] = []
        self.started: dict[int, Any] = {}  # pid: psutil.Process, every process seen in the nodes' trees
        self._logs: list[Any] = []
        try:
            self._start(
                ["--head", "--port", str(self.port), "--include-dashboard=false"],
                head_cpus,
                head_gpus,
                {},
            )
        except BaseException:
            self.stop()
            raise

    def add_node(self, cpus: int, gpus: int = 0, env: dict | None = None) -> subprocess.Popen:
        """A worker node joins (``env``: what its raylet and workers get beside the cluster's)."""
        return self._start(["--address", self.address], cpus, gpus, env or {})

    def _start(self, role: list[str], cpus: int, gpus: int, env: dict) -> subprocess.Popen:
        exe = Path(sys.executable).with_name("ray")
        cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "ray.scripts.scripts"]
        cmd += ["start", *role, "--block", "--disable-usage-stats"]
        cmd += ["--node-ip-address", "127.0.0.1", "--num-cpus", str(cpus), "--num-gpus", str(gpus)]
        cmd += ["--dashboard-agent-listen-port", str(free_port()), "--object-store-memory", str(200 * 2**20)]
        log = open(self.workdir / f"ray-node{len(self.nodes)}.log", "ab")
        self._logs.append(log)
        proc = subprocess.Popen(cmd, env=child(**self.env, **env), stdout=log, stderr=subprocess.STDOUT)
        self.nodes.append(proc)
        self._record()
        self._wait_started(proc, Path(log.name))
        self._record()
        return proc

    def _wait_started(self, proc, log: Path, timeout: float = START_TIMEOUT_S) -> None:
        """Until the node's ``ray start`` says it started (RuntimeError when it exits or times out)."""
        deadline = time.monotonic() + timeout
        while b"Ray runtime started" not in log.read_bytes():
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = log.read_text(errors="replace").strip().splitlines()[-3:]
                raise RuntimeError(f"`ray start` did not start a node ({' / '.join(tail)}); see {log}")
            time.sleep(0.2)

    def alive(self) -> int:
        """Nodes alive, as the GCS says (Ray's own ``GlobalState``, as ``ray.cluster_utils`` reads it, in
        a child process with the cluster's token: this one does not join the cluster)."""
        r = subprocess.run(
            [sys.executable, "-c", ALIVE, self.address],
            env=child(**self.env),
            capture_output=True,
            text=True,
            timeout=120,
        )
        if r.returncode != 0:
            raise RuntimeError(f"the cluster at {self.address} does not answer: {r.stderr.strip()[-300:]}")
        return int(r.stdout.strip())

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """Kill every process the nodes started (workers first, the head last), bounded by ``timeout``."""
        import shutil

        deadline = time.monotonic() + timeout
        self._record()
        for proc in reversed(self.nodes):
            p = self.started.get(proc.pid)
            if p is not None:
                tree = tree_of({proc.pid: p})
                self.started |= tree
                kill(tree, max(1.0, deadline - time.monotonic()))
        kill(self.started, max(1.0, deadline - time.monotonic()))
        for log in self._logs:
            log.close()
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    def leftovers(self) -> list[int]:
        return sorted(pid for pid, p in self.started.items() if running(p))

    def _record(self) -> None:
        psutil = psutil_module()
        own = {}
        for proc in self.nodes:
            with contextlib.suppress(psutil.Error):
                own[proc.pid] = self.started.get(proc.pid) or psutil.Process(proc.pid)
        self.started |= tree_of(own)

    def __enter__(self) -> RayNodes:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


ALIVE = """
import sys
from ray._private.state import GlobalState
from ray._raylet import GcsClientOptions
state = GlobalState()
state._initialize_global_state(GcsClientOptions.create(sys.argv[1], None, allow_cluster_id_nil=True, fetch_cluster_id_if_nil=False))
print(sum(1 for n in state.node_table() if n.get("Alive")))
"""


# --------------------------------------------------------------------------------------------
# process trees


def psutil_module():
    """psutil as Ray ships it (``ray/thirdparty_files``, put on the path by ``import ray``)."""
    import importlib

    importlib.import_module("ray")
    return importlib.import_module("psutil")


def tree_of(procs: dict[int, Any]) -> dict[int, Any]:
    """``procs`` and every descendant of them now (a process whose pid was reused is not followed)."""
    psutil = psutil_module()
    out = dict(procs)
    for p in list(procs.values()):
        with contextlib.suppress(psutil.Error):
            if p.is_running():
                out.update({c.pid: c for c in p.children(recursive=True)})
    return out


def running(p) -> bool:
    """Still running and still the process recorded (not a zombie, not a new process with its pid)."""
    psutil = psutil_module()
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def kill(procs: dict[int, Any], timeout: float) -> None:
    """SIGKILL ``procs`` (and any descendant they start meanwhile) and wait until they are gone, at
    most ``timeout`` seconds. ``psutil.Process.kill`` refuses a pid that now names another process."""
    psutil = psutil_module()
    deadline = time.monotonic() + timeout
    todo = dict(procs)
    while todo and time.monotonic() < deadline:
        todo = tree_of(todo)
        for p in todo.values():
            with contextlib.suppress(psutil.Error):
                p.kill()
        for p in todo.values():  # reap this process's own children: else they stay zombies
            with contextlib.suppress(psutil.Error):  # TimeoutExpired: not dead yet
                if p.ppid() == os.getpid():
                    p.wait(timeout=0)
        todo = {pid: p for pid, p in todo.items() if running(p)}
        if todo:
            time.sleep(0.05)

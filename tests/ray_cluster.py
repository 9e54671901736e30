"""A local multi-node Ray cluster for tests: a head and N worker nodes on this machine, each with its
own CPUs, custom resources and environment, torn down by the ids of the processes it started.

    def test_x(request):
        c = ray_cluster(request, [{"num_cpus": 1}, {"num_cpus": 1, "resources": {"slow": 1}}])
        c.address                     # "127.0.0.1:PORT": ray.init(address=...), studio serve --farm ...
        c.add_node(num_cpus=1)        # a node joins later
        c.kill_node(c.workers[0])     # a node is lost (its raylet and workers SIGKILLed)
        # the finalizer: c.shutdown(); then no process it started is left (c.leftovers() == [])

Built on ``ray.cluster_utils.Cluster`` (Ray's own test cluster: every node is real raylet, object store
and worker processes, the head a real GCS). What is written here is the teardown, because
``Cluster.shutdown`` (and ``ray stop``) are not fit for a shared machine: ``ray stop`` kills every Ray
process of every user session, and ``Cluster.shutdown`` leaves the raylets' worker processes to notice
on their own that their raylet has gone. Here every process a node started is recorded (the node's own
processes, and their descendants, seen again just before the kill so that late-started workers are
included), killed by pid, and waited for within a bound (``studio.bench.ray_nodes``' process trees,
which the farm benchmark's ``ray start`` nodes are stopped with too). Nothing outside those pids is
touched.

The cluster binds 127.0.0.1 only, keeps its session files in a private temporary folder (not the
shared /tmp/ray, whose "current cluster" file other sessions' ``ray.init("auto")`` read), and does
not start the dashboard. The test process itself does not connect (no ``ray.init`` here): drivers
are the code under test, in this process or another.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from typing import Any

from studio.bench.ray_nodes import kill, psutil_module, running, tree_of

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0


class LocalRayCluster:
    def __init__(
        self,
        head_cpus: int = 0,
        head_resources: dict | None = None,
        head_env: dict | None = None,
        head_system_config: dict | None = None,
    ):
        self.head_cpus = head_cpus
        self.head_system_config = head_system_config or {}  # Ray's ``_system_config`` (health checks, ...)
        self.head_resources = head_resources or {}
        self.head_env = head_env or {}
        self.cluster: Any = None
        self.workers: list[Any] = []  # the worker nodes (``ray._private.node.Node``), in order of joining
        self.started: dict[int, Any] = {}  # every process this cluster started, seen so far (pid: psutil.Process)
        self.temp_dir = ""
        self._env_before: dict[str, str | None] = {}

    # -- starting --------------------------------------------------------------------------------

    @property
    def address(self) -> str:
        """The GCS address drivers join (``ray.init(address=...)``, ``studio serve --farm ADDR``)."""
        return self.cluster.address

    def start(self, nodes: list[dict] | int = 1, timeout: float = START_TIMEOUT_S) -> LocalRayCluster:
        from ray.cluster_utils import Cluster

        from studio.core.scale.cluster import loopback_only

        # short, private: Ray's socket paths must stay under 108 bytes
        self.temp_dir = tempfile.mkdtemp(prefix="rc", dir="/tmp")
        os.mkdir(os.path.join(self.temp_dir, "ray"))
        import secrets

        # its own token (Ray's token authentication, as between hosts): a driver that finds a token
        # on this host (``~/.ray/auth_token``) sends it, and a cluster without one refuses its calls
        token = secrets.token_hex(32)
        self._setenv(
            {
                **loopback_only(),
                "RAY_TMPDIR": self.temp_dir,
                "RAY_USAGE_STATS_ENABLED": "0",
                "RAY_AUTH_MODE": "token",
                "RAY_AUTH_TOKEN": token,
            }
        )
        _reread_auth()  # this process reads the GCS (``alive_nodes``) with it
        deadline = time.monotonic() + timeout
        # its reaper kills the nodes should this test process die before the teardown
        self.cluster = Cluster(initialize_head=False, shutdown_at_exit=True)
        try:
            head = self._node_args(self.head_cpus, self.head_resources, self.head_env)
            if self.head_system_config:
                head["_system_config"] = dict(self.head_system_config)
            self.cluster.add_node(**head)
            self._record(self.cluster.head_node)
            for spec in [{"num_cpus": 1}] * nodes if isinstance(nodes, int) else nodes:
                self.add_node(**spec)
            self.wait_for_nodes(1 + len(self.workers), max(1.0, deadline - time.monotonic()))
        except BaseException:
            self.shutdown()
            raise
        return self

    def add_node(self, num_cpus: int = 1, resources: dict | None = None, env: dict | None = None, num_gpus: int = 0):
        """A worker node joins (``env``: variables its raylet and worker processes get)."""
        node = self.cluster.add_node(wait=True, **self._node_args(num_cpus, resources or {}, env or {}, gpus=num_gpus))
        self.workers.append(node)
        self._record(node)
        return node

    def _node_args(self, cpus: int, resources: dict, env: dict, gpus: int = 0) -> dict:
        args: dict[str, Any] = {
            "num_cpus": cpus,
            "num_gpus": gpus,
            "resources": dict(resources),
            "node_ip_address": "127.0.0.1",
            "include_dashboard": False,
            "object_store_memory": 80 * 2**20,
            "temp_dir": os.path.join(self.temp_dir, "ray"),
        }
        if env:
            args["env_vars"] = {str(k): str(v) for k, v in env.items()}
        return args

    def wait_for_nodes(self, count: int, timeout: float = START_TIMEOUT_S) -> None:
        """Until ``count`` nodes are alive in the GCS (asked without connecting a driver)."""
        deadline = time.monotonic() + timeout
        while True:
            alive = self.alive_nodes()
            if alive >= count:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{alive} of {count} Ray nodes alive after {timeout:.0f} s")
            time.sleep(0.2)

    def alive_nodes(self) -> int:
        return sum(1 for n in self.cluster.global_state.node_table() if n.get("Alive"))

    # -- stopping --------------------------------------------------------------------------------

    def node_processes(self, node) -> dict[int, Any]:
        """The processes ``node`` runs now (pid: ``psutil.Process``): its own (raylet, object store,
        GCS on the head, ...) and every descendant (worker processes, actors)."""
        psutil = psutil_module()

        own = {}
        for infos in node.all_processes.values():
            for info in infos:
                with contextlib.suppress(psutil.Error, AttributeError):
                    own[info.process.pid] = psutil.Process(info.process.pid)
        return tree_of(own)

    def kill_node(self, node, timeout: float = STOP_TIMEOUT_S) -> list[int]:
        """The node is lost: SIGKILL its processes and their descendants; answers the pids killed."""
        procs = self.node_processes(node)
        self.started |= procs
        kill(procs, timeout)
        with contextlib.suppress(KeyError, ValueError):
            self.cluster.worker_nodes.remove(node)
        if node in self.workers:
            self.workers.remove(node)
        return sorted(procs)

    def shutdown(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """Kill every process the cluster started, workers first, the head last; bounded by ``timeout``."""
        deadline = time.monotonic() + timeout
        try:
            if self.cluster is not None:
                for node in list(self.workers):
                    self.kill_node(node, max(1.0, deadline - time.monotonic()))
                head = self.cluster.head_node
                if head is not None:
                    self.started |= self.node_processes(head)
                # everything seen so far, again with any descendant started meanwhile
                self.started = tree_of(self.started)
                kill(self.started, max(1.0, deadline - time.monotonic()))
                self.cluster.head_node = None
                self.cluster.worker_nodes.clear()
        finally:
            self._restore_env()
            _reread_auth()
            if self.temp_dir:
                shutil.rmtree(self.temp_dir, ignore_errors=True)

    def leftovers(self) -> list[int]:
        """Pids this cluster started that still run (zombies, already dead, are not counted)."""
        return sorted(pid for pid, p in self.started.items() if running(p))

    # -- helpers -------------------------------------------------------------------------------

    def _record(self, node) -> None:
        self.started |= self.node_processes(node)

    def _setenv(self, values: dict) -> None:
        for k, v in values.items():
            self._env_before.setdefault(k, os.environ.get(k))
            os.environ[k] = v

    def _restore_env(self) -> None:
        for k, v in self._env_before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        self._env_before.clear()


def ray_cluster(request, nodes: list[dict] | int = 1, **head) -> LocalRayCluster:
    """A started cluster torn down by the test's finalizer, which then fails the test if any process
    the cluster started is left."""
    c = LocalRayCluster(**head)

    def teardown() -> None:
        c.shutdown()
        left = c.leftovers()
        assert not left, f"Ray processes left after the teardown: {left}"

    request.addfinalizer(teardown)
    return c.start(nodes)


def _reread_auth() -> None:
    """Ray reads ``RAY_AUTH_MODE`` and the token once a process; read them again (as Ray's own tests
    do: ``ray._private.authentication_test_utils``)."""
    from ray._private.authentication_test_utils import reset_auth_token_state

    reset_auth_token_state()

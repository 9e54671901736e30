"""The tests' local multi-node Ray cluster (tests/ray_cluster.py): it starts, a driver sees its nodes,
and its teardown leaves none of the processes it started."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from ray_cluster import LocalRayCluster, psutil_module

pytest.importorskip("ray", reason="the farm needs Ray: pip install 'studio[farm]' (ray is not installed)")

DRIVER = """
import json, sys, ray
ray.init(address=sys.argv[1], configure_logging=False, log_to_driver=False)
nodes = [n for n in ray.nodes() if n["Alive"]]
print(json.dumps({"alive": len(nodes), "cpus": ray.cluster_resources().get("CPU", 0),
                  "custom": ray.cluster_resources().get("blue", 0), "ips": sorted({n["NodeManagerAddress"] for n in nodes})}))
"""


def test_a_head_and_a_node_start_are_seen_by_a_driver_and_leave_nothing_behind():
    c = LocalRayCluster()
    try:
        c.start([{"num_cpus": 1, "resources": {"blue": 2}, "env": {"STUDIO_TEST_NODE": "1"}}])
        assert c.address.startswith("127.0.0.1:")
        r = subprocess.run(
            [sys.executable, "-c", DRIVER, c.address], capture_output=True, text=True, timeout=120, env=os.environ
        )
        assert r.returncode == 0, r.stderr[-2000:]
        seen = json.loads(r.stdout.strip().splitlines()[-1])
        assert seen == {"alive": 2, "cpus": 1.0, "custom": 2.0, "ips": ["127.0.0.1"]}
        pids = set(c.started)
        assert len(pids) >= 4  # at least the GCS and two raylets with their helpers
    finally:
        c.shutdown()
    assert c.leftovers() == []
    assert all(not _alive(pid) for pid in pids)
    assert not os.path.exists(c.temp_dir)


def _alive(pid: int) -> bool:
    psutil = psutil_module()

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def test_the_benchmarks_ray_start_nodes_stop_by_their_pids(tmp_path):
    """``studio.bench.ray_nodes``: a ``ray start --head`` and a ``ray start --address`` node of their
    own token and session folder, seen alive by the GCS, then gone with every process they started."""
    from studio.bench.farm_serve import default_cpus
    from studio.bench.ray_nodes import RayNodes

    with RayNodes(tmp_path) as nodes:
        nodes.add_node(cpus=1, env={"STUDIO_HOME": str(tmp_path / "node")})
        assert nodes.alive() == 2 and nodes.address.startswith("127.0.0.1:")
        started = dict(nodes.started)
        assert len(started) >= 6  # two `ray start`, the GCS, two raylets, their agents
    assert nodes.leftovers() == [] and not any(_alive(pid) for pid in started)
    assert not os.path.exists(nodes.temp_dir)
    # 12 clients over 1 and 2 nodes on 16 cores: 3 CPUs a node, whole rounds of jobs for both
    assert (default_cpus(16, [1, 2], 12), default_cpus(2, [1, 2], 4), default_cpus(32, [1, 2], 12)) == (3, 1, 6)

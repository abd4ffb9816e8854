"""plan --node: pods placed on a live node as it stands, read over the real socket of the
simulated kubelet (and from a fixture directory)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.cli import main
from exporter.sim.model_driven import ModelDrivenNode
from reconciler.allocator import ModelConfig, PodPlacement, from_spec
from reconciler.cpuset import format_cpuset
from tests.allocator.helpers import ctr, pod


def _manifest(tmp: Path, *pods: tuple[str, int]) -> Path:
    docs = [{"apiVersion": "v1", "kind": "Pod",
             "metadata": {"namespace": "default", "name": name},
             "spec": {"containers": [{"name": "app", "resources": {
                 "requests": {"cpu": str(cpus), "memory": "1Gi"},
                 "limits": {"cpu": str(cpus), "memory": "1Gi"}}}]}}
            for name, cpus in pods]
    path = tmp / "pods.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


def _busy_node() -> ModelDrivenNode:
    """2 NUMA nodes of 4 CPUs (0-3, 4-7), CPU 0 reserved, a 2-CPU pod on NUMA node 0: node 0
    has 1 CPU free, node 1 has 4."""
    config = ModelConfig(topology_policy="single-numa-node", scope="container",
                         reserved_cpus=frozenset({0}))
    node = ModelDrivenNode(from_spec("2x4x1"), config)
    placed = node.add(pod("busy", ctr("app", "2")))
    assert isinstance(placed, PodPlacement)
    assert placed.held <= {1, 2, 3}
    return node


async def _plan_live(tmp: Path, start_sim: Any, *args: str) -> None:
    node = _busy_node()
    sim = await start_sim(node.state())
    topology = tmp / "topology.json"
    topology.write_text(json.dumps(node.topology_json()))
    argv = ["plan", "--node", "--podresources.socket", sim.socket_path, "--topology",
            str(topology), "--topology-policy", "single-numa-node", "--scope", "container",
            "--reserved", "0", "--output", "json", *args]
    assert await asyncio.to_thread(main, argv) == 0


async def test_plan_node_over_the_socket(short_tmp: Path, start_sim: Any,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    manifest = _manifest(short_tmp, ("needs-four", 4), ("also-four", 4), ("one", 1))
    await _plan_live(short_tmp, start_sim, "-f", str(manifest))
    report = json.loads(capsys.readouterr().out)
    node = report["node"]
    assert node["free_cpus_by_numa"] == [{"numa_node": 0, "cpus": 1},
                                         {"numa_node": 1, "cpus": 4}]
    assert node["free_cpus"] == "3-7"
    # The busy pod's 1Gi is taken from NUMA node 0's memory.
    free_mem = {m["numa_node"]: m["bytes"] for m in node["free_memory"]}
    assert free_mem[1] - free_mem[0] == 2**30
    pods = {p["name"]: p for p in report["pods"]}
    # Fits only on the emptier NUMA node.
    assert pods["needs-four"]["admitted"] is True
    assert pods["needs-four"]["cpus"] == "4-7"
    assert pods["needs-four"]["numa_nodes"] == [1]
    # Would fit an empty node, fits nowhere now.
    assert pods["also-four"]["admitted"] is False
    assert "topology affinity" in pods["also-four"]["reason"]
    assert pods["also-four"]["cpus"] is None
    # What is left still takes a small pod.
    assert pods["one"]["admitted"] is True
    assert pods["one"]["cpus"] == "3"


async def test_plan_node_name_on_a_live_node(short_tmp: Path, start_sim: Any,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """`--node NAME` names a live node in both outputs, even when --node-name says
    otherwise (it used to report the sources' name and ignore NAME)."""
    manifest = _manifest(short_tmp, ("one", 1))
    node = _busy_node()
    sim = await start_sim(node.state())
    topology = short_tmp / "topology.json"
    topology.write_text(json.dumps(node.topology_json()))
    base = ["plan", "--node", "worker-9", "--podresources.socket", sim.socket_path,
            "--topology", str(topology), "--node-name", "other", "-f", str(manifest)]
    assert await asyncio.to_thread(main, [*base, "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["node"]["name"] == "worker-9"
    assert await asyncio.to_thread(main, base) == 0
    assert capsys.readouterr().out.startswith("node worker-9: ")


async def test_plan_node_table(short_tmp: Path, start_sim: Any,
                               capsys: pytest.CaptureFixture[str]) -> None:
    manifest = _manifest(short_tmp, ("needs-four", 4))
    node = _busy_node()
    sim = await start_sim(node.state())
    topology = short_tmp / "topology.json"
    topology.write_text(json.dumps(node.topology_json()))
    code = await asyncio.to_thread(main, [
        "plan", "--node", "--podresources.socket", sim.socket_path, "--topology",
        str(topology), "--scope", "container", "-f", str(manifest)])
    assert code == 0
    out = capsys.readouterr().out
    assert out.startswith("node ")
    assert "free CPUs 3-7 (NUMA 0: 1, NUMA 1: 4)" in out
    assert "4-7" in out.split("\n", 2)[2]


def _fixture_dir(tmp: Path, node: ModelDrivenNode) -> Path:
    from exporter.sources.fixture import write_fixture_dir

    out = tmp / "node"
    write_fixture_dir(out, node.state().raw(node.model.topo.to_snapshot()))
    return out


def test_plan_node_from_fixture_uses_configz(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    directory = _fixture_dir(tmp_path, _busy_node())
    manifest = _manifest(tmp_path, ("needs-four", 4), ("five", 5))
    # The modelled-node flags say "none" but the node's /configz says single-numa-node.
    assert main(["plan", "--node", "worker-7", "--from", str(directory), "--topology-policy",
                 "none", "-f", str(manifest), "-o", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["node"]["name"] == "worker-7"
    assert report["node"]["config"]["topologyManagerPolicy"] == "single-numa-node"
    pods = {p["name"]: p for p in report["pods"]}
    assert pods["needs-four"]["numa_nodes"] == [1]
    assert pods["five"]["admitted"] is False


def test_plan_node_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = _manifest(tmp_path, ("one", 1))
    assert main(["plan", "--from", str(tmp_path), "-f", str(manifest)]) == 2
    assert "--from DIR reads a node" in capsys.readouterr().err
    assert main(["plan", "--node", "--topology.shape", "1x4x1", "--from", str(tmp_path),
                 "-f", str(manifest)]) == 2
    assert "--topology.shape does not apply" in capsys.readouterr().err
    # A node whose topology is unknown cannot be modelled.
    node = _busy_node()
    directory = tmp_path / "notopo"
    from exporter.sources.fixture import write_fixture_dir

    write_fixture_dir(directory, node.state().raw(None))
    assert main(["plan", "--node", "--from", str(directory), "-f", str(manifest)]) == 2
    assert "topology is unknown" in capsys.readouterr().err


def test_free_memory_fills_a_multi_numa_block_node_by_node() -> None:
    """The memory manager reserves a block over several NUMA nodes by filling them in
    ascending order (``updateMachineState``, pkg/kubelet/cm/memorymanager/policy_static.go,
    v1.37.2), not evenly. Seen on the real kubelet 1.37.2 (tests/realnode/test_memory.py): a
    16Gi container on a 2-node machine of ~15Gi and ~16Gi allocatable left NUMA node 0 with
    0 bytes free in memory_manager_state, and later blocks of the group went to node 1."""
    from types import SimpleNamespace

    from reconciler.allocator.live import free_resources
    from reconciler.snapshot import (
        Allocatable,
        ContainerAlloc,
        CPUInfo,
        MemoryBlock,
        NodeSnapshot,
        PodAlloc,
        Topology,
    )

    gib = 2**30
    node0, node1 = 16075313152, 17075011584  # the kubelet's allocatable per node there
    topo = Topology(tuple(CPUInfo(i, i, i // 2, i // 2) for i in range(4)))
    alloc = Allocatable(memory=(MemoryBlock("memory", node0, (0,)),
                                MemoryBlock("memory", node1, (1,))))
    group = (0, 1)
    pods = (PodAlloc("default", "big", (ContainerAlloc("app", (1,), (
                MemoryBlock("memory", 16 * gib, group),)),)),
            PodAlloc("default", "plain", (
                ContainerAlloc("a", (2,), (MemoryBlock("memory", gib // 2, group),)),
                ContainerAlloc("b", (3,), (MemoryBlock("memory", gib // 4, group),)))),
            PodAlloc("default", "single", (ContainerAlloc("x", (), (
                MemoryBlock("memory", gib, (1,)),)),)))
    no_cpus: Any = SimpleNamespace(cpu_map=(), pods=())  # only the memory is asked for

    def free_memory(snapshot: NodeSnapshot, topo: Topology) -> dict[int, int]:
        return free_resources(snapshot, no_cpus, topo)[1]

    free = free_memory(NodeSnapshot(pods, allocatable=alloc), topo)
    used = 16 * gib + gib // 2 + gib // 4
    # memory_manager_state of that run: node 0 free 0, node 1 free 10870181888 (no "single").
    assert free == {0: 0, 1: node1 - (used - node0) - gib}
    # The order of the pods does not matter: the group's blocks share their nodes.
    assert free_memory(NodeSnapshot(pods[::-1], allocatable=alloc), topo) == free


def test_free_memory_counts_a_pool_reported_the_1_36_way_once() -> None:
    """1.36 (PodLevelResourceManagers on, pod scope) reports no pod-level memory: each
    container on a pod-level pod's pool lists the pool's blocks as its own. The ledger
    counts them once (docs/design.md#memory), and so must the free memory: seen on the real
    kubelet 1.36.3 (tests/realnode/test_memory.py), whose memory_manager_state had
    1,342,177,280 bytes (the pool, counted twice) more free on NUMA node 0 than plan said."""
    from reconciler.allocator.live import free_resources
    from reconciler.kube import ContainerSpec, PodSpec, Resources
    from reconciler.reconcile import reconcile
    from reconciler.snapshot import (
        Allocatable,
        ContainerAlloc,
        CPUInfo,
        MemoryBlock,
        NodeSnapshot,
        PodAlloc,
        Topology,
    )

    mib = 2**20
    topo = Topology(tuple(CPUInfo(i, i, i // 4, i // 4) for i in range(8)))
    alloc = Allocatable(cpu_ids=tuple(range(1, 8)), memory=(
        MemoryBlock("memory", 8192 * mib, (0,)), MemoryBlock("memory", 8192 * mib, (1,))))
    pool = MemoryBlock("memory", 1280 * mib, (0,))
    pooled = PodAlloc("default", "pooled", (
        ContainerAlloc("app", (1,), (MemoryBlock("memory", 768 * mib, (0,)),)),
        ContainerAlloc("log", (2, 3), (pool,)), ContainerAlloc("mesh", (2, 3), (pool,))))
    own = Resources(1000, 1000, 768 * mib, 768 * mib)
    spec = PodSpec("default", "pooled", "u1", (
        ContainerSpec("app", own), ContainerSpec("log"), ContainerSpec("mesh")),
        resources=Resources(3000, 3000, 2048 * mib, 2048 * mib), qos_class="Guaranteed")
    snapshot = NodeSnapshot((pooled,), allocatable=alloc, topology=topo, pod_specs=(spec,))
    ledger = reconcile(snapshot)
    assert "legacy_shared_report" in {a.kind for a in ledger.anomalies}
    _, free = free_resources(snapshot, ledger, topo)
    assert free == {0: (8192 - 2048) * mib, 1: 8192 * mib}


def _node_with_a_lone_block(policy: str) -> ModelDrivenNode:
    """3 NUMA nodes of 4 CPUs and 8 GiB, the Static memory manager, CPU 0 reserved, and a
    1Gi container on NUMA node 0: a node holding a single-node block serves no block over
    several nodes (``isAffinityViolatingNUMAAllocations`` and ``calculateHints`` in
    pkg/kubelet/cm/memorymanager/policy_static.go, v1.37.2)."""
    config = ModelConfig(topology_policy=policy, scope="container",
                         reserved_cpus=frozenset({0}))
    node = ModelDrivenNode(from_spec("3x4x1", memory_per_numa=8 * 2**30), config)
    placed = node.add(pod("small", ctr("app", "1", "1Gi")))
    assert isinstance(placed, PodPlacement)
    return node


@pytest.mark.parametrize("policy", ["best-effort", "none"])
def test_plan_node_keeps_the_memory_managers_numa_groups(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], policy: str) -> None:
    """plan --node seeds the model with the NUMA groups the pods' memory blocks hold, not
    only the free bytes: a 10Gi container needs two NUMA nodes, and node 0, which holds a
    block of its own, may not be one of them, so its memory goes to nodes 1 and 2. Seeded
    with the free bytes alone, the model put it on nodes 0 and 1. The expectation is the
    model that admitted both pods in turn, whose memory placement the reference
    differential checks."""
    node = _node_with_a_lone_block(policy)
    directory = tmp_path / "node"
    from exporter.sources.fixture import write_fixture_dir

    write_fixture_dir(directory, node.state().raw(node.model.topo.to_snapshot()))
    manifest = tmp_path / "big.yaml"
    manifest.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": "default",
                                                        "name": "big"},
        "spec": {"containers": [{"name": "app", "resources": {
            "requests": {"cpu": "2", "memory": "10Gi"},
            "limits": {"cpu": "2", "memory": "10Gi"}}}]}}))
    assert main(["plan", "--node", "--from", str(directory), "-f", str(manifest),
                 "-o", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["node"]["memory_groups"] == [[0]]
    planned = report["pods"][0]
    expected = node.add(pod("big", ctr("app", "2", "10Gi")))
    assert isinstance(expected, PodPlacement)
    assert planned["admitted"] is True
    assert planned["cpus"] == format_cpuset(expected.held)
    assert planned["memory_numa_nodes"] == [1, 2]

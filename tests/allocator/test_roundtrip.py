"""Round trip: random workloads placed by the model-driven simulated kubelet, served over
the real PodResources socket and HTTPS, read back by the exporter's reader and reconcile,
must reproduce the model's own ground truth for every container and every pool."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from allocator.strategies import random_pod
from exporter.reader import NodeReader, SourceOptions
from exporter.sim.model_driven import ModelDrivenNode
from reconciler.allocator import ModelConfig, PodPlacement, from_spec

N_PODS = 200


def _place(style: str, scope: str, seed: int, n_pods: int = N_PODS,
           spec: str = "2x32x2") -> ModelDrivenNode:
    topo = from_spec(spec, numa_per_socket=2)
    config = ModelConfig(scope=scope, topology_policy="single-numa-node", reserved_cpu_m=2000)
    node = ModelDrivenNode(topo, config, style)
    rng = random.Random(seed)
    # The 1.36 report cannot show a pod-level pod without at least two pod-shared containers
    # (one would read as exclusive, none as node-level); such workloads are what it can show.
    min_shared = 2 if style == "1.36" else 0
    for i in range(n_pods):
        ns = rng.choice(["shop", "db", "batch"])
        node.add(random_pod(rng, f"p{i}", min_shared=min_shared, namespace=ns))
        if node.model.pods and rng.random() < 0.15:  # churn
            victim = rng.choice(sorted(node.model.pods))
            node.delete(*victim)
    return node


async def _read_back(node: ModelDrivenNode, start_sim: Any, short_tmp: Path) -> Any:
    """List and GetAllocatableResources over the real socket; pod specs and config as the
    kubelet's JSON bodies (parsed by the exporter's own parsers); then reconcile."""
    from exporter.assemble import assemble
    from exporter.sources.convert import allocatable_from_proto, pods_from_proto
    from exporter.sources.kubelet_bodies import config_from_object, pod_list_from_object
    from exporter.sources.podresources import PodResourcesClient
    from reconciler.reconcile import reconcile

    state = node.state()
    sim = await start_sim(state)
    client = PodResourcesClient(sim.socket_path)
    try:
        listing = await client.list()
        allocatable = await client.allocatable()
    finally:
        await client.close()
    pod_list = json.loads(json.dumps(state.pod_list))
    configz = json.loads(json.dumps(state.configz))
    snapshot = assemble(pods_from_proto(listing), allocatable=None if allocatable is None
                        else allocatable_from_proto(allocatable),
                        pod_specs=pod_list_from_object(pod_list),
                        config=config_from_object(configz), topology=node.model.topo.to_snapshot())
    return reconcile(snapshot)


async def _read_back_https(node: ModelDrivenNode, start_sim: Any, short_tmp: Path) -> Any:
    """The whole reader: PodResources socket plus /pods and /configz over HTTPS."""
    sim = await start_sim(node.state(), http=True)
    topo_file = short_tmp / "topology.json"
    topo_file.write_text(json.dumps(node.topology_json()))
    reader = NodeReader(SourceOptions(socket=sim.socket_path, kubelet_url=sim.http_url,
                                      insecure_skip_verify=True, token_file=None, sysfs=None,
                                      topology_file=str(topo_file)))
    try:
        reading = await reader.read()
    finally:
        await reader.close()
    assert not reading.errors, reading.errors
    return reading.ledger


@pytest.mark.parametrize(("style", "scope", "seed"), [
    ("1.37", "pod", 1), ("1.37", "container", 2), ("1.36", "pod", 3), ("1.35", "pod", 4),
])
async def test_reconcile_reproduces_the_model(style: str, scope: str, seed: int,
                                              start_sim: Any, short_tmp: Path) -> None:
    node = _place(style, scope, seed)
    assert len(node.model.pods) >= 60, "the workload should fill the node with many pods"
    assert node.rejected, "some pods should not fit"
    ledger = await _read_back_https(node, start_sim, short_tmp)
    _compare(node, ledger, style)


@pytest.mark.parametrize("style", ["1.37", "1.36"])
async def test_full_reader_over_https(style: str, start_sim: Any, short_tmp: Path) -> None:
    node = _place(style, "pod", 7, n_pods=30, spec="1x16x2")
    assert node.model.pods
    ledger = await _read_back_https(node, start_sim, short_tmp)
    _compare(node, ledger, style)


@pytest.mark.parametrize("style", ["1.37", "1.35"])
async def test_memory_assignments_round_trip(style: str, start_sim: Any,
                                             short_tmp: Path) -> None:
    node = _place(style, "pod", 11)
    ledger = await _read_back(node, start_sim, short_tmp)
    truth = {p.key: p for p in node.model.pods.values()}
    for c in ledger.containers:
        want = {t.name: t for t in truth[(c.namespace, c.pod)].containers}[c.name]
        assert c.memory_assignment == want.memory_assignment, (c, want)


def _compare(node: ModelDrivenNode, ledger: Any, style: str) -> None:
    model = node.model
    placed = list(model.pods.values())

    # Pools, node-wide and per NUMA node.
    assert ledger.cpu_pools.to_json() == model.pools()
    by_numa = dict(ledger.cpu_pools_by_numa)
    for n in model.topo.numa_nodes:
        assert by_numa[n].to_json() == model.pools(n), f"NUMA node {n}"

    # Pods in List order, with their blocks.
    assert [(p.namespace, p.name) for p in ledger.pods] == [p.key for p in placed]
    truth: dict[tuple[str, str], PodPlacement] = {p.key: p for p in placed}
    pod_level = 0
    for entry in ledger.pods:
        p = truth[(entry.namespace, entry.name)]
        assert entry.cpus == p.block
        if p.block:
            pod_level += 1
    if style == "1.35" or node.config.scope == "container":
        assert pod_level == 0
    else:
        assert pod_level > 0

    # Every container's assignment and cpuset.
    seen = 0
    for c in ledger.containers:
        p = truth[(c.namespace, c.pod)]
        want = {t.name: t for t in p.containers}[c.name]
        assert (c.assignment, c.cpus) == (want.assignment, want.cpus), (c, want)
        assert c.sidecar == want.sidecar
        seen += 1
    assert seen == sum(len(p.containers) for p in placed)

    # Anomalies: only the 1.36 report pattern, once per pod-level pod.
    kinds = sorted({a.kind for a in ledger.anomalies})
    if style == "1.36":
        assert kinds == ["legacy_shared_report"]
        flagged = {(a.namespace, a.pod) for a in ledger.anomalies}
        assert flagged == {p.key for p in placed if p.block}
    else:
        assert kinds == [], [a.to_json() for a in ledger.anomalies][:5]

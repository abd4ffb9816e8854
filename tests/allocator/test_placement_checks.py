"""The live placement checks never accuse the kubelet's own placements: random workloads
placed by the model, under every option combination, reported as the kubelet reports them
and reconciled, raise no full_pcpus_violation, numa_policy_violation or uncore_split."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from allocator.helpers import ctr, pod
from allocator.strategies import configs, random_pod, topologies
from exporter.assemble import snapshot_from_raw
from exporter.sim.model_driven import ModelDrivenNode
from reconciler.allocator import CPUTopology, ModelConfig, PodPlacement, from_spec
from reconciler.kube import PodSpec
from reconciler.reconcile import reconcile

PLACEMENT_KINDS = {"full_pcpus_violation", "numa_policy_violation", "uncore_split"}


def _with_caches(topo: CPUTopology, cores_per_cache: int) -> CPUTopology:
    """``topo`` with uncore caches of ``cores_per_cache`` consecutive cores of a NUMA node."""
    first: dict[int, int] = {}
    for c in sorted(topo.cpus, key=lambda c: c.core):
        first.setdefault(c.numa_node, c.core)
    uncore = tuple((c.id, c.numa_node * 1000 + (c.core - first[c.numa_node]) // cores_per_cache)
                   for c in topo.cpus)
    return CPUTopology(cpus=topo.cpus, memory=topo.memory, uncore=uncore)


def _whole_core_pod(rng: random.Random, name: str) -> PodSpec:
    """A pod of even CPU counts, which full-pcpus-only admits on two-thread cores (most
    random pods it refuses): legacy containers, or a pod budget with a shared sidecar."""
    apps = [ctr(f"app{i}", str(2 * rng.randint(1, 3)), "256Mi")
            for i in range(rng.randint(1, 2))]
    if rng.random() < 0.5:
        return pod(name, *apps)
    exclusive = sum(c.resources.integer_cpus or 0 for c in apps)
    return pod(name, *apps, init=(ctr("side", sidecar=True),), budget=str(exclusive + 2),
               budget_mem=f"{256 * len(apps) + 256}Mi")


def _placed_node(shape: tuple[str, int], config: ModelConfig, cache_cores: int, seed: int,
                 churn: bool) -> ModelDrivenNode:
    spec, nps = shape
    topo = _with_caches(from_spec(spec, numa_per_socket=nps, memory_per_numa=2**30 * 4),
                        cache_cores)
    node = ModelDrivenNode(topo, config)
    rng = random.Random(seed)
    for i in range(rng.randint(1, 16)):
        make = random_pod if rng.random() < 0.5 else _whole_core_pod
        node.add(make(rng, f"p{i}"))
        if churn and node.model.pods and rng.random() < 0.3:
            node.delete(*rng.choice(sorted(node.model.pods)))
    return node


@settings(max_examples=150, deadline=None)
@given(shape=topologies(), config=configs(), cache_cores=st.sampled_from([1, 2, 3]),
       seed=st.integers(0, 2**32), churn=st.booleans())
def test_the_model_s_placements_pass_the_placement_checks(
        shape: tuple[str, int], config: ModelConfig, cache_cores: int, seed: int,
        churn: bool) -> None:
    node = _placed_node(shape, config, cache_cores, seed, churn)
    snapshot = snapshot_from_raw(node.state().raw(node.model.topo.to_snapshot())).snapshot
    ledger = reconcile(snapshot)
    # uncore_split judges by what is free now: after churn a cache the kubelet could not
    # use when it placed a pod may have been freed since (docs/runbook.md says so).
    judged = PLACEMENT_KINDS - ({"uncore_split"} if churn else set())
    found = [a for a in ledger.anomalies if a.kind in judged]
    assert not found, (config, [p.held for p in node.model.pods.values()], found)


def test_the_checks_see_the_placements() -> None:
    """The property is not vacuous: the reconciled node has the configuration, the
    topology with caches, and pods holding exclusive CPUs."""
    config = ModelConfig(topology_policy="restricted", scope="container",
                         options=frozenset({"full-pcpus-only",
                                            "prefer-align-cpus-by-uncorecache"}))
    node = _placed_node(("2x4x2", 1), config, 2, 7, churn=False)
    assert any(isinstance(p, PodPlacement) and p.held for p in node.model.pods.values())
    snapshot = snapshot_from_raw(node.state().raw(node.model.topo.to_snapshot())).snapshot
    assert snapshot.kubelet_config is not None
    assert snapshot.topology is not None and {c.uncore for c in snapshot.topology.cpus} \
        == {0, 1, 1000, 1001}
    # A half core handed to a pod by hand is caught on the same node.
    from dataclasses import replace

    listing = snapshot.pods
    held = next(p for p in listing if any(c.cpu_ids for c in p.containers))
    i = next(i for i, c in enumerate(held.containers) if c.cpu_ids)
    bad = held.containers[i]._replace(cpu_ids=held.containers[i].cpu_ids[:1])
    broken = held._replace(containers=(*held.containers[:i], bad, *held.containers[i + 1:]))
    pods = tuple(broken if p is held else p for p in listing)
    kinds = {a.kind for a in reconcile(replace(snapshot, pods=pods)).anomalies}
    assert "full_pcpus_violation" in kinds


def test_a_set_holding_a_cache_whole_is_not_told_to_move_into_it() -> None:
    """Found by the property above (shape 2x6x1, caches of 3 cores, seed 52): the model,
    like the 1.37.2 reference on the same workload, gives p5 cache 1001 whole and three
    single CPUs of caches no longer free; the check once offered cache 1001 itself as the
    room the three could have shared."""
    config = ModelConfig(memory_policy="None", topology_policy="none", scope="pod",
                         options=frozenset({"prefer-align-cpus-by-uncorecache"}),
                         reserved_cpu_m=2000, pod_level=True)
    node = _placed_node(("2x6x1", 1), config, 3, 52, churn=False)
    assert node.model.pods[("default", "p5")].held == frozenset({2, 5, 8, 9, 10, 11})
    snapshot = snapshot_from_raw(node.state().raw(node.model.topo.to_snapshot())).snapshot
    assert not [a for a in reconcile(snapshot).anomalies if a.kind == "uncore_split"]

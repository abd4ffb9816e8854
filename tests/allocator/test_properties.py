"""Invariants of the model over random nodes, configurations and workloads."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from allocator.strategies import configs, random_pod, topologies
from reconciler.allocator import ModelConfig, NodeModel, PodPlacement, from_spec
from reconciler.allocator.model import pod_guaranteed_cpus


def _min_numa_span(model: NodeModel, n: int) -> int:
    sizes = sorted((len(c - model.reserved) for c in model.topo.numa_cpus.values()),
                   reverse=True)
    total = 0
    for i, size in enumerate(sizes, 1):
        total += size
        if total >= n:
            return i
    return len(sizes)


def _check(model: NodeModel) -> None:
    online = model.topo.online
    owners: dict[int, str] = {}
    for p in model.pods.values():
        seen: set[int] = set()
        for c in p.containers:
            assert not (c.exclusive & seen), f"{p.name}/{c.name} overlaps a sibling"
            seen |= c.exclusive
        if p.block:
            assert p.exclusive <= p.block, "exclusive slice outside its pod block"
        for cpu in p.held:
            assert cpu not in owners, f"CPU {cpu} owned by {owners.get(cpu)} and {p.name}"
            owners[cpu] = p.name
    held = frozenset(owners)
    assert not held & model.reserved
    assert not held & model.free
    if model.config.static:
        # Blocks of pods refused after the block was taken stay out (the kubelet's leak).
        leaked = frozenset().union(*model.orphan_blocks.values())
        assert not leaked & (held | model.free)
        assert held | leaked | model.free | model.reserved == online
    assert sum(model.pools().values()) == len(online)
    # Topology policy.
    policy = model.config.topology_policy
    for p in model.pods.values():
        units = [p.block] if p.block else (
            [p.exclusive] if model.config.scope == "pod" else [c.exclusive for c in p.containers])
        for unit in units:
            if not unit:
                continue
            span = len(model.topo.numa_set(unit))
            if policy == "single-numa-node":
                assert span == 1, f"{p.name} spans {span} NUMA nodes"
            elif policy == "restricted":
                # Under the pod scope the hint is sized for the whole pod, init containers
                # included (podGuaranteedCPUs), which may be more than it holds.
                need = len(unit)
                if model.config.scope == "pod" and not p.block:
                    need = max(need, pod_guaranteed_cpus(p.spec))
                allowed = _min_numa_span(model, need)
                if "align-by-socket" in model.config.options:
                    # The preferred mask's NUMA nodes may each be on another socket, and the
                    # CPUs are then taken from those whole sockets (allocateCPUs widens the
                    # hint to them).
                    per_socket = len(model.topo.numa_cpus) // len(model.topo.socket_cpus)
                    allowed = min(len(model.topo.numa_cpus), allowed * per_socket)
                assert span <= allowed


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topo=topologies(), config=configs(), seed=st.integers(0, 2**32 - 1),
       steps=st.integers(5, 40))
def test_random_admit_release_keeps_every_invariant(topo: tuple[str, int], config: ModelConfig,
                                                    seed: int, steps: int) -> None:
    spec, nps = topo
    model = NodeModel(from_spec(spec, numa_per_socket=nps), config)
    start_free = set(model.free)
    start_mem = dict(model.mem_free)
    rng = random.Random(seed)
    for i in range(steps):
        if model.pods and rng.random() < 0.3:
            ns, name = rng.choice(sorted(model.pods))
            released = model.release(ns, name)
            assert released is not None
        else:
            model.admit(random_pod(rng, f"p{i}"))
        _check(model)
    for ns, name in list(model.pods):
        model.release(ns, name)
    # Every CPU comes back but the blocks of pods refused after their block was taken,
    # which the kubelet never gives back (docs/design.md#allocator).
    leaked = set().union(*model.orphan_blocks.values())
    assert model.free | leaked == start_free and not model.free & leaked
    assert model.mem_free == start_mem


@settings(max_examples=60, deadline=None)
@given(topo=topologies(), seed=st.integers(0, 2**32 - 1))
def test_release_returns_exactly_what_a_pod_held(topo: tuple[str, int], seed: int) -> None:
    spec, nps = topo
    model = NodeModel(from_spec(spec, numa_per_socket=nps),
                      ModelConfig(scope="pod", topology_policy="best-effort"))
    rng = random.Random(seed)
    for i in range(10):
        model.admit(random_pod(rng, f"p{i}"))
    for key in list(model.pods):
        before = set(model.free)
        placed = model.pods[key]
        assert isinstance(placed, PodPlacement)
        model.release(*key)
        assert model.free == before | placed.held
        assert not before & placed.held

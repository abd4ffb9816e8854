"""Invariants of the model over random nodes, configurations and workloads."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from allocator.strategies import configs, random_pod, topologies
from reconciler.allocator import ModelConfig, NodeModel, PodPlacement, from_spec


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
        assert held | model.free | model.reserved == online
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
                allowed = _min_numa_span(model, len(unit))
                if "align-by-socket" in model.config.options:
                    # A mask on as few sockets as needed is preferred too.
                    per_socket = len(model.topo.numa_cpus) // len(model.topo.socket_cpus)
                    allowed = -(-allowed // per_socket) * per_socket
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
    assert model.free == start_free
    assert model.mem_free == start_mem


@settings(max_examples=60, deadline=None)
@given(topo=topologies(), seed=st.integers(0, 2**32 - 1))
def test_release_returns_exactly_what_a_pod_held(topo: tuple[str, int], seed: int) -> None:
    spec, nps = topo
    model = NodeModel(from_spec(spec, numa_per_socket=nps), ModelConfig(scope="pod"))
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

"""The random cases of the differential (bench/reference.py; docs/design.md#reference), without
Go: what the topology-option and memory streams add, and that a seed's case without them is
the one it always was."""

from __future__ import annotations

from bench import reference_machines
from bench.reference import random_case, setup_request


def test_without_the_new_streams_a_seed_keeps_its_case() -> None:
    for seed in range(40):
        plain = random_case(seed, "1.37", topology_options=False)
        assert plain.topo.distances == () and not plain.config.prefer_closest_numa
        assert plain.config.memory_policy == "None" and plain.reserved_memory == ()
        full = random_case(seed, "1.37", devices=False)
        # No machine of many NUMA nodes drawn, none with CPUs offline.
        if len(full.topo.numa_nodes) <= 8 and not reference_machines.drawn("1.37", seed):
            assert full.topo.cpus == plain.topo.cpus
            # The CPU manager's stream adds reconcile steps only (bench/reference_cpu.py).
            assert [op for op in full.ops if op[0] != "reconcile"] == plain.ops


def test_devices_only_add_extended_resources() -> None:
    with_devices = 0
    for seed in range(60):
        plain = random_case(seed, "1.35", devices=False)
        case = random_case(seed, "1.35")
        with_devices += bool(case.devices)
        assert case.topo == plain.topo and case.config == plain.config
        assert len(case.ops) == len(plain.ops)
        for (op, pod), (op0, pod0) in zip(case.ops, plain.ops, strict=True):
            assert op == op0
            if pod is None or pod0 is None:
                assert pod is pod0
                continue
            strip = [(c.name, c.resources.cpu_request_m, c.resources.memory_limit)
                     for c in (*pod.containers, *pod.init_containers)]
            assert strip == [(c.name, c.resources.cpu_request_m, c.resources.memory_limit)
                             for c in (*pod0.containers, *pod0.init_containers)]
            served = set(case.devices.by_name)
            assert all(name in served for c in (*pod.containers, *pod.init_containers)
                       for name, _ in c.resources.extended)
    assert 5 <= with_devices <= 35  # about three in ten


def test_distances_are_symmetric_and_uneven() -> None:
    seen_closest = seen_many = False
    for seed in range(200):
        case = random_case(seed, "1.36")
        nodes = case.topo.numa_nodes
        rows = dict(case.topo.distances)
        assert sorted(rows) == list(nodes)
        for a in nodes:
            assert rows[a][a] == 10
            for b in nodes:
                assert rows[a][b] == rows[b][a] and (a == b or rows[a][b] > 10)
        seen_closest |= case.config.prefer_closest_numa
        seen_many |= len(nodes) > 8
        setup = setup_request(case)["setup"]
        assert setup["distances"] == {str(n): list(rows[n]) for n in nodes}
        assert ("prefer-closest-numa-nodes" in setup["topology_options"]) == \
            case.config.prefer_closest_numa
    assert seen_closest and seen_many


def test_the_memory_stream_sets_up_the_static_memory_manager() -> None:
    case = random_case(3, "1.37", memory=True)
    plain = random_case(3, "1.37")
    assert case.config.memory_policy == "Static"
    reserved = dict(case.reserved_memory)
    assert reserved and all(r > 0 for r in reserved.values())
    setup = setup_request(case)["setup"]
    # The reference gets each node's capacity; the model what is left after the reservation.
    assert setup["memory"] == {str(n): b + reserved[n] for n, b in case.topo.memory}
    assert dict(plain.topo.memory) == {n: b + reserved[n] for n, b in case.topo.memory}
    assert setup["reserved_memory"] == {str(n): r for n, r in reserved.items()}
    assert [op for op, _ in case.ops] == [op for op, _ in plain.ops]


def test_explicit_reserved_cpu_sets_stay_in_the_mix() -> None:
    """The topology-option stream dropped every reservedSystemCPUs set (it took any case with
    distances for a new machine): the kubelet's explicit-set path went unmeasured."""
    kept = sum(bool(random_case(seed, "1.37").config.reserved_cpus) for seed in range(100))
    assert kept >= 15

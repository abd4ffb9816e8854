"""The random machines with CPUs offline (bench/reference_machines.py), without Go: a
modest share of the mix, each a machine the kubelet starts on, of unequal sockets, NUMA
nodes or cores."""

from __future__ import annotations

import random
from collections import Counter

from bench import reference_machines
from bench.reference import random_case
from reconciler.allocator import CPUTopology


def _sizes(units: dict[int, frozenset[int]]) -> set[int]:
    return {len(cpus) for cpus in units.values()}


def test_a_modest_share_of_the_mix_has_cpus_offline() -> None:
    drawn = sum(reference_machines.drawn("1.37", seed) for seed in range(1000))
    assert 80 <= drawn <= 160


def test_each_kind_gives_the_machine_it_says() -> None:
    seen: Counter[str] = Counter()
    for seed in range(300):
        case = random_case(seed, "1.36", devices=False)
        topo = case.topo
        for kind in reference_machines.KINDS:
            got = reference_machines.offline(random.Random(seed), topo, kind)
            if got is topo:
                continue
            assert 0 in got.online and got.online < topo.online
            assert set(got.numa_cpus) == set(topo.numa_cpus)  # every node keeps a core
            assert set(got.socket_cpus) == set(topo.socket_cpus)
            _same_cores_less_cpus(topo, got)
            if len(_sizes(got.socket_cpus)) > 1:
                seen["sockets"] += 1
            if len(_sizes(got.numa_cpus)) > 1:
                seen["numa"] += 1
            if len(_sizes(got.core_cpus)) > 1:
                seen["threads"] += 1
    assert min(seen.values()) >= 20 and set(seen) == {"sockets", "numa", "threads"}


def _same_cores_less_cpus(topo: CPUTopology, got: CPUTopology) -> None:
    """A core keeps its CPUs that are still online and is named after the lowest; each CPU
    keeps its socket, NUMA node and uncore cache."""
    for core, cpus in got.core_cpus.items():
        assert core == min(cpus)
        before = topo.core_cpus[topo.by_id[core].core]
        assert cpus == before & got.online
    for cpu in got.cpus:
        was = topo.by_id[cpu.id]
        assert (cpu.socket, cpu.numa_node) == (was.socket, was.numa_node)
        assert got.uncore_of[cpu.id] == topo.uncore_of[cpu.id]


def test_an_explicit_reserved_set_keeps_its_online_cpus() -> None:
    for seed in range(400):
        if not reference_machines.drawn("1.37", seed):
            continue
        case = random_case(seed, "1.37", devices=False)
        reserved = case.config.reserved_cpus
        assert reserved is None or reserved <= case.topo.online

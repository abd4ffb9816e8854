"""Machines with CPUs offline, in the random differential (docs/design.md#reference).

A share of the random machines loses some CPUs, as a real one does with CPUs offlined,
partly onlined or a VM's odd vCPU layout: whole cores of one socket or NUMA node (sockets
and NUMA nodes of unequal size), one thread of some cores (cores of one thread beside cores
of two), or both. The kubelet divides by its counts where such a machine's units differ
(``CPUsPerSocket``, ``CPUsPerCore``: docs/design.md#allocator), which is what these cases
check. CPU 0 stays online (Linux cannot offline it on most machines), and every NUMA node
keeps a core: a node without CPUs is another kind of machine.

The draws come from a random stream of their own, so that the rest of a seed's case is as
it was.
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import replace
from typing import TYPE_CHECKING

from reconciler.allocator import CPUTopology
from reconciler.snapshot import CPUInfo

if TYPE_CHECKING:
    from bench.reference import Case

SHARE = 0.12
KINDS = ("sockets", "numa", "threads", "mixed")


def with_offline_cpus(case: Case, version: str, seed: int) -> Case:
    """The case, on a share of seeds with some of its machine's CPUs offline; a reserved
    set loses the CPUs that went offline (a reserved CPU count stands in when none is
    left)."""
    rng = _stream(version, seed)
    if rng.random() >= SHARE:
        return case
    topo = offline(rng, case.topo, rng.choice(KINDS))
    if topo is case.topo:
        return case
    config = case.config
    if config.reserved_cpus:
        kept = config.reserved_cpus & topo.online
        config = replace(config, reserved_cpus=kept or None,
                         reserved_cpu_m=config.reserved_cpu_m if kept else 1000)
    return replace(case, topo=topo, config=config)


def drawn(version: str, seed: int) -> bool:
    """Whether the seed's machine is one with CPUs offline (when it has any to take)."""
    return _stream(version, seed).random() < SHARE


def _stream(version: str, seed: int) -> random.Random:
    return random.Random(f"{version}:{seed}:offline-cpus")


def offline(rng: random.Random, topo: CPUTopology, kind: str) -> CPUTopology:
    """``topo`` with CPUs offline as ``kind`` says (:data:`KINDS`); ``topo`` itself when
    it has nothing to take of that kind."""
    gone: set[int] = set()
    if kind in ("sockets", "mixed"):
        gone |= _whole_cores(rng, topo, topo.socket_cpus)
    if kind == "numa":
        gone |= _whole_cores(rng, topo, topo.numa_cpus)
    if kind in ("threads", "mixed"):
        gone |= _threads(rng, topo, gone)
    if not gone:
        return topo
    return _without(topo, gone)


def _whole_cores(rng: random.Random, topo: CPUTopology,
                 units: dict[int, frozenset[int]]) -> set[int]:
    """Whole cores of one unit (a socket, or a NUMA node), each NUMA node keeping one."""
    if len(units) < 2:
        return set()
    unit = rng.choice(sorted(units))
    cores = sorted({topo.by_id[c].core for c in units[unit]})
    left = {n: {topo.by_id[c].core for c in cpus} for n, cpus in topo.numa_cpus.items()}
    gone: set[int] = set()
    for core in rng.sample(cores, rng.randint(1, len(cores))):
        cpus = topo.core_cpus[core]
        node = topo.by_id[min(cpus)].numa_node
        if 0 in cpus or len(left[node]) < 2:
            continue
        left[node].discard(core)
        gone |= cpus
    return gone


def _threads(rng: random.Random, topo: CPUTopology, gone: set[int]) -> set[int]:
    """One thread of some cores of two or more; either thread (the core is then named
    after the one left, as the kubelet names a core after its lowest CPU)."""
    smt = [core for core, cpus in sorted(topo.core_cpus.items())
           if len(cpus) > 1 and not cpus & gone]
    if not smt:
        return set()
    out: set[int] = set()
    for core in rng.sample(smt, rng.randint(1, len(smt))):
        out.add(rng.choice(sorted(topo.core_cpus[core] - {0})))
    return out


def _without(topo: CPUTopology, gone: set[int]) -> CPUTopology:
    """The machine with the CPUs of ``gone`` offline: each core keeps the name of its
    lowest online CPU, each CPU its uncore cache."""
    members: dict[int, list[int]] = defaultdict(list)
    for cpu in topo.cpus:
        if cpu.id not in gone:
            members[cpu.core].append(cpu.id)
    cpus = tuple(CPUInfo(cpu.id, min(members[cpu.core]), cpu.socket, cpu.numa_node)
                 for cpu in topo.cpus if cpu.id not in gone)
    uncore = tuple((c, cache) for c, cache in topo.uncore if c not in gone)
    return CPUTopology(cpus=cpus, memory=topo.memory, uncore=uncore, counts=None,
                       distances=topo.distances, hugepages=topo.hugepages)

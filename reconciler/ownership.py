"""CPU ownership (docs/design.md#ownership) and the pools it adds up to
(docs/design.md#cpu-pools).

Every CPU is owned at most once. Ownership is decided in ``List`` order: pod by pod, and
inside a pod its exclusive sets (in container order) before its shared or idle remainder.
A CPU already owned by another pod stays with its first owner (``exclusive_overlap``).
Online CPUs nobody owns are reserved or node_shared; a reserved CPU that a pod owns counts
in the pod's pool.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from reconciler.anomalies import Anomaly
from reconciler.classify import EMPTY, PodView
from reconciler.cpuset import format_cpuset
from reconciler.ledger import CPUCell, PoolCounts
from reconciler.node_facts import NodeFacts
from reconciler.pools import CPU_POOLS, EXCLUSIVE, CPUPool
from reconciler.snapshot import PodAlloc

Owner = tuple[CPUPool, int, str]  # (pool, List index of the pod, "namespace/pod[/container]")


class Claim(NamedTuple):
    """What one pod was given."""

    exclusive: frozenset[int]  # its exclusive containers' CPUs (even those owned first)
    remainder: frozenset[int]  # its block less those: the pod shared pool, or idle


_NO_CLAIM = Claim(EMPTY, EMPTY)


class Ownership:
    """The owner of every CPU handed out so far; pods claim theirs in ``List`` order."""

    def __init__(self, pods: Sequence[PodAlloc]) -> None:
        self.pods = pods
        self.owner: dict[int, Owner] = {}

    def claim(self, index: int, view: PodView) -> tuple[Claim, list[Anomaly]]:
        """Hands the pod at ``index`` its CPUs: exclusive sets first, then the remainder of
        its block; returns what it got and ``exclusive_overlap``/``empty_pod_shared_pool``."""
        if view.plain:
            return _NO_CLAIM, []
        overlaps: dict[int, set[int]] = {}
        exclusive = self._claim_exclusive(index, view, overlaps)
        remainder = view.block - exclusive
        found: list[Anomaly] = []
        if view.pod_level:
            self._claim_remainder(index, view, remainder, overlaps, found)
        pod = view.alloc
        for other, taken in overlaps.items():
            first = self.pods[other]
            found.append(Anomaly(
                "exclusive_overlap", pod.namespace, pod.name, None,
                f"CPUs {format_cpuset(taken)} are already exclusive to "
                f"{first.namespace}/{first.name}; counted once, for the first owner"))
        return tuple.__new__(Claim, (exclusive, remainder)), found  # as Claim(...), cheaper

    def _claim_exclusive(self, index: int, view: PodView,
                         overlaps: dict[int, set[int]]) -> frozenset[int]:
        pod = view.alloc
        taken: list[frozenset[int]] = []
        for c, assignment, cpus in zip(pod.containers, view.assignments, view.sets,
                                       strict=True):
            if assignment in EXCLUSIVE:
                self._take(cpus, (assignment, index, f"{pod.namespace}/{pod.name}/{c.name}"),
                           overlaps)
                taken.append(cpus)
        # Most pods have one exclusive container: its set is the pod's, no union built.
        if len(taken) == 1:
            return taken[0]
        return frozenset().union(*taken) if taken else EMPTY

    def _claim_remainder(self, index: int, view: PodView, remainder: frozenset[int],
                         overlaps: dict[int, set[int]], found: list[Anomaly]) -> None:
        pod = view.alloc
        has_shared = "pod_shared" in view.assignments
        pool: CPUPool = "pod_shared" if has_shared else "pod_idle"
        self._take(remainder, (pool, index, f"{pod.namespace}/{pod.name}"), overlaps)
        if has_shared and not remainder:
            found.append(Anomaly(
                "empty_pod_shared_pool", pod.namespace, pod.name, None,
                "pod-shared containers have no CPU left in the pod block "
                f"{format_cpuset(view.block) or '(empty)'}"))

    def _take(self, cpus: Iterable[int], who: Owner, overlaps: dict[int, set[int]]) -> None:
        owner, index = self.owner, who[1]
        for cpu in cpus:
            held = owner.get(cpu)
            if held is None:
                owner[cpu] = who
            elif held[1] != index:
                overlaps.setdefault(held[1], set()).add(cpu)


def cpu_pools(facts: NodeFacts, owner: Mapping[int, Owner],
              ) -> tuple[PoolCounts, tuple[tuple[int, PoolCounts], ...], tuple[CPUCell, ...]]:
    """The pool counts of the node and of each NUMA node, and the CPU map."""
    counts: dict[CPUPool, int] = dict.fromkeys(CPU_POOLS, 0)
    numa_counts = {n: dict.fromkeys(CPU_POOLS, 0) for n in facts.numa_nodes}
    places = facts.places or {}
    reserved = facts.reserved
    cells: list[CPUCell] = []
    for cpu in sorted(facts.online):
        held = owner.get(cpu)
        pool: CPUPool
        if held is not None:
            pool, who = held[0], held[2]
        else:
            pool, who = ("reserved" if cpu in reserved else "node_shared"), ""
        counts[pool] += 1
        meta = places.get(cpu)
        # tuple.__new__ in CPUCell's field order: a cell per CPU, without NamedTuple's
        # Python-level __new__.
        if meta is not None:
            numa_counts[meta.numa_node][pool] += 1
            cells.append(tuple.__new__(CPUCell, (cpu, pool, meta.core, meta.socket,
                                                 meta.numa_node, who)))
        else:
            cells.append(tuple.__new__(CPUCell, (cpu, pool, None, None, None, who)))
    by_numa = tuple((n, PoolCounts(**c)) for n, c in sorted(numa_counts.items()))
    return PoolCounts(**counts), by_numa, tuple(cells)

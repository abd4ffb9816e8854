"""``takeByTopology``: which CPUs the static policy picks for a request (SPEC §2.6).

Packed form: take whole free sockets / NUMA nodes while a whole one is still needed, then whole
free physical cores while at least threads-per-core CPUs are needed, then single CPUs. At every
level candidates are ordered fewest free CPUs first (best fit: pack the most-used unit), ties
by lower id, and the order is recomputed after every take.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable

from reconciler.allocator.topology import CPUTopology


class _Free:
    """Free-CPU bookkeeping with per-core / NUMA / socket counts."""

    def __init__(self, topo: CPUTopology, available: Iterable[int]) -> None:
        self.topo = topo
        self.free = {c for c in available if c in topo.by_id}
        self.core: dict[int, int] = {}
        self.numa: dict[int, int] = {}
        self.socket: dict[int, int] = {}
        for cpu in self.free:
            info = topo.by_id[cpu]
            self.core[info.core] = self.core.get(info.core, 0) + 1
            self.numa[info.numa_node] = self.numa.get(info.numa_node, 0) + 1
            self.socket[info.socket] = self.socket.get(info.socket, 0) + 1

    def take(self, cpus: Iterable[int]) -> None:
        for cpu in cpus:
            self.free.remove(cpu)
            info = self.topo.by_id[cpu]
            self.core[info.core] -= 1
            self.numa[info.numa_node] -= 1
            self.socket[info.socket] -= 1


def _whole_units(state: _Free, units: dict[int, frozenset[int]], level: str, need: int,
                 taken: set[int]) -> int:
    topo = state.topo
    while need > 0:
        best: tuple[tuple[int, ...], int] | None = None
        for uid, cpus in units.items():
            size = len(cpus)
            if size > need:
                continue
            counts = state.numa if level == "numa" else state.socket
            if counts.get(uid, 0) != size:
                continue
            first = topo.by_id[min(cpus)]
            # Fewest free in the enclosing unit first (pack), then lower id.
            parent = state.socket.get(first.socket, 0) if level == "numa" else 0
            key = (parent, uid)
            if best is None or key < best[0]:
                best = (key, uid)
        if best is None:
            break
        cpus = units[best[1]]
        state.take(cpus)
        taken.update(cpus)
        need -= len(cpus)
    return need


def _whole_cores(state: _Free, need: int, taken: set[int]) -> int:
    topo = state.topo
    tpc = topo.threads_per_core
    while need >= tpc:
        best: tuple[tuple[int, int, int], int] | None = None
        for core, cpus in topo.core_cpus.items():
            size = len(cpus)
            if size > need or state.core.get(core, 0) != size:
                continue
            info = topo.by_id[min(cpus)]
            key = (state.numa[info.numa_node], state.socket[info.socket], core)
            if best is None or key < best[0]:
                best = (key, core)
        if best is None:
            break
        cpus = topo.core_cpus[best[1]]
        state.take(cpus)
        taken.update(cpus)
        need -= len(cpus)
    return need


def _single_cpus(state: _Free, need: int, taken: set[int]) -> int:
    topo = state.topo
    while need > 0 and state.free:
        best_key: tuple[int, int, int, int] | None = None
        best_cpu = -1
        for cpu in state.free:
            info = topo.by_id[cpu]
            key = (state.core[info.core], state.numa[info.numa_node],
                   state.socket[info.socket], cpu)
            if best_key is None or key < best_key:
                best_key, best_cpu = key, cpu
        state.take((best_cpu,))
        taken.add(best_cpu)
        need -= 1
    return need


def take_by_topology(topo: CPUTopology, available: Iterable[int], n: int) -> frozenset[int] | None:
    """``n`` CPUs out of ``available`` in the packed order, or ``None`` when too few."""
    if n <= 0:
        return frozenset()
    state = _Free(topo, available)
    if n > len(state.free):
        return None
    taken: set[int] = set()
    need = n
    levels: list[tuple[str, dict[int, frozenset[int]]]] = [
        ("socket", topo.socket_cpus), ("numa", topo.numa_cpus)]
    # The larger unit is taken first (sockets usually hold one or more NUMA nodes).
    levels.sort(key=lambda lv: -max(len(c) for c in lv[1].values()))
    for level, units in levels:
        need = _whole_units(state, units, level, need, taken)
    need = _whole_cores(state, need, taken)
    need = _single_cpus(state, need, taken)
    if need:
        return None
    return frozenset(taken)


def take_with_hint(topo: CPUTopology, available: Iterable[int], n: int,
                   numa_hint: frozenset[int] | None) -> frozenset[int] | None:
    """As the static policy does with a NUMA affinity: as much as possible from the hinted
    nodes first, the rest from anywhere."""
    pool = frozenset(available)
    if numa_hint is None:
        return take_by_topology(topo, pool, n)
    aligned = pool & topo.cpus_of_numa(numa_hint)
    first = take_by_topology(topo, aligned, min(n, len(aligned)))
    if first is None:  # pragma: no cover - aligned always has enough by construction
        return None
    rest = take_by_topology(topo, pool - first, n - len(first))
    if rest is None:
        return None
    return first | rest


def take_distributed(topo: CPUTopology, available: Iterable[int], n: int,
                     group: int = 1, numa_hint: frozenset[int] | None = None
                     ) -> frozenset[int] | None:
    """``distribute-cpus-across-numa``: a request that fits one NUMA node is packed as usual;
    otherwise it is spread evenly (in multiples of ``group``) over the fewest NUMA nodes that
    can hold it, preferring the combination that leaves the free CPUs most balanced."""
    pool = frozenset(available)
    if n <= 0:
        return frozenset()
    nodes = [m for m in topo.numa_nodes if numa_hint is None or m in numa_hint] \
        or list(topo.numa_nodes)
    free_by_node = {m: pool & topo.numa_cpus[m] for m in topo.numa_nodes}
    for m in nodes:
        if len(free_by_node[m]) >= n:
            return take_with_hint(topo, pool, n, numa_hint)
    for k in range(2, len(nodes) + 1):
        best: tuple[tuple[float, tuple[int, ...]], dict[int, int]] | None = None
        for combo in itertools.combinations(nodes, k):
            groups, rem = divmod(n, group)
            if rem:
                return None
            per, extra = divmod(groups, k)
            shares = {m: (per + (1 if i < extra else 0)) * group for i, m in enumerate(combo)}
            if any(len(free_by_node[m]) < shares[m] for m in combo):
                continue
            left = [len(free_by_node[m]) - shares[m] for m in combo]
            mean = sum(left) / k
            balance = sum((x - mean) ** 2 for x in left)
            key = (balance, combo)
            if best is None or key < best[0]:
                best = (key, shares)
        if best is not None:
            out: set[int] = set()
            for m, share in best[1].items():
                got = take_by_topology(topo, free_by_node[m], share)
                if got is None:  # pragma: no cover - checked above
                    return None
                out |= got
            return frozenset(out)
    return None

"""The NUMA-distributed take for an in-place resize (``distribute-cpus-across-numa``):
the even spread of :func:`reconciler.allocator.take.take_distributed`, over NUMA-node
combinations that include every node where the container keeps CPUs, counting the kept
CPUs towards each node's share (docs/design.md#allocator)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from reconciler.allocator.take import (
    _Acc,
    _best_remainder,
    _numa_range,
    resize_start,
    take_for_resize,
)
from reconciler.allocator.topology import CPUTopology


@dataclass(frozen=True, slots=True)
class _Choice:
    balance: float
    combo: tuple[int, ...]
    rest: tuple[int, ...]
    kept_extra: int  # kept CPUs beyond the share, already counting towards the remainder
    one_socket: bool


class _Nodes:
    """Free and kept CPUs per NUMA node at the start of the distributed step."""

    def __init__(self, acc: _Acc) -> None:
        numa_cpus = acc.topo.numa_cpus
        self.free = {m: len(cpus & acc.free) for m, cpus in numa_cpus.items()}
        self.kept = {m: len(cpus & acc.result) for m, cpus in numa_cpus.items()}

    def share(self, combo: Sequence[int], n: int, group: int, align: bool) -> int:
        share = (n // len(combo) // group) * group
        if align:
            share = min([share, *(self._room(m, group) for m in combo)])
        return share

    def _room(self, m: int, group: int) -> int:
        return (self.free[m] + self.kept[m]) // group * group


def _score(nodes: _Nodes, numas: Sequence[int], combo: Sequence[int], n: int, group: int,
           align: bool) -> tuple[float, tuple[int, ...], int] | None:
    """(balance, remainder nodes, kept extra) of one combination, or ``None``."""
    if sum(nodes.free[m] for m in combo) + sum(nodes.kept.values()) < n:
        return None
    if sum((nodes.free[m] + nodes.kept[m]) // group for m in combo) * group < n:
        return None
    share = nodes.share(combo, n, group, align)
    spare = n - share * len(combo)
    kept_extra = 0
    for m in combo:
        if nodes.free[m] + nodes.kept[m] < share or nodes.kept[m] > share + spare:
            return None
        kept_extra += max(0, nodes.kept[m] - share)
    left = {m: nodes.free[m] for m in numas}
    for m in combo:
        left[m] -= nodes.kept[m] if nodes.kept[m] > share else share - nodes.kept[m]
    remainder = spare - kept_extra
    if remainder < 0:
        return None
    scored = _best_remainder(left, combo, remainder, group, whole_groups=True)
    if scored is None:
        return None
    return scored[0], scored[1], kept_extra


def _choose(acc: _Acc, numas: list[int], k: int, n: int, group: int, align: bool,
            kept_nodes: frozenset[int]) -> _Choice | None:
    nodes = _Nodes(acc)
    socket_of = {m: {acc.topo.by_id[c].socket for c in cpus}
                 for m, cpus in acc.topo.numa_cpus.items()}
    best: _Choice | None = None
    for combo in itertools.combinations(numas, k):
        if best is not None and best.balance == 0 and (not align or best.one_socket):
            break
        if not kept_nodes <= set(combo):
            continue
        scored = _score(nodes, numas, combo, n, group, align)
        if scored is None:
            continue
        one_socket = align and len(set().union(*(socket_of[m] for m in combo))) == 1
        better = best is None or scored[0] < best.balance
        if align and best is not None and one_socket != best.one_socket:
            better = one_socket
        if better:
            best = _Choice(scored[0], combo, scored[1], scored[2], one_socket)
    return best


def _grow_node(acc: _Acc, node: int, size: int) -> None:
    """Bring the container's CPUs on ``node`` up to ``size``, around those it keeps there."""
    topo = acc.topo
    kept = frozenset(topo.numa_cpus[node] & acc.result)
    got = take_for_resize(topo, acc.free & topo.numa_cpus[node], size, kept, kept)
    acc.take((got or kept) - kept)


def _allocate(acc: _Acc, choice: _Choice, n: int, group: int) -> None:
    topo = acc.topo
    nodes = _Nodes(acc)
    share = min([(n // len(choice.combo) // group) * group,
                 *((nodes.free[m] + nodes.kept[m]) // group * group for m in choice.combo)])
    for m in choice.combo:
        if nodes.kept[m] < share:
            _grow_node(acc, m, share)
    remainder = n - share * len(choice.combo) - choice.kept_extra
    while remainder > 0:
        before = remainder
        for m in choice.rest:
            if remainder and len(acc.free & topo.numa_cpus[m]) >= group:
                _grow_node(acc, m, len(acc.result & topo.numa_cpus[m]) + group)
                remainder -= group
        if remainder == before:
            return


def take_distributed_for_resize(topo: CPUTopology, available: Iterable[int], n: int,
                                allocated: frozenset[int], baseline: frozenset[int] =
                                frozenset(), group: int = 1, *, align_by_socket: bool = False
                                ) -> frozenset[int] | None:
    """An in-place resize to ``n`` CPUs spread over NUMA nodes in groups of ``group``; see
    :func:`reconciler.allocator.take.take_for_resize` for ``available``, ``allocated`` and
    ``baseline``. Falls back to the packed resize when no combination works."""
    if n % group:
        return take_for_resize(topo, available, n, allocated, baseline)
    start = resize_start(topo, available, n, allocated, baseline)
    if not isinstance(start, _Acc):
        return start
    acc = start
    numas = acc.numas()
    kept_nodes = topo.numa_set(acc.result)
    low, high = _numa_range(acc, group, total=n)
    for k in range(max(low, len(kept_nodes)), high + 1):
        choice = _choose(acc, numas, k, n, group, align_by_socket, kept_nodes)
        if choice is None:
            continue
        _allocate(acc, choice, n, group)
        return frozenset(acc.result) if acc.need == 0 else None
    return take_for_resize(topo, available, n, allocated, baseline)

"""The Static memory manager's machine state and rules, as the kubelet's ``policy_static.go``
(memorymanager, v1.35.4 to v1.37.2) has them (docs/design.md#memory-in-the-model).

Per NUMA node and memory type (``memory``, ``hugepages-2Mi``, ``hugepages-1Gi``) the state
holds what is allocatable, free and reserved; per node the number of blocks that touch it
and its group (``Cells``): the NUMA nodes the last block on it spanned. A block is a size of
one type on a set of NUMA nodes, filled node by node in ascending order. A node in a group
of several serves only blocks on exactly that group; a node holding a single-node block
serves no multi-node block. Hints are every mask that satisfies those rules and has room,
preferred when as narrow as the narrowest mask whose allocatable memory could hold the
request.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from reconciler.allocator.hints import Hint
from reconciler.snapshot import MemoryBlock

MEMORY = "memory"
Requested = Mapping[str, int]  # memory type -> bytes


class MemoryRefused(Exception):
    """The memory manager's ``Allocate`` or ``AllocatePod`` fails; the message is its own."""


@dataclass(slots=True)
class Table:
    allocatable: int
    free: int
    reserved: int = 0


@dataclass(slots=True)
class NumaState:
    assignments: int
    cells: tuple[int, ...]
    tables: dict[str, Table]


def _bits(mask: Iterable[int]) -> int:
    return sum(1 << n for n in mask)


def best_hint(hints: Iterable[Hint]) -> Hint | None:
    """``findBestHint``: the first preferred hint, else the first; narrower masks (fewer
    nodes, then the smaller bitmask) win among equals."""
    return min(hints, key=lambda h: (not h[1], len(h[0]), _bits(h[0])), default=None)


@dataclass(slots=True)
class MachineState:
    """``state.NUMANodeMap``."""

    nodes: dict[int, NumaState] = field(default_factory=dict)

    @classmethod
    def fresh(cls, allocatable: Mapping[int, Mapping[str, int]]) -> MachineState:
        """``getDefaultMachineState``: every node alone in its group, all free."""
        return cls({n: NumaState(0, (n,), {t: Table(size, size) for t, size in types.items()})
                    for n, types in sorted(allocatable.items())})

    @classmethod
    def from_checkpoint(cls, machine: Mapping[str, Any]) -> MachineState:
        """The ``machineState`` of a ``memory_manager_state`` checkpoint."""
        nodes = {}
        for n, st in machine.items():
            tables = {t: Table(int(x["allocatable"]), int(x["free"]), int(x["reserved"]))
                      for t, x in (st.get("memoryMap") or {}).items()}
            nodes[int(n)] = NumaState(int(st.get("numberOfAssignments", 0)),
                                      tuple(st.get("cells") or (int(n),)), tables)
        return cls(dict(sorted(nodes.items())))

    def copy(self) -> MachineState:
        return MachineState({n: NumaState(s.assignments, s.cells,
                                          {t: Table(x.allocatable, x.free, x.reserved)
                                           for t, x in s.tables.items()})
                             for n, s in self.nodes.items()})

    def free(self, kind: str = MEMORY) -> dict[int, int]:
        return {n: s.tables[kind].free if kind in s.tables else 0
                for n, s in self.nodes.items()}

    def _table(self, node: int, kind: str) -> Table:
        return self.nodes[node].tables.get(kind) or Table(0, 0)

    # ---- hints ---------------------------------------------------------------------------

    def masks(self) -> Iterable[tuple[int, ...]]:
        """``bitmask.IterateBitMasks``: by width, each width in lexicographic order."""
        ids = sorted(self.nodes)
        for k in range(1, len(ids) + 1):
            yield from itertools.combinations(ids, k)

    def _grouped_out(self, combo: tuple[int, ...]) -> bool:
        """A mask the groups forbid: a single node in a group of several, or a wider mask
        over a node used alone or by another group."""
        if len(combo) == 1:
            return len(self.nodes[combo[0]].cells) > 1
        for n in combo:
            st = self.nodes[n]
            if st.assignments > 0 and (len(st.cells) == 1 or tuple(sorted(st.cells)) != combo):
                return True
        return False

    def hints(self, requested: Requested,
              reusable: Mapping[frozenset[int], Mapping[str, int]] | None = None
              ) -> dict[str, list[Hint]]:
        """``calculateHints``: per memory type the same masks; empty when none fits."""
        reusable = reusable or {}
        min_size = len(self.nodes)
        found: list[frozenset[int]] = []
        for combo in self.masks():
            if any(sum(self._table(n, t).allocatable for n in combo) < size
                   for t, size in requested.items()):
                continue
            min_size = min(min_size, len(combo))
            if self._grouped_out(combo):
                continue
            mask = frozenset(combo)
            again = reusable.get(mask, {})
            if any(sum(self._table(n, t).free for n in combo) + again.get(t, 0) < size
                   for t, size in requested.items()):
                continue
            found.append(mask)
        if not found:
            return {}
        return {t: [(m, len(m) == min_size) for m in found] for t in requested}

    def satisfies(self, mask: frozenset[int], requested: Requested) -> bool:
        """``isAffinitySatisfyRequest``."""
        return all(sum(self._table(n, t).free for n in mask) >= size
                   for t, size in requested.items())

    def violates(self, mask: frozenset[int]) -> bool:
        """``isAffinityViolatingNUMAAllocations``."""
        if len(mask) == 1:
            return False
        combo = tuple(sorted(mask))
        for n in combo:
            st = self.nodes[n]
            if st.assignments and (len(st.cells) == 1 or tuple(sorted(st.cells)) != combo):
                return True
        return False

    def default_hint(self, requested: Requested,
                     reusable: Mapping[frozenset[int], Mapping[str, int]] | None = None
                     ) -> Hint:
        hints = self.hints(requested, reusable)
        if not hints:
            raise MemoryRefused("[memorymanager] failed to get the default NUMA affinity, no "
                                "NUMA nodes with enough memory is available")
        return best_hint(hints.get(MEMORY, ())) or (frozenset(), False)

    def extend(self, requested: Requested, mask: frozenset[int],
               reusable: Mapping[frozenset[int], Mapping[str, int]] | None = None) -> Hint:
        """``extendTopologyManagerHint``: the best hint holding ``mask``."""
        hints = self.hints(requested, reusable).get(MEMORY, [])
        best = best_hint(h for h in hints if mask <= h[0])
        if best is None:
            raise MemoryRefused("[memorymanager] failed to find NUMA nodes to extend the "
                                "current topology hint")
        return best

    def affinity(self, requested: Requested, hint: tuple[frozenset[int] | None, bool] | None,
                 reusable: Mapping[frozenset[int], Mapping[str, int]] | None = None
                 ) -> frozenset[int]:
        """The mask ``Allocate`` and ``AllocatePod`` place a request on, given the topology
        manager's hint (``None`` or a ``None`` mask: no affinity): the default hint when
        there is none, extended when it lacks room, refused when it breaks a group."""
        mask, preferred = hint if hint is not None else (None, False)
        best: Hint
        if mask is None:
            best = self.default_hint(requested, reusable)
            if not best[1] and preferred:
                raise MemoryRefused("[memorymanager] failed to find the default preferred hint")
        else:
            best = (mask, preferred)
        if not self.satisfies(best[0], requested):
            extended = self.extend(requested, best[0], reusable)
            if not extended[1] and best[1]:
                raise MemoryRefused("[memorymanager] failed to find the extended preferred "
                                    "hint")
            best = extended
        if self.violates(best[0]):
            raise MemoryRefused("[memorymanager] preferred hint violates NUMA node allocation")
        return best[0]

    # ---- taking and giving back ----------------------------------------------------------

    def update(self, mask: frozenset[int], kind: str, size: int) -> None:
        """``updateMachineState``: every node of the mask joins its group and counts the
        block; the size is taken node by node in ascending order."""
        combo = tuple(sorted(mask))
        for n in combo:
            st = self.nodes[n]
            st.assignments += 1
            st.cells = combo
            if size == 0:
                continue
            table = st.tables.get(kind)
            if table is None or table.free <= 0:
                continue
            part = min(size, table.free)
            table.reserved += part
            table.free -= part
            size -= part

    def release(self, blocks: Iterable[MemoryBlock]) -> None:
        """``releaseMemory``: each node of a block counts one block fewer (and leaves its
        group at none); the size goes back node by node in ascending order, from whatever
        each holds reserved."""
        for b in blocks:
            size = b.size
            for n in b.numa_nodes:
                st = self.nodes[n]
                st.assignments -= 1
                if st.assignments == 0:
                    st.cells = (n,)
                if size == 0:
                    continue
                table = st.tables.get(b.memory_type)
                if table is None or table.reserved == 0:
                    continue
                part = min(size, table.reserved)
                table.free += part
                table.reserved -= part
                size -= part

    def matches(self, other: MachineState) -> bool:
        """``areMachineStatesEqual``: the same blocks and group on every node, and per
        group the same free and reserved memory of each type."""
        if self.nodes.keys() != other.nodes.keys():
            return False
        for n, st in self.nodes.items():
            them = other.nodes[n]
            if st.assignments != them.assignments or sorted(st.cells) != sorted(them.cells):
                return False
            if st.tables.keys() != them.tables.keys():
                return False
            for t, table in st.tables.items():
                if table.allocatable != them.tables[t].allocatable:
                    return False
                for field_ in ("free", "reserved"):
                    mine = sum(getattr(self._table(c, t), field_) for c in st.cells)
                    theirs = sum(getattr(other._table(c, t), field_) for c in st.cells)
                    if mine != theirs:
                        return False
        return True

    def summary(self) -> dict[int, tuple[int, tuple[int, ...], dict[str, tuple[int, int]]]]:
        """Per node: blocks, group, and (free, reserved) per type (what tests compare)."""
        return {n: (s.assignments, tuple(sorted(s.cells)),
                    {t: (x.free, x.reserved) for t, x in sorted(s.tables.items())})
                for n, s in self.nodes.items()}


Reusable = dict[frozenset[int], dict[str, int]]


def blocks_on(mask: frozenset[int], requested: Requested) -> tuple[MemoryBlock, ...]:
    nodes = tuple(sorted(mask))
    return tuple(MemoryBlock(t, size, nodes) for t, size in requested.items())


__all__ = ["MEMORY", "MachineState", "MemoryRefused", "NumaState", "Requested", "Reusable",
           "Table", "best_hint", "blocks_on"]

"""The Static memory policy's start check (``validateState``) and the outcomes Go's map order
gives it (docs/design.md#memory-in-the-model).

The kubelet adds up the blocks of its state on a fresh machine and wants the machine state
it restored (``pkg/kubelet/cm/memorymanager/policy_static.go``, 1.36.3 and 1.37.2). It
walks the assignments as Go maps, pods (``for pod, container := range memoryAssignments``)
and each pod's containers (``for containerName, blocks := range container``) in a random
order; a pod with pod-level blocks is one step (its blocks, a slice). Each block sets the
group of every node it covers (``nodeState.Cells = b.NUMAAffinity`` in
``updateExpectedMachineState``), so a node under blocks of different NUMA sets ends with the
group of whichever block the walk meets last. The check passes under some orders and fails
under others: the model works out which outcomes are possible rather than one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from reconciler.allocator.memory_state import MachineState
from reconciler.snapshot import MemoryBlock

MEMORY_START_ERROR = ("memory manager start: [memorymanager] the expected machine state is "
                      "different from the real one")

# One step of the walk: a container's blocks, or a pod's pod-level blocks, in slice order.
Step = Sequence[MemoryBlock]


@dataclass(frozen=True, slots=True)
class StartOutcomes:
    """Whether some order of the walk passes the check, and whether some order fails it."""

    may_start: bool
    may_fail: bool


def start_outcomes(actual: MachineState, pods: Sequence[Sequence[Step]],
                   fresh: MachineState) -> StartOutcomes:
    """``pods``: per pod, its steps (any order among a pod's, pods in any order, a pod's
    steps together); ``fresh``: ``getDefaultMachineState``; ``actual``: the restored
    state."""
    want = {n: tuple(sorted(st.cells)) for n, st in actual.nodes.items()}
    given = [list(p) for p in pods]
    order = _peel(given, want)
    may_start = order is not None and _expected(fresh, order).matches(actual)
    may_fail = (not may_start or any(_ends_elsewhere(step, want) for p in given for step in p)
                or not _expected(fresh, [s for p in given for s in p]).matches(actual))
    return StartOutcomes(may_start, may_fail)


def _last_groups(step: Step) -> dict[int, tuple[int, ...]]:
    """The group each node has once ``step`` is walked: its last block's on it."""
    out: dict[int, tuple[int, ...]] = {}
    for b in step:
        for n in b.numa_nodes:
            out[n] = tuple(sorted(b.numa_nodes))
    return out


def _ends_elsewhere(step: Step, want: dict[int, tuple[int, ...]]) -> bool:
    """Whether walking ``step`` last (its pod last, it last in its pod) leaves a node in
    another group than the restored one."""
    return any(want.get(n) != group for n, group in _last_groups(step).items())


def _fits_last(step: Step, open_nodes: set[int], want: dict[int, tuple[int, ...]]) -> bool:
    return all(want.get(n) == g for n, g in _last_groups(step).items() if n in open_nodes)


def _peel(pods: list[list[Step]], want: dict[int, tuple[int, ...]]) -> list[Step] | None:
    """An order of the walk that leaves every node in its restored group, or None when
    there is none. Built from the end: a pod that can be walked last (its steps in an order
    of their own that leaves each node not yet settled by a later pod in its group) goes
    last; its nodes are then settled. Putting such a pod last never rules out an order that
    works, so the peeling finds one whenever one exists."""
    open_nodes = {n for p in pods for step in p for b in step for n in b.numa_nodes}
    left = list(range(len(pods)))
    tail: list[list[Step]] = []
    while left:
        for i in left:
            inner = _peel_steps(pods[i], open_nodes, want)
            if inner is not None:
                break
        else:
            return None
        left.remove(i)
        tail.append(inner)
        open_nodes -= {n for step in pods[i] for b in step for n in b.numa_nodes}
    return [step for inner in reversed(tail) for step in inner]


def _peel_steps(steps: Iterable[Step], open_nodes: set[int],
                want: dict[int, tuple[int, ...]]) -> list[Step] | None:
    """The same peeling over one pod's steps, the nodes in ``open_nodes`` not yet settled."""
    open_here = set(open_nodes)
    left = list(steps)
    tail: list[Step] = []
    while left:
        step = next((s for s in left if _fits_last(s, open_here, want)), None)
        if step is None:
            return None
        left.remove(step)
        tail.append(step)
        open_here -= {n for b in step for n in b.numa_nodes}
    return list(reversed(tail))


def _expected(fresh: MachineState, order: Iterable[Step]) -> MachineState:
    expected = fresh.copy()
    for step in order:
        for b in step:
            expected.update(frozenset(b.numa_nodes), b.memory_type, b.size)
    return expected


__all__ = ["MEMORY_START_ERROR", "StartOutcomes", "start_outcomes"]

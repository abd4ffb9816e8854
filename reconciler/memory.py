"""Memory reconciliation (docs/design.md#memory): classification as for CPUs, but by
quantity per memory type; the memory pools of the node; ``memory_over_budget``.

The 1.36 pattern (shared containers reporting the pod's shared memory as their own) is only
believed when the CPUs of the same pod showed it: two ordinary containers may well hold
identical blocks (same size, same NUMA node).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import lru_cache
from operator import attrgetter
from typing import NamedTuple

from reconciler.anomalies import Anomaly
from reconciler.classify import all_node_shared
from reconciler.kube import PodSpec
from reconciler.pools import MEMORY_POOLS, Assignment, MemoryPool
from reconciler.snapshot import ContainerAlloc, MemoryBlock, PodAlloc

MemoryKey = tuple[tuple[str, int, tuple[int, ...]], ...]
MemoryRow = tuple[MemoryPool, str, int]  # (pool, memory_type, bytes)

_POOL_SLOT = {pool: slot for slot, pool in enumerate(MEMORY_POOLS)}
_SIZE = attrgetter("size")
_MEMORY_OF = attrgetter("memory")


class PodMemory(NamedTuple):
    assignments: tuple[Assignment, ...]  # one per container, in List order
    sizes: tuple[int, ...]  # bytes attributed to each container
    rows: tuple[MemoryRow, ...]  # the pod's memory by pool and type


@lru_cache(maxsize=64)
def no_memory(n: int) -> PodMemory:
    """The memory of a pod of ``n`` containers that reports none (the common case)."""
    return PodMemory(all_node_shared(n)[0], (0,) * n, ())


def pod_memory(pod: PodAlloc, spec: PodSpec | None, legacy_pattern: bool,
               ) -> tuple[PodMemory, list[Anomaly]]:
    """The memory classification of a pod that reports memory (at pod or container level);
    ``legacy_pattern`` is whether its CPUs showed the 1.36 pattern."""
    shares, shared_keys = _shares(pod, legacy_pattern)
    exclusive: dict[str, int] = {}
    for c, shared in zip(pod.containers, shares, strict=True):
        if not shared:
            for b in c.memory:
                exclusive[b.memory_type] = exclusive.get(b.memory_type, 0) + b.size
    pod_total = _pod_total(pod, exclusive, shared_keys)
    found: list[Anomaly] = []
    shared_left = _shared_left(pod, pod_total, exclusive, found) if pod_total else {}
    if pod.memory and spec is not None and spec.resources is not None:
        found += _over_budget(pod, spec.resources.memory_limit, pod_total)
    pod_level = bool(pod_total)
    assignments, sizes = _containers(pod, shares, pod_level, sum(shared_left.values()))
    pool: MemoryPool = "pod_exclusive" if pod_level else "node_exclusive"
    # Most pods hold one memory type ("memory"): a dict of one item needs no sorting.
    rows = [(pool, mtype, size) for mtype, size in _in_order(exclusive)]
    if shared_left:
        rows += [("pod_shared", mtype, size) for mtype, size in _in_order(shared_left)]
    # tuple.__new__: PodMemory's fields in order, without NamedTuple's Python-level __new__.
    return tuple.__new__(PodMemory, (assignments, sizes, tuple(rows))), found


class MemoryShapes:
    """``pod_memory`` of the pods of one reconcile, each distinct shape worked out once.
    What it reads of a pod (its own blocks, each container's blocks, whether its CPUs show
    the 1.36 pattern, its spec's memory limit) is the key: the replicas of a workload
    mostly share it, and the result is immutable. A result with anomalies (they name their
    pod) is never shared."""

    __slots__ = ("_known",)

    def __init__(self) -> None:
        self._known: dict[tuple[object, ...], PodMemory] = {}

    def of(self, pod: PodAlloc, spec: PodSpec | None, legacy_pattern: bool,
           ) -> tuple[PodMemory, list[Anomaly]]:
        limit = (spec.resources.memory_limit
                 if spec is not None and spec.resources is not None else None)
        key = (pod[4], tuple(map(_MEMORY_OF, pod[2])), legacy_pattern, limit)
        known = self._known.get(key)
        if known is not None:
            return known, []
        found = pod_memory(pod, spec, legacy_pattern)
        if not found[1]:
            self._known[key] = found[0]
        return found


def _in_order(by_type: dict[str, int]) -> Iterable[tuple[str, int]]:
    """The items of ``by_type`` by memory type."""
    return by_type.items() if len(by_type) < 2 else sorted(by_type.items())


def _memory_key(c: ContainerAlloc) -> MemoryKey:
    return tuple(sorted((b.memory_type, b.size, b.numa_nodes) for b in c.memory))


def _shares(pod: PodAlloc, legacy_pattern: bool) -> tuple[Sequence[bool], set[MemoryKey]]:
    """Which containers report the pod's shared memory as their own (the 1.36 pattern: the
    same blocks listed by more than one container), and those blocks."""
    if not legacy_pattern or pod.memory:
        return _none_shared(len(pod.containers)), set()
    keys = [_memory_key(c) for c in pod.containers]
    shared_keys: set[MemoryKey] = set()
    seen: set[MemoryKey] = set()
    for key in keys:
        if key and key in seen:
            shared_keys.add(key)
        seen.add(key)
    return [bool(key) and key in shared_keys for key in keys], shared_keys


@lru_cache(maxsize=64)
def _none_shared(n: int) -> tuple[bool, ...]:
    return (False,) * n


def _by_type(blocks: Iterable[MemoryBlock]) -> dict[str, int]:
    out: dict[str, int] = {}
    for b in blocks:
        out[b.memory_type] = out.get(b.memory_type, 0) + b.size
    return out


def _pod_total(pod: PodAlloc, exclusive: dict[str, int], shared_keys: set[MemoryKey],
               ) -> dict[str, int]:
    """The pod-level memory by type: the pod's own blocks, else what the 1.36 pattern
    implies (the containers' own plus the shared blocks once), else none."""
    if pod.memory:
        return _by_type(pod.memory)
    if not shared_keys:
        return {}
    total = dict(exclusive)
    for key in shared_keys:
        for mtype, size, _ in key:
            total[mtype] = total.get(mtype, 0) + size
    return total


def _shared_left(pod: PodAlloc, pod_total: dict[str, int], exclusive: dict[str, int],
                 found: list[Anomaly]) -> dict[str, int]:
    """What the containers' own blocks leave of the pod's memory, per type (never below 0:
    containers holding more than the pod is ``memory_over_budget``)."""
    left_by_type: dict[str, int] = {}
    for mtype, total in pod_total.items():
        left = total - exclusive.get(mtype, 0)
        if left < 0:
            found.append(Anomaly(
                "memory_over_budget", pod.namespace, pod.name, None,
                f"containers hold {exclusive[mtype]} bytes of {mtype}, more than the "
                f"pod's {total}"))
        left_by_type[mtype] = max(0, left)
    return left_by_type


def _over_budget(pod: PodAlloc, budget: int | None, pod_total: dict[str, int],
                 ) -> list[Anomaly]:
    """Pod-level memory blocks above the pod's memory limit."""
    if budget is None or pod_total.get("memory", 0) <= budget:
        return []
    return [Anomaly("memory_over_budget", pod.namespace, pod.name, None,
                    f"pod memory blocks hold {pod_total['memory']} bytes, over the pod "
                    f"budget of {budget}")]


def _containers(pod: PodAlloc, shares: Sequence[bool], pod_level: bool, shared_bytes: int,
                ) -> tuple[tuple[Assignment, ...], tuple[int, ...]]:
    """Each container's memory assignment and the bytes attributed to it: its own blocks
    when exclusive, the pod's shared memory when pod_shared, none when node_shared."""
    assignments: list[Assignment] = []
    sizes: list[int] = []
    for c, shared in zip(pod.containers, shares, strict=True):
        blocks = c.memory
        if pod_level and (shared or not blocks):
            assignments.append("pod_shared")
            sizes.append(shared_bytes)
        elif blocks:
            assignments.append("pod_exclusive" if pod_level else "node_exclusive")
            sizes.append(blocks[0].size if len(blocks) == 1 else sum(map(_SIZE, blocks)))
        else:
            assignments.append("node_shared")
            sizes.append(0)
    return tuple(assignments), tuple(sizes)


def memory_pools(pods: Iterable[PodMemory]) -> tuple[tuple[str, tuple[int, int, int]], ...]:
    """The node's memory by type: (node_exclusive, pod_exclusive, pod_shared) bytes."""
    pools: dict[str, list[int]] = {}
    for pod in pods:
        for pool, mtype, size in pod.rows:
            pools.setdefault(mtype, [0, 0, 0])[_POOL_SLOT[pool]] += size
    return tuple((mtype, (v[0], v[1], v[2])) for mtype, v in sorted(pools.items()))

"""The random cases kept where the kubelet answers quickly (docs/design.md#reference).

The topology manager's merge (``HintMerger.Merge``, topologymanager/policy.go) walks every
permutation of one hint per resource: the product of the lengths of its hint lists. A scope
(the pod, or each container) has one list per resource it asks of a provider with a NUMA
preference: ``cpu`` (the static CPU policy, a Guaranteed pod), ``memory`` and each hugepage
size (the Static memory manager, a Guaranteed pod), and each device-plugin resource whose
devices have NUMA nodes. A list holds at most one hint per non-empty mask of the N NUMA
nodes, 2^N - 1, and has that many for a small request on an empty machine. On 8 NUMA nodes
CPU, memory and two hugepage sizes are up to 255^4 = 4.2e9 permutations: at the 0.4-1 µs
each measured here, 20 to 45 minutes for one admission (seed 8800026480 of 1.37, --memory
--devices: 228 x 230^3).

So a generated pod whose bound exceeds :data:`MERGE_BUDGET` loses resource kinds until it
fits: device-plugin resources first, then hugepage sizes, in name order. CPU and memory are
never dropped: on 8 NUMA nodes the two are 65,025 permutations."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from reconciler.allocator.devices import _hint_nodes
from reconciler.kube import ContainerSpec, PodSpec, Resources

if TYPE_CHECKING:
    from bench.reference import Case

# Permutations one merge may walk: 0.13-0.26 s at 0.5-1 µs each.
MERGE_BUDGET = 2**18


def _masks(nodes: Sequence[int]) -> Iterator[frozenset[int]]:
    for k in range(1, len(nodes) + 1):
        for combo in itertools.combinations(nodes, k):
            yield frozenset(combo)


def _amount(r: Resources, resource: str) -> int:
    if resource == "cpu":
        return r.cpu_request_m or 0
    if resource == "memory":
        return r.memory_request or 0
    return dict(r.hugepages).get(resource, 0) or r.devices.get(resource, 0)


def _least(blocks: Sequence[Resources], pod: Resources | None, resource: str) -> int:
    """The least a scope can ask of one resource: the most any one of its containers asks,
    or the pod-level amount when that is set and smaller."""
    most = max((_amount(r, resource) for r in blocks), default=0)
    whole = _amount(pod, resource) if pod is not None else 0
    return min(most, whole) if most and whole else most or whole


def _memory_hints(case: Case, need: Mapping[str, int]) -> int:
    """The most hints the memory manager gives each of its resources: the masks whose nodes
    hold what every resource asks (one mask set for all of them, calculateHints), counted
    on the whole of each node's memory and hugepages."""
    memory = dict(case.topo.memory)
    for n, size in case.reserved_memory:
        memory[n] += size
    caps: dict[str, dict[int, int]] = {"memory": memory}
    for n, t, size in case.topo.hugepages:
        caps.setdefault(t, {})[n] = size
        memory[n] += size
    return sum(1 for m in _masks(case.topo.numa_nodes)
               if all(sum(caps.get(r, {}).get(n, 0) for n in m) >= k for r, k in need.items()))


def _device_hints(case: Case, name: str, need: int) -> int:
    """The most hints the device manager gives one resource: the masks of the nodes its
    hints walk with enough devices (those without topology count everywhere)."""
    devs = case.devices.by_name[name]
    nodes = _hint_nodes(devs, frozenset(case.topo.numa_nodes), case.config.kubelet_version)
    anywhere = sum(1 for d in devs if not d.numa)
    return sum(1 for m in _masks(nodes)
               if anywhere + sum(1 for d in devs if m & set(d.numa)) >= need)


def merge_lists(case: Case, pod: PodSpec) -> list[dict[str, int]]:
    """For each merge of ``pod``'s admission (the pod scope's one, or one per container,
    init containers too), the least each resource with a NUMA preference is asked: ``cpu``
    in CPUs, memory and hugepages in bytes, devices in devices."""
    c = case.config
    if c.topology_policy == "none":
        return []  # the none policy merges nothing
    everything = (*pod.init_containers, *pod.containers)
    units = [everything] if c.scope == "pod" else [(one,) for one in everything]
    level = pod.resources if c.scope == "pod" else None
    with_topology = {name for name, devs in case.devices.by_name.items()
                     if any(d.numa for d in devs)}
    out = []
    for unit in units:
        blocks = [x.resources for x in unit]
        asked: dict[str, int] = {}
        if pod.guaranteed and c.static and any(r.integer_cpus for r in (*blocks, level) if r):
            asked["cpu"] = max(1, _least(blocks, level, "cpu") // 1000)
        if pod.guaranteed and c.memory_policy == "Static":
            asked["memory"] = _least(blocks, level, "memory")
            for t in sorted({t for r in (*blocks, level) if r for t, size in r.hugepages
                             if size}):
                asked[t] = _least(blocks, level, t)
        for n in sorted({n for r in blocks for n, k in r.extended if k} & with_topology):
            asked[n] = _least(blocks, None, n)
        out.append(asked)
    return out


def merge_bound(case: Case, pod: PodSpec) -> int:
    """The most permutations any merge of ``pod``'s admission can walk: each list at most
    the masks that could hold what it asks on an empty node."""
    worst = 1
    for asked in merge_lists(case, pod):
        every = (2 ** len(case.topo.numa_nodes) - 1) ** len(asked)
        if every <= MERGE_BUDGET:
            worst = max(worst, every)  # within the budget however long its lists
            continue
        memory = {r: k for r, k in asked.items() if r == "memory" or r.startswith("hugepages-")}
        product = max(1, _memory_hints(case, memory)) ** len(memory) if memory else 1
        if "cpu" in asked:
            cpus = {n: len(case.topo.numa_cpus[n]) for n in case.topo.numa_nodes}
            product *= max(1, sum(1 for m in _masks(case.topo.numa_nodes)
                                  if sum(cpus[n] for n in m) >= asked["cpu"]))
        for name, k in asked.items():
            if name not in memory and name != "cpu":
                product *= max(1, _device_hints(case, name, k))
        worst = max(worst, product)
    return worst


def _without(pod: PodSpec, kind: str) -> PodSpec:
    """``pod`` asking nothing of ``kind`` (a device-plugin resource or a hugepage size)."""
    def drop(c: ContainerSpec) -> ContainerSpec:
        r = c.resources
        return replace(c, resources=replace(
            r, extended=tuple(e for e in r.extended if e[0] != kind),
            hugepages=tuple(h for h in r.hugepages if h[0] != kind)))

    res = pod.resources
    if res is not None:
        res = replace(res, hugepages=tuple(h for h in res.hugepages if h[0] != kind))
    return replace(pod, containers=tuple(map(drop, pod.containers)),
                   init_containers=tuple(map(drop, pod.init_containers)), resources=res)


def fitted(case: Case, pod: PodSpec) -> PodSpec:
    """``pod``, less the fewest resource kinds that bring it within :data:`MERGE_BUDGET`."""
    while merge_bound(case, pod) > MERGE_BUDGET:
        asked = {n for names in merge_lists(case, pod) for n in names}
        kinds = sorted(asked - {"cpu", "memory"},
                       key=lambda n: (n.startswith("hugepages-"), n))
        if not kinds:
            break
        pod = _without(pod, kinds[0])
    return pod


def within_budget(case: Case) -> Case:
    """``case`` with each pod :func:`fitted`; the case itself when every pod fits."""
    done: dict[str, PodSpec] = {}
    ops = []
    for op, p in case.ops:
        if p is not None:
            p = done.setdefault(p.uid, fitted(case, p))
        ops.append((op, p))
    return case if ops == case.ops else replace(case, ops=ops)

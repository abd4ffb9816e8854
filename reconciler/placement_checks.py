"""Placement checks: the live ledger's exclusive sets and pod blocks against the placement
rules of the kubelet's configuration (docs/design.md#anomalies). Each is raised only where
the kubelet's own rules could not have produced the placement:

* ``full_pcpus_violation`` (``full-pcpus-only``): a node-exclusive set or pod block that is not
  whole physical cores (all online threads of each core it touches), unless it spills past
  the NUMA nodes of the pod's memory: the kubelet's take within a narrower hint is not held
  to whole cores.
* ``numa_policy_violation`` (topology policy ``restricted`` or ``single-numa-node``): CPUs
  spread over more NUMA nodes than the narrowest mask that could hold the request, so no
  preferred hint allows it. The request is a container's set under container scope and the
  whole pod (the larger of what it holds and what its spec sizes the hint for) under pod
  scope; NUMA nodes the pod's reported memory spans are allowed too, since memory widens the
  merged hint; with ``align-by-socket`` a mask on as few sockets as needed is allowed.
  Under ``single-numa-node`` a single set that spans nodes is ``numa_misaligned`` already
  (reported by ``reconciler.checks``): this kind then reports only a pod-scope pod whose
  sets each sit on one node but on different nodes.
* ``uncore_split`` (``prefer-align-cpus-by-uncorecache``): a pod block or node-exclusive set
  whose part outside whole caches spans several uncore caches although one cache on its
  NUMA nodes is entirely free or its own now, so the kubelet's partial-cache take would
  have kept it together (a set that spills past its memory's NUMA nodes is not judged, as
  above). Pod-exclusive slices are carved from the block and not judged.
  Needs every pod's ownership, so it runs after the last pod (:meth:`PlacementChecks.finish`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from reconciler.allocator.config import ModelError, parse_policy_options
from reconciler.allocator.model import pod_guaranteed_cpus
from reconciler.anomalies import Anomaly
from reconciler.classify import PodView
from reconciler.cpuset import format_cpuset
from reconciler.kubelet_topology import core_groups, uncore_of
from reconciler.node_facts import NodeFacts
from reconciler.pools import EXCLUSIVE
from reconciler.snapshot import Topology

_Subject = tuple[str | None, frozenset[int]]  # (container, or None for the pod block; CPUs)


def _nodes(ids: Iterable[int]) -> str:
    return ",".join(str(n) for n in sorted(ids))


@dataclass(slots=True)
class PlacementChecks:
    """One node's placement rules; :meth:`check` per pod, :meth:`finish` after the last."""

    options: frozenset[str]
    policy: str
    pod_scope: bool
    numa_of: dict[int, int]
    socket_of: dict[int, int]
    core_cpus: dict[int, frozenset[int]]  # the kubelet's CoreID → online threads
    core_of: dict[int, int]
    numa_sizes: tuple[int, ...]  # CPUs per NUMA node, largest first
    numas_per_socket: int
    uncore_cpus: dict[int, frozenset[int]]  # only with the uncore option and >1 cache
    online: frozenset[int]
    reserved: frozenset[int]
    _uncore_subjects: list[tuple[int, PodView, _Subject]] = field(default_factory=list)

    @classmethod
    def for_node(cls, facts: NodeFacts) -> PlacementChecks | None:
        """The checks that apply to the node, or ``None`` when none can (no static CPU
        policy, no topology or no configuration)."""
        config, topo = facts.config, facts.topology
        if config is None or topo is None or not facts.static_cpu:
            return None
        try:
            options = parse_policy_options(config.cpu_manager_policy_options)
        except ModelError:
            options = frozenset()  # a kubelet refusing its options runs no pods to judge
        sizes: dict[int, int] = {}
        for c in topo.cpus:
            sizes[c.numa_node] = sizes.get(c.numa_node, 0) + 1
        sockets = {c.socket for c in topo.cpus}
        return cls(
            options=options, policy=config.topology_manager_policy.lower(),
            pod_scope=config.topology_manager_scope.lower() == "pod",
            numa_of=facts.numa_of, socket_of={c.id: c.socket for c in topo.cpus},
            core_cpus=core_groups(topo.cpus), core_of={c.id: c.core for c in topo.cpus},
            numa_sizes=tuple(sorted(sizes.values(), reverse=True)),
            numas_per_socket=max(1, len(sizes) // max(1, len(sockets))),
            uncore_cpus=_uncore_caches(topo, options), online=facts.online,
            reserved=facts.reserved)

    def check(self, index: int, view: PodView) -> list[Anomaly]:
        """Full-core and NUMA-policy anomalies of one classified pod; remembers what the
        uncore check judges once every pod is known."""
        if view.plain:
            return []
        subjects = _subjects(view)
        found: list[Anomaly] = []
        if "full-pcpus-only" in self.options:
            # AllocatePod holds the pod block to whole cores, not the slices it carves out
            # of it (docs/design.md#allocator).
            found += self._full_pcpus(view, [s for s in subjects
                                             if s[0] is None or _node_exclusive(view, s[0])])
        if self.policy in ("restricted", "single-numa-node") and self.numa_of:
            found += self._numa_policy(view, subjects)
        if self.uncore_cpus:
            self._uncore_subjects += [(index, view, s) for s in subjects
                                      if s[0] is None or _node_exclusive(view, s[0])]
        return found

    def finish(self, owned: Iterable[int]) -> list[tuple[int, list[Anomaly]]]:
        """``uncore_split`` anomalies per pod index, given every CPU some pod holds."""
        free = self.online - self.reserved - frozenset(owned)
        out: list[tuple[int, list[Anomaly]]] = []
        for index, view, (container, cpus) in self._uncore_subjects:
            detail = None if self._two_pass(view, cpus) else self._uncore_split(cpus, free)
            if detail:
                pod = view.alloc
                out.append((index, [Anomaly("uncore_split", pod.namespace, pod.name,
                                            container, detail)]))
        return out

    # ---- full-pcpus-only -----------------------------------------------------------

    def _full_pcpus(self, view: PodView, subjects: Sequence[_Subject]) -> list[Anomaly]:
        pod = view.alloc
        found = []
        for container, cpus in subjects:
            if self._two_pass(view, cpus):
                continue
            partial = sorted({self.core_of[c] for c in cpus if c in self.core_of
                              and not self.core_cpus[self.core_of[c]] <= cpus})
            if partial:
                threads = frozenset().union(*(self.core_cpus[k] for k in partial))
                found.append(Anomaly(
                    "full_pcpus_violation", pod.namespace, pod.name, container,
                    f"CPUs {format_cpuset(cpus)} hold part of physical cores (threads "
                    f"{format_cpuset(threads)}) under full-pcpus-only"))
        return found

    def _two_pass(self, view: PodView, cpus: frozenset[int]) -> bool:
        """Whether ``cpus`` spill past the NUMA nodes of the pod's memory: the kubelet then
        took them in two passes (every free CPU of the merged hint's nodes, half cores and
        split caches included, then the rest elsewhere), which neither full-pcpus-only nor
        the uncore-cache preference holds to whole cores or caches
        (docs/design.md#anomalies)."""
        memory_nodes = _memory_nodes(view)
        return bool(memory_nodes) and not {self.numa_of.get(c) for c in cpus} <= memory_nodes

    # ---- topology manager policy ---------------------------------------------------

    def _width(self, need: int) -> int:
        """How few NUMA nodes could hold ``need`` CPUs on an empty node (reserved CPUs
        count, as in the kubelet's hints)."""
        total = 0
        for width, size in enumerate(self.numa_sizes, start=1):
            total += size
            if total >= need:
                return width
        return len(self.numa_sizes)

    def _allowed(self, cpus: frozenset[int], need: int, memory_nodes: frozenset[int]) -> bool:
        nodes = {self.numa_of[c] for c in cpus if c in self.numa_of}
        if len(nodes) <= max(self._width(need), len(memory_nodes)):
            return True
        if "align-by-socket" in self.options:
            sockets = {self.socket_of[c] for c in cpus if c in self.socket_of}
            min_sockets = -(-self._width(need) // self.numas_per_socket)
            return len(sockets) <= min_sockets
        return False

    def _judged(self, view: PodView, subjects: Sequence[_Subject]
                ) -> list[tuple[str | None, frozenset[int], int]]:
        """(container, CPUs, CPUs the hint was sized for): each set under container scope,
        the pod's CPUs together under pod scope."""
        if not self.pod_scope:
            return [(container, cpus, len(cpus)) for container, cpus in subjects]
        union = frozenset().union(*(s for _, s in subjects))
        if not union:
            return []
        spec_need = pod_guaranteed_cpus(view.spec) if view.spec is not None else 0
        need = 1 if self.policy == "single-numa-node" else max(len(union), spec_need)
        return [(None, union, need)]

    def _numa_policy(self, view: PodView, subjects: Sequence[_Subject]) -> list[Anomaly]:
        pod = view.alloc
        memory_nodes = _memory_nodes(view)
        if self.policy == "single-numa-node":
            if any(len({self.numa_of.get(c) for c in s} - {None}) > 1 for _, s in subjects):
                return []  # numa_misaligned reports it
            memory_nodes = frozenset()
        scope = "pod" if self.pod_scope else "container"
        found = []
        for container, cpus, n in self._judged(view, subjects):
            if not self._allowed(cpus, n, memory_nodes):
                nodes = {self.numa_of[c] for c in cpus if c in self.numa_of}
                what = "the pod's CPUs" if self.pod_scope else "CPUs"
                found.append(Anomaly(
                    "numa_policy_violation", pod.namespace, pod.name, container,
                    f"{what} {format_cpuset(cpus)} span NUMA nodes {_nodes(nodes)}; "
                    f"{self.policy} with {scope} scope allows "
                    f"{max(self._width(n), len(memory_nodes))} for {n} CPUs"))
        return found

    # ---- uncore caches -------------------------------------------------------------

    def _uncore_split(self, cpus: frozenset[int], free: frozenset[int]) -> str | None:
        caches = {k: c for k, c in self.uncore_cpus.items() if c & cpus}
        rest = cpus - frozenset().union(*(c for c in caches.values() if c <= cpus))
        spanned = [k for k, c in caches.items() if c & rest]
        if len(spanned) < 2:
            return None
        nodes = {self.numa_of.get(c) for c in cpus}
        room = free | cpus
        for k, cache in self.uncore_cpus.items():
            # A cache the set already holds whole cannot also take its remainder.
            if len(cache) >= len(rest) and cache <= room and not cache <= cpus \
                    and {self.numa_of.get(c) for c in cache} <= nodes:
                return (f"CPUs {format_cpuset(rest)} span uncore caches {_nodes(spanned)} "
                        f"although cache {k} ({format_cpuset(cache)}) could hold them")
        return None


def _uncore_caches(topo: Topology, options: frozenset[str]) -> dict[int, frozenset[int]]:
    if "prefer-align-cpus-by-uncorecache" not in options:
        return {}
    caches: dict[int, set[int]] = {}
    for c in topo.cpus:
        caches.setdefault(uncore_of(c), set()).add(c.id)
    return {k: frozenset(v) for k, v in caches.items()} if len(caches) > 1 else {}


def _subjects(view: PodView) -> list[_Subject]:
    """The pod block (when reported) and every exclusive container set."""
    pod = view.alloc
    out: list[_Subject] = [(None, view.block)] if view.pod_block and view.block else []
    out += [(c.name, s) for c, a, s in zip(pod.containers, view.assignments, view.sets,
                                           strict=True) if a in EXCLUSIVE and s]
    return out


def _memory_nodes(view: PodView) -> frozenset[int]:
    """The NUMA nodes the pod's reported memory lies on."""
    pod = view.alloc
    blocks = (*pod.memory, *(m for c in pod.containers for m in c.memory))
    return frozenset(n for b in blocks for n in b.numa_nodes)


def _node_exclusive(view: PodView, container: str) -> bool:
    return any(c.name == container and a == "node_exclusive"
               for c, a in zip(view.alloc.containers, view.assignments, strict=True))


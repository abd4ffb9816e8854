"""The hint providers and the topology manager's merge on the model node
(docs/design.md#allocator): the CPU manager's hints, the memory manager's, the device
manager's, the regenerated hints of CPUs already held, and the merged affinity."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from reconciler.allocator.hints import (
    Hint,
    HintError,
    HintRecord,
    kubelet_merge_hint,
    merge,
    policy_refusal,
)
from reconciler.allocator.node_memory import MemoryHints, NodeMemory
from reconciler.allocator.rules import (
    Refused,
    shown_hints,
)


class NodeHints(NodeMemory):
    """The model node with its topology hints."""

    def cpu_hints(self, n: int, available: Iterable[int],
                  reusable: frozenset[int] = frozenset()) -> list[Hint]:
        """The CPU manager's hints for ``n`` CPUs out of ``available``, every mask holding
        the ``reusable`` CPUs' NUMA nodes. A mask's width is judged by all its CPUs, reserved
        ones included, as the kubelet does."""
        return self._cpu_hints(n, available, self._masks.every, reusable)

    def held_cpu_hints(self, n: int, held: frozenset[int]) -> list[Hint]:
        """Hints for a container already in the state (after a kubelet restart, or admitted
        again): regenerated from the CPUs it holds, nothing else; none at all when it holds
        another number than it asks for (``getTopologyHintsForAdd``)."""
        return self.cpu_hints(n, held) if len(held) == n else []

    def held_pod_cpu_hints(self, requested: int,
                           containers: Iterable[tuple[int, frozenset[int] | None]]
                           ) -> tuple[list[Hint] | None, frozenset[int]]:
        """Pod scope: ``containers`` are (CPUs each asks, CPUs it holds or ``None``). When
        one holds another number than it asks, no hint (``[]``); when those held add up to
        the pod's request, hints regenerated from them; else ``None`` and the held CPUs,
        which the kubelet then offers again beside the free ones
        (``getPodTopologyHintsForAdd``)."""
        assigned: set[int] = set()
        for wants, held in containers:
            if held is None:
                continue
            if len(held) != wants:
                return [], frozenset()
            assigned |= held
        if len(assigned) == requested:
            return self.cpu_hints(requested, assigned), frozenset(assigned)
        return None, frozenset(assigned)

    def merge_cpu_hints(self, hints: list[Hint]) -> tuple[bool, frozenset[int] | None]:
        """The topology manager's merge of the CPU manager's hints alone: (admitted,
        affinity)."""
        policy = self.config.topology_policy
        if policy == "single-numa-node":
            hints = [(m, p) for m, p in hints if len(m) == 1]
        try:
            return True, merge(policy, [hints], frozenset(self.topo.numa_nodes),
                               self._closest)
        except HintError:
            return False, None

    def held_pod_hint(self, requested: int,
                      containers: list[tuple[int, frozenset[int] | None]]
                      ) -> tuple[bool, frozenset[int] | None]:
        """The pod scope's merge when containers of the pod are already in the state
        (``held_pod_cpu_hints``): (admitted, affinity)."""
        hints = self.held_pod_cpu_list(requested, containers)
        return (True, None) if hints is None else self.merge_cpu_hints(hints)

    def held_pod_cpu_list(self, requested: int,
                          containers: list[tuple[int, frozenset[int] | None]]
                          ) -> list[Hint] | None:
        """The CPU manager's hints for a pod admitted again (``None``: it asks no CPUs, no
        hints at all)."""
        if not requested:
            return None
        hints, assigned = self.held_pod_cpu_hints(requested, containers)
        if hints is None:
            hints = self.cpu_hints(requested, self.free | assigned, reusable=assigned)
        return hints

    def merge_held(self, cpu: list[Hint] | None, memory: MemoryHints, asked: int,
                   devices: Mapping[str, list[Hint] | None] | None = None
                   ) -> tuple[bool, tuple[frozenset[int] | None, bool]]:
        """A restart's merge of the hints regenerated from what a container (or pod)
        holds, in the order the container manager registers the providers: the device
        manager's per resource, the CPU manager's (``None``: it gives none) and the memory
        manager's for ``asked`` bytes. (admitted, (affinity, preferred))."""
        if not asked and not devices:
            if cpu is None:
                # No provider has a preference: the merge is every node, preferred (the
                # 1.36 memory manager allocates an empty request on it), or no affinity
                # under single-numa-node.
                return True, kubelet_merge_hint(self.config.topology_policy, [None],
                                                frozenset(self.topo.numa_nodes))
            ok, mask = self.merge_cpu_hints(cpu)
            return ok, (mask, True)
        providers: list[list[Hint] | None] = [*(devices or {}).values(), cpu]
        if asked:
            providers += memory if memory is not None else [None]
        try:
            return True, kubelet_merge_hint(self.config.topology_policy, providers,
                                            frozenset(self.topo.numa_nodes), self._closest)
        except HintError:
            return False, (None, False)

    def _cpu_hints(self, n: int, available: Iterable[int], candidates: list[int],
                   reusable: frozenset[int] = frozenset()) -> list[Hint]:
        pool = available if isinstance(available, (set, frozenset)) else set(available)
        free = {node: len(cpus & pool) for node, cpus in self.topo.numa_cpus.items()}
        narrowest = self._narrowest("cpu", n)
        hints = self._masks.hints(candidates, n, free, narrowest)
        if reusable:
            # generateCPUTopologyHints drops every mask missing a node of a reusable CPU.
            nodes = self.topo.numa_set(reusable)
            hints = [h for h in hints if nodes <= h[0]]
        if "align-by-socket" not in self.config.options or narrowest is None:
            return hints
        # align-by-socket also prefers a mask on as few sockets as the narrowest needs.
        # isHintSocketAligned: NumNUMANodes / NumSockets of the kubelet's counts, integer
        # division, none aligned when it is 0 (docs/design.md#allocator).
        counts = self.topo.kubelet_counts
        per_socket = counts.numa_nodes // counts.sockets if counts.sockets else 0
        if not per_socket:
            return hints
        min_sockets = -(-narrowest // per_socket)
        return [(m, preferred or len(self._sockets_of(m)) == min_sockets)
                for m, preferred in hints]

    def _narrowest(self, resource: str, need: int) -> int | None:
        key = (resource, need)
        if key not in self._widths:
            total = self._numa_size if resource == "cpu" else self._numa_memory
            self._widths[key] = self._masks.narrowest(need, total)
        return self._widths[key]

    def _hint(self, cpus: int, cpu_pool: Iterable[int], memory: MemoryHints = None,
              what: str = "pod", devices: Mapping[str, list[Hint] | None] | None = None,
              reusable: frozenset[int] = frozenset(), asked: int = 0
              ) -> frozenset[int] | None:
        """The topology manager's merged NUMA affinity for one request (:meth:`_merged`)."""
        return self._merged(cpus, cpu_pool, memory, what, devices, reusable, asked)[0]

    def _merged(self, cpus: int, cpu_pool: Iterable[int], memory: MemoryHints = None,
                what: str = "pod", devices: Mapping[str, list[Hint] | None] | None = None,
                reusable: frozenset[int] = frozenset(), asked: int = 0
                ) -> tuple[frozenset[int] | None, bool]:
        """The topology manager's merged hint for one request, and whether it is preferred:
        ``devices`` are the device manager's hints per resource asked (it is the first
        provider), ``memory`` the memory manager's (one list per memory type; ``None``: no
        preference) for ``asked`` bytes of memory; ``reusable`` the CPUs the container may
        take back from init containers."""
        policy = self.config.topology_policy
        if policy == "none":
            return None, False
        if devices or asked:
            return self._kubelet_merged(cpus, cpu_pool, memory, what, devices or {},
                                        reusable, asked)
        providers: list[list[Hint]] = []
        # Under single-numa-node only single-node masks can win the merge.
        candidates = self._masks.single if policy == "single-numa-node" else self._masks.every
        if cpus > 0:
            providers.append(self._cpu_hints(cpus, cpu_pool, candidates, reusable))
        try:
            chosen = merge(policy, providers, frozenset(self.topo.numa_nodes), self._closest)
        except HintError as exc:
            if self.on_hint is not None:
                self.on_hint(HintRecord(what, cpus, 0, tuple(providers), None, str(exc)))
            raise Refused(str(exc)) from None
        if self.on_hint is not None:
            self.on_hint(HintRecord(what, cpus, 0, tuple(providers), chosen, None))
        return chosen, True

    def _kubelet_merged(self, cpus: int, cpu_pool: Iterable[int], memory: MemoryHints,
                        what: str, devices: Mapping[str, list[Hint] | None],
                        reusable: frozenset[int], asked: int
                        ) -> tuple[frozenset[int] | None, bool]:
        """The topology manager's own merge (``kubelet_merge``): device and memory hints are
        not every mask with room, so the shortcut of ``merge`` does not hold."""
        others: list[list[Hint]] = []
        if cpus > 0:
            others.append(self._cpu_hints(cpus, cpu_pool, self._masks.every, reusable))
        mem_lists: list[list[Hint] | None] = list(memory) if memory is not None else [None]
        others += [h for h in mem_lists if h is not None]
        shown = tuple(devices.items())
        providers: list[list[Hint] | None] = [*devices.values()]
        if cpus > 0:
            providers.append(others[0])
        providers += mem_lists if asked else []
        try:
            chosen, preferred = kubelet_merge_hint(
                self.config.topology_policy, providers, frozenset(self.topo.numa_nodes),
                self._closest)
        except HintError as exc:
            # Without devices, the same words as the CPU-only merge.
            text = str(exc) if devices else policy_refusal(self.config.topology_policy)
            if self.on_hint is not None:
                self.on_hint(HintRecord(what, cpus, asked, tuple(others), None, text,
                                        shown_hints(shown)))
            raise Refused(text) from None
        if self.on_hint is not None:
            self.on_hint(HintRecord(what, cpus, asked, tuple(others), chosen, None,
                                    shown_hints(shown)))
        return chosen, preferred

"""The Static memory manager on the model node (docs/design.md#memory-in-the-model): what each
container and pod asks for, the memory manager's hints, and its ``Allocate`` and
``AllocatePod`` on the machine state (memory_state.py)."""

from __future__ import annotations

from dataclasses import replace

from reconciler.allocator.hints import Hint
from reconciler.allocator.memory_state import (
    MachineState,
    MemoryRefused,
    Requested,
    Reusable,
    blocks_on,
)
from reconciler.allocator.node_core import NodeCore
from reconciler.allocator.placement import PodPlacement
from reconciler.allocator.rules import Refused, Work
from reconciler.kube import ContainerSpec, PodSpec, Resources
from reconciler.snapshot import MemoryBlock

MemoryHints = list[list[Hint]] | None  # one list per memory type; None: no preference
Entries = dict[str, tuple[MemoryBlock, ...]]


def _requests(r: Resources) -> dict[str, int]:
    out: dict[str, int] = {}
    if r.memory_request is not None:
        out["memory"] = r.memory_request
    for name, size in r.hugepages:
        out[name] = size
    return out


class NodeMemory(NodeCore):
    """The model node with the memory manager's rules."""

    @property
    def _pod_level_gate(self) -> bool:
        return self.config.pod_level and self.config.kubelet_version != "1.35"

    @staticmethod
    def _pod_level_set(pod: PodSpec) -> bool:
        return pod.resources is not None and pod.resources.is_set

    def memory_requested(self, pod: PodSpec, c: ContainerSpec) -> dict[str, int]:
        """``getContainerRequestedResources``: memory and hugepages requested; nothing for a
        container of a pod with pod-level resources unless its own requests equal limits."""
        if self._pod_level_gate and self._pod_level_set(pod) and not c.resources.guaranteed:
            return {}
        return _requests(c.resources)

    def pod_memory_requested(self, pod: PodSpec) -> dict[str, int]:
        """``getPodRequestedResources``: the pod-level requests, else the larger of what the
        long-running containers ask together and what any init container asks beside the
        sidecars before it (only types the app containers ask)."""
        if self._pod_level_gate and self._pod_level_set(pod):
            assert pod.resources is not None
            return {t: size for t, size in _requests(pod.resources).items() if size > 0}
        init_peak: dict[str, int] = {}
        sidecars: dict[str, int] = {}
        for c in pod.init_containers:
            for t, q in self.memory_requested(pod, c).items():
                init_peak.setdefault(t, 0)
                if c.sidecar:
                    sidecars[t] = sidecars.get(t, 0) + q
                elif sidecars.get(t, 0) + q > init_peak[t]:
                    init_peak[t] = sidecars.get(t, 0) + q
        apps: dict[str, int] = {}
        for c in pod.containers:
            for t, q in self.memory_requested(pod, c).items():
                apps[t] = apps.get(t, 0) + q
        return {t: max(q + sidecars.get(t, 0), init_peak.get(t, 0)) for t, q in apps.items()}

    def _asked(self, requested: dict[str, int], pod: PodSpec) -> int:
        """The bytes of memory the memory manager is a provider for (0: it gives none)."""
        return 0 if self._skipped(pod) else requested.get("memory", 0) or \
            sum(requested.values())

    def _skipped(self, pod: PodSpec) -> bool:
        """No memory manager work at all: policy None, not Guaranteed, or pod-level
        resources the kubelet's gates do not let it manage."""
        if not self.memory_enabled or not pod.guaranteed:
            return True
        return self._pod_level_set(pod) and not self._pod_level_gate

    # ---- hints ----------------------------------------------------------------------------

    @staticmethod
    def _as_providers(hints: dict[str, list[Hint]]) -> MemoryHints:
        if not hints:
            return None
        return [hints[t] for t in sorted(hints)]

    def memory_hints(self, pod: PodSpec, c: ContainerSpec, work: Work,
                     held: tuple[MemoryBlock, ...] | None = None) -> MemoryHints:
        """``GetTopologyHints``; ``held``: the container's blocks already in the state."""
        if self._skipped(pod):
            return None
        requested = self.memory_requested(pod, c)
        if not requested:
            return None
        if held is not None:
            return regenerate(held, requested)
        return self._as_providers(work.mem.hints(requested, work.mem_reuse))

    def pod_memory_hints(self, pod: PodSpec, work: Work,
                         held: tuple[MemoryBlock, ...] | None = None) -> MemoryHints:
        """``GetPodTopologyHints``; ``held``: the blocks of the pod's first container
        already in the state."""
        if self._skipped(pod):
            return None
        requested = self.pod_memory_requested(pod)
        if self._pod_level_gate and self._pod_level_set(pod) and \
                self.empty_shared_pool(pod) is not None:
            return [[] for _ in requested]
        if not requested:
            return None
        if held is not None:
            return regenerate(held, requested)
        return self._as_providers(work.mem.hints(requested))

    def empty_shared_pool(self, pod: PodSpec) -> str | None:
        """``validatePodScopeResources``: the kubelet's words when the exclusive containers'
        requests leave the pod's memory pool empty for a container that needs it."""
        total = self.pod_memory_requested(pod)
        exclusive: dict[str, int] = {}
        shared = False
        for c in pod.init_containers:
            reqs = self.memory_requested(pod, c)
            if not c.sidecar:
                if not reqs:
                    for t, pool in total.items():
                        if exclusive.get(t, 0) >= pool:
                            return (f"pod rejected, pod has shared init containers but no {t} "
                                    "available for them")
                continue
            shared = shared or not reqs
            for t, q in reqs.items():
                exclusive[t] = exclusive.get(t, 0) + q
        for c in pod.containers:
            reqs = self.memory_requested(pod, c)
            shared = shared or not reqs
            for t, q in reqs.items():
                exclusive[t] = exclusive.get(t, 0) + q
        if shared:
            for t, pool in total.items():
                if exclusive.get(t, 0) >= pool:
                    return (f"pod rejected, sum of exclusive container {t} requests equals "
                            "pod budget, leaving no memory for shared containers")
        return None

    # ---- Allocate -------------------------------------------------------------------------

    def allocate_memory(self, pod: PodSpec, c: ContainerSpec, ordinary_init: bool,
                        hint: tuple[frozenset[int] | None, bool], work: Work
                        ) -> tuple[MemoryBlock, ...]:
        """``Allocate`` for one container with the topology manager's ``hint``; the blocks
        go to ``work.mem_entries``. Raises :class:`Refused` with the kubelet's words."""
        if self._skipped(pod):
            return ()
        requested = self.memory_requested(pod, c)
        if not requested:
            if self.config.kubelet_version == "1.36" and self._pod_level_set(pod):
                # 1.36 goes on with nothing asked: the affinity must still be valid.
                self._affinity(work.mem, {}, hint, work.mem_reuse)
                work.mem_entries[c.name] = ()
            return ()
        mask = self._affinity(work.mem, requested, hint, work.mem_reuse)
        blocks = blocks_on(mask, requested)
        for b in blocks:
            again = work.mem_reuse.get(mask, {}).get(b.memory_type, 0)
            work.mem.update(mask, b.memory_type, max(0, b.size - again))
        update_reusable(work.mem_reuse, ordinary_init, blocks)
        work.mem_entries[c.name] = blocks
        _reuse_init_blocks(work.mem_entries, pod, c, blocks)
        return blocks

    @staticmethod
    def _affinity(mem: MachineState, requested: Requested,
                  hint: tuple[frozenset[int] | None, bool], reusable: Reusable | None = None
                  ) -> frozenset[int]:
        try:
            return mem.affinity(requested, hint, reusable)
        except MemoryRefused as exc:
            raise Refused(str(exc)) from None

    def allocate_pod_memory(self, pod: PodSpec, hint: tuple[frozenset[int] | None, bool],
                            work: Work) -> tuple[MemoryBlock, ...]:
        """``AllocatePod``: one block per memory type of the pod's budget on one mask, and
        each container's entry carved from it (``work.mem_entries``)."""
        if not self.memory_enabled or not pod.guaranteed:
            return ()
        total = self.pod_memory_requested(pod)
        problem = self.empty_shared_pool(pod)
        if problem is not None:
            raise Refused(f"EmptyPodSharedPoolError: {problem}")
        mask = self._affinity(work.mem, total, hint)
        entries = self._partition(pod, total, mask)
        for c in (*pod.init_containers, *pod.containers):
            work.mem_entries[c.name] = entries[c.name]
        for t, q in total.items():
            work.mem.update(mask, t, q)
        return blocks_on(mask, total)

    def _partition(self, pod: PodSpec, total: Requested, mask: frozenset[int]) -> Entries:
        """``AllocatePod``'s entries: an exclusive container its requests; an ordinary init
        container asking nothing the budget less the sidecars before it; the others the
        pod's pool, what the exclusive containers leave of the budget."""
        entries: Entries = {}
        sidecars: dict[str, int] = {}
        for c in pod.init_containers:
            reqs = self.memory_requested(pod, c)
            if reqs:
                entries[c.name] = blocks_on(mask, {t: q for t, q in reqs.items() if q > 0})
                for t, q in reqs.items():
                    sidecars[t] = sidecars.get(t, 0) + (q if c.sidecar else 0)
            elif not c.sidecar:
                entries[c.name] = blocks_on(mask, {t: q - sidecars.get(t, 0)
                                                   for t, q in total.items()
                                                   if q - sidecars.get(t, 0) > 0})
        pool = {t: q - sidecars.get(t, 0) for t, q in total.items()}
        for c in pod.containers:
            reqs = self.memory_requested(pod, c)
            if reqs:
                entries[c.name] = blocks_on(mask, {t: q for t, q in reqs.items() if q > 0})
                for t, q in reqs.items():
                    pool[t] = pool.get(t, 0) - q
        shared = blocks_on(mask, {t: q for t, q in pool.items() if q > 0})
        return {c.name: entries.get(c.name, shared)
                for c in (*pod.init_containers, *pod.containers)}

    def add_containers(self, placement: PodPlacement, mem: MachineState) -> PodPlacement:
        """The memory manager's ``AddContainer`` for every container in order: each drops
        the ordinary init containers before it from the state, which gives their blocks
        back (a pod with pod-level blocks keeps those until its last container goes)."""
        entries = dict(placement.mem_entries)
        dropped = [c.name for c in placement.spec.init_containers
                   if not c.sidecar and c.name in entries]
        if not dropped:
            return placement
        for name in dropped:
            blocks = entries.pop(name)
            if not placement.block_memory:
                mem.release(blocks)
        return replace(placement, mem_entries=tuple(entries.items()))

    def release_memory(self, entries: Entries, pod_blocks: tuple[MemoryBlock, ...],
                       order: list[str]) -> None:
        """``RemoveContainer`` for every container in ``order``: a pod with pod-level blocks
        gives back those once its last container is gone, else each container's own."""
        if pod_blocks:
            self.mem.release(pod_blocks)
            return
        for name in order:
            self.mem.release(entries.get(name, ()))


def regenerate(held: tuple[MemoryBlock, ...], requested: Requested) -> MemoryHints:
    """``regenerateHints``: a container already in the state is offered its own blocks'
    masks, preferred; nothing (no preference) when they no longer match its request."""
    if len(held) != len(requested):
        return None
    hints: dict[str, list[Hint]] = {t: [] for t in requested}
    for b in held:
        if b.memory_type not in requested or b.size != requested[b.memory_type]:
            return None
        hints[b.memory_type].append((frozenset(b.numa_nodes), True))
    return [hints[t] for t in sorted(hints)]


def update_reusable(reusable: Reusable, ordinary_init: bool,
                     blocks: tuple[MemoryBlock, ...]) -> None:
    """``updatePodReusableMemory``: an ordinary init container's blocks may be reused by
    the containers after it on the same NUMA nodes; theirs use that up."""
    for b in blocks:
        key = frozenset(b.numa_nodes)
        if ordinary_init:
            per = reusable.setdefault(key, {})
            per[b.memory_type] = max(per.get(b.memory_type, 0), b.size)
            continue
        have = reusable.get(key, {}).get(b.memory_type, 0)
        if have:
            reusable[key][b.memory_type] = 0 if b.size >= have else have - b.size


def _reuse_init_blocks(entries: Entries, pod: PodSpec, c: ContainerSpec,
                       blocks: tuple[MemoryBlock, ...]) -> None:
    """``updateInitContainersMemoryBlocks``: the state's blocks of the ordinary init
    containers before ``c`` shrink by what ``c`` reused, so that the pod's blocks add up
    to what it holds."""
    for block in blocks:
        size = block.size
        for init in pod.init_containers:
            if init.name == c.name or size == 0:
                break
            if init.sidecar or not entries.get(init.name):
                continue
            out = []
            for b in entries[init.name]:
                if b.size and b.memory_type == block.memory_type \
                        and set(b.numa_nodes) == set(block.numa_nodes):
                    cut = min(b.size, size)
                    b = MemoryBlock(b.memory_type, b.size - cut, b.numa_nodes)
                    size -= cut
                out.append(b)
            entries[init.name] = tuple(out)


__all__ = ["Entries", "MemoryHints", "NodeMemory", "regenerate", "update_reusable"]

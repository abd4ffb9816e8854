"""The paths a pod takes through the static policy on the model node
(docs/design.md#allocator): legacy per-container allocation, the pod scope's block and its
slices, the container scope and the none policy for pods with pod-level resources, and the
device manager's take beside them."""

from __future__ import annotations

from dataclasses import replace

from reconciler.allocator.devices import DevicesUnavailable
from reconciler.allocator.node_hints import NodeHints
from reconciler.allocator.placement import ContainerTruth, PodPlacement
from reconciler.allocator.rules import (
    AUTO,
    Auto,
    Leaked,
    MemoryAfterBlock,
    Refused,
    Slices,
    Work,
    all_shared,
    container_cpus,
    eligible_init,
    in_start_order,
    pod_guaranteed_cpus,
    validate_pod_scope,
    with_devices,
)
from reconciler.kube import ContainerSpec, PodSpec
from reconciler.pools import Assignment
from reconciler.snapshot import MemoryBlock

Merged = tuple[frozenset[int] | None, bool]  # the topology manager's hint, and preferred

# The topology manager's refusal when the hints regenerated from CPUs already held fit no
# mask the policy accepts.
_HELD_REFUSAL = "TopologyAffinityError: Resources cannot be allocated with Topology locality"


def _record(c: ContainerSpec, ordinary_init: bool, got: frozenset[int],
            blocks: tuple[MemoryBlock, ...], slices: Slices) -> None:
    """What one container of the legacy path took, in the slices of its pod."""
    if ordinary_init:
        slices.reusable |= got
        if got:
            slices.init[c.name] = got
    else:
        slices.exclusive[c.name] = got
        slices.memory[c.name] = blocks


class NodePaths(NodeHints):
    """The model node with the static policy's placement paths."""

    def _shared_devices(self, pod: PodSpec, work: Work, placement: PodPlacement
                        ) -> PodPlacement:
        """Devices for a pod given no exclusive CPUs: the device manager allocates them
        all the same, aligned by its own hints alone."""
        assert work.dev is not None
        slices = Slices()
        hint = None
        if self.config.scope == "pod":
            hint = self._hint(0, (), devices=work.dev.pod_hints(pod))
        for c, ordinary_init in in_start_order(pod):
            dev_hints = work.dev.container_hints(c)
            if self.config.scope == "container" and dev_hints:
                what = f"container {c.name}"
                try:
                    hint = self._hint(0, (), None, what, dev_hints)
                except Refused as exc:
                    raise Refused(f"{what}: {exc}") from None
            self._take_devices(work, c, hint, ordinary_init, slices, pod)
        return with_devices(placement, slices.devices, slices.device_errors)

    def _take_devices(self, work: Work, c: ContainerSpec, hint: frozenset[int] | None,
                      ordinary_init: bool, slices: Slices, pod: PodSpec | None = None
                      ) -> None:
        """``pod``: given when the kubelet allocates the devices when the container starts
        (``_devices_at_start``); too few then fails the start, not the admission."""
        if work.dev is None:
            return
        work.dev.walked = True
        at_start = pod is not None and self._devices_at_start(pod)
        if at_start and pod is not None \
                and (why := work.dev.unstartable(pod.uid, c)) is not None:
            slices.device_errors[c.name] = why
            return
        try:
            got = work.dev.take(c, hint, ordinary_init)
        except DevicesUnavailable as exc:
            if not at_start:
                raise Refused(str(exc)) from None
            slices.device_errors[c.name] = str(exc)
            return
        if not ordinary_init:
            slices.devices[c.name] = got

    def _devices_at_start(self, pod: PodSpec) -> bool:
        """A pod with pod-level resources admitted by the pod scope under pod-level resource
        managers goes through ``AllocatePod``, which the device manager does not implement:
        its containers get their devices when they start, with the pod's hint."""
        cfg = self.config
        return (cfg.pod_level and cfg.scope == "pod" and cfg.topology_policy != "none"
                and pod.resources is not None and pod.resources.is_set)

    def _place(self, pod: PodSpec, work: Work) -> PodPlacement:
        cfg = self.config
        if not cfg.static:
            return self._memory_only(pod, work)
        pod_level = pod.resources is not None and pod.resources.is_set
        if not pod_level:
            return self._legacy(pod, work)
        if not cfg.pod_level:
            # The CPU and memory managers skip such a pod rather than pin its containers
            # (docs/design.md#allocator).
            return all_shared(pod, "pod-level resources without PodLevelResourceManagers: "
                                    "no exclusive CPUs or memory")
        if not pod.guaranteed:
            return all_shared(pod, "not Guaranteed: no exclusive CPUs")
        if cfg.scope == "container" or cfg.topology_policy == "none":
            # Only the pod scope's admission allocates a pod block; the container scope and
            # the none policy's admission pin each eligible container from the node pool,
            # unbounded by the budget (docs/design.md#allocator).
            return replace(self._legacy(pod, work), path="container")
        budget = pod.budget_cpus
        if budget is None:
            return self._fractional(pod, work)
        validate_pod_scope(pod)
        return self._pod_scope(pod, budget, work)

    def _memory_only(self, pod: PodSpec, work: Work) -> PodPlacement:
        """The none CPU policy pins no CPU, but the Static memory manager runs beside it
        all the same: a Guaranteed pod's memory is pinned as under the static policy, on
        the hints of the memory (and device) managers alone (docs/design.md#memory-in-the-model)."""
        shared = all_shared(pod, "the CPU manager policy is none")
        cfg = self.config
        if not self.memory_enabled or not pod.guaranteed or self._skipped(pod):
            return shared
        pod_level = pod.resources is not None and pod.resources.is_set
        if pod_level and cfg.scope == "pod" and cfg.topology_policy != "none":
            return self._fractional(pod, work)
        placement = self._legacy(pod, work)
        return replace(placement, path="none", note=shared.note, init_held=frozenset(),
                       init_slices=())

    def _fractional(self, pod: PodSpec, work: Work) -> PodPlacement:
        """A pod-scope pod with a fractional budget: no CPUs of its own, but the memory
        manager's ``AllocatePod`` still pins its memory, aligned by the memory hints."""
        placement = all_shared(pod, "fractional pod budget: no exclusive CPUs")
        merged = self._merged(0, (), self.pod_memory_hints(pod, work),
                              devices=work.dev.pod_hints(pod) if work.dev else None,
                              asked=self._asked(self.pod_memory_requested(pod), pod))
        pod_blocks = self.allocate_pod_memory(pod, merged, work)
        if not pod_blocks:
            return placement  # devices, if any, as for any pod pinning nothing
        placement = PodPlacement(pod.namespace, pod.name, pod.uid, pod, "none", frozenset(),
                                 pod_blocks, placement.containers, merged[0], placement.note,
                                 mem_entries=tuple(work.mem_entries.items()))
        if work.dev is None:
            return placement
        # One merge of every provider's pod hints: the devices follow the same hint as the
        # memory, taken when the containers start (``_devices_at_start``).
        slices = Slices()
        for c, ordinary_init in in_start_order(pod):
            self._take_devices(work, c, merged[0], ordinary_init, slices, pod)
        return with_devices(placement, slices.devices, slices.device_errors)

    def _legacy(self, pod: PodSpec, work: Work) -> PodPlacement:
        """Per-container exclusive CPUs from the node pool; init-container CPUs are reused,
        and those no later container reused stay held by the pod."""
        merged: Merged = (None, False)
        # Containers a checkpoint already assigns keep their CPUs (from_checkpoint).
        held = {name: cpus for (uid, name), cpus in self.checkpointed.items() if uid == pod.uid}
        if self.config.scope == "pod" and held and self.config.topology_policy != "none":
            merged = (self._held_pod_affinity(pod, held), True)
        elif self.config.scope == "pod":
            merged = self._merged(pod_guaranteed_cpus(pod) if self.config.static else 0,
                                  work.free,
                                  self.pod_memory_hints(pod, work),
                                  devices=work.dev.pod_hints(pod) if work.dev else None,
                                  asked=self._asked(self.pod_memory_requested(pod), pod))
        slices = Slices()
        for c, ordinary_init in in_start_order(pod):
            merged = self._legacy_container(pod, c, ordinary_init, merged, work, slices,
                                            held.get(c.name))
        hint = merged[0]
        containers = []
        for c in pod.long_running:
            ex = slices.exclusive.get(c.name, frozenset())
            blocks = slices.memory.get(c.name, ())
            containers.append(ContainerTruth(
                c.name, c.sidecar, bool(ex), "node_exclusive" if ex else "node_shared",
                "node_exclusive" if blocks else "node_shared", ex, ex, blocks))
        note = "" if any(c.exclusive for c in containers) else \
            ("not Guaranteed: no exclusive CPUs" if not pod.guaranteed
             else "no container asks for whole CPUs")
        return with_devices(PodPlacement(
            pod.namespace, pod.name, pod.uid, pod, "legacy", frozenset(), (),
            tuple(containers), hint, note, frozenset(slices.reusable),
            tuple(slices.init.items()), tuple(work.mem_entries.items())), slices.devices)

    def _held_pod_affinity(self, pod: PodSpec, held: dict[str, frozenset[int]]
                           ) -> frozenset[int] | None:
        """The pod scope's affinity for a pod some of whose containers a checkpoint already
        assigns: hints regenerated from them (``getPodTopologyHintsForAdd``)."""
        wants = [(container_cpus(pod, c) if (eligible_init(pod, c) if init
                                             else pod.eligible(c)) else 0, held.get(c.name))
                 for c, init in in_start_order(pod)]
        ok, hint = self.held_pod_hint(pod_guaranteed_cpus(pod), wants)
        if not ok:
            raise Refused(_HELD_REFUSAL)
        return hint

    def _keep_held(self, n: int, held: frozenset[int], hint: frozenset[int] | None,
                   work: Work, what: str) -> frozenset[int] | None:
        """A container the checkpoint already assigns keeps its CPUs (``Allocate``: "container
        already present in state, skipping"); its hints are regenerated from them alone.
        1.35 and 1.36 check ``full-pcpus-only`` before they look in the state."""
        if self.config.scope == "container" and self.config.topology_policy != "none":
            ok, hint = self.merge_cpu_hints(self.held_cpu_hints(n, held))
            if not ok:
                raise Refused(f"{what}: {_HELD_REFUSAL}")
        if self.config.kubelet_version in ("1.35", "1.36"):
            self._check_smt(frozenset(work.free), n, what)
        return hint

    def _legacy_container(self, pod: PodSpec, c: ContainerSpec, ordinary_init: bool,
                          merged: Merged, work: Work, slices: Slices,
                          held: frozenset[int] | None = None) -> Merged:
        eligible = eligible_init(pod, c) if ordinary_init else pod.eligible(c)
        n = container_cpus(pod, c) if eligible and self.config.static else 0
        what = f"container {c.name}"
        if held is not None and n:
            hint = self._keep_held(n, held, merged[0], work, what)
            _record(c, ordinary_init, held, (), slices)
            return hint, True
        dev_hints = work.dev.container_hints(c) if work.dev else None
        mem = {} if self._skipped(pod) else self.memory_requested(pod, c)
        if self.config.scope == "container" and (n or mem or dev_hints):
            try:
                merged = self._merged(n, work.free | slices.reusable,
                                      self.memory_hints(pod, c, work), what, dev_hints,
                                      frozenset(slices.reusable) if n else frozenset(),
                                      self._asked(mem, pod))
            except Refused as exc:
                raise Refused(f"{what}: {exc}") from None
        elif self.config.scope == "container" and not self._skipped(pod):
            merged = self._nothing_asked()
        # The device manager is the topology manager's first provider: it allocates first.
        self._take_devices(work, c, merged[0], ordinary_init, slices)
        got = self._take(work.free | slices.reusable, n, merged[0], what,
                         default=work.free) if n else frozenset()
        slices.reusable -= got
        work.free -= got
        try:
            blocks = self.allocate_memory(pod, c, ordinary_init, merged, work)
        except Refused as exc:
            raise Refused(f"{what}: {exc}") from None
        _record(c, ordinary_init, got, blocks, slices)
        return merged

    def _nothing_asked(self) -> Merged:
        """The merge when no provider has a hint: the whole machine, preferred (none at all
        under single-numa-node, which gives no affinity for the whole machine)."""
        policy = self.config.topology_policy
        if policy == "none":
            return None, False
        if policy == "single-numa-node":
            return None, True
        return frozenset(self.topo.numa_nodes), True

    def _pod_scope(self, pod: PodSpec, budget: int, work: Work,
                   merged: Merged | Auto = AUTO) -> PodPlacement:
        """One NUMA-aligned block of the budget; slices carved from it
        (docs/design.md#allocator). ``merged`` is the topology manager's hint, when already
        known."""
        if isinstance(merged, Auto):
            merged = self._merged(budget, work.free, self.pod_memory_hints(pod, work),
                                  devices=work.dev.pod_hints(pod) if work.dev else None,
                                  asked=self._asked(self.pod_memory_requested(pod), pod))
        hint = merged[0]
        slices = Slices()
        for c, ordinary_init in in_start_order(pod):
            self._take_devices(work, c, hint, ordinary_init, slices, pod)
        block = self._take(work.free, budget, hint, "pod budget")
        work.free -= block
        init_slices: dict[str, frozenset[int]] = {}
        try:
            exclusive = self._carve_slices(pod, block, init_slices)
        except Refused as exc:
            raise Leaked(str(exc), block) from None
        try:
            block_memory = self.allocate_pod_memory(pod, merged, work)
        except Refused as exc:
            raise MemoryAfterBlock(str(exc)) from None
        shared_pool = block.difference(*exclusive.values())
        containers = []
        for c in pod.long_running:
            ex = exclusive.get(c.name, frozenset())
            # A container whose own requests equal its limits holds memory of its own.
            blocks = work.mem_entries.get(c.name, ()) if c.resources.guaranteed else ()
            mem_assign: Assignment = "node_shared"
            if block_memory:
                mem_assign = "pod_exclusive" if blocks else "pod_shared"
            if not ex:
                containers.append(ContainerTruth(
                    c.name, c.sidecar, False, "pod_shared", mem_assign, frozenset(),
                    shared_pool, blocks))
                continue
            containers.append(ContainerTruth(
                c.name, c.sidecar, True, "pod_exclusive", mem_assign, ex, ex, blocks))
        return with_devices(PodPlacement(pod.namespace, pod.name, pod.uid, pod, "pod", block,
                                          block_memory, tuple(containers), hint,
                                          init_slices=tuple(init_slices.items()),
                                          mem_entries=tuple(work.mem_entries.items())),
                             slices.devices, slices.device_errors)

    def _carve_slices(self, pod: PodSpec, block: frozenset[int],
                      init_slices: dict[str, frozenset[int]]) -> dict[str, frozenset[int]]:
        """Exclusive slices out of the pod's block, in start order; ordinary init containers'
        CPUs (recorded in ``init_slices``) are reused by the containers after them and fall
        back to the block."""
        inside = set(block)
        reusable: set[int] = set()
        exclusive: dict[str, frozenset[int]] = {}
        # A slice claimed outside the block never leaves the default set, so a refusal
        # has nothing of it to give back.
        grabbed = set(self.grabbed)
        for c, ordinary_init in in_start_order(pod):
            eligible = eligible_init(pod, c) if ordinary_init else pod.eligible(c)
            n = container_cpus(pod, c) if eligible else 0
            if not n:
                continue
            # AllocatePod holds the block to full-pcpus-only, not the slices carved from it.
            # The pool is the block less what is taken: an init container's CPUs the
            # kubelet claimed outside the block (a core taken whole) are not in it again.
            got = self._take(inside | (reusable & block), n, None, f"container {c.name}",
                             smt=False)
            self.grabbed = set(grabbed)
            inside -= got
            reusable -= got
            if ordinary_init:
                reusable |= got
                init_slices[c.name] = got
            else:
                exclusive[c.name] = got
        return exclusive

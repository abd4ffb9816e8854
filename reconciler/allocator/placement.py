"""What the model decides for a pod: its placement (the ground truth of every container's
assignment and cpuset) or the kubelet's reason to reject it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from reconciler.allocator.memory_state import MachineState
from reconciler.allocator.topology import CPUTopology
from reconciler.kube import PodSpec
from reconciler.pools import Assignment
from reconciler.snapshot import DeviceAlloc, MemoryBlock


@dataclass(frozen=True, slots=True)
class ContainerTruth:
    """One long-running container as the model placed it (docs/design.md#ownership)."""

    name: str
    sidecar: bool
    eligible: bool
    assignment: Assignment
    memory_assignment: Assignment
    exclusive: frozenset[int]  # its own exclusive CPUs (empty when shared)
    cpus: frozenset[int]  # exclusive set; the pod shared pool for pod_shared; else empty
    memory: tuple[MemoryBlock, ...] = ()  # its own exclusive memory blocks
    devices: tuple[DeviceAlloc, ...] = ()  # its device-plugin devices, one entry a NUMA node


@dataclass(frozen=True, slots=True)
class PodPlacement:
    namespace: str
    name: str
    uid: str
    spec: PodSpec
    path: Literal["none", "legacy", "pod", "container"]
    block: frozenset[int]  # the pod-level block (pod scope with a budget), else empty
    block_memory: tuple[MemoryBlock, ...]
    containers: tuple[ContainerTruth, ...]  # List order: sidecars, then app containers
    numa_hint: frozenset[int] | None
    note: str = ""  # why a pod got no exclusive CPUs, when it matters
    # CPUs ordinary init containers were given and no later container reused: the kubelet
    # keeps them out of the shared pool while the pod exists, though no listed container
    # holds them.
    init_held: frozenset[int] = frozenset()
    # The exclusive CPUs each ordinary init container was given, by name: still in the CPU
    # manager's state after it finished, which a restart's hints look at.
    init_slices: tuple[tuple[str, frozenset[int]], ...] = ()
    # The memory manager's entry of every container, init containers included, as its
    # state holds it (docs/design.md#memory-in-the-model): what is given back on removal
    # and what a restart's hints are regenerated from.
    mem_entries: tuple[tuple[str, tuple[MemoryBlock, ...]], ...] = ()
    # Containers that fail to start for want of devices, with why: a pod-level pod under the
    # pod scope gets its devices only when its containers start
    # (docs/design.md#devices-in-the-model).
    device_errors: tuple[tuple[str, str], ...] = ()

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    @property
    def exclusive(self) -> frozenset[int]:
        out: set[int] = set()
        for c in self.containers:
            out |= c.exclusive
        return frozenset(out)

    @property
    def shared_pool(self) -> frozenset[int]:
        return self.block - self.exclusive

    @property
    def has_pod_shared(self) -> bool:
        return any(c.assignment == "pod_shared" for c in self.containers)

    @property
    def held(self) -> frozenset[int]:
        """Every CPU the pod keeps from others (its block or exclusive sets, and the CPUs
        its finished init containers still hold)."""
        return self.block | self.exclusive | self.init_held

    def numa_nodes(self, topo: CPUTopology) -> frozenset[int]:
        return topo.numa_set(self.block | self.exclusive)


@dataclass(frozen=True, slots=True)
class Rejection:
    namespace: str
    name: str
    reason: str
    # CPUs the kubelet took out of the default set before it refused, and never gives back
    # (a pod-level block whose carving failed; docs/design.md#allocator).
    leaked: frozenset[int] = frozenset()
    # The memory manager's machine state once the stale-state sweep has given back what
    # the refused pod's containers had been given: groups a block set stay set
    # (docs/design.md#memory-in-the-model). None when nothing was given.
    memory_after: MachineState | None = field(default=None, compare=False)
    # The devices (by resource) the device manager gave the refused pod's containers before
    # the refusal, and wrote to its checkpoint: a restart reads them back as taken.
    devices_checkpointed: dict[str, frozenset[str]] = field(default_factory=dict,
                                                            compare=False)

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

"""What the reconciler is given: one full, immutable snapshot of a node.

Sources (the kubelet's socket, its HTTPS endpoint, sysfs, fixture files) are turned into
these types by ``exporter``; the reconciler never sees protobuf messages or files. What a
busy node has thousands of (pods, containers, memory blocks) are named tuples, which are
built several times faster than frozen dataclasses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from reconciler.kube import KubeletConfig, PodSpec


class MemoryBlock(NamedTuple):
    memory_type: str
    size: int
    numa_nodes: tuple[int, ...] = ()


class DeviceAlloc(NamedTuple):
    """One ``ContainerDevices`` entry: devices of one extended resource (a device plugin's,
    such as ``nvidia.com/gpu``) and the NUMA nodes the plugin gave them; no NUMA nodes means
    the plugin reported no topology. ``GetAllocatableResources`` lists one per device."""

    resource_name: str
    device_ids: tuple[str, ...] = ()
    numa_nodes: tuple[int, ...] = ()


class ClaimDevice(NamedTuple):
    """One device of a dynamic resource claim (``DynamicResource``/``ClaimResource``). DRA
    reports no NUMA node, so these are inventoried but never judged for alignment."""

    claim_namespace: str
    claim_name: str
    driver: str
    pool: str
    device: str
    cdi_devices: tuple[str, ...] = ()
    share_id: str | None = None


class ContainerAlloc(NamedTuple):
    """A container as PodResources ``List`` reports it."""

    name: str
    cpu_ids: tuple[int, ...] = ()
    memory: tuple[MemoryBlock, ...] = ()
    devices: tuple[DeviceAlloc, ...] = ()
    dynamic: tuple[ClaimDevice, ...] = ()


class PodAlloc(NamedTuple):
    """A pod as PodResources ``List`` reports it; ``cpu_ids``/``memory`` are the pod-level
    fields (4 and 5), empty on kubelets without pod-level resource managers."""

    namespace: str
    name: str
    containers: tuple[ContainerAlloc, ...] = ()
    cpu_ids: tuple[int, ...] = ()
    memory: tuple[MemoryBlock, ...] = ()


@dataclass(frozen=True, slots=True)
class Allocatable:
    """``GetAllocatableResources``: CPUs the kubelet may hand out (empty under policy none)."""

    cpu_ids: tuple[int, ...] = ()
    memory: tuple[MemoryBlock, ...] = ()
    devices: tuple[DeviceAlloc, ...] = ()


@dataclass(frozen=True, slots=True)
class CPUInfo:
    id: int
    core: int
    socket: int
    numa_node: int
    # The uncore (L3) cache the CPU shares; ``None`` when not known, which the kubelet reads
    # as the socket's id (docs/design.md#topology).
    uncore: int | None = None


class TopologyCounts(NamedTuple):
    """The counts the kubelet's ``topology.Discover`` sets (``NumCPUs``, ``NumCores``,
    ``NumSockets``, ``NumNUMANodes``, ``NumUncoreCache``). The CPU manager divides by them
    (CPUs per core is ``cpus // cores``), and on some machines they are not what the CPU
    rows add up to: offline threads, CPUs listed under two NUMA nodes."""

    cpus: int
    cores: int
    sockets: int
    numa_nodes: int
    uncore_caches: int


@dataclass(frozen=True, slots=True)
class KernelTopology:
    """What the kernel says where the kubelet may see otherwise (docs/design.md#topology):
    the online CPUs, every NUMA node the topology manager counts (CPU-less ones too), the
    SMT sibling groups of ``thread_siblings_list``, and why ``Discover`` failed, if it
    did."""

    online: frozenset[int] = frozenset()
    numa_nodes: tuple[int, ...] = ()
    siblings: tuple[frozenset[int], ...] = ()
    discover_error: str | None = None


@dataclass(frozen=True, slots=True)
class Topology:
    """Online CPUs as the kubelet sees them, with their place in the machine, and memory
    per NUMA node. ``CPUInfo.core`` is the kubelet's CoreID (the lowest CPU id of the
    physical core): build one with ``reconciler.kubelet_topology.topology``."""

    cpus: tuple[CPUInfo, ...]
    memory: tuple[tuple[int, int], ...] = ()  # (numa_node, bytes)
    counts: TopologyCounts | None = None
    kernel: KernelTopology | None = None
    # (node, its sysfs distance row), every node or none (prefer-closest-numa-nodes).
    distances: tuple[tuple[int, tuple[int, ...]], ...] = ()

    @property
    def online(self) -> frozenset[int]:
        return frozenset(c.id for c in self.cpus)

    @property
    def numa_nodes(self) -> tuple[int, ...]:
        return tuple(sorted({c.numa_node for c in self.cpus}))

    def numa_of(self) -> dict[int, int]:
        return {c.id: c.numa_node for c in self.cpus}


@dataclass(frozen=True, slots=True)
class CheckpointFacts:
    """The kubelet's checkpoint files as read: the detected format of each readable file,
    and whether any holds a format that older kubelets refuse (``None``: not known, e.g.
    a file present but unreadable and none of the others unsafe). See
    docs/design.md#checkpoints."""

    formats: tuple[tuple[str, str], ...] = ()  # (file name, format), sorted by name
    downgrade_unsafe: bool | None = None


@dataclass(frozen=True, slots=True)
class NodeSnapshot:
    """Everything known about a node at one moment. Optional parts are ``None`` when their
    source was not configured or failed; the reconciler degrades accordingly."""

    pods: tuple[PodAlloc, ...]
    node_name: str = ""
    allocatable: Allocatable | None = None
    topology: Topology | None = None
    pod_specs: tuple[PodSpec, ...] | None = None
    kubelet_config: KubeletConfig | None = None
    # Free-form facts about the kubelet (version, which RPCs answered), copied to the ledger.
    kubelet_info: tuple[tuple[str, str], ...] = field(default=())
    # Not reconciled: carried to the ledger for the checkpoint metrics. None when the
    # checkpoint source is not configured.
    checkpoints: CheckpointFacts | None = None

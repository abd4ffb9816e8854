"""What the reconciler knows about the node as a whole before it looks at any pod: which
CPUs are online, which are reserved, where each CPU sits, the pod specs by name and the
kubelet's policies (docs/design.md#cpu-pools)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from reconciler.cpuset import MAX_CPU_ID
from reconciler.kube import KubeletConfig, PodSpec
from reconciler.snapshot import CPUInfo, NodeSnapshot, Topology


@dataclass(frozen=True, slots=True)
class NodeFacts:
    online: frozenset[int]
    reserved: frozenset[int]
    topology: Topology | None
    numa_of: dict[int, int]  # CPU → NUMA node, when the topology is known
    config: KubeletConfig | None
    specs: dict[tuple[str, str], PodSpec]  # (namespace, name) → the first spec of that name
    static_cpu: bool  # the static CPU policy hands out exclusive CPUs
    single_numa: bool  # topology policy single-numa-node, with a topology to check against
    # PodLevelResourceManagers: without it the CPU and memory managers skip every pod with
    # pod-level resources (docs/design.md#allocator).
    pod_level_managers: bool = False
    # CPU → its row in the topology, when the topology is known: the CPU map's columns.
    places: dict[int, CPUInfo] | None = None
    numa_nodes: tuple[int, ...] = ()  # the topology's NUMA nodes, sorted


class _Places(NamedTuple):
    """Where each CPU of one topology sits, worked out once for that topology."""

    online: frozenset[int]
    numa_of: dict[int, int]
    places: dict[int, CPUInfo]
    numa_nodes: tuple[int, ...]


# The last topology's places, by identity: a node's topology is one object from one change
# of the pods to the next (the topology source reads it again only when sysfs changes), so
# a reconcile of new pods finds them here instead of walking every CPU again. Read only.
_last_places: tuple[Topology, _Places] | None = None


def _places(topology: Topology) -> _Places:
    global _last_places
    last = _last_places
    if last is not None and last[0] is topology:
        return last[1]
    found = _Places(topology.online, topology.numa_of(),
                    {c.id: c for c in topology.cpus},
                    topology.numa_nodes)
    _last_places = (topology, found)
    return found


def node_facts(snapshot: NodeSnapshot) -> NodeFacts:
    config, topology = snapshot.kubelet_config, known_topology(snapshot)
    places = _places(topology) if topology is not None else None
    online = places.online if places is not None else _online_cpus(snapshot)
    return NodeFacts(
        online=online,
        reserved=_reserved_cpus(snapshot, online),
        topology=topology,
        numa_of=places.numa_of if places is not None else {},
        config=config,
        specs=_index_specs(snapshot.pod_specs),
        static_cpu=config is not None and config.static_cpu,
        single_numa=(config is not None and topology is not None
                     and config.topology_manager_policy == "single-numa-node"),
        pod_level_managers=_pod_level_managers(snapshot),
        places=places.places if places is not None else None,
        numa_nodes=places.numa_nodes if places is not None else (),
    )


def _pod_level_managers(snapshot: NodeSnapshot) -> bool:
    """Whether PodLevelResourceManagers is on: as the config sets it, else as the pods show
    it (a pod-level block is only reported with it on)."""
    config = snapshot.kubelet_config
    said = config.gate("PodLevelResourceManagers") if config is not None else None
    if said is not None:
        return said
    return any(pod.cpu_ids or pod.memory for pod in snapshot.pods)


def known_topology(snap: NodeSnapshot) -> Topology | None:
    """The snapshot's topology when the kubelet could read one: a machine whose topology
    ``Discover`` fails has no CPUs to place (docs/design.md#topology)."""
    topology = snap.topology
    return topology if topology is not None and topology.cpus else None


def _online_cpus(snap: NodeSnapshot) -> frozenset[int]:
    """Without a topology: every id the node reports (valid ones only)."""
    ids: set[int] = set()
    if snap.allocatable is not None:
        ids.update(snap.allocatable.cpu_ids)
    if snap.kubelet_config is not None and snap.kubelet_config.reserved_system_cpus:
        ids.update(snap.kubelet_config.reserved_system_cpus)
    for pod in snap.pods:
        ids.update(pod.cpu_ids)
        for c in pod.containers:
            ids.update(c.cpu_ids)
    return frozenset(cpu for cpu in ids if 0 <= cpu <= MAX_CPU_ID)


def _reserved_cpus(snap: NodeSnapshot, online: frozenset[int]) -> frozenset[int]:
    alloc, config = snap.allocatable, snap.kubelet_config
    if alloc is not None and alloc.cpu_ids:
        return online - frozenset(alloc.cpu_ids)
    if config is not None and config.reserved_system_cpus:
        return config.reserved_system_cpus & online
    return frozenset()


def _index_specs(specs: Iterable[PodSpec] | None) -> dict[tuple[str, str], PodSpec]:
    index: dict[tuple[str, str], PodSpec] = {}
    for spec in specs or ():
        index.setdefault((spec.namespace, spec.name), spec)
    return index


def kubelet_info(snapshot: NodeSnapshot) -> tuple[tuple[str, object], ...]:
    """The kubelet's policies from its config, then the free-form facts of the snapshot."""
    info: dict[str, object] = {}
    config = snapshot.kubelet_config
    if config is not None:
        info.update(
            cpu_manager_policy=config.cpu_manager_policy,
            memory_manager_policy=config.memory_manager_policy,
            topology_manager_policy=config.topology_manager_policy,
            topology_manager_scope=config.topology_manager_scope,
            pod_level_resource_managers=config.pod_level_resource_managers,
        )
    info.update(snapshot.kubelet_info)
    return tuple(info.items())

"""The model seeded from a live node (docs/design.md#allocator): the CPUs its ledger shows
free and the memory its reports leave, so ``plan --node`` places pods on the node as it is
now rather than on an empty one."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Set
from dataclasses import dataclass

from reconciler.allocator.config import ModelConfig
from reconciler.allocator.devices import NodeDevices
from reconciler.allocator.model import NodeModel
from reconciler.allocator.topology import from_snapshot
from reconciler.kube import KubeletConfig
from reconciler.ledger import Ledger
from reconciler.memory import MemoryKey, _memory_key
from reconciler.snapshot import MemoryBlock, NodeSnapshot, Topology

# A node without device-plugin devices (immutable, so one default for every state).
NO_DEVICES = NodeDevices()


class LiveNodeError(ValueError):
    """The live node lacks what the model needs (its CPU topology)."""


@dataclass(frozen=True, slots=True)
class LiveNode:
    """A model of the node as observed, and what it was seeded with."""

    model: NodeModel
    free_cpus: frozenset[int]
    free_memory: tuple[tuple[int, int], ...]  # (numa_node, bytes); empty without Static
    # Device-plugin devices no container holds: (resource name, device ID, NUMA nodes).
    free_devices: tuple[tuple[str, str, tuple[int, ...]], ...] = ()
    # The NUMA groups holding memory blocks (:func:`memory_groups`); empty without Static.
    memory_groups: tuple[tuple[int, ...], ...] = ()


def _reported_blocks(snapshot: NodeSnapshot, pooled: Set[tuple[str, str]] = frozenset()
                     ) -> Iterator[MemoryBlock]:
    """Every memory block the pods hold, each once: the pod block where reported (its
    containers' blocks lie inside it), else the containers' own; in a pod of ``pooled``
    (namespace, name: the ledger found it reporting its pool the 1.36 way, each container on
    the pool listing the pool's blocks as its own) the same blocks count once."""
    for pod in snapshot.pods:
        if pod.memory:
            yield from pod.memory
        elif (pod.namespace, pod.name) in pooled:
            seen: set[MemoryKey] = set()
            for c in pod.containers:
                key = _memory_key(c)
                if key not in seen:
                    seen.add(key)
                    yield from c.memory
        else:
            for c in pod.containers:
                yield from c.memory


def _memory_in_use(snapshot: NodeSnapshot, capacity: Mapping[int, int],
                   pooled: Set[tuple[str, str]] = frozenset()) -> dict[int, int]:
    """Bytes of ``memory`` the pods hold per NUMA node (:func:`_reported_blocks`). A block
    over several NUMA nodes fills them in ascending order, each up to its ``capacity``, as the
    kubelet's Static policy reserves it (``updateMachineState``; what would overflow the last
    node is counted there). Blocks over several nodes share all of them (the kubelet keeps
    such a group apart), so the order of the pods does not change the outcome
    (docs/plan.md#--node)."""
    used: dict[int, int] = {}
    groups: dict[tuple[int, ...], int] = {}
    for b in _reported_blocks(snapshot, pooled):
        if b.memory_type != "memory" or not b.numa_nodes:
            continue
        if len(b.numa_nodes) == 1:
            used[b.numa_nodes[0]] = used.get(b.numa_nodes[0], 0) + b.size
        else:
            nodes = tuple(sorted(set(b.numa_nodes)))
            groups[nodes] = groups.get(nodes, 0) + b.size
    for nodes, size in sorted(groups.items()):
        for n in nodes:
            room = max(0, capacity.get(n, 0) - used.get(n, 0))
            part = size if n == nodes[-1] else min(size, room)
            used[n] = used.get(n, 0) + part
            size -= part
    return used


def memory_groups(snapshot: NodeSnapshot, topo: Topology,
                  pooled: Set[tuple[str, str]] = frozenset()) -> tuple[tuple[int, ...], ...]:
    """The NUMA groups the pods' blocks hold (of every memory type), as the Static memory
    manager keeps them in its machine state (``Cells``): the nodes of each block over several
    nodes, and each node a block holds alone. A node in use serves no wider mask and a group
    only blocks on exactly it, so the model must know them to place a pod on the node as it
    is (docs/plan.md#--node). Where reports put one node both alone and in a group (the
    kubelet never does), the group wins; nodes ``topo`` lacks are left out."""
    cells: dict[int, tuple[int, ...]] = {}
    known = set(topo.numa_nodes)
    for b in _reported_blocks(snapshot, pooled):
        nodes = tuple(sorted(set(b.numa_nodes) & known))
        for n in nodes:
            if len(nodes) > 1 or n not in cells:
                cells[n] = nodes
    return tuple(sorted(set(cells.values())))


def _memory_capacity(snapshot: NodeSnapshot, topo: Topology) -> dict[int, int]:
    """Allocatable ``memory`` per NUMA node as the kubelet reports it, else the topology's."""
    capacity: dict[int, int] = {}
    if snapshot.allocatable is not None:
        for b in snapshot.allocatable.memory:
            if b.memory_type == "memory" and len(b.numa_nodes) == 1:
                n = b.numa_nodes[0]
                capacity[n] = capacity.get(n, 0) + b.size
    if capacity:
        return capacity
    sizes = dict(topo.memory)
    return {n: sizes.get(n, 0) for n in topo.numa_nodes}


def pooled_pods(ledger: Ledger) -> frozenset[tuple[str, str]]:
    """The pods whose memory the ledger splits into a pod shared pool."""
    return frozenset((p.namespace, p.name) for p in ledger.pods
                     if any(row[0] == "pod_shared" for row in p.memory))


def free_memory(snapshot: NodeSnapshot, topo: Topology,
                pooled: Set[tuple[str, str]] = frozenset()) -> dict[int, int]:
    """Per NUMA node of ``topo``, the bytes of allocatable memory the pods' reports leave
    (``pooled``: see ``_memory_in_use``)."""
    capacity = _memory_capacity(snapshot, topo)
    used = _memory_in_use(snapshot, capacity, pooled)
    return {n: max(0, capacity.get(n, 0) - used.get(n, 0)) for n in topo.numa_nodes}


def free_resources(snapshot: NodeSnapshot, ledger: Ledger, topo: Topology
                   ) -> tuple[frozenset[int], dict[int, int]]:
    """What the model is seeded with: the CPUs the ledger puts in the node shared pool
    (reserved CPUs and every pod's CPUs are taken) and, per NUMA node of ``topo``, the bytes
    of allocatable memory the pods' reports leave. ``plan --node`` seeds from it, and the
    history records it for ``plan --fleet`` (:mod:`reconciler.allocator.fleet`). It reads
    the snapshot's topology, not the model's form of it: ``serve`` calls it on every
    changed ledger, and converting a 512-CPU topology takes some 4 ms."""
    free, memory, _ = _seeds(snapshot, ledger, topo)
    return free, memory


def _seeds(snapshot: NodeSnapshot, ledger: Ledger, topo: Topology
           ) -> tuple[frozenset[int], dict[int, int], tuple[tuple[int, ...], ...]]:
    """:func:`free_resources` and the memory groups, the ledger's pooled pods found once."""
    free = frozenset(c.id for c in ledger.cpu_map if c.pool == "node_shared")
    pooled = pooled_pods(ledger)
    return free, free_memory(snapshot, topo, pooled), memory_groups(snapshot, topo, pooled)


def node_devices(snapshot: NodeSnapshot) -> NodeDevices:
    """The node's device-plugin devices as ``GetAllocatableResources`` lists them."""
    if snapshot.allocatable is None:
        return NodeDevices()
    return NodeDevices.from_allocatable(snapshot.allocatable.devices)


def devices_in_use(snapshot: NodeSnapshot) -> dict[str, set[str]]:
    """Device IDs the listed containers hold, by resource name."""
    used: dict[str, set[str]] = {}
    for pod in snapshot.pods:
        for c in pod.containers:
            for d in c.devices:
                used.setdefault(d.resource_name, set()).update(d.device_ids)
    return used


def live_config(snapshot: NodeSnapshot, fallback: ModelConfig) -> ModelConfig:
    """The kubelet's own configuration when ``/configz`` was read, else ``fallback``."""
    cfg = snapshot.kubelet_config
    return fallback if cfg is None else ModelConfig.from_kubelet_config(cfg)


def live_node(snapshot: NodeSnapshot, ledger: Ledger, config: ModelConfig) -> LiveNode:
    """The model of ``snapshot``'s node under ``config``, its free CPUs those the ledger
    puts in the node shared pool (reserved CPUs and every pod's CPUs are taken) and its free
    memory what the pods' reports leave of the allocatable memory."""
    if snapshot.topology is None or not snapshot.topology.cpus:
        raise LiveNodeError("the node's CPU topology is unknown (sysfs or --topology)")
    topo = from_snapshot(snapshot.topology)
    model = NodeModel(topo, config, node_devices(snapshot))
    free, mem_free, groups = _seeds(snapshot, ledger, snapshot.topology)
    model.seed(free, mem_free, groups)
    used = devices_in_use(snapshot)
    model.dev_free = {name: ids - used.get(name, set()) for name, ids in model.dev_free.items()}
    shown = tuple(sorted(mem_free.items())) if model.memory_enabled else ()
    devices = tuple((name, d.id, d.numa) for name, devs in model.devices.resources
                    for d in devs if d.id in model.dev_free.get(name, ()))
    return LiveNode(model, frozenset(model.free), shown, devices,
                    groups if model.memory_enabled else ())


@dataclass(frozen=True, slots=True)
class NodeState:
    """What the model needs to place a pod on a node as it stands: the kubelet's view of
    its topology, its configuration (``None``: ``/configz`` was not read), the CPUs the
    ledger left in the node shared pool and the allocatable memory the pods leave per NUMA
    node. ``key`` identifies the content (the history's digest): equal keys, equal
    placements."""

    topology: Topology
    config: KubeletConfig | None
    free_cpus: frozenset[int]
    free_memory: tuple[tuple[int, int], ...]  # (numa_node, bytes)
    key: str = ""
    # The node's device-plugin devices as far as known (``plan --fleet``: those the history
    # saw its containers hold) and, by resource, those no container holds now.
    devices: NodeDevices = NO_DEVICES
    free_devices: tuple[tuple[str, frozenset[str]], ...] = ()
    # The NUMA groups its memory blocks hold (:func:`memory_groups`).
    memory_groups: tuple[tuple[int, ...], ...] = ()


def node_state(snapshot: NodeSnapshot, ledger: Ledger) -> NodeState | None:
    """The state of a reconciled node; ``None`` when its CPU topology is unknown (the model
    cannot place anything there)."""
    if snapshot.topology is None or not snapshot.topology.cpus:
        return None
    free, memory, groups = _seeds(snapshot, ledger, snapshot.topology)
    return NodeState(snapshot.topology, snapshot.kubelet_config, free,
                     tuple(sorted(memory.items())), memory_groups=groups)

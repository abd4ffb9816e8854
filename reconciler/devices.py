"""Devices in the ledger (docs/design.md#devices): who holds which device-plugin device and
which dynamic-resource claim device, how many devices of each resource each NUMA node has
(allocatable, assigned, free), and ``device_numa_misaligned``: a container whose exclusive
CPUs or memory sit on a NUMA node none of its devices is on.

Devices are never part of the CPU pools: a pod holding only devices is a plain pod for
everything else the reconciler does.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, NamedTuple

from reconciler.anomalies import Anomaly
from reconciler.classify import PodView
from reconciler.cpuset import format_cpuset
from reconciler.node_facts import NodeFacts
from reconciler.pools import EXCLUSIVE
from reconciler.snapshot import ClaimDevice, ContainerAlloc, DeviceAlloc, NodeSnapshot, PodAlloc

# Distinct resource names counted per NUMA node; a node has a handful, so more is a broken
# or hostile answer. The rest are counted in ``DeviceLedger.dropped_resources``.
MAX_RESOURCES = 64
# The kernel's largest MAX_NUMNODES (CONFIG_NODES_SHIFT 10): without the node's topology,
# a NUMA id outside 0..1023 is no NUMA node at all.
MAX_NUMA_ID = 1023
# An extended resource name as the API server admits one: an optional DNS-subdomain prefix
# and a name, each of letters, digits, '-', '_' and '.', bounded.
_RESOURCE = re.compile(r"([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?"
                       r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
# The topology manager policies that admit a pod whatever its hints say
# (docs/design.md#devices); under restricted and single-numa-node the kubelet refuses it.
SILENT_POLICIES = frozenset({"none", "best-effort"})


class ContainerDevices(NamedTuple):
    """The devices and claim devices of one container that holds any."""

    namespace: str
    pod: str
    container: str
    devices: tuple[DeviceAlloc, ...]
    dynamic: tuple[ClaimDevice, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace, "pod": self.pod, "container": self.container,
            "devices": [{"resource": d.resource_name, "device_ids": list(d.device_ids),
                         "numa_nodes": list(d.numa_nodes)} for d in self.devices],
            "dynamic_resources": [
                {"claim_namespace": c.claim_namespace, "claim_name": c.claim_name,
                 "driver": c.driver, "pool": c.pool, "device": c.device,
                 "cdi_devices": list(c.cdi_devices), "share_id": c.share_id}
                for c in self.dynamic],
        }


class DeviceCount(NamedTuple):
    """Devices of one resource on one NUMA node (``None``: devices without topology). A
    device on several NUMA nodes counts on each, as the kubelet lists it once per node."""

    resource: str
    numa_node: int | None
    allocatable: int
    assigned: int
    free: int


@dataclass(frozen=True, slots=True)
class DeviceLedger:
    containers: tuple[ContainerDevices, ...] = ()
    counts: tuple[DeviceCount, ...] = ()  # by resource name, then NUMA node (None last)
    dropped_resources: int = 0  # past MAX_RESOURCES or not a resource name

    def to_json(self) -> dict[str, Any]:
        by_resource: dict[str, dict[str, dict[str, int]]] = {}
        for c in self.counts:
            key = "none" if c.numa_node is None else str(c.numa_node)
            by_resource.setdefault(c.resource, {})[key] = {
                "allocatable": c.allocatable, "assigned": c.assigned, "free": c.free}
        return {"by_resource": by_resource,
                "containers": [c.to_json() for c in self.containers],
                "dropped_resources": self.dropped_resources}


NO_DEVICES = DeviceLedger()


def _valid_numa(facts: NodeFacts) -> frozenset[int] | None:
    """The node's NUMA nodes when its topology is known (the kubelet drops any other id a
    plugin reports), else ``None``: any id in 0..MAX_NUMA_ID."""
    topo = facts.topology
    if topo is None:
        return None
    kernel = topo.kernel.numa_nodes if topo.kernel is not None else ()
    return frozenset(topo.numa_nodes) | frozenset(kernel)


def _nodes(ids: Iterable[int], valid: frozenset[int] | None) -> frozenset[int]:
    if valid is None:
        return frozenset(n for n in ids if 0 <= n <= MAX_NUMA_ID)
    return frozenset(ids) & valid


def device_holders(pods: Iterable[PodAlloc]) -> tuple[ContainerDevices, ...]:
    """Every container of ``pods`` that reports devices or claim devices, in ``List`` order.
    ``reconcile`` passes only the pods whose containers hold any (it learns that once per
    distinct containers tuple, with the pod's other facts)."""
    return tuple(ContainerDevices(pod.namespace, pod.name, c.name, c.devices, c.dynamic)
                 for pod in pods for c in pod.containers if c.devices or c.dynamic)


def holds_devices(containers: Sequence[ContainerAlloc]) -> bool:
    """Whether any of ``containers`` reports devices or claim devices."""
    # C-level passes: this is asked of every distinct containers tuple of a node.
    return any(map(_DEVICES_OF, containers)) or any(map(_DYNAMIC_OF, containers))


_DEVICES_OF = attrgetter("devices")
_DYNAMIC_OF = attrgetter("dynamic")


def device_ledger(snapshot: NodeSnapshot, facts: NodeFacts,
                  holding: Iterable[PodAlloc]) -> DeviceLedger:
    """The node's devices; ``holding``: the pods whose containers hold any (passing every
    pod gives the same ledger)."""
    holders = device_holders(holding)
    allocatable = snapshot.allocatable.devices if snapshot.allocatable is not None else ()
    if not holders and not allocatable:
        return NO_DEVICES
    valid = _valid_numa(facts)
    # resource → device id → NUMA nodes; the allocatable list's topology first (the
    # kubelet's own record of each device), a holder's report for devices it lacks.
    where: dict[str, dict[str, set[int]]] = {}
    for d in allocatable:
        ids = where.setdefault(d.resource_name, {})
        for i in d.device_ids:
            ids.setdefault(i, set()).update(_nodes(d.numa_nodes, valid))
    offered = {r: frozenset(ids) for r, ids in where.items()}
    assigned: dict[str, set[str]] = {}
    for h in holders:
        for d in h.devices:
            assigned.setdefault(d.resource_name, set()).update(d.device_ids)
            ids = where.setdefault(d.resource_name, {})
            for i in d.device_ids:
                if i not in offered.get(d.resource_name, ()):
                    ids.setdefault(i, set()).update(_nodes(d.numa_nodes, valid))
    names = sorted(where)
    kept = [r for r in names if _RESOURCE.fullmatch(r)][:MAX_RESOURCES]
    counts: list[DeviceCount] = []
    for r in kept:
        alloc_ids, held = offered.get(r, frozenset()), assigned.get(r, set())
        per: dict[int | None, list[int]] = {}  # node → [allocatable, assigned, free]
        for i, nodes in where[r].items():
            for n in nodes or (None,):
                row = per.setdefault(n, [0, 0, 0])
                if i in alloc_ids:
                    row[0] += 1
                    row[2] += i not in held
                row[1] += i in held
        counts += [DeviceCount(r, n, *per[n])
                   for n in sorted(per, key=lambda n: (n is None, n or 0))]
    return DeviceLedger(holders, tuple(counts), len(names) - len(kept))


# -- device_numa_misaligned ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeviceChecks:
    """``device_numa_misaligned`` on a node whose topology policy admits it silently."""

    policy: str
    pod_scope: bool
    numa_of: dict[int, int]
    valid: frozenset[int] | None

    @classmethod
    def for_node(cls, facts: NodeFacts) -> DeviceChecks | None:
        config = facts.config
        if config is None or not facts.numa_of:
            return None  # the policy or the CPUs' NUMA nodes unknown: nothing is judged
        policy = config.topology_manager_policy.lower()
        if policy not in SILENT_POLICIES:
            return None
        return cls(policy, config.topology_manager_scope.lower() == "pod", facts.numa_of,
                   _valid_numa(facts))

    def check(self, view: PodView) -> list[Anomaly]:
        pod = view.alloc
        if not any(c.devices for c in pod.containers):
            return []
        found: list[Anomaly] = []
        own = [(c, s if a in EXCLUSIVE else frozenset())
               for c, a, s in zip(pod.containers, view.assignments, view.sets, strict=True)]
        if self.pod_scope:
            cpus = view.block if view.pod_level else frozenset().union(*(s for _, s in own))
            memory = (*pod.memory, *(m for c in pod.containers for m in c.memory))
            devices = tuple(d for c in pod.containers for d in c.devices)
            found += self._judge(pod, None, cpus, memory, devices)
            if not view.pod_level:
                return found
        for c, cpus in own:
            if c.devices:
                found += self._judge(pod, c.name, cpus, c.memory, c.devices)
        return found

    def _judge(self, pod: PodAlloc, container: str | None, cpus: frozenset[int],
               memory: Iterable[Any], devices: Sequence[DeviceAlloc]) -> list[Anomaly]:
        device_nodes = frozenset().union(*(_nodes(d.numa_nodes, self.valid) for d in devices))
        if not device_nodes:
            return []  # no device with topology: the kubelet takes no hint from them
        cpu_nodes = {self.numa_of[c] for c in cpus if c in self.numa_of}
        memory_nodes = _nodes((n for b in memory for n in b.numa_nodes), self.valid)
        away = (cpu_nodes | memory_nodes) - device_nodes
        if not away:
            return []
        what = []
        if cpu_nodes:
            what.append(f"exclusive CPUs {format_cpuset(cpus)} on NUMA node(s) "
                        f"{_listed(cpu_nodes)}")
        if memory_nodes:
            what.append(f"memory on NUMA node(s) {_listed(memory_nodes)}")
        resources = sorted({d.resource_name for d in devices if d.numa_nodes})
        subject = "the pod's" if container is None else "its"
        return [Anomaly(
            "device_numa_misaligned", pod.namespace, pod.name, container,
            f"{', '.join(what)}; {subject} devices ({', '.join(resources)[:200]}) on NUMA "
            f"node(s) {_listed(device_nodes)}; topology policy {self.policy} admits it")]


def _listed(nodes: Iterable[int]) -> str:
    return ",".join(str(n) for n in sorted(nodes))

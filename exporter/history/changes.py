"""What the history records of a ledger, and the differences between two of them.

A ledger is reduced to a :class:`State`: one :class:`AssignmentRow` per container (keyed by
namespace, pod and container name), one :class:`DeviceRow` per container and device
resource it holds, the set of current anomalies and a summary. Two states
give a :class:`Diff` (intervals to close and to open); an unchanged ledger gives an empty one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, NamedTuple

from reconciler.cpuset import format_cpuset
from reconciler.ledger import Ledger

if TYPE_CHECKING:
    from exporter.history.placement import PlacementRow

AssignmentKey = tuple[str, str, str]  # namespace, pod, container
AnomalyKey = tuple[str, str, str, str, str]  # kind, namespace, pod, container, detail
DeviceKey = tuple[str, str, str, str]  # namespace, pod, container, resource


class AssignmentRow(NamedTuple):
    """One container's open interval. A tuple rather than a frozen dataclass: a ledger of
    4,000 containers is reduced to 4,000 rows on every change (and summary), and two states
    are compared row by row; tuples are built and compared in C (the diff of two such
    states 3.1 -> 1.2 ms, on the event loop)."""

    namespace: str
    pod: str
    container: str
    pod_uid: str
    sidecar: bool
    assignment: str
    memory_assignment: str
    cpuset: str
    cpu_count: int
    memory_bytes: int
    numa_nodes: str

    @property
    def key(self) -> AssignmentKey:
        return (self.namespace, self.pod, self.container)


class DeviceRow(NamedTuple):
    """The devices of one resource a container holds (docs/history.md#devices): ids and
    NUMA nodes as sorted, comma-joined text."""

    namespace: str
    pod: str
    container: str
    resource: str
    device_ids: str
    numa_nodes: str

    @property
    def key(self) -> DeviceKey:
        return (self.namespace, self.pod, self.container, self.resource)


@dataclass(frozen=True, slots=True)
class State:
    assignments: dict[AssignmentKey, AssignmentRow]
    anomalies: frozenset[AnomalyKey]
    summary: dict[str, int]
    online_cpus: int
    devices: dict[DeviceKey, DeviceRow] = field(default_factory=dict)


@dataclass(slots=True)
class Diff:
    close: list[AssignmentKey] = field(default_factory=list)
    open: list[AssignmentRow] = field(default_factory=list)
    resolve: list[AnomalyKey] = field(default_factory=list)
    raise_: list[AnomalyKey] = field(default_factory=list)
    close_devices: list[DeviceKey] = field(default_factory=list)
    open_devices: list[DeviceRow] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.close or self.open or self.resolve or self.raise_
                    or self.close_devices or self.open_devices)

    @property
    def rows(self) -> int:
        return (len(self.close) + len(self.open) + len(self.resolve) + len(self.raise_)
                + len(self.close_devices) + len(self.open_devices))


def clean(text: str, limit: int = 253) -> str:
    """What the database can hold: no NUL characters (PostgreSQL refuses them), at most
    ``limit`` characters (Kubernetes names are at most 253)."""
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    return text[:limit]


def anomaly_subject(namespace: str, pod: str, container: str) -> str:
    return "/".join(part for part in (namespace, pod, container) if part)


def state_of(ledger: Ledger) -> State:
    uids = {(p.namespace, p.name): p.uid for p in ledger.pods}
    numa = {cell.id: cell.numa_node for cell in ledger.cpu_map if cell.numa_node is not None}
    assignments: dict[AssignmentKey, AssignmentRow] = {}
    counts = dict.fromkeys(("node_exclusive", "pod_exclusive", "pod_shared", "node_shared"), 0)
    for c in ledger.containers:
        counts[c.assignment] = counts.get(c.assignment, 0) + 1
        namespace, pod, name = clean(c.namespace), clean(c.pod), clean(c.name)
        key = (namespace, pod, name)
        if key in assignments:  # a name listed twice: the first listing wins
            continue
        cpus = c.cpus
        if cpus:
            cpuset = format_cpuset(cpus)
            numa_nodes = ",".join(map(str, sorted({numa[cpu] for cpu in cpus if cpu in numa})))
        else:  # most containers of a node hold no CPU of their own
            cpuset = numa_nodes = ""
        # The assignments are the reconciler's own words (at most 14 characters): only
        # the names and the uid, which come from the kubelet, need cleaning.
        assignments[key] = AssignmentRow(
            namespace, pod, name, clean(uids.get((c.namespace, c.pod), ""), 64), c.sidecar,
            c.assignment, c.memory_assignment, cpuset, len(cpus), c.memory_bytes, numa_nodes)
    anomalies = frozenset(
        (clean(a.kind, 64), clean(a.namespace or ""), clean(a.pod or ""),
         clean(a.container or ""), clean(a.detail, 4000))
        for a in ledger.anomalies)
    pools = ledger.cpu_pools
    summary = {
        "online_cpus": ledger.online_cpus,
        "cpus_reserved": pools.reserved,
        "cpus_node_shared": pools.node_shared,
        "cpus_node_exclusive": pools.node_exclusive,
        "cpus_pod_exclusive": pools.pod_exclusive,
        "cpus_pod_shared": pools.pod_shared,
        "cpus_pod_idle": pools.pod_idle,
        **{f"containers_{k}": v for k, v in counts.items()},
        "pods": len(ledger.pods),
        "reclaimed_cpus": ledger.reclaimed_cpus,
        "reclaimable_cpus": ledger.reclaimable_cpus,
        "anomalies": len(ledger.anomalies),
    }
    return State(assignments, anomalies, summary, ledger.online_cpus, _devices(ledger))


def _devices(ledger: Ledger) -> dict[DeviceKey, DeviceRow]:
    """A row per container and resource; a device the kubelet lists once per NUMA node is
    one id with its nodes joined."""
    rows: dict[DeviceKey, tuple[set[str], set[int]]] = {}
    for holder in ledger.devices.containers:
        names = clean(holder.namespace), clean(holder.pod), clean(holder.container)
        for d in holder.devices:
            ids, nodes = rows.setdefault((*names, clean(d.resource_name)), (set(), set()))
            ids.update(d.device_ids)
            nodes.update(d.numa_nodes)
    return {key: DeviceRow(*key, clean(",".join(sorted(ids)), 4000),
                           clean(",".join(map(str, sorted(nodes))), 255))
            for key, (ids, nodes) in rows.items()}


def diff_states(old_assignments: dict[AssignmentKey, AssignmentRow],
                old_anomalies: frozenset[AnomalyKey] | set[AnomalyKey],
                new: State, old_devices: dict[DeviceKey, DeviceRow] | None = None) -> Diff:
    d = Diff()
    old_devices = old_devices or {}
    d.close_devices = [k for k, row in old_devices.items() if new.devices.get(k) != row]
    d.open_devices = [row for k, row in new.devices.items() if old_devices.get(k) != row]
    for key, row in old_assignments.items():
        now = new.assignments.get(key)
        if now is None or now != row:
            d.close.append(key)
    for key, row in new.assignments.items():
        before = old_assignments.get(key)
        if before is None or before != row:
            d.open.append(row)
    d.resolve = sorted(set(old_anomalies) - new.anomalies)
    d.raise_ = sorted(new.anomalies - set(old_anomalies))
    return d


@dataclass(slots=True)
class Gap:
    gap_from: datetime
    gap_to: datetime
    dropped_writes: int
    reason: str


@dataclass(slots=True)
class ChangeSet:
    """One write: the differences a ledger brought (``full`` = reconcile the whole ``state``
    against what the database holds open), an optional summary and an optional gap."""

    seq: int
    at: datetime
    prev_at: datetime
    diff: Diff | None = None
    state: State | None = None  # set when full
    summary: dict[str, int] | None = None
    gap: Gap | None = None
    # The node's placement state, when it changed since the last one queued (or is the
    # first of this writer): docs/history.md#placement-state.
    placement: PlacementRow | None = None

    @property
    def full(self) -> bool:
        return self.state is not None

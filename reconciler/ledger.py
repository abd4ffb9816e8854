"""The ledger: the reconciled picture of a node (docs/design.md#data-path); its JSON form is
the ``podres.ledger/v1`` object.

Immutable; ``to_json()`` gives exactly the documented object. The per-pod, per-container and
per-CPU records are named tuples: a busy node has thousands of them, and a tuple is built
several times faster than a frozen dataclass. The pool and anomaly vocabularies are defined
in ``reconciler.pools`` and ``reconciler.anomalies`` and are part of the ledger's public
names.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, overload

from reconciler.anomalies import ANOMALY_KINDS as ANOMALY_KINDS
from reconciler.anomalies import Anomaly as Anomaly
from reconciler.anomalies import AnomalyKind as AnomalyKind
from reconciler.cpuset import format_cpuset
from reconciler.devices import NO_DEVICES, DeviceLedger
from reconciler.kubelet_topology import Divergence
from reconciler.pools import ASSIGNMENTS as ASSIGNMENTS
from reconciler.pools import CPU_POOLS as CPU_POOLS
from reconciler.pools import MEMORY_POOLS as MEMORY_POOLS
from reconciler.pools import Assignment as Assignment
from reconciler.pools import CPUPool as CPUPool
from reconciler.snapshot import CheckpointFacts, ContainerAlloc

SCHEMA = "podres.ledger/v1"

Basis = Literal["spec", "podresources"]


@dataclass(frozen=True, slots=True)
class PoolCounts:
    reserved: int = 0
    node_shared: int = 0
    node_exclusive: int = 0
    pod_exclusive: int = 0
    pod_shared: int = 0
    pod_idle: int = 0

    def to_json(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in CPU_POOLS}

    @property
    def total(self) -> int:
        return sum(self.to_json().values())


class PodEntry(NamedTuple):
    namespace: str
    name: str
    cpus: frozenset[int]
    budget_cpus: int | None
    pod_exclusive_cpus: int
    pod_shared_cpus: int
    pod_idle_cpus: int
    node_exclusive_cpus: int
    reclaimed_cpus: int | None
    reclaimable_cpus: int | None
    estimate_basis: Basis
    uid: str = ""  # from the pod spec when known; not part of the JSON contract
    memory: tuple[tuple[str, str, int], ...] = ()  # (pool, memory_type, bytes)

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "cpus": format_cpuset(self.cpus),
            "budget_cpus": self.budget_cpus,
            "pod_exclusive_cpus": self.pod_exclusive_cpus,
            "pod_shared_cpus": self.pod_shared_cpus,
            "pod_idle_cpus": self.pod_idle_cpus,
            "node_exclusive_cpus": self.node_exclusive_cpus,
            "reclaimed_cpus": self.reclaimed_cpus,
            "reclaimable_cpus": self.reclaimable_cpus,
            "estimate_basis": self.estimate_basis,
        }


class PodEntries(tuple[PodEntry, ...]):
    """The pod entries as the reconciler gives them, knowing which pods hold anything:
    ``holding`` are the positions (in order) of the entries of pods that report CPUs or
    memory. Every other entry holds no CPU, no memory and no estimate, so it gives no
    per-pod series and adds nothing to a sum: the exposition and the reconciler's totals
    read the few ``held`` entries, not all of a busy node's. A tuple in every other way
    (equal to, hashed and shown as the plain tuple of its entries)."""

    holding: tuple[int, ...]

    def __new__(cls, entries: Iterable[PodEntry], holding: tuple[int, ...]) -> PodEntries:
        self = super().__new__(cls, entries)
        self.holding = holding
        return self

    def __getnewargs__(self) -> tuple[tuple[PodEntry, ...], tuple[int, ...]]:
        return tuple(self), self.holding

    @property
    def held(self) -> list[PodEntry]:
        """The entries at ``holding``."""
        return [self[i] for i in self.holding]


class ContainerEntry(NamedTuple):
    namespace: str
    pod: str
    name: str
    sidecar: bool
    assignment: Assignment
    memory_assignment: Assignment
    cpus: frozenset[int]
    memory_bytes: int = 0  # memory attributed to the container (its own, or its pod's pool)

    @property
    def cpu_count(self) -> int:
        return len(self.cpus)

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "pod": self.pod,
            "name": self.name,
            "sidecar": self.sidecar,
            "assignment": self.assignment,
            "memory_assignment": self.memory_assignment,
            "cpus": format_cpuset(self.cpus),
            "cpu_count": self.cpu_count,
        }


class NodeSharedPod(NamedTuple):
    """The containers of a pod that reports no CPU and no memory (most pods of a node), kept
    as the pod's names and its ``List`` containers rather than built as entries: every one
    is node_shared and holds nothing, a sidecar when its name is in ``sidecars``. See
    ``DistinctContainers``."""

    namespace: str
    pod: str
    containers: tuple[ContainerAlloc, ...]
    sidecars: frozenset[str]

    def entries(self) -> list[ContainerEntry]:
        namespace, pod, sidecars, new = self.namespace, self.pod, self.sidecars, tuple.__new__
        # ContainerEntry's fields in order, without NamedTuple's Python-level __new__.
        return [new(ContainerEntry, (namespace, pod, c.name, c.name in sidecars, "node_shared",
                                     "node_shared", _NO_CPUS, 0)) for c in self.containers]


ContainerRun = ContainerEntry | NodeSharedPod
_NO_CPUS: frozenset[int] = frozenset()


def each_entry(runs: Iterable[ContainerRun]) -> Iterator[ContainerEntry]:
    """The container entries of ``runs``, in order."""
    for run in runs:
        if isinstance(run, NodeSharedPod):
            yield from run.entries()
        else:
            yield run


class DistinctContainers(Sequence[ContainerEntry]):
    """Container entries no two of which share a namespace, pod and name: what the
    reconciler gives a ledger whose pods are each listed once, each naming its containers
    once (nearly every node), so that the exposition need not look for repeated series.
    A tuple of entries built any other way, or changed afterwards, is a plain tuple: not
    known to be distinct. Equal to, hashed and shown as the plain tuple of its entries.

    The entries of a pod that reports nothing are not built until read: the reconciler
    keeps such a pod as one ``NodeSharedPod`` in ``runs``, in its place among the
    entries of the other pods. Building some 3,600 entries on a busy node was a fifth of
    its reconcile, and the exposition, which reads ``runs``, needs only their names:
    the entries are built by whoever iterates (the history, the JSON API, the kernel
    checks), off the path from a changed node to its published metrics. Iterating builds
    them afresh each time without keeping them (0.8 ms for 3,600); indexing keeps them.

    It carries three more facts about its entries that the reconciler learns on its way
    (each a pass over some 4,000 containers on a busy node, were the exposition to find
    them again): how many hold each assignment, CPU and memory (``cpu_counts``,
    ``memory_counts``, in ``ASSIGNMENTS`` order), whether every namespace, pod and
    container name the node listed is plain (``plain_names``: no backslash, double quote
    or line break, so it stands verbatim between quotes), and their number."""

    __slots__ = ("_built", "_length", "cpu_counts", "memory_counts", "plain_names", "runs")

    def __init__(self, runs: Sequence[ContainerRun], length: int,
                 cpu_counts: tuple[int, ...], memory_counts: tuple[int, ...],
                 plain_names: bool) -> None:
        self.runs = runs
        self._length = length
        self.cpu_counts, self.memory_counts = cpu_counts, memory_counts
        self.plain_names = plain_names
        self._built: tuple[ContainerEntry, ...] | None = None

    def _entries(self) -> tuple[ContainerEntry, ...]:
        if self._built is None:
            self._built = tuple(each_entry(self.runs))
        return self._built

    def __len__(self) -> int:
        return self._length

    def __iter__(self) -> Iterator[ContainerEntry]:
        return iter(self._built) if self._built is not None else each_entry(self.runs)

    @overload
    def __getitem__(self, index: int) -> ContainerEntry: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[ContainerEntry, ...]: ...

    def __getitem__(self, index: int | slice) -> ContainerEntry | tuple[ContainerEntry, ...]:
        return self._entries()[index]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DistinctContainers | tuple):
            return len(self) == len(other) and tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return repr(tuple(self))

    def __reduce__(self) -> tuple[Any, ...]:
        return DistinctContainers, (tuple(self.runs), self._length, self.cpu_counts,
                                    self.memory_counts, self.plain_names)


class CPUCell(NamedTuple):
    """One online CPU and who holds it, for the CPU map (not part of the ledger JSON)."""

    id: int
    pool: CPUPool
    core: int | None = None
    socket: int | None = None
    numa_node: int | None = None
    owner: str = ""  # "namespace/pod[/container]" when owned


@dataclass(frozen=True, slots=True)
class Ledger:
    node_name: str
    online_cpus: int
    numa_nodes: int | None
    kubelet: tuple[tuple[str, Any], ...]
    cpu_pools: PoolCounts
    cpu_pools_by_numa: tuple[tuple[int, PoolCounts], ...]
    memory_pools: tuple[tuple[str, tuple[int, int, int]], ...]  # type → (node_ex, pod_ex, pod_sh)
    pods: tuple[PodEntry, ...]
    containers: Sequence[ContainerEntry]  # a DistinctContainers, mostly
    reclaimed_cpus: int
    reclaimable_cpus: int
    anomalies: tuple[Anomaly, ...]
    cpu_map: tuple[CPUCell, ...] = field(default=(), compare=False)
    # The snapshot's checkpoint facts, passed through (not part of the ledger JSON).
    checkpoints: CheckpointFacts | None = None
    # Where the kubelet's topology differs from the kernel's (docs/design.md#topology);
    # None when the topology was not read from sysfs. Not part of the ledger JSON.
    topology_divergences: tuple[Divergence, ...] | None = None
    # Device-plugin devices and claim devices (docs/design.md#devices).
    devices: DeviceLedger = NO_DEVICES

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "node": {"name": self.node_name, "online_cpus": self.online_cpus,
                     "numa_nodes": self.numa_nodes, "kubelet": dict(self.kubelet)},
            "cpu_pools": self.cpu_pools.to_json(),
            "cpu_pools_by_numa": {str(n): p.to_json() for n, p in self.cpu_pools_by_numa},
            "memory_pools": {
                mtype: dict(zip(MEMORY_POOLS, sizes, strict=True))
                for mtype, sizes in self.memory_pools
            },
            "pods": [p.to_json() for p in self.pods],
            "containers": [c.to_json() for c in self.containers],
            "reclaimed_cpus": self.reclaimed_cpus,
            "reclaimable_cpus": self.reclaimable_cpus,
            "anomalies": [a.to_json() for a in self.anomalies],
            "devices": self.devices.to_json(),
        }

    def anomaly_counts(self) -> dict[str, int]:
        counts: dict[str, int] = dict.fromkeys(ANOMALY_KINDS, 0)
        for a in self.anomalies:
            counts[a.kind] = counts.get(a.kind, 0) + 1
        return counts

"""The machine as the CPU manager sees it: sockets, NUMA nodes, physical cores, SMT threads.

Built from a :class:`reconciler.snapshot.Topology` (sysfs or ``topology.json``) or from a
``SxCxT`` spec (sockets × cores per socket × threads per core). Generated machines number
CPUs the way Linux does on most x86 servers: first one thread of every core, socket by
socket, then the second thread of every core, so on ``1x4x2`` the siblings of CPU 0 is 4.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from reconciler import kubelet_topology
from reconciler.kubelet_topology import core_groups, uncore_of
from reconciler.snapshot import CPUInfo, Topology, TopologyCounts

_SPEC = re.compile(r"^\s*(\d+)\s*[xX]\s*(\d+)\s*[xX]\s*(\d+)\s*$")
MAX_CPUS = 4096


class TopologyError(ValueError):
    """A topology spec or description that cannot describe a machine."""


@dataclass(frozen=True, slots=True)
class CPUTopology:
    """Immutable description of the CPUs. ``core`` ids are the kubelet's CoreIDs, unique
    machine-wide (``reconciler.kubelet_topology``, docs/design.md#topology)."""

    cpus: tuple[CPUInfo, ...]
    memory: tuple[tuple[int, int], ...] = ()  # (numa_node, bytes)
    # (cpu, uncore cache id); a CPU not listed is in cache 0, the Go zero value of the
    # kubelet's hand-written test topologies. Real machines list every CPU (from_snapshot).
    uncore: tuple[tuple[int, int], ...] = ()
    # The kubelet's NumCPUs, NumCores... where they are not what the rows add up to.
    counts: TopologyCounts | None = None
    # NUMA distances as sysfs lists them (node, its distance to every node in node order);
    # the topology manager's prefer-closest-numa-nodes reads them (docs/design.md#allocator).
    distances: tuple[tuple[int, tuple[int, ...]], ...] = ()
    # Hugepages the Static memory manager may hand out: (node, "hugepages-2Mi", bytes).
    # ``memory`` is then the regular memory left beside them (docs/design.md#allocator).
    hugepages: tuple[tuple[int, str, int], ...] = ()
    # Derived lookups (filled in __post_init__).
    by_id: dict[int, CPUInfo] = field(default_factory=dict, compare=False, repr=False)
    core_cpus: dict[int, frozenset[int]] = field(default_factory=dict, compare=False,
                                                  repr=False)
    numa_cpus: dict[int, frozenset[int]] = field(default_factory=dict, compare=False,
                                                  repr=False)
    socket_cpus: dict[int, frozenset[int]] = field(default_factory=dict, compare=False,
                                                    repr=False)
    uncore_cpus: dict[int, frozenset[int]] = field(default_factory=dict, compare=False,
                                                    repr=False)
    uncore_of: dict[int, int] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.cpus:
            raise TopologyError("a topology needs at least one CPU")
        numas: dict[int, set[int]] = {}
        sockets: dict[int, set[int]] = {}
        for cpu in self.cpus:
            if cpu.id in self.by_id:
                raise TopologyError(f"CPU {cpu.id} listed twice")
            self.by_id[cpu.id] = cpu
            numas.setdefault(cpu.numa_node, set()).add(cpu.id)
            sockets.setdefault(cpu.socket, set()).add(cpu.id)
        self.core_cpus.update(core_groups(self.cpus))
        self.numa_cpus.update({k: frozenset(v) for k, v in sorted(numas.items())})
        self.socket_cpus.update({k: frozenset(v) for k, v in sorted(sockets.items())})
        self.uncore_of.update(dict.fromkeys(self.by_id, 0))
        self.uncore_of.update((c, cache) for c, cache in self.uncore if c in self.by_id)
        caches: dict[int, set[int]] = {}
        for cpu_id, cache in self.uncore_of.items():
            caches.setdefault(cache, set()).add(cpu_id)
        self.uncore_cpus.update({k: frozenset(v) for k, v in sorted(caches.items())})
        counts = self.kubelet_counts
        if counts.cores < 1 or counts.cpus < counts.cores:
            # The kubelet's Discover takes such a machine info (cAdvisor never gives one:
            # every core it reads has a thread), but CPUsPerCore is then 0 and its static
            # policy divides by it: full-pcpus-only and uncore-cache admissions panic
            # (docs/design.md#topology). The model does not follow it there.
            raise TopologyError(
                f"{counts.cpus} CPUs on {counts.cores} cores: the kubelet's CPUsPerCore "
                "(NumCPUs / NumCores) would be 0, and its static policy divides by it")

    @property
    def online(self) -> frozenset[int]:
        return frozenset(self.by_id)

    @property
    def numa_nodes(self) -> tuple[int, ...]:
        return tuple(self.numa_cpus)

    @property
    def kubelet_counts(self) -> TopologyCounts:
        return self.counts or TopologyCounts(
            len(self.by_id), len(self.core_cpus), len(self.socket_cpus), len(self.numa_cpus),
            len(self.uncore_cpus))

    @property
    def threads_per_core(self) -> int:
        """The kubelet's ``CPUsPerCore``: NumCPUs / NumCores, integer division (1 on a
        hybrid machine whose E-cores have one thread); at least 1, as a topology with
        fewer CPUs than cores is refused."""
        counts = self.kubelet_counts
        return counts.cpus // counts.cores

    @property
    def cpus_per_socket(self) -> int:
        """The kubelet's ``CPUsPerSocket``: NumCPUs / NumSockets, 0 without sockets; a
        socket whose free CPUs number this many is free to it (``isSocketFree``)."""
        counts = self.kubelet_counts
        return counts.cpus // counts.sockets if counts.sockets else 0

    @property
    def cpus_per_uncore(self) -> int:
        """The kubelet's ``CPUsPerUncore``: NumCPUs / NumUncoreCache."""
        counts = self.kubelet_counts
        return counts.cpus // counts.uncore_caches if counts.uncore_caches else 0

    def average_distance(self, mask: frozenset[int]) -> float:
        """``NUMADistances.CalculateAverageFor``: the mean distance over every ordered pair
        of the mask's nodes, each node with itself included."""
        if not mask:
            return 0.0
        # The kubelet indexes each node's row by node id (d[node1][node2]).
        rows = dict(self.distances)
        total = sum(rows[a][b] for a in mask for b in mask)
        return total / (len(mask) ** 2)

    def memory_types(self) -> dict[int, dict[str, int]]:
        """Per NUMA node, what each memory type offers: regular memory, and hugepages."""
        out: dict[int, dict[str, int]] = {n: {"memory": self.memory_of(n)}
                                          for n in self.numa_nodes}
        for node, kind, size in self.hugepages:
            out.setdefault(node, {"memory": 0})[kind] = size
        return out

    def memory_of(self, numa: int) -> int:
        for node, size in self.memory:
            if node == numa:
                return size
        return 0

    def numa_of(self, cpu: int) -> int:
        return self.by_id[cpu].numa_node

    def numa_set(self, cpus: Iterable[int]) -> frozenset[int]:
        return frozenset(self.by_id[c].numa_node for c in cpus if c in self.by_id)

    def cpus_of_numa(self, nodes: Iterable[int]) -> frozenset[int]:
        out: set[int] = set()
        for n in nodes:
            out |= self.numa_cpus.get(n, frozenset())
        return frozenset(out)

    def to_snapshot(self) -> Topology:
        """The snapshot form; each CPU carries its uncore cache id when the model has any."""
        cpus = self.cpus
        if self.uncore:
            cpus = tuple(replace(c, uncore=self.uncore_of[c.id]) for c in cpus)
        return Topology(cpus=tuple(sorted(cpus, key=lambda c: c.id)), memory=self.memory,
                        counts=self.counts, distances=self.distances)

    def to_json(self) -> dict[str, object]:
        """The ``topology.json`` form of a fixture directory (docs/design.md#sources)."""
        out: list[dict[str, int]] = []
        for c in self.to_snapshot().cpus:
            cpu = {"id": c.id, "core": c.core, "socket": c.socket, "numa_node": c.numa_node}
            if c.uncore is not None:
                cpu["uncore"] = c.uncore
            out.append(cpu)
        body: dict[str, object] = {
            "cpus": out, "memory": [{"numa_node": n, "bytes": b} for n, b in self.memory]}
        if self.distances:
            body["distances"] = {str(n): list(row) for n, row in self.distances}
        return body


def from_snapshot(topology: Topology) -> CPUTopology:
    """The model's topology. A CPU whose uncore cache is unknown is in its socket's, the
    kubelet's ``getUncoreCacheID`` where a core has no uncore cache. The rows carry the
    kubelet's core identity already (every snapshot topology is built so): grouping them
    again would move a CPU that two cores list away from the core Discover gave it."""
    rows = sorted(topology.cpus, key=lambda c: c.id)
    cpus = tuple(replace(c, uncore=None) for c in rows)
    uncore = tuple((c.id, uncore_of(c)) for c in rows)
    return CPUTopology(cpus=cpus, memory=topology.memory, uncore=uncore,
                       counts=topology.counts, distances=topology.distances)


def from_spec(spec: str, numa_per_socket: int = 1,
              memory_per_numa: int = 64 * 2**30) -> CPUTopology:
    """``"2x8x2"``: 2 sockets of 8 cores with 2 threads each; ``numa_per_socket`` splits each
    socket's cores evenly into NUMA nodes."""
    match = _SPEC.match(spec)
    if not match:
        raise TopologyError(f"topology {spec!r} is not SOCKETSxCORESxTHREADS (e.g. 2x8x2)")
    sockets, cores, threads = (int(g) for g in match.groups())
    if sockets < 1 or cores < 1 or threads < 1:
        raise TopologyError(f"topology {spec!r}: every count must be at least 1")
    if sockets * cores * threads > MAX_CPUS:
        raise TopologyError(f"topology {spec!r}: more than {MAX_CPUS} CPUs")
    if numa_per_socket < 1 or cores % numa_per_socket:
        raise TopologyError(
            f"--numa-per-socket {numa_per_socket} must divide the {cores} cores of a socket")
    per_numa = cores // numa_per_socket
    total_cores = sockets * cores
    cpus = []
    for t in range(threads):
        for s in range(sockets):
            for c in range(cores):
                core = s * cores + c
                cpus.append(CPUInfo(id=t * total_cores + core, core=core, socket=s,
                                    numa_node=s * numa_per_socket + c // per_numa))
    memory = tuple((n, memory_per_numa) for n in range(sockets * numa_per_socket))
    # Through the snapshot form, so that a generated machine has the identity a real one
    # read from sysfs has: each core named after its lowest CPU, each socket's cache its
    # uncore cache (docs/design.md#topology).
    return from_snapshot(kubelet_topology.topology(cpus, memory))

"""The machine as the kubelet's CPU manager sees it: the one home of a CPU's core identity.

The kubelet does not use sysfs ``core_id`` as a core's identity: cAdvisor groups a NUMA
node's online CPUs by (``core_id``, ``physical_package_id``), and ``topology.Discover``
names each group after its lowest CPU id. ``core_id`` restarts in every package (and, on
many AMD and sub-NUMA machines, in every NUMA node or die), so the raw value merges cores
that the kubelet keeps apart. Every module that needs to know which CPUs share a core asks
this one, through :class:`reconciler.snapshot.CPUInfo.core` as built here
(docs/design.md#topology).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

from reconciler.snapshot import CPUInfo, KernelTopology, Topology, TopologyCounts


class DiscoverError(ValueError):
    """``topology.Discover`` fails on this machine: the kubelet does not start with the
    static CPU manager policy."""


class RawCore(NamedTuple):
    """A core as cAdvisor's ``getCoresInfo`` groups it within one NUMA node: the online
    threads sharing ``core_id`` and package (and book and drawer on s390x), in the order
    read, with the id of its first uncore (level 3 or above, not node-wide) cache."""

    threads: tuple[int, ...]
    socket: int
    uncore_cache: int | None = None


class RawNode(NamedTuple):
    """A NUMA node as cAdvisor reports it (a package, on machines without NUMA nodes)."""

    id: int
    cores: tuple[RawCore, ...]


def core_id(threads: Sequence[int]) -> int:
    """The kubelet's CoreID of a core: its lowest CPU id (``getUniqueCoreID``), unique
    machine-wide where sysfs ``core_id`` is not."""
    if not threads:
        raise DiscoverError("no cpus provided")
    if len(set(threads)) != len(threads):
        raise DiscoverError("cpus provided are not unique")
    return min(threads)


def discover(nodes: Sequence[RawNode], num_cpus: int, num_sockets: int) -> tuple[
        tuple[CPUInfo, ...], TopologyCounts]:
    """``topology.Discover`` over cAdvisor's nodes. ``num_cpus`` is cAdvisor's logical CPU
    count (threads over all nodes, or every ``cpuN`` directory on machines without NUMA
    directories); ``num_sockets`` its socket count. A CPU listed under two nodes takes the
    later node's place, as the kubelet's map assignment does."""
    if num_cpus == 0:
        raise DiscoverError("could not detect number of cpus")
    details: dict[int, CPUInfo] = {}
    num_cores = 0
    for node in nodes:
        num_cores += len(node.cores)
        for core in node.cores:
            cid = core_id(core.threads)
            uncore = core.socket if core.uncore_cache is None else core.uncore_cache
            for cpu in core.threads:
                details[cpu] = CPUInfo(cpu, cid, core.socket, node.id, uncore)
    cpus = tuple(details[c] for c in sorted(details))
    counts = TopologyCounts(
        cpus=num_cpus, cores=num_cores, sockets=num_sockets,
        numa_nodes=len({c.numa_node for c in cpus}),
        uncore_caches=len({c.uncore for c in cpus}))
    return cpus, counts


def kubelet_identity(cpus: Iterable[CPUInfo]) -> tuple[CPUInfo, ...]:
    """CPU rows given flat (``topology.json``, a generated machine) with the kubelet's core
    identity: CPUs sharing (NUMA node, socket, ``core``) form one core, named after its
    lowest CPU id. Rows that already carry the kubelet's ids come back unchanged."""
    rows = sorted(cpus, key=lambda c: c.id)
    groups: dict[tuple[int, int, int], list[int]] = {}
    for c in rows:
        groups.setdefault((c.numa_node, c.socket, c.core), []).append(c.id)
    named = {key: core_id(ids) for key, ids in groups.items()}
    return tuple(c if (cid := named[(c.numa_node, c.socket, c.core)]) == c.core
                 else replace(c, core=cid) for c in rows)


def uncore_of(cpu: CPUInfo) -> int:
    """The CPU's uncore cache as the kubelet numbers it: its socket's id where no uncore
    cache is known (``getUncoreCacheID``)."""
    return cpu.socket if cpu.uncore is None else cpu.uncore


def core_groups(cpus: Iterable[CPUInfo]) -> dict[int, frozenset[int]]:
    """CoreID → the CPUs of that core, cores in id order: the one grouping of CPUs into
    cores (rows built by this module carry the kubelet's CoreID)."""
    cores: dict[int, set[int]] = {}
    for c in cpus:
        cores.setdefault(c.core, set()).add(c.id)
    return {k: frozenset(v) for k, v in sorted(cores.items())}


def counts_of(cpus: Sequence[CPUInfo]) -> TopologyCounts:
    """The counts ``Discover`` would give a machine whose CPUs are exactly ``cpus``."""
    return TopologyCounts(
        cpus=len(cpus), cores=len({c.core for c in cpus}),
        sockets=len({c.socket for c in cpus}), numa_nodes=len({c.numa_node for c in cpus}),
        uncore_caches=len({uncore_of(c) for c in cpus}))


def topology(cpus: Iterable[CPUInfo], memory: tuple[tuple[int, int], ...] = (),
             *, counts: TopologyCounts | None = None,
             kernel: KernelTopology | None = None) -> Topology:
    """A snapshot topology whose cores are the kubelet's: the one way to build one."""
    rows = kubelet_identity(cpus)
    return Topology(rows, memory, counts=counts or counts_of(rows), kernel=kernel)


# --- Where the kubelet's view and the kernel's differ (docs/design.md#topology) ---

#: Every divergence kind, published at 0 from the first scrape.
DIVERGENCE_KINDS = ("cpus_dropped", "discover_failed", "numa_nodes_over_limit",
                    "siblings_split")
#: The topology manager refuses more NUMA nodes than this unless the policy option
#: ``max-allowable-numa-nodes`` raises it (``pkg/kubelet/cm/topologymanager``).
DEFAULT_MAX_NUMA_NODES = 8


@dataclass(frozen=True, slots=True)
class Divergence:
    kind: str
    cpus: frozenset[int]
    detail: str
    fix: str


def divergences(topo: Topology, *, topology_policy: str | None = None,
                max_numa_nodes: int | None = None) -> tuple[Divergence, ...]:
    """What the kubelet sees differently from the kernel on this machine, each with the
    change that removes it. ``topology_policy`` is the topology manager's policy when the
    kubelet's configuration is known; ``max_numa_nodes`` its ``max-allowable-numa-nodes``
    option when set."""
    kernel = topo.kernel
    if kernel is None:
        return ()
    out: list[Divergence] = []
    if kernel.discover_error is not None:
        out.append(Divergence(
            "discover_failed", frozenset(kernel.online),
            f"the kubelet cannot read this machine's CPU topology ({kernel.discover_error})"
            ": it does not start with the static CPU manager policy",
            "keep cpuManagerPolicy none on this node, or fix the sysfs topology the kernel "
            "exposes (core_id and physical_package_id of every online CPU)"))
    dropped = frozenset(kernel.online) - topo.online
    if dropped and kernel.discover_error is None:
        out.append(Divergence(
            "cpus_dropped", dropped,
            f"{len(dropped)} online CPU(s) are not in the kubelet's topology (no core_id "
            "or package id, or in no NUMA node): the kubelet never assigns them",
            "check sysfs topology/core_id and the nodeN/cpuM links of these CPUs; take "
            "them offline or out of the kubelet's reach (reservedSystemCPUs) meanwhile"))
    limit = max_numa_nodes or DEFAULT_MAX_NUMA_NODES
    if (len(kernel.numa_nodes) > limit and topology_policy not in (None, "none")):
        out.append(Divergence(
            "numa_nodes_over_limit", frozenset(),
            f"{len(kernel.numa_nodes)} NUMA nodes, more than the topology manager's limit "
            f"of {limit}: the kubelet refuses to start with topology policy "
            f"{topology_policy}",
            "set topologyManagerPolicyOptions max-allowable-numa-nodes to at least "
            f"{len(kernel.numa_nodes)}, or use topology policy none"))
    split = _split_siblings(topo, kernel.siblings)
    if split:
        out.append(Divergence(
            "siblings_split", split,
            "SMT siblings that the kernel pairs are separate cores to the kubelet (their "
            "core_id differs, as on AMD compute units, or they sit in different NUMA "
            "nodes or packages): full-pcpus-only does not keep them together",
            "fix the firmware's NUMA description (SRAT) or the kernel's topology, or "
            "expect noisy neighbours on these CPUs"))
    return tuple(out)


def _split_siblings(topo: Topology, siblings: tuple[frozenset[int], ...]) -> frozenset[int]:
    core_of = {c.id: c.core for c in topo.cpus}
    out: set[int] = set()
    for group in siblings:
        cores = {core_of[c] for c in group if c in core_of}
        if len(cores) > 1:
            out |= {c for c in group if c in core_of}
    return frozenset(out)

"""Snapshot → ledger (docs/design.md#data-path).

Pod by pod, in ``List`` order: classification (``reconciler.classify``), CPU ownership
(``reconciler.ownership``), memory (``reconciler.memory``), checks against the node and the
spec (``reconciler.checks``), then the pod's entries (``reconciler.entries``). Every step
reports its anomalies through one :class:`~reconciler.anomalies.AnomalyLog`, which fixes
their order in the ledger. Pod-level and container-level lists are never added together.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from itertools import chain, compress, count
from operator import attrgetter, itemgetter, or_
from typing import NamedTuple

from reconciler.anomalies import AnomalyLog
from reconciler.checks import missing_exclusive, pod_checks
from reconciler.classify import (
    PodView,
    all_node_shared,
    classify,
    cpu_less_view,
    node_unknown_cpus,
)
from reconciler.devices import DeviceChecks, device_ledger, holds_devices
from reconciler.entries import plain_records, pod_entries, spec_plain_records
from reconciler.kube import PodSpec
from reconciler.kubelet_topology import Divergence, divergences
from reconciler.ledger import (
    ASSIGNMENTS,
    ContainerEntry,
    ContainerRun,
    DistinctContainers,
    Ledger,
    NodeSharedPod,
    PodEntries,
    PodEntry,
    each_entry,
)
from reconciler.memory import MemoryShapes, PodMemory, memory_pools, no_memory
from reconciler.node_facts import NodeFacts, kubelet_info, node_facts
from reconciler.ownership import Ownership, cpu_pools
from reconciler.placement_checks import PlacementChecks
from reconciler.pools import Assignment
from reconciler.snapshot import ContainerAlloc, NodeSnapshot, PodAlloc, Topology

_CPU_IDS_OF = attrgetter("cpu_ids")
_NAME_OF = attrgetter("name")
_POD_NAME_OF = attrgetter("namespace", "name")
_MEMORY_OF = attrgetter("memory")
_CONTAINERS_OF = itemgetter(2)
_OWN_OF = itemgetter(3, 4)  # a pod's own cpu_ids and memory
# filter(None, ...) leaves out the None (and 0) estimates: C-level over every pod.
_RECLAIMED_OF = attrgetter("reclaimed_cpus")
_RECLAIMABLE_OF = attrgetter("reclaimable_cpus")


def reconcile(snapshot: NodeSnapshot) -> Ledger:
    facts = node_facts(snapshot)
    ownership = Ownership(snapshot.pods)
    log = AnomalyLog()
    log.extend(-1, node_unknown_cpus(snapshot, facts.online))  # node-level: before any pod
    listed = snapshot.pods
    plain = _as_plain(listed, facts, log)
    # The pod entries and container runs in pod order: every pod's plain record, but for
    # the pods that report something, whose own take their place below.
    pods: list[PodEntry] = plain.entries
    containers: list[ContainerRun] = []
    memory: list[PodMemory] = []
    placement = PlacementChecks.for_node(facts)
    device_checks = DeviceChecks.for_node(facts)
    # The assignments of the containers of pods that report something; every other
    # container is node_shared (for DistinctContainers' counts).
    cpu_assigned: list[Assignment] = []
    memory_assigned: list[Assignment] = []
    reports, runs, specs = plain.reports, plain.runs, plain.specs
    done = 0  # the runs of the pods before this one are in ``containers``
    shapes = MemoryShapes()
    for index in plain.holding:
        containers += runs[done:index]
        done = index + 1
        pod = listed[index]
        reported = reports[id(pod[2])]
        view, pod_mem, pods[index] = _reconcile_pod(
            index, pod, specs[index] if specs else None, bool(pod[3]) or reported[0],
            bool(pod[4]) or reported[1], facts, ownership, log, containers, placement,
            device_checks, shapes)
        memory.append(pod_mem)
        cpu_assigned += view.assignments
        memory_assigned += pod_mem.assignments
    containers += runs[done:]
    if placement is not None:
        for index, found in placement.finish(ownership.owner):
            log.extend(index, found)
    pools, by_numa, cells = cpu_pools(facts, ownership.owner)
    entries = PodEntries(pods, plain.holding)
    held = entries.held
    return Ledger(
        node_name=snapshot.node_name,
        online_cpus=len(facts.online),
        numa_nodes=len(facts.numa_nodes) if facts.topology else None,
        kubelet=kubelet_info(snapshot),
        cpu_pools=pools,
        cpu_pools_by_numa=by_numa,
        memory_pools=memory_pools(memory),
        pods=entries,
        containers=_container_entries(containers, plain.containers, cpu_assigned,
                                      memory_assigned, reports,
                                      plain.names if plain.names_once else None),
        reclaimed_cpus=sum(filter(None, map(_RECLAIMED_OF, held))),
        reclaimable_cpus=sum(filter(None, map(_RECLAIMABLE_OF, held))),
        anomalies=log.ordered(),
        cpu_map=cells,
        checkpoints=snapshot.checkpoints,
        topology_divergences=_divergences(snapshot),
        devices=device_ledger(snapshot, facts, _with_devices(listed, reports)),
    )


def _container_entries(runs: list[ContainerRun], count: int, cpu_assigned: list[Assignment],
                       memory_assigned: list[Assignment],
                       reports: dict[int, tuple[bool, bool, bool, bool, bool]],
                       pod_names: set[tuple[str, str]] | None) -> Sequence[ContainerEntry]:
    """The ledger's container entries: a ``DistinctContainers`` when every pod was listed
    once (``pod_names``, else None) and names each container once, a tuple otherwise. Told
    by the facts of each distinct containers tuple (``reports``), not looked at again pod
    by pod."""
    if pod_names is None or not all(r[2] for r in reports.values()):
        return tuple(each_entry(runs))
    plain = (all(r[3] for r in reports.values())
             and _plain("".join(chain.from_iterable(pod_names))))
    return DistinctContainers(tuple(runs), count, _counts(cpu_assigned, count),
                              _counts(memory_assigned, count), plain)


def _with_devices(pods: Sequence[PodAlloc],
                  reports: dict[int, tuple[bool, bool, bool, bool, bool]]) -> list[PodAlloc]:
    """The pods whose containers hold devices, from the facts of each distinct tuple."""
    if not any(r[4] for r in reports.values()):
        return []
    return [pod for pod in pods if reports[id(pod.containers)][4]]


# The last divergence check: (topology, policy, NUMA limit, result). A node's topology is
# one object from one change of the pods to the next (the topology source reads it again
# only when sysfs changes), so a recompute for new pods finds the answer here by identity.
_last_divergences: tuple[Topology, str | None, int | None, tuple[Divergence, ...]] | None = None


def _divergences(snapshot: NodeSnapshot) -> tuple[Divergence, ...] | None:
    global _last_divergences
    topology, config = snapshot.topology, snapshot.kubelet_config
    if topology is None or topology.kernel is None:
        return None
    policy = config.topology_manager_policy if config else None
    limit = config.max_numa_nodes() if config else None
    last = _last_divergences
    if last is not None and last[0] is topology and last[1] == policy and last[2] == limit:
        return last[3]
    found = divergences(topology, topology_policy=policy, max_numa_nodes=limit)
    _last_divergences = (topology, policy, limit, found)
    return found


def _reports(containers: tuple[ContainerAlloc, ...]) -> tuple[bool, bool, bool, bool, bool]:
    """Whether the containers report any CPU, any memory, each name once, plain names, and
    any device."""
    names = tuple(map(_NAME_OF, containers))
    return (any(map(_CPU_IDS_OF, containers)), any(map(_MEMORY_OF, containers)),
            len(set(names)) == len(names), _plain("".join(names)), holds_devices(containers))


def _plain(text: str) -> bool:
    """Whether ``text`` holds no backslash, double quote or line break."""
    return "\\" not in text and '"' not in text and "\n" not in text


def _counts(assigned: list[Assignment], containers: int) -> tuple[int, ...]:
    """Containers by assignment, in ``ASSIGNMENTS`` order: ``assigned`` and, node_shared,
    the rest of ``containers``."""
    counts = Counter(assigned)
    counts["node_shared"] += containers - len(assigned)
    return tuple(counts[a] for a in ASSIGNMENTS)


def _reconcile_pod(index: int, pod: PodAlloc, spec: PodSpec | None, cpus: bool, mem: bool,
                   facts: NodeFacts, ownership: Ownership, log: AnomalyLog,
                   containers: list[ContainerRun], placement: PlacementChecks | None,
                   device_checks: DeviceChecks | None, shapes: MemoryShapes | None = None,
                   ) -> tuple[PodView, PodMemory, PodEntry]:
    """A pod that reports CPUs or memory: appends its container entries, logs its anomalies
    and returns its classification, its memory and its pod entry."""
    view = classify(pod, spec, facts.online) if cpus else cpu_less_view(pod, spec)
    claim, claimed = ownership.claim(index, view)
    if mem:
        pod_mem, mem_found = (shapes or MemoryShapes()).of(pod, spec, view.legacy_pattern)
    else:
        pod_mem, mem_found = no_memory(len(pod.containers)), []
    found = [*view.anomalies, *claimed, *pod_checks(view, claim, facts), *mem_found]
    if placement is not None:
        found += placement.check(index, view)
    if device_checks is not None:
        found += device_checks.check(view)
    if found:
        log.extend(index, found)
    return view, pod_mem, pod_entries(view, claim, pod_mem, containers)


class _Plain(NamedTuple):
    """Every pod of a node as if it reported nothing, and what tells the others apart."""

    entries: list[PodEntry]  # each pod's entry as a pod that reports nothing
    runs: list[NodeSharedPod]  # each pod's containers as such a pod's
    specs: list[PodSpec | None] | None  # each pod's spec; None: no pod has one
    holding: tuple[int, ...]  # the pods that report CPUs or memory, in order
    # Whether the containers report CPUs, memory, each name once, plain names and any
    # device, by the identity of their tuple (see _as_plain).
    reports: dict[int, tuple[bool, bool, bool, bool, bool]]
    containers: int  # of every pod
    names: set[tuple[str, str]]  # the pods' (namespace, name)
    names_once: bool  # no pod listed twice


def _as_plain(listed: Sequence[PodAlloc], facts: NodeFacts, log: AnomalyLog) -> _Plain:
    """Every pod's records as if it reported nothing (``plain_records``; with its spec's
    where it has one, and its spec's anomalies logged), and which pods report something.
    Most pods of a busy node report nothing: they are told apart by C-level iterators over
    the whole node, not one by one."""
    conts = list(map(_CONTAINERS_OF, listed))
    # Facts of each distinct containers tuple, by its identity: the pods of one workload
    # share it (exporter.sources.convert decodes each distinct one once). Every tuple is
    # held by the snapshot until the end of reconcile, so no identity is reused meanwhile.
    ids = list(map(id, conts))
    reports = {key: _reports(c) for key, c in dict(zip(ids, conts, strict=True)).items()}
    reporting = {key for key, r in reports.items() if r[0] or r[1]}
    # A pod reports something when it lists CPUs or memory itself (any() over its two
    # fields) or its containers do.
    holding = tuple(compress(count(), map(or_, map(any, map(_OWN_OF, listed)),
                                          map(reporting.__contains__, ids))))
    entries, runs = plain_records(listed)
    names = list(map(_POD_NAME_OF, listed))
    specs = list(map(facts.specs.get, names)) if facts.specs else None
    if specs:
        # The pods with a spec: their own records, and what the spec alone shows wrong.
        busy = set(holding)
        for index in compress(count(), specs):
            spec = specs[index]
            if index in busy or spec is None:
                continue
            pod = listed[index]
            entries[index], runs[index] = spec_plain_records(pod, spec)
            if facts.static_cpu:
                log.extend(index, missing_exclusive(pod, spec,
                                                    all_node_shared(len(pod[2]))[0],
                                                    facts.pod_level_managers))
    unique = set(names)
    return _Plain(entries, runs, specs, holding, reports, sum(map(len, conts)), unique,
                  len(unique) == len(names))

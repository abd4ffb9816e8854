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
from itertools import chain
from operator import attrgetter

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
from reconciler.entries import plain_pod_entries, pod_entries
from reconciler.kube import PodSpec
from reconciler.kubelet_topology import Divergence, divergences
from reconciler.ledger import (
    ASSIGNMENTS,
    ContainerEntry,
    ContainerRun,
    DistinctContainers,
    Ledger,
    PodEntries,
    PodEntry,
    each_entry,
)
from reconciler.memory import PodMemory, memory_pools, no_memory, pod_memory
from reconciler.node_facts import NodeFacts, kubelet_info, node_facts
from reconciler.ownership import Ownership, cpu_pools
from reconciler.placement_checks import PlacementChecks
from reconciler.pools import Assignment
from reconciler.snapshot import ContainerAlloc, NodeSnapshot, PodAlloc, Topology

_CPU_IDS_OF = attrgetter("cpu_ids")
_NAME_OF = attrgetter("name")
_POD_NAME_OF = attrgetter("namespace", "name")
_MEMORY_OF = attrgetter("memory")
# filter(None, ...) leaves out the None (and 0) estimates: C-level over every pod.
_RECLAIMED_OF = attrgetter("reclaimed_cpus")
_RECLAIMABLE_OF = attrgetter("reclaimable_cpus")


def reconcile(snapshot: NodeSnapshot) -> Ledger:
    facts = node_facts(snapshot)
    ownership = Ownership(snapshot.pods)
    log = AnomalyLog()
    log.extend(-1, node_unknown_cpus(snapshot, facts.online))  # node-level: before any pod
    pods: list[PodEntry] = []
    # The container entries in pod order, a pod that reports nothing as one NodeSharedPod.
    containers: list[ContainerRun] = []
    node_shared_containers = 0  # the containers of those pods
    memory: list[PodMemory] = []
    specs = facts.specs
    placement = PlacementChecks.for_node(facts)
    device_checks = DeviceChecks.for_node(facts)
    # Whether a pod's containers report CPUs, memory, each name once and plain names, by
    # the identity of their tuple: the pods of one workload share it
    # (exporter.sources.convert decodes each distinct one once), so most pods of a busy
    # node look it up. Every tuple is held by the snapshot until the end of this call, so
    # no identity is reused meanwhile.
    reports: dict[int, tuple[bool, bool, bool, bool, bool]] = {}
    pod_names = set(map(_POD_NAME_OF, snapshot.pods))
    names_once = len(pod_names) == len(snapshot.pods)
    # The assignments of the containers of pods that report something; every other
    # container is node_shared (for DistinctContainers' counts).
    cpu_assigned: list[Assignment] = []
    holding: list[int] = []  # where the entries of pods that report anything are
    memory_assigned: list[Assignment] = []
    for index, pod in enumerate(snapshot.pods):
        # PodAlloc's fields in order (unpacking fails loudly if it changes shape).
        namespace, name, pod_containers, cpu_ids, pod_mem_blocks = pod
        spec = specs.get((namespace, name)) if specs else None
        reported = reports.get(id(pod_containers))
        if reported is None:
            reported = reports[id(pod_containers)] = _reports(pod_containers)
        if cpu_ids or pod_mem_blocks or reported[0] or reported[1]:
            holding.append(len(pods))
            view, pod_mem = _reconcile_pod(index, pod, spec, bool(cpu_ids) or reported[0],
                                           bool(pod_mem_blocks) or reported[1], facts,
                                           ownership, log, containers, pods, placement,
                                           device_checks)
            memory.append(pod_mem)
            cpu_assigned += view.assignments
            memory_assigned += pod_mem.assignments
            continue
        # The common case: the pod reports nothing and owns nothing, so only its spec can
        # show something wrong.
        pods.append(plain_pod_entries(pod, spec, containers))
        node_shared_containers += len(pod_containers)
        if spec is not None and facts.static_cpu:
            log.extend(index, missing_exclusive(pod, spec,
                                                all_node_shared(len(pod_containers))[0],
                                                facts.pod_level_managers))
    if placement is not None:
        for index, found in placement.finish(ownership.owner):
            log.extend(index, found)
    pools, by_numa, cells = cpu_pools(facts, ownership.owner)
    entries = PodEntries(pods, tuple(holding))
    held = entries.held
    count = len(cpu_assigned) + node_shared_containers  # the entries, built or not
    return Ledger(
        node_name=snapshot.node_name,
        online_cpus=len(facts.online),
        numa_nodes=len(facts.numa_nodes) if facts.topology else None,
        kubelet=kubelet_info(snapshot),
        cpu_pools=pools,
        cpu_pools_by_numa=by_numa,
        memory_pools=memory_pools(memory),
        pods=entries,
        containers=_container_entries(containers, count, cpu_assigned, memory_assigned,
                                      reports, pod_names if names_once else None),
        reclaimed_cpus=sum(filter(None, map(_RECLAIMED_OF, held))),
        reclaimable_cpus=sum(filter(None, map(_RECLAIMABLE_OF, held))),
        anomalies=log.ordered(),
        cpu_map=cells,
        checkpoints=snapshot.checkpoints,
        topology_divergences=_divergences(snapshot),
        devices=device_ledger(snapshot, facts, _with_devices(snapshot.pods, reports)),
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
                   containers: list[ContainerRun], pods: list[PodEntry],
                   placement: PlacementChecks | None, device_checks: DeviceChecks | None,
                   ) -> tuple[PodView, PodMemory]:
    """A pod that reports CPUs or memory: appends its entries, logs its anomalies and
    returns its classification and its memory."""
    view = classify(pod, spec, facts.online) if cpus else cpu_less_view(pod, spec)
    claim, claimed = ownership.claim(index, view)
    if mem:
        pod_mem, mem_found = pod_memory(pod, spec, view.legacy_pattern)
    else:
        pod_mem, mem_found = no_memory(len(pod.containers)), []
    found = [*view.anomalies, *claimed, *pod_checks(view, claim, facts), *mem_found]
    if placement is not None:
        found += placement.check(index, view)
    if device_checks is not None:
        found += device_checks.check(view)
    if found:
        log.extend(index, found)
    pods.append(pod_entries(view, claim, pod_mem, containers))
    return view, pod_mem

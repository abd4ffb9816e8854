"""The ledger's pod and container entries of one reconciled pod, with its estimates
(docs/design.md#estimates)."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat
from operator import itemgetter

from reconciler.classify import EMPTY, PodView
from reconciler.estimates import legacy_cost, reclaimable_cores
from reconciler.kube import PodSpec
from reconciler.ledger import ContainerEntry, ContainerRun, NodeSharedPod, PodEntry
from reconciler.memory import MemoryRow, PodMemory
from reconciler.ownership import Claim
from reconciler.pools import EXCLUSIVE
from reconciler.snapshot import PodAlloc

_EMPTY_NAMES: frozenset[str] = frozenset()
_NAMESPACE_OF, _NAME_OF, _CONTAINERS_OF = itemgetter(0), itemgetter(1), itemgetter(2)  # PodAlloc
_CONTAINER_NAME_OF = itemgetter(0)  # ContainerAlloc


def _sidecar_names(spec: PodSpec | None) -> frozenset[str]:
    """Names that ``spec.container(name)`` resolves to a sidecar (the first container of a
    name wins, as there)."""
    if spec is None or not spec.init_containers:
        return _EMPTY_NAMES
    first: dict[str, bool] = {}
    for c in spec.long_running:
        first.setdefault(c.name, c.sidecar)
    return frozenset(name for name, sidecar in first.items() if sidecar)


def _plain_entry(pod: PodAlloc, spec: PodSpec | None, memory: tuple[MemoryRow, ...],
                 ) -> PodEntry:
    """The entry of a pod that owns no CPU (the common case): no block, no counts,
    nothing reclaimable."""
    # tuple.__new__ builds the same record as PodEntry(...) without the Python-level
    # __new__ that NamedTuple generates (some 40% cheaper), on the path every pod takes.
    # The values are in PodEntry's field order.
    if spec is None:
        return tuple.__new__(PodEntry, (pod.namespace, pod.name, EMPTY, None, 0, 0, 0, 0,
                                        None, 0, "podresources", "", memory))
    return tuple.__new__(PodEntry, (pod.namespace, pod.name, EMPTY, spec.budget_cpus, 0, 0,
                                    0, 0, None, 0, "spec", spec.uid, memory))


def plain_records(pods: Sequence[PodAlloc]) -> tuple[list[PodEntry], list[NodeSharedPod]]:
    """The entry and the one ``NodeSharedPod`` run (its containers, every one node_shared
    and not built as entries: see ``DistinctContainers``) of each of ``pods`` as a pod that
    reports nothing and has no spec would have them. Built by C-level iterators for every
    pod of a node at once, which costs less than telling most pods apart one by one; the
    reconciler then puts the records of pods with a spec (``spec_plain_records``) and of
    pods that report something in their places."""
    # tuple.__new__ in PodEntry's and NodeSharedPod's field order, without the Python-level
    # __new__ that NamedTuple generates; zip hands each tuple over as it is.
    new = tuple.__new__
    entries = list(map(new, repeat(PodEntry), zip(
        map(_NAMESPACE_OF, pods), map(_NAME_OF, pods), repeat(EMPTY), repeat(None), repeat(0),
        repeat(0), repeat(0), repeat(0), repeat(None), repeat(0), repeat("podresources"),
        repeat(""), repeat(()))))
    runs = list(map(new, repeat(NodeSharedPod), zip(
        map(_NAMESPACE_OF, pods), map(_NAME_OF, pods), map(_CONTAINERS_OF, pods),
        repeat(_EMPTY_NAMES))))
    return entries, runs


def spec_plain_records(pod: PodAlloc, spec: PodSpec) -> tuple[PodEntry, NodeSharedPod]:
    """``plain_records`` of a pod that reports nothing and has a spec."""
    return (_plain_entry(pod, spec, ()),
            tuple.__new__(NodeSharedPod, (pod[0], pod[1], pod[2], _sidecar_names(spec))))


def pod_entries(view: PodView, claim: Claim, memory: PodMemory,
                containers: list[ContainerRun]) -> PodEntry:
    """Adds the pod's container entries; returns its pod entry."""
    pod = view.alloc
    namespace, pod_name = pod.namespace, pod.name
    sidecars = _sidecar_names(view.spec) if view.spec is not None else _EMPTY_NAMES
    add, new, remainder = containers.append, tuple.__new__, claim.remainder
    for name, assignment, cpus, mem_assignment, mem_bytes in zip(
            map(_CONTAINER_NAME_OF, pod.containers), view.assignments, view.sets,
            memory.assignments, memory.sizes, strict=True):
        if assignment == "pod_shared":
            held = remainder
        elif assignment == "node_shared":
            held = EMPTY
        else:
            held = cpus
        add(new(ContainerEntry, (namespace, pod_name, name, name in sidecars, assignment,
                                 mem_assignment, held, mem_bytes)))
    if view.plain:
        return _plain_entry(pod, view.spec, memory.rows)
    return _pod_entry(view, claim, memory.rows)


def _pod_entry(view: PodView, claim: Claim, memory: tuple[MemoryRow, ...]) -> PodEntry:
    pod, spec = view.alloc, view.spec
    pod_exclusive = pod_shared = pod_idle = node_exclusive = 0
    # The estimates (docs/design.md#estimates): reclaimed for a pod with a block,
    # reclaimable for one without.
    reclaimed: int | None = None
    reclaimable: int | None = None
    if view.pod_level:
        pod_exclusive = len(claim.exclusive)
        if "pod_shared" in view.assignments:
            pod_shared = len(claim.remainder)
        else:
            pod_idle = len(claim.remainder)
        reclaimed = _legacy_cost(view) - len(view.block)
    else:
        # Without a block, the exclusive containers are node_exclusive (classify), and the
        # claim's exclusive CPUs are their sets joined.
        node_exclusive = len(claim.exclusive)
        reclaimable = reclaimable_cores(
            [len(s) for a, s in zip(view.assignments, view.sets, strict=True)
             if a == "node_exclusive"])
    # tuple.__new__ in PodEntry's field order, as in _plain_entry: a pod of its own is
    # built without NamedTuple's Python-level __new__ too.
    if spec is None:
        return tuple.__new__(PodEntry, (
            pod.namespace, pod.name, view.block, None, pod_exclusive, pod_shared, pod_idle,
            node_exclusive, reclaimed, reclaimable, "podresources", "", memory))
    return tuple.__new__(PodEntry, (
        pod.namespace, pod.name, view.block, spec.budget_cpus, pod_exclusive, pod_shared,
        pod_idle, node_exclusive, reclaimed, reclaimable, "spec", spec.uid, memory))


def _legacy_cost(view: PodView) -> int:
    """What the per-container model would have pinned for the pod's containers."""
    spec = view.spec
    if spec is None:  # every shared container counted as one core
        return sum([len(s) if a in EXCLUSIVE else 1
                    for a, s in zip(view.assignments, view.sets, strict=True)])
    return legacy_cost(
        (a in EXCLUSIVE, len(s), cs.resources if cs is not None else None)
        for a, s, cs in zip(view.assignments, view.sets,
                            [spec.container(c.name) for c in view.alloc.containers],
                            strict=True))

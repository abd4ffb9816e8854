"""Container classification by CPU (docs/design.md#classification): which containers of a
listed pod are exclusive or shared, at pod or node level, and what the pod's block is.

Classification reads what ``List`` reported; it decides nothing about ownership. It finds
two anomalies, both about the report itself: ids that are not online (``unknown_cpu``, also
for the node's allocatable and reserved lists) and the 1.36 reporting pattern
(``legacy_shared_report``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import NamedTuple

from reconciler.anomalies import Anomaly
from reconciler.kube import PodSpec
from reconciler.pools import Assignment
from reconciler.snapshot import NodeSnapshot, PodAlloc

EMPTY: frozenset[int] = frozenset()
_NO_ANOMALIES: tuple[Anomaly, ...] = ()


class PodView(NamedTuple):
    """The classification of one listed pod, before CPUs are handed to pools."""

    alloc: PodAlloc
    spec: PodSpec | None
    block: frozenset[int]  # B: the pod block (online ids only)
    pod_block: bool  # the pod reported its block itself
    legacy_pattern: bool  # the block is inferred from the 1.36 pattern
    assignments: Sequence[Assignment]  # one per container, in List order
    sets: Sequence[frozenset[int]]  # each container's own reported set, online ids only
    anomalies: Sequence[Anomaly]  # what classification found wrong with the report
    plain: bool = False  # no CPU reported at all: every container node_shared

    @property
    def pod_level(self) -> bool:
        """The pod has a block, reported or inferred: its CPUs are pod-level."""
        return self.pod_block or self.legacy_pattern


_NODE_SHARED: tuple[Assignment] = ("node_shared",)


@lru_cache(maxsize=64)
def all_node_shared(n: int) -> tuple[tuple[Assignment, ...], tuple[frozenset[int], ...]]:
    """The assignments and sets of a pod of ``n`` containers that reports no CPU (the common
    case on a busy node); shared by every such pod, so immutable."""
    return _NODE_SHARED * n, (EMPTY,) * n


def cpu_less_view(pod: PodAlloc, spec: PodSpec | None) -> PodView:
    """The view of a pod that reports no CPU at all: every container node_shared."""
    shared, nothing = all_node_shared(len(pod.containers))
    return PodView(pod, spec, EMPTY, False, False, shared, nothing, _NO_ANOMALIES, plain=True)


def classify(pod: PodAlloc, spec: PodSpec | None, online: frozenset[int]) -> PodView:
    """The view of a pod that reports CPUs (at pod or container level)."""
    found: list[Anomaly] = []
    block = _known(pod.cpu_ids, online, pod, None, found)
    before = len(found)
    sets = [_known(c.cpu_ids, online, pod, c.name, found) for c in pod.containers]
    # What each container reported, unknown ids included: its online set, unless some ids
    # were not online (nearly never), which saves a set per container.
    raw = sets if len(found) == before else [frozenset(c.cpu_ids) for c in pod.containers]
    # The views below are built by tuple.__new__, in PodView's field order (plain last):
    # without NamedTuple's Python-level __new__, as for every pod that reports CPUs.
    if pod.cpu_ids:
        assignments: list[Assignment] = ["pod_exclusive" if r else "pod_shared" for r in raw]
        return tuple.__new__(PodView, (pod, spec, block, True, False, assignments, sets, found,
                                       False))
    shared_idx = _legacy_shared(raw, spec, pod)
    if shared_idx:
        assignments = ["pod_shared" if (i in shared_idx or not r) else "pod_exclusive"
                       for i, r in enumerate(raw)]
        found.append(Anomaly("legacy_shared_report", pod.namespace, pod.name, None,
                             "containers report the pod shared pool as their own CPUs "
                             "(1.36 reporting); counted once as pod_shared"))
        return tuple.__new__(PodView, (pod, spec, frozenset().union(*sets), False, True,
                                       assignments, sets, found, False))
    assignments = ["node_exclusive" if r else "node_shared" for r in raw]
    return tuple.__new__(PodView, (pod, spec, EMPTY, False, False, assignments, sets, found,
                                   False))


def _known(ids: Iterable[int], online: frozenset[int], pod: PodAlloc, container: str | None,
           found: list[Anomaly]) -> frozenset[int]:
    """The online subset of reported ids; the rest raise ``unknown_cpu`` once."""
    if not ids:
        return EMPTY
    reported = frozenset(ids)
    if reported <= online:  # nearly always: no second set built
        return reported
    bad = sorted(reported - online)
    shown = ",".join(str(i) for i in bad[:16]) + (",…" if len(bad) > 16 else "")
    found.append(Anomaly("unknown_cpu", pod.namespace, pod.name, container,
                         f"reported CPU ids not online on this node: {shown}"))
    return reported & online


def node_unknown_cpus(snapshot: NodeSnapshot, online: frozenset[int]) -> list[Anomaly]:
    """``unknown_cpu`` for the node's own CPU lists, with no pod named: allocatable ids and
    ``reservedSystemCPUs`` that are not online. The kubelet takes both from the CPUs it
    found at start-up, so an id past any CPU (or negative) is a broken answer; one CPU
    taken offline since is the other way to get here."""
    found = []
    lists = (("allocatable CPU ids", snapshot.allocatable and snapshot.allocatable.cpu_ids),
             ("reservedSystemCPUs", snapshot.kubelet_config
              and snapshot.kubelet_config.reserved_system_cpus))
    for what, ids in lists:
        bad = sorted(frozenset(ids or ()) - online)
        if bad:
            shown = ",".join(str(i) for i in bad[:16]) + (",…" if len(bad) > 16 else "")
            found.append(Anomaly("unknown_cpu", None, None, None,
                                 f"{what} not online on this node: {shown}"))
    return found


def _legacy_shared(raw: list[frozenset[int]], spec: PodSpec | None,
                   pod: PodAlloc) -> set[int]:
    """Indexes of containers that report a shared set (the 1.36 pattern), or none."""
    nonempty = [(i, s) for i, s in enumerate(raw) if s]
    budget = spec is not None and spec.has_pod_cpu_budget
    # A container the static policy gives no CPUs of its own that still reports some holds
    # its pod's shared pool: alone on the pool, nothing else gives 1.36 away (seen on the
    # real 1.36 kubelet, docs/real-node.md#findings).
    pooled = _ineligible(nonempty, spec, pod) if budget and spec is not None else set()
    if len(nonempty) < 2:
        return pooled
    identical: dict[frozenset[int], list[int]] = defaultdict(list)
    for i, s in nonempty:
        identical[s].append(i)
    shared = {i for group in identical.values() if len(group) >= 2 for i in group}
    if budget:
        shared |= _overlapping(nonempty) | pooled
    return shared


def _ineligible(nonempty: list[tuple[int, frozenset[int]]], spec: PodSpec,
                pod: PodAlloc) -> set[int]:
    """Indexes of reporting containers that the pod's spec makes ineligible for exclusive
    CPUs."""
    found = set()
    for i, _ in nonempty:
        c = spec.container(pod.containers[i].name)
        if c is not None and not spec.eligible(c):
            found.add(i)
    return found


def _overlapping(nonempty: list[tuple[int, frozenset[int]]]) -> set[int]:
    """Indexes of containers whose sets overlap another container's."""
    found: set[int] = set()
    for a, (i, si) in enumerate(nonempty):
        for j, sj in nonempty[a + 1:]:
            if si & sj:
                found.update((i, j))
    return found

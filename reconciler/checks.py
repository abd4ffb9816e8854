"""Checks of one classified pod against its own block, the node's reserved CPUs, the NUMA
layout and its pod spec (docs/design.md#anomalies). They find anomalies and change nothing:
ownership and pools are decided elsewhere, whatever the checks find."""

from __future__ import annotations

from collections.abc import Sequence

from reconciler.anomalies import Anomaly
from reconciler.classify import PodView
from reconciler.cpuset import format_cpuset
from reconciler.kube import ContainerSpec, PodSpec
from reconciler.node_facts import NodeFacts
from reconciler.ownership import Claim
from reconciler.pools import EXCLUSIVE, Assignment
from reconciler.snapshot import PodAlloc


def pod_checks(view: PodView, claim: Claim, facts: NodeFacts) -> list[Anomaly]:
    found: list[Anomaly] = []
    if not view.plain:  # a pod that reports no CPU holds none to check
        if view.pod_block:
            found += _outside_pod(view)
        if facts.reserved:
            found += _reserved_assigned(view, claim, facts.reserved)
        if facts.single_numa:
            found += _numa_misaligned(view, facts.numa_of)
    spec = view.spec
    if spec is not None:
        if view.pod_block and view.block:
            found += _budget_mismatch(view, spec)
        if facts.static_cpu:
            found += missing_exclusive(view.alloc, spec, view.assignments,
                                       facts.pod_level_managers)
    return found


def _outside_pod(view: PodView) -> list[Anomaly]:
    """``container_outside_pod``: a pod_exclusive container's CPUs leave the pod block
    (of a pod that reported one)."""
    pod, block = view.alloc, view.block
    return [Anomaly("container_outside_pod", pod.namespace, pod.name, c.name,
                    f"exclusive CPUs {format_cpuset(cpus - block)} are outside the "
                    f"pod block {format_cpuset(block)}")
            for c, assignment, cpus in zip(pod.containers, view.assignments, view.sets,
                                           strict=True)
            if assignment == "pod_exclusive" and not cpus <= block]


def _reserved_assigned(view: PodView, claim: Claim, reserved: frozenset[int]
                       ) -> list[Anomaly]:
    if reserved.isdisjoint(claim.exclusive) and reserved.isdisjoint(view.block):
        return []  # nearly always: no set built
    assigned_reserved = (claim.exclusive | view.block) & reserved
    pod = view.alloc
    return [Anomaly("reserved_cpu_assigned", pod.namespace, pod.name, None,
                    f"reserved CPUs {format_cpuset(assigned_reserved)} are allocated to "
                    "the pod")]


def _numa_misaligned(view: PodView, numa_of: dict[int, int]) -> list[Anomaly]:
    """Under single-numa-node: a pod block or exclusive set that spans NUMA nodes."""
    pod = view.alloc
    subjects: list[tuple[str | None, frozenset[int]]] = []
    if view.pod_block:
        subjects.append((None, view.block))
    subjects += [(c.name, s) for c, a, s in zip(pod.containers, view.assignments, view.sets,
                                                strict=True)
                 if a in EXCLUSIVE]
    found: list[Anomaly] = []
    for container, cpus in subjects:
        nodes = {numa_of[cpu] for cpu in cpus if cpu in numa_of}
        if len(nodes) > 1:
            found.append(Anomaly(
                "numa_misaligned", pod.namespace, pod.name, container,
                f"CPUs {format_cpuset(cpus)} span NUMA nodes "
                f"{','.join(str(n) for n in sorted(nodes))} under single-numa-node"))
    return found


def _budget_mismatch(view: PodView, spec: PodSpec) -> list[Anomaly]:
    """A reported, non-empty pod block whose size is not the integer pod CPU budget."""
    budget = spec.budget_cpus
    if budget == len(view.block):
        return []
    want = "no integer pod CPU budget" if budget is None else f"budget {budget}"
    pod = view.alloc
    return [Anomaly("budget_mismatch", pod.namespace, pod.name, None,
                    f"pod block holds {len(view.block)} CPUs but the spec has {want}")]


def missing_exclusive(pod: PodAlloc, spec: PodSpec, assignments: Sequence[Assignment],
                      pod_level_managers: bool) -> list[Anomaly]:
    """Under the static policy: eligible containers (docs/design.md#allocator) that
    got no exclusive CPU."""
    if not pod_level_managers and spec.resources is not None and spec.resources.is_set:
        return []  # the CPU manager skips a pod with pod-level resources without the gate
    if spec.has_pod_cpu_budget and spec.budget_cpus is None:
        return []  # a fractional pod budget gets no exclusive CPUs at all
    if not spec.guaranteed:
        return []  # only a Guaranteed pod's containers are eligible
    # The first spec container of a name, as spec.container() finds it: looked up once per
    # pod rather than per container (every pod of a node with specs comes here).
    by_name: dict[str, ContainerSpec] = {}
    for listed in spec.long_running:
        by_name.setdefault(listed.name, listed)
    found: list[Anomaly] = []
    for c, assignment in zip(pod.containers, assignments, strict=True):
        cspec = by_name.get(c.name)
        if cspec is not None and assignment not in EXCLUSIVE and spec.eligible(cspec):
            found.append(Anomaly(
                "missing_exclusive", pod.namespace, pod.name, c.name,
                f"eligible for {cspec.resources.integer_cpus} exclusive CPUs under "
                "the static policy but reported none"))
    return found

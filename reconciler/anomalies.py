"""Anomalies: the allocation errors the exporter can see (docs/design.md#anomalies), and
the one channel the reconciler reports them through, which fixes their order in a ledger.

Anomalies never crash anything and never make a CPU count twice: a check that finds one
records it here and carries on.
"""

from __future__ import annotations

from collections.abc import Iterable
from operator import itemgetter
from typing import Any, Literal, NamedTuple, get_args

AnomalyKind = Literal[
    "exclusive_overlap", "container_outside_pod", "unknown_cpu", "reserved_cpu_assigned",
    "empty_pod_shared_pool", "legacy_shared_report", "budget_mismatch", "missing_exclusive",
    "numa_misaligned", "memory_over_budget", "full_pcpus_violation", "numa_policy_violation",
    "uncore_split", "cpuset_drift", "device_numa_misaligned",
]

# The kinds this version checks. Each is exported as a series of its own, zero when absent,
# so a kind joins this tuple together with the check that raises it.
ANOMALY_KINDS: tuple[AnomalyKind, ...] = (
    "exclusive_overlap", "container_outside_pod", "unknown_cpu", "reserved_cpu_assigned",
    "empty_pod_shared_pool", "legacy_shared_report", "budget_mismatch", "missing_exclusive",
    "numa_misaligned", "memory_over_budget",
    "full_pcpus_violation", "numa_policy_violation", "uncore_split", "cpuset_drift",
    "device_numa_misaligned",
)

# Kinds that are counted like every kind (podres_anomalies{kind}, the ledger's list) but are
# not allocation errors: nothing is alerted on them and tables list them apart
# (docs/design.md#anomalies). The 1.36 reporting pattern is how an alpha kubelet reports a
# correct pod-level allocation.
INFORMATIONAL_KINDS: frozenset[AnomalyKind] = frozenset({"legacy_shared_report"})


class Anomaly(NamedTuple):
    kind: AnomalyKind
    namespace: str | None
    pod: str | None
    container: str | None
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "namespace": self.namespace, "pod": self.pod,
                "container": self.container, "detail": self.detail}


# The order of a ledger's anomalies. First what is wrong with the report itself (ids that
# are not online, the 1.36 pattern), for every pod in List order; then pod by pod, in List
# order, what deciding CPU ownership found, then placement against the topology, then
# checks against the pod spec, then memory, then what the kernel enforces. Anomalies of
# one kind for one pod keep the order their check found them in.
REPORT_ORDER: tuple[AnomalyKind, ...] = ("unknown_cpu", "legacy_shared_report")
POD_ORDER: tuple[AnomalyKind, ...] = (
    "container_outside_pod", "empty_pod_shared_pool", "exclusive_overlap",
    "reserved_cpu_assigned",
    "numa_misaligned", "numa_policy_violation", "full_pcpus_violation", "uncore_split",
    "device_numa_misaligned",
    "budget_mismatch", "missing_exclusive",
    "memory_over_budget",
    "cpuset_drift",
)
_STAGE = {kind: (0 if kind in REPORT_ORDER else 1) for kind in get_args(AnomalyKind)}
_RANK = {kind: rank for rank, kind in enumerate(REPORT_ORDER + POD_ORDER)}


class AnomalyLog:
    """The one channel for a node's anomalies: checks add what they find, in any order, with
    the List index of the pod concerned; :meth:`ordered` gives them in ledger order."""

    __slots__ = ("_found",)

    def __init__(self) -> None:
        self._found: list[tuple[tuple[int, int, int], Anomaly]] = []

    def extend(self, pod_index: int, anomalies: Iterable[Anomaly]) -> None:
        add = self._found.append
        for a in anomalies:
            add(((_STAGE[a.kind], pod_index, _RANK[a.kind]), a))

    def ordered(self) -> tuple[Anomaly, ...]:
        # sorted() is stable: equal keys keep the order their check found them in.
        return tuple(a for _, a in sorted(self._found, key=itemgetter(0)))

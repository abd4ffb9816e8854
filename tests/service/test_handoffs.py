"""The hand-offs after each reading (exporter.handoffs): the history writer gets the ledger
when it changed or a node summary is due, and never otherwise; the kernel's anomalies join
the ledger, and what it enforces is dropped while the cgroup source reads nothing."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any, cast

from exporter.assemble import assemble
from exporter.handoffs import HistoryHandoff, KernelHandoff
from reconciler.anomalies import Anomaly
from reconciler.enforcement import EnforcedCpusets
from reconciler.reconcile import reconcile


@dataclass
class Sink:
    """Records what the handoff submits: the history writer's interface only (the writer
    itself is tested in tests/history)."""

    summary_interval: float = 300.0
    pending_writes: int = 2
    dropped_writes_total: int = 1
    submitted: list[tuple[Any, datetime, Any]] = field(default_factory=list)

    def submit(self, ledger: Any, at: datetime, placement: Any = None) -> None:
        self.submitted.append((ledger, at, placement))


def test_history_gets_a_changed_ledger_or_a_due_summary_only() -> None:
    sink = Sink()
    handoff = HistoryHandoff(sink)
    ledger = reconcile(assemble(()))
    handoff.record(ledger, False, 1000.0)  # the first is always due
    handoff.record(ledger, False, 1100.0)
    asked: list[float] = []

    def placement() -> Any:
        asked.append(1200.0)
        return "p"

    handoff.record(ledger, True, 1200.0, placement=placement)
    handoff.record(ledger, False, 1400.0)  # 200 s after the last: not due
    handoff.record(ledger, False, 1500.0)  # 300 s: due
    assert [(at.timestamp(), placement) for _, at, placement in sink.submitted] == [
        (1000.0, None), (1200.0, "p"), (1500.0, None)]
    assert asked == [1200.0]  # made only for what was handed on
    assert sink.submitted[0][1].tzinfo is UTC
    assert handoff.counts() == (2, 1)


def test_the_kernels_anomalies_join_the_ledger() -> None:
    ledger = reconcile(assemble(()))
    drift = Anomaly(kind="cpuset_drift", namespace="ns", pod="p", container="c",
                    detail="cpuset 0-3, expected 2")
    enforced = EnforcedCpusets({("ns", "p", "c"): frozenset({0, 1, 2, 3})})
    # What joined reads of a KernelReport (whose anomalies derive from its drifts).
    report = cast(Any, SimpleNamespace(anomalies=(drift,), enforced=enforced, cgroup_off=None))
    joined, seen = KernelHandoff.joined(ledger, report)
    assert joined.anomalies == (*ledger.anomalies, drift) and seen is enforced
    off = cast(Any, SimpleNamespace(anomalies=(), enforced=enforced,
                                    cgroup_off="no cgroup v2 mount"))
    assert KernelHandoff.joined(ledger, off)[1] is None

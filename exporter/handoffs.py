"""What the poll loop hands on after each reading (docs/design.md#data-path): the kernel
sources (docs/kernel.md), read in a worker thread after the ledger, whose anomalies join
it and whose counters are rendered apart; and the history writer, given the ledger when it
changed or a node summary is due."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Coroutine
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial
from typing import Any, Protocol

from exporter.kernel import KernelObserver, KernelReport
from exporter.metrics.catalogue import KernelFacts
from exporter.metrics.exposition import render_kernel
from exporter.rawnode import Body, unpacked
from exporter.reader import Reading
from exporter.sources.cgroup import pod_refs_from_body
from reconciler.allocator.live import NodeState
from reconciler.enforcement import EnforcedCpusets
from reconciler.ledger import Ledger


class HistorySink(Protocol):
    """What the exporter needs of a history writer (exporter.history.HistoryWriter)."""

    @property
    def pending_writes(self) -> int: ...

    @property
    def dropped_writes_total(self) -> int: ...

    summary_interval: float

    def submit(self, ledger: Ledger, at: datetime, placement: NodeState | None = None
               ) -> None: ...


class HistoryHandoff:
    """Hands the ledger to the history writer when it changed, or when a node summary is
    due; an unchanged node then costs the writer nothing on most polls."""

    def __init__(self, sink: HistorySink) -> None:
        self.sink = sink
        self._at: float | None = None

    def counts(self) -> tuple[int, int]:
        """The writer's pending and dropped writes, for the self-metrics."""
        return self.sink.pending_writes, self.sink.dropped_writes_total

    def record(self, ledger: Ledger, changed: bool, at: float,
               placement: Callable[[], NodeState | None] | None = None) -> None:
        """``placement`` gives the node's placement state, made only when the ledger is
        handed on."""
        due = self._at is None or at - self._at >= self.sink.summary_interval
        if changed or due:
            self._at = at
            self.sink.submit(ledger, datetime.fromtimestamp(at, UTC),
                             None if placement is None else placement())


class KernelHandoff:
    """The kernel observer run after each reading, in a thread: a thousand pods are some
    five thousand file reads, which must not hold up scrapes."""

    def __init__(self, kernel: KernelObserver,
                 refresh_pods: Callable[[], Coroutine[Any, Any, Body | None]]) -> None:
        self.kernel = kernel
        self._refresh_pods = refresh_pods
        self._bodies = _ParsedBodies()

    @property
    def sources(self) -> frozenset[str]:
        return self.kernel.sources

    @property
    def reads_proc_stat(self) -> bool:
        return bool(self.kernel.options.proc_root)

    async def observe(self, reading: Reading) -> KernelReport:
        bodies, raw, kernel = self._bodies, reading.raw, self.kernel
        loop = asyncio.get_running_loop()

        def refresh() -> Any:
            # A container's cgroup is gone (docs/kernel.md#restarted-containers): /pods
            # afresh, read on the loop while this thread waits for it.
            body = asyncio.run_coroutine_threadsafe(self._refresh_pods(), loop).result()
            return None if body is None else bodies.parsed("pods", body, pod_refs_from_body)

        def observe() -> KernelReport:
            # Only the pods' container references are kept, never the parsed /pods tree
            # (tens of MiB on a busy node), and the decode too stays off the loop; taken
            # only when the cgroup source has cgroups to match them to (some 1 MiB for
            # 1000 pods, held until /pods changes).
            pods = None if raw.pods is None else partial(bodies.parsed, "pods", raw.pods,
                                                         pod_refs_from_body)
            configz = bodies.parsed("configz", raw.configz)
            return kernel.poll(reading.ledger, pods, configz, time.monotonic(), refresh)

        return await asyncio.to_thread(observe)

    @staticmethod
    def joined(ledger: Ledger, report: KernelReport
               ) -> tuple[Ledger, EnforcedCpusets | None]:
        """The ledger with the kernel's anomalies, and what the kernel enforces (None: the
        cgroup source reads nothing, and the ledger's JSON is exactly its own)."""
        return (replace(ledger, anomalies=ledger.anomalies + report.anomalies),
                None if report.cgroup_off else report.enforced)

    def render(self, report: KernelReport, pods_series_left: int | None
               ) -> tuple[bytes, int]:
        """The kernel families of ``report``, and how many per-pod series the cap left
        out."""
        usage = report.usage
        kernel = self.kernel
        cgroup_on = kernel.cgroup is not None
        facts = KernelFacts(
            None if not kernel.options.proc_root
            else usage.pool_seconds() if usage is not None else {},
            usage.pod_seconds() if usage is not None else {},
            # Drift and usage are absent, not 0, while the cgroup source reads nothing.
            report.drift_counts if cgroup_on and report.cgroup_off is None else None,
            off_reasons={"cgroup": report.cgroup_off_reason}
            if cgroup_on and report.cgroup_off_reason is not None else {},
            container_usage=report.container_usage if cgroup_on else None,
            pod_usage=report.pod_usage if cgroup_on else None)
        rendered = render_kernel(facts, pods_series_left=pods_series_left)
        return rendered.text.encode("utf-8"), rendered.dropped


def _json_or_none(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return None


class _ParsedBodies:
    """The kubelet's JSON bodies the kernel observer reads, parsed again only when their
    bytes change: the observer skips matching ``/pods`` to cgroups while it gets the same
    object."""

    def __init__(self) -> None:
        self._cache: dict[str, tuple[Body, Any]] = {}

    def parsed(self, name: str, body: Body | None,
               decode: Callable[[bytes], Any] = _json_or_none) -> Any:
        """The body decoded (``None`` when malformed: the poll reports that already), by a
        ``decode`` that keeps only what is worth holding on to."""
        if body is None:
            return None
        cached = self._cache.get(name)
        if cached is not None and cached[0] == body:
            return cached[1]
        value = decode(unpacked(body))
        self._cache[name] = (body, value)
        return value

"""The daemon's poll loop (docs/design.md#data-path).

Data flows one way: ``NodeReader`` (sources → raw node → snapshot → reconcile) →
``PublishedState`` (the ledger, its pre-rendered exposition and JSON, the exporter's
health: what scrapes and the API read) → the hand-offs (``exporter.handoffs``): the kernel
sources, read after each poll's ledger in a worker thread, whose ``cpuset_drift``
anomalies join the ledger's and whose counters are rendered apart; and the history writer.
``Exporter`` runs the loop and wires the three together; the web layer reads through it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from exporter.handoffs import HistoryHandoff, HistorySink, KernelHandoff
from exporter.kernel import KernelObserver
from exporter.metrics.compression import Encoding
from exporter.published import SOURCE_OPERATIONS, Published, PublishedState, cpumap
from exporter.reader import NodeReader
from exporter.runtime import release_free_memory

log = logging.getLogger("podres.exporter")


@dataclass(frozen=True)
class ServiceOptions:
    poll_interval: float = 15.0
    staleness: float = 60.0
    pods_collector: bool = True
    pods_max_series: int = 50_000


class Exporter:
    """The poll loop: reads the node, publishes what changed, hands on to the kernel
    observer and the history writer. ``state`` is what scrapes and the API read."""

    def __init__(self, reader: NodeReader, options: ServiceOptions | None = None, *,
                 history: HistorySink | None = None, kernel: KernelObserver | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.reader = reader
        self.options = options or ServiceOptions()
        self.kernel = None if kernel is None else KernelHandoff(kernel, reader.refresh_pods)
        self.history = None if history is None else HistoryHandoff(history)
        self.state = PublishedState(
            lambda: self.sources, staleness=self.options.staleness, clock=clock,
            pods_max_series=self.options.pods_max_series if self.options.pods_collector
            else None)
        if self.history is not None:
            self.state.history_pending = self.history.counts
        if self.kernel is not None and self.kernel.reads_proc_stat:
            self.state.cpu_busy = {}
        self._wake = asyncio.Event()

    @property
    def sources(self) -> frozenset[str]:
        """The configured sources: the reader's and the kernel's."""
        if self.kernel is None:
            return self.reader.sources
        return self.reader.sources | self.kernel.sources

    def wake(self) -> None:
        """Poll now (SIGHUP)."""
        self._wake.set()

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.poll_once()
            except Exception:
                # A bug must not take the node agent down: count it, log it, poll again.
                self.state.poll_failed()
                log.exception("poll failed unexpectedly")
            self._wake.clear()
            waiters = {asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self._wake.wait())}
            _, pending = await asyncio.wait(waiters, timeout=self.options.poll_interval,
                                            return_when=asyncio.FIRST_COMPLETED)
            for task in waiters:
                task.cancel()
            for task in pending:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def poll_once(self) -> bool:
        state = self.state
        started = time.perf_counter()
        poll = await self.reader.poll()
        reading = poll.reading
        report = None
        if reading is not None and self.kernel is not None:
            report = await self.kernel.observe(reading)
        state.last_duration = time.perf_counter() - started
        errors, observed = poll.errors, poll.observed
        if report is not None and report.errors:
            errors, observed = {**errors, **report.errors}, observed | set(report.errors)
        state.account_errors(errors, observed, () if report is None or
                             report.cgroup_off_reason is None else ("cgroup",))
        if reading is None:
            state.up = False
            return False
        ledger, enforced = reading.ledger, None
        changed = reading.changed or state.published is None
        if report is not None:
            ledger, enforced = KernelHandoff.joined(ledger, report)
            changed = changed or state.changed(ledger, enforced)
        if changed:
            await state.publish(ledger, enforced)
        if self.kernel is not None and report is not None:
            published = state.published
            state.kernel_exposition, dropped = self.kernel.render(
                report, None if published is None else published.pods_series_left)
            state.count_dropped(dropped)
            if state.cpu_busy is not None:
                state.cpu_busy = report.busy
        # Up only once this poll's ledger is published: the render above yields to the loop,
        # and a scrape in between must not pair podres_up 1 with the previous ledger.
        state.succeeded()
        if self.history is not None and state.last_success is not None:
            self.history.record(ledger, changed, state.last_success, reading.placement_of)
        if reading.changed:
            # A recompute freed the previous node's worth of objects: give the pages back
            # rather than carry the peak for the life of the process.
            release_free_memory()
        return True

    # -- what the web layer reads (PublishedState's) --------------------------------------

    @property
    def ready(self) -> bool:
        return self.state.ready

    @property
    def last_success(self) -> float | None:
        return self.state.last_success

    def current(self) -> Published | None:
        return self.state.current()

    def cpuload(self) -> dict[str, Any] | None:
        return self.state.cpuload()

    def metrics_body(self, encoding: Encoding = "identity") -> tuple[bytes, bytes]:
        return self.state.metrics_body(encoding)


__all__ = ["SOURCE_OPERATIONS", "Exporter", "HistorySink", "Published", "ServiceOptions",
           "cpumap"]

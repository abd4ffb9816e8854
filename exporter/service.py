"""The daemon's core: the poll loop and the state that scrapes and API calls read.

Data flows one way: ``NodeReader`` (sources → raw node → snapshot → reconcile) →
``Exporter`` state (the ledger, its pre-rendered exposition and JSON) → web handlers and
the history writer. A scrape never waits on a source: it reads bytes rendered when the
ledger last changed, plus a few live self-metrics. The kernel sources (docs/kernel.md), when
configured, are read after each poll's ledger in a worker thread: their ``cpuset_drift``
anomalies join the ledger's, and their counters are rendered apart, after every poll.

Source health (docs/design.md#metrics): every configured source is read in every poll
(the kubelet's ``/metrics`` every read period, its last outcome standing in between), so
``podres_source_up`` is 1 or 0 for each after every poll. It is absent before the first
poll and after a poll that failed inside the exporter, when no source outcome is known.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Protocol

from exporter import __version__
from exporter.kernel import KernelObserver, KernelReport, add_enforced
from exporter.metrics.catalogue import KernelFacts, SelfState
from exporter.metrics.compression import Encoding, GzipPrefix, gzip_bytes
from exporter.metrics.exposition import node_exposition, render_kernel, render_self
from exporter.reader import NodeReader, Reading
from exporter.runtime import release_free_memory
from exporter.sources import cgroup, checkpoint, kubelet, podresources, procstat, topology
from exporter.sources.cgroup import pod_refs_from_body
from reconciler.allocator.live import NodeState
from reconciler.enforcement import EnforcedCpusets
from reconciler.ledger import Ledger

log = logging.getLogger("podres.exporter")

# What each source can fail at, from the sources' own declarations, and the poll loop's own
# failure: published at 0 from the first scrape, so that increase() counts a first failure.
SOURCE_OPERATIONS: dict[str, tuple[str, ...]] = {
    **podresources.OPERATIONS, **kubelet.OPERATIONS, **topology.OPERATIONS,
    **checkpoint.OPERATIONS, **cgroup.OPERATIONS, **procstat.OPERATIONS,
    "exporter": ("poll",)}


class HistorySink(Protocol):
    """What the exporter needs of a history writer (exporter.history.HistoryWriter)."""

    @property
    def pending_writes(self) -> int: ...

    @property
    def dropped_writes_total(self) -> int: ...

    summary_interval: float

    def submit(self, ledger: Ledger, at: datetime, placement: NodeState | None = None
               ) -> None: ...


@dataclass(frozen=True)
class ServiceOptions:
    poll_interval: float = 15.0
    staleness: float = 60.0
    pods_collector: bool = True
    pods_max_series: int = 50_000


@dataclass(frozen=True)
class Published:
    """Everything derived from one ledger, each form made at most once: the exposition when
    the ledger changes; the JSON bodies and the gzip forms on first request, so that a
    ledger nobody asks for as JSON costs nothing to publish."""

    ledger: Ledger
    exposition: bytes
    # What the kernel enforces (docs/kernel.md); None: the cgroup source is off, and the
    # JSON bodies are exactly the ledger's.
    enforced: EnforcedCpusets | None = None
    pods_series_left: int | None = None  # of the per-pod cap, for the kernel's pod series

    @functools.cached_property
    def exposition_gzip(self) -> GzipPrefix:
        return GzipPrefix(self.exposition)

    @functools.cached_property
    def ledger_json(self) -> bytes:
        body = self.ledger.to_json()
        if self.enforced is not None:
            add_enforced(body, self.enforced)
        return json.dumps(body, ensure_ascii=False).encode("utf-8")

    @functools.cached_property
    def cpumap_json(self) -> bytes:
        return json.dumps(cpumap(self.ledger, self.enforced),
                          ensure_ascii=False).encode("utf-8")

    @functools.cached_property
    def _ledger_json_gzip(self) -> bytes:
        return gzip_bytes(self.ledger_json)

    @functools.cached_property
    def _cpumap_json_gzip(self) -> bytes:
        return gzip_bytes(self.cpumap_json)

    def ledger_body(self, encoding: Encoding) -> bytes:
        return self._ledger_json_gzip if encoding == "gzip" else self.ledger_json

    def cpumap_body(self, encoding: Encoding) -> bytes:
        return self._cpumap_json_gzip if encoding == "gzip" else self.cpumap_json


class Exporter:
    def __init__(self, reader: NodeReader, options: ServiceOptions | None = None, *,
                 history: HistorySink | None = None, kernel: KernelObserver | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.reader = reader
        self.kernel = kernel
        self.kernel_exposition = b""  # the kernel families, rendered after every poll
        self.cpu_busy: Mapping[int, float] = {}  # each CPU's busy share of the last poll
        self._kernel_bodies = _ParsedBodies()
        self.options = options or ServiceOptions()
        self.history = history
        self.clock = clock
        self.published: Published | None = None
        self.up = False
        self.last_success: float | None = None
        self.last_duration = 0.0
        self.errors_total: Counter[tuple[str, str]] = Counter()
        self.source_up: dict[str, bool] = {}
        self.anomalies_observed: Counter[str] = Counter()
        self.pods_dropped_total = 0
        self._seen_anomalies: set[tuple[Any, ...]] = set()
        self._logged_errors: dict[tuple[str, str], str] = {}
        self._wake = asyncio.Event()
        self._history_at: float | None = None
        # The last scrape body per encoding, reused while neither the ledger nor the
        # self-metrics changed: concatenating a ~0.5 MB exposition on every scrape cost ~30%
        # of scrape latency.
        self._bodies: dict[Encoding, tuple[Published | None, bytes, SelfState, bytes]] = {}

    # -- polling ------------------------------------------------------------------------

    def wake(self) -> None:
        """Poll now (SIGHUP)."""
        self._wake.set()

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.poll_once()
            except Exception:
                # A bug must not take the node agent down: count it, log it, poll again.
                self.up = False
                self.source_up = {}  # no source outcome is known from this poll
                self.errors_total[("exporter", "poll")] += 1
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

    @property
    def sources(self) -> frozenset[str]:
        """The configured sources: the reader's and the kernel's."""
        if self.kernel is None:
            return self.reader.sources
        return self.reader.sources | self.kernel.sources

    async def poll_once(self) -> bool:
        started = time.perf_counter()
        poll = await self.reader.poll()
        reading = poll.reading
        report = None
        if reading is not None and self.kernel is not None:
            report = await self._observe_kernel(self.kernel, reading)
        self.last_duration = time.perf_counter() - started
        errors, observed = poll.errors, poll.observed
        if report is not None and report.errors:
            errors, observed = {**errors, **report.errors}, observed | set(report.errors)
        self._account_errors(errors, observed, () if report is None or
                             report.cgroup_off_reason is None else ("cgroup",))
        if reading is None:
            self.up = False
            return False
        ledger, changed = reading.ledger, reading.changed or self.published is None
        if report is not None:
            ledger = replace(ledger, anomalies=ledger.anomalies + report.anomalies)
            changed = changed or self._kernel_changed(ledger, report)
        if changed:
            await self._publish(ledger, None if report is None or report.cgroup_off
                          else report.enforced)
        if report is not None:
            self._publish_kernel(report)
        # Up only once this poll's ledger is published: the render above yields to the loop,
        # and a scrape in between must not pair podres_up 1 with the previous ledger.
        self.up = True
        self.last_success = self.clock()
        self._record_history(ledger, changed, reading.placement)
        if reading.changed:
            # A recompute freed the previous node's worth of objects: give the pages back
            # rather than carry the peak for the life of the process.
            release_free_memory()
        return True

    async def _observe_kernel(self, kernel: KernelObserver, reading: Reading) -> KernelReport:
        """The kernel sources once, in a thread: a thousand pods are some five thousand
        file reads, which must not hold up scrapes."""
        bodies, raw = self._kernel_bodies, reading.raw

        loop = asyncio.get_running_loop()

        def refresh() -> Any:
            # A container's cgroup is gone (docs/kernel.md#restarted-containers): /pods
            # afresh, read on the loop while this thread waits for it.
            body = asyncio.run_coroutine_threadsafe(self.reader.refresh_pods(), loop).result()
            return None if body is None else bodies.parsed("pods", body, pod_refs_from_body)

        def observe() -> KernelReport:
            # Only the pods' container references are kept, never the parsed /pods tree
            # (tens of MiB on a busy node), and the decode too stays off the loop.
            pods = bodies.parsed("pods", raw.pods, pod_refs_from_body)
            configz = bodies.parsed("configz", raw.configz)
            return kernel.poll(reading.ledger, pods, configz, time.monotonic(), refresh)

        return await asyncio.to_thread(observe)

    def _kernel_changed(self, ledger: Ledger, report: KernelReport) -> bool:
        """Whether the kernel changed what the ledger's forms show: its anomalies or the
        enforced sets (usage alone does not: it is rendered apart)."""
        published = self.published
        if published is None:
            return True
        enforced = None if report.cgroup_off else report.enforced
        return (ledger.anomalies != published.ledger.anomalies
                or enforced != published.enforced)

    def _publish_kernel(self, report: KernelReport) -> None:
        usage = report.usage
        kernel = self.kernel
        cgroup_on = kernel is not None and kernel.cgroup is not None
        facts = KernelFacts(
            None if kernel is None or not kernel.options.proc_root
            else usage.pool_seconds() if usage is not None else {},
            usage.pod_seconds() if usage is not None else {},
            # Drift and usage are absent, not 0, while the cgroup source reads nothing.
            report.drift_counts if cgroup_on and report.cgroup_off is None else None,
            off_reasons={"cgroup": report.cgroup_off_reason}
            if cgroup_on and report.cgroup_off_reason is not None else {},
            container_usage=report.container_usage if cgroup_on else None,
            pod_usage=report.pod_usage if cgroup_on else None)
        published = self.published
        rendered = render_kernel(facts, pods_series_left=None if published is None
                                 else published.pods_series_left)
        self.kernel_exposition = rendered.text.encode("utf-8")
        self.cpu_busy = report.busy
        if rendered.dropped:
            self.pods_dropped_total += rendered.dropped

    def _record_history(self, ledger: Ledger, changed: bool,
                        placement: NodeState | None = None) -> None:
        """Hand the ledger to the history writer when it changed, or when a node summary is
        due; an unchanged node then costs the writer nothing on most polls."""
        if self.history is None or self.last_success is None:
            return
        due = (self._history_at is None
               or self.last_success - self._history_at >= self.history.summary_interval)
        if changed or due:
            self._history_at = self.last_success
            self.history.submit(ledger, datetime.fromtimestamp(self.last_success, UTC),
                                placement)

    def _account_errors(self, errors: Mapping[tuple[str, str], str],
                        observed: frozenset[tuple[str, str]],
                        off: Iterable[str] = ()) -> None:
        """Count the failures this poll saw, set each configured source's health from what
        is failing now (or ``off``: on, but with nothing usable to read), and log changes
        of state only (a kubelet down for an hour is one line, not 240): an operation is
        "recovered" only once it was read and worked."""
        for key in observed:
            self.errors_total[key] += 1
        failing = {source for source, _ in errors} | set(off)
        self.source_up = {s: s not in failing for s in sorted(self.sources | failing)}
        for key, message in errors.items():
            if self._logged_errors.get(key) != message:
                log.warning("source failing", extra={"source": key[0], "operation": key[1],
                                                     "error": message})
        for key in set(self._logged_errors) - set(errors):
            log.info("source recovered", extra={"source": key[0], "operation": key[1]})
        self._logged_errors = dict(errors)

    async def _publish(self, ledger: Ledger, enforced: EnforcedCpusets | None = None) -> None:
        current = {(a.kind, a.namespace, a.pod, a.container, a.detail) for a in ledger.anomalies}
        for key in current - self._seen_anomalies:
            self.anomalies_observed[key[0]] += 1
        self._seen_anomalies = current
        # Rendered in a worker thread whatever the node's size: scrapes keep being answered
        # (from the previous exposition) while a large ledger is rendered, and a small one
        # rendered on the loop cost 0.7 MiB of resident memory (docs/design.md#data-path).
        exposition, dropped, series_left = await asyncio.to_thread(
            functools.partial(node_exposition, ledger, pods_max_series=(
                self.options.pods_max_series if self.options.pods_collector else None)))
        if dropped:
            self.pods_dropped_total += dropped
            log.warning("per-pod series capped", extra={
                "dropped": dropped, "max_series": self.options.pods_max_series})
        self.published = Published(ledger=ledger, exposition=exposition,
                                   enforced=enforced, pods_series_left=series_left)

    # -- reading state ------------------------------------------------------------------

    def cpuload(self) -> dict[str, Any] | None:
        """Each CPU's busy share between the last two polls (``/proc/stat``), or ``None``
        when that source is off; live, not part of the ledger."""
        kernel = self.kernel
        if kernel is None or not kernel.options.proc_root:
            return None
        return {"cpus": {str(cpu): round(share, 4)
                         for cpu, share in sorted(self.cpu_busy.items())}}

    @property
    def stale(self) -> bool:
        if self.last_success is None:
            return True
        return self.clock() - self.last_success > self.options.staleness

    @property
    def ready(self) -> bool:
        return self.last_success is not None

    def current(self) -> Published | None:
        """The published state, or None when there is none or it is past staleness."""
        if self.published is None or self.stale:
            return None
        return self.published

    def self_state(self) -> SelfState:
        """What the self-metrics show now (copies: comparable with a later one)."""
        history = self.history
        return SelfState(
            up=self.up, last_success=self.last_success, poll_duration=self.last_duration,
            source_up=dict(self.source_up), source_errors=dict(self.errors_total),
            source_operations=tuple(
                (source, operation)
                for source in sorted(self.sources | {"exporter"})
                for operation in SOURCE_OPERATIONS.get(source, ())),
            anomalies_observed=dict(self.anomalies_observed),
            pods_dropped_total=self.pods_dropped_total,
            history_pending=None if history is None else history.pending_writes,
            history_dropped_total=None if history is None else history.dropped_writes_total,
            version=__version__)

    def metrics_body(self, encoding: Encoding = "identity") -> bytes:
        """The /metrics body: the exposition rendered at the last ledger change (compressed
        at most once per change) followed by the self-metrics, rendered again only when
        they changed (at a poll, mostly): a scrape costs a comparison."""
        published = self.current()
        state = self.self_state()
        cached = self._bodies.get(encoding)
        kernel = self.kernel_exposition if published is not None else b""
        if (cached is not None and cached[0] is published and cached[1] is kernel
                and cached[2] == state):
            return cached[3]
        live = kernel + render_self(state).encode("utf-8")
        if published is None:
            body = gzip_bytes(live) if encoding == "gzip" else live
        elif encoding == "gzip":
            body = published.exposition_gzip.finish(live)
        else:
            body = published.exposition + live
        self._bodies[encoding] = (published, kernel, state, body)
        return body


def cpumap(ledger: Ledger, enforced: EnforcedCpusets | None = None) -> dict[str, Any]:
    """The CPU map; with the cgroup source on, each CPU also lists the containers the
    kernel lets run on it (``enforced``: ``namespace/pod/container``), beside its owner."""
    on_cpu: dict[int, list[str]] = {}
    if enforced is not None:
        for (namespace, pod, container), cpus in sorted(enforced.containers.items()):
            for cpu in cpus:
                on_cpu.setdefault(cpu, []).append(f"{namespace}/{pod}/{container}")
    cells = []
    for c in ledger.cpu_map:
        cell: dict[str, Any] = {"id": c.id, "core": c.core, "socket": c.socket,
                                "numa_node": c.numa_node, "pool": c.pool, "owner": c.owner}
        if enforced is not None:
            cell["enforced"] = on_cpu.get(c.id, [])
        cells.append(cell)
    return {"node": ledger.node_name, "cpus": cells}


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
        self._cache: dict[str, tuple[bytes, Any]] = {}

    def parsed(self, name: str, body: bytes | None,
               decode: Callable[[bytes], Any] = _json_or_none) -> Any:
        """The body decoded (``None`` when malformed: the poll reports that already), by a
        ``decode`` that keeps only what is worth holding on to."""
        if body is None:
            return None
        cached = self._cache.get(name)
        if cached is not None and cached[0] == body:
            return cached[1]
        value = decode(body)
        self._cache[name] = (body, value)
        return value

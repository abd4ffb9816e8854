"""The published state: what scrapes and API calls read (docs/design.md#data-path).

``PublishedState`` holds the last ledger in the forms it is served in (``Published``: the
exposition rendered when the ledger changed, the JSON bodies and gzip forms made on first
request) and the exporter's own health: whether the last poll worked, each source's
outcome, error and anomaly counters. A scrape never waits on a source: it reads bytes
rendered when the ledger last changed, plus a few live self-metrics. The poll loop
(``exporter.service``) is the only writer.

Source health (docs/design.md#metrics): every configured source is read in every poll
(the kubelet's ``/metrics`` every read period, its last outcome standing in between), so
``podres_source_up`` is 1 or 0 for each after every poll. It is absent before the first
poll and after a poll that failed inside the exporter, when no source outcome is known.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from exporter import __version__
from exporter.kernel import add_enforced
from exporter.metrics.catalogue import SelfState
from exporter.metrics.compression import Encoding, GzipPrefix, gzip_bytes
from exporter.metrics.exposition import node_exposition, render_self
from exporter.sources import cgroup, checkpoint, kubelet, podresources, procstat, topology
from reconciler.enforcement import EnforcedCpusets
from reconciler.ledger import Ledger

log = logging.getLogger("podres.exporter")

# What each source can fail at, from the sources' own declarations, and the poll loop's own
# failure: published at 0 from the first scrape, so that increase() counts a first failure.
SOURCE_OPERATIONS: dict[str, tuple[str, ...]] = {
    **podresources.OPERATIONS, **kubelet.OPERATIONS, **topology.OPERATIONS,
    **checkpoint.OPERATIONS, **cgroup.OPERATIONS, **procstat.OPERATIONS,
    "exporter": ("poll",)}


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


class PublishedState:
    """The ledger as served and the exporter's health, as the last poll left them.

    ``sources`` names the configured sources (the reader's and the kernel's), for their
    health and the error counters published at 0."""

    def __init__(self, sources: Callable[[], frozenset[str]], *, staleness: float = 60.0,
                 pods_max_series: int | None = 50_000,
                 clock: Callable[[], float] = time.time) -> None:
        self._sources = sources
        self.staleness = staleness
        self.pods_max_series = pods_max_series  # None: the per-pod collector is off
        self.clock = clock
        self.published: Published | None = None
        self.kernel_exposition = b""  # the kernel families, rendered after every poll
        self.cpu_busy: Mapping[int, float] | None = None  # None: /proc/stat is not read
        self.up = False
        self.last_success: float | None = None
        self.last_duration = 0.0
        self.errors_total: Counter[tuple[str, str]] = Counter()
        self.source_up: dict[str, bool] = {}
        self.anomalies_observed: Counter[str] = Counter()
        self.pods_dropped_total = 0
        self.history_pending: Callable[[], tuple[int, int]] | None = None
        self._seen_anomalies: set[tuple[Any, ...]] = set()
        self._logged_errors: dict[tuple[str, str], str] = {}
        # The last scrape body per encoding, reused while neither the ledger nor the
        # self-metrics changed: rendering the self-metrics (or compressing) on every scrape
        # would cost each one that much again.
        self._bodies: dict[Encoding, tuple[Published | None, bytes, SelfState,
                                           tuple[bytes, bytes]]] = {}

    # -- written by the poll loop ---------------------------------------------------------

    def poll_failed(self) -> None:
        """A poll that raised inside the exporter: no source outcome is known from it."""
        self.up = False
        self.source_up = {}
        self.errors_total[("exporter", "poll")] += 1

    def succeeded(self) -> None:
        """This poll's ledger is published: only now is the exporter up (the render
        yields to the loop, and a scrape in between must not pair podres_up 1 with the
        previous ledger)."""
        self.up = True
        self.last_success = self.clock()

    def account_errors(self, errors: Mapping[tuple[str, str], str],
                       observed: frozenset[tuple[str, str]],
                       off: Iterable[str] = ()) -> None:
        """Count the failures this poll saw, set each configured source's health from what
        is failing now (or ``off``: on, but with nothing usable to read), and log changes
        of state only (a kubelet down for an hour is one line, not 240): an operation is
        "recovered" only once it was read and worked."""
        for key in observed:
            self.errors_total[key] += 1
        failing = {source for source, _ in errors} | set(off)
        self.source_up = {s: s not in failing for s in sorted(self._sources() | failing)}
        for key, message in errors.items():
            if self._logged_errors.get(key) != message:
                log.warning("source failing", extra={"source": key[0], "operation": key[1],
                                                     "error": message})
        for key in set(self._logged_errors) - set(errors):
            log.info("source recovered", extra={"source": key[0], "operation": key[1]})
        self._logged_errors = dict(errors)

    def changed(self, ledger: Ledger, enforced: EnforcedCpusets | None) -> bool:
        """Whether ``ledger`` with ``enforced`` shows anything the published forms do
        not, beyond what the reader already called a change: the kernel's anomalies or
        enforced sets (usage alone does not: it is rendered apart)."""
        published = self.published
        return (published is None or ledger.anomalies != published.ledger.anomalies
                or enforced != published.enforced)

    async def publish(self, ledger: Ledger, enforced: EnforcedCpusets | None = None) -> None:
        current = {(a.kind, a.namespace, a.pod, a.container, a.detail) for a in ledger.anomalies}
        for key in current - self._seen_anomalies:
            self.anomalies_observed[key[0]] += 1
        self._seen_anomalies = current
        # Rendered in a worker thread whatever the node's size: scrapes keep being answered
        # (from the previous exposition) while a large ledger is rendered, and a small one
        # rendered on the loop cost 0.7 MiB of resident memory (docs/design.md#data-path).
        exposition, dropped, series_left = await asyncio.to_thread(
            functools.partial(node_exposition, ledger, pods_max_series=self.pods_max_series))
        self.count_dropped(dropped)
        self.published = Published(ledger=ledger, exposition=exposition,
                                   enforced=enforced, pods_series_left=series_left)

    def count_dropped(self, dropped: int) -> None:
        if dropped:
            self.pods_dropped_total += dropped
            log.warning("per-pod series capped", extra={
                "dropped": dropped, "max_series": self.pods_max_series})

    # -- read by scrapes and the API ------------------------------------------------------

    @property
    def stale(self) -> bool:
        if self.last_success is None:
            return True
        return self.clock() - self.last_success > self.staleness

    @property
    def ready(self) -> bool:
        return self.last_success is not None

    def current(self) -> Published | None:
        """The published state, or None when there is none or it is past staleness."""
        if self.published is None or self.stale:
            return None
        return self.published

    def cpuload(self) -> dict[str, Any] | None:
        """Each CPU's busy share between the last two polls (``/proc/stat``), or ``None``
        when that source is off; live, not part of the ledger."""
        if self.cpu_busy is None:
            return None
        return {"cpus": {str(cpu): round(share, 4)
                         for cpu, share in sorted(self.cpu_busy.items())}}

    def self_state(self) -> SelfState:
        """What the self-metrics show now (copies: comparable with a later one)."""
        history = None if self.history_pending is None else self.history_pending()
        return SelfState(
            up=self.up, last_success=self.last_success, poll_duration=self.last_duration,
            source_up=dict(self.source_up), source_errors=dict(self.errors_total),
            source_operations=tuple(
                (source, operation)
                for source in sorted(self._sources() | {"exporter"})
                for operation in SOURCE_OPERATIONS.get(source, ())),
            anomalies_observed=dict(self.anomalies_observed),
            pods_dropped_total=self.pods_dropped_total,
            history_pending=None if history is None else history[0],
            history_dropped_total=None if history is None else history[1],
            version=__version__)

    def metrics_body(self, encoding: Encoding = "identity") -> tuple[bytes, bytes]:
        """The /metrics body as two parts to send one after the other: the exposition
        rendered at the last ledger change, then the self-metrics (the kernel families
        before them), rendered again only when they changed (at a poll, mostly): a scrape
        costs a comparison. Joined, the two would be a second half-megabyte copy of the
        exposition, made at every poll and held between scrapes. Gzip is one member of both
        (compressed at most once per change), and an empty second part."""
        published = self.current()
        state = self.self_state()
        cached = self._bodies.get(encoding)
        kernel = self.kernel_exposition if published is not None else b""
        if (cached is not None and cached[0] is published and cached[1] is kernel
                and cached[2] == state):
            return cached[3]
        live = kernel + render_self(state).encode("utf-8")
        parts: tuple[bytes, bytes]
        if published is None:
            parts = (gzip_bytes(live), b"") if encoding == "gzip" else (live, b"")
        elif encoding == "gzip":
            parts = (published.exposition_gzip.finish(live), b"")
        else:
            parts = (published.exposition, live)
        self._bodies[encoding] = (published, kernel, state, parts)
        return parts


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

"""Reads a live node: every configured source once per poll (``exporter.fetch``), then the
ledger of what was read, computed again only when the raw inputs changed
(``exporter.ledger_cache``; docs/design.md#data-path). ``NodeReader`` is the one entry:
a poll's raw node, its ledger, and every source operation failing now.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from exporter.assemble import SourceKey, parse_optional
from exporter.errors import SourceError
from exporter.fetch import LIST, SourceFetcher, SourceOptions
from exporter.ledger_cache import LedgerByContent
from exporter.rawnode import PackedBody, RawNode
from exporter.sources.checkpoint import CheckpointFiles
from exporter.sources.kubelet import KubeletClient
from exporter.sources.podresources import PodResourcesClient
from exporter.sources.topology import TopologySource
from reconciler.allocator.live import NodeState
from reconciler.ledger import Ledger


@dataclass(frozen=True)
class Reading:
    """A poll that produced a ledger: the ledger, the raw inputs (for ``record``) and every
    source operation failing now."""

    ledger: Ledger
    raw: RawNode
    errors: Mapping[SourceKey, str] = field(default_factory=dict)
    changed: bool = True
    # What plan --fleet models the node from, as the history records it (None: the CPU
    # topology is unknown; reconciler.allocator.fleet), made when first asked for.
    placement_of: Callable[[], NodeState | None] | None = None

    @property
    def placement(self) -> NodeState | None:
        return None if self.placement_of is None else self.placement_of()


@dataclass(frozen=True)
class Poll:
    """What one poll found. ``errors`` holds every source operation failing now, as
    ``(source, operation) → message``; ``observed`` the failures this poll's own reads saw
    (a periodic read that was not due keeps its last outcome in ``errors`` without being
    seen again). ``reading`` is ``None`` when ``List`` failed (``failure``)."""

    raw: RawNode
    errors: Mapping[SourceKey, str]
    observed: frozenset[SourceKey]
    reading: Reading | None
    failure: SourceError | None = None


__all__ = ["NodeReader", "Poll", "Reading", "SourceOptions"]


class NodeReader:
    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.fetcher = SourceFetcher(options)
        self.ledgers = LedgerByContent(options.node_name,
                                       checkpoints=self.fetcher.checkpoints is not None)

    # The sources, for one-shot setup (bench.cycle connects before timing a cold read).
    @property
    def podresources(self) -> PodResourcesClient:
        return self.fetcher.podresources

    @property
    def kubelet(self) -> KubeletClient | None:
        return self.fetcher.kubelet

    @property
    def topology(self) -> TopologySource | None:
        return self.fetcher.topology

    @property
    def checkpoints(self) -> CheckpointFiles | None:
        return self.fetcher.checkpoints

    @property
    def sources(self) -> frozenset[str]:
        """The names of the configured sources, as errors and health report them."""
        return self.fetcher.sources

    async def close(self) -> None:
        await self.fetcher.close()

    async def refresh_pods(self) -> PackedBody | None:
        """/pods read now, out of its schedule (``SourceFetcher.refresh_pods``)."""
        return await self.fetcher.refresh_pods()

    async def poll(self, now: float | None = None) -> Poll:
        """Read every source once. Never raises for a source: a failing one is reported
        in the result, and without ``List`` there is no reading."""
        now = time.monotonic() if now is None else now
        fetcher = self.fetcher
        raw, errors, periodic = await fetcher.fetch(now)
        ledger: tuple[Ledger, bool] | None = None
        failure = errors.get(LIST)
        if failure is None:
            try:
                key = self.ledgers.key(raw, fetcher.topology_generation, fetcher.metrics_key)
                ledger = await self.ledgers.ledger(raw, key, errors)
            except SourceError as exc:  # an undecodable List
                failure = errors[LIST] = exc
        if failure is not None:
            # No ledger, but the other sources were read: their health is still known.
            parts = parse_optional(raw, checkpoints=self.checkpoints is not None)
            for source_key, problem in parts.errors.items():
                errors.setdefault(source_key, problem)
        observed = set(errors)
        for source_key, last in fetcher.standing_errors(periodic).items():
            errors.setdefault(source_key, last)
        messages = {k: str(exc) for k, exc in errors.items()}
        reading = None if ledger is None else Reading(ledger[0], raw, messages, ledger[1],
                                                      self.ledgers.placement)
        return Poll(raw, messages, frozenset(observed), reading, failure)

    async def read(self, now: float | None = None) -> Reading:
        """Poll once for a one-shot command: the reading, or the ``List`` failure raised."""
        result = await self.poll(now)
        if result.reading is None:
            assert result.failure is not None
            raise result.failure
        return result.reading

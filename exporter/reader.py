"""Reads a live node: every configured source once per poll, concurrently, into a
``RawNode``; then one full snapshot and its ledger (docs/design.md#data-path).

The reader owns its sources: the PodResources channel (dialled afresh after a failure or
a kubelet restart), the kubelet's HTTPS endpoint, the topology and the checkpoint files.
Independent sources are read at the same time, each under its own deadline, so a hung
endpoint costs one timeout per poll.

A node that has not changed costs almost nothing: the raw inputs are hashed, and when
the hash equals the previous poll's the previous ledger (and the problems found in its
inputs) is reused. Nothing is ever computed by deltas; a changed input means a full
recompute.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from exporter.assemble import SourceKey, parse_optional, snapshot_from_raw
from exporter.errors import SourceError
from exporter.rawnode import RawNode
from exporter.runtime import release_free_memory
from exporter.sources.checkpoint import CheckpointFiles
from exporter.sources.kubelet import KubeletClient, parse_feature_metrics
from exporter.sources.pod_list import reduce_pod_list
from exporter.sources.podresources import DEFAULT_REPROBE, PodResourcesClient
from exporter.sources.topology import TopologySource
from reconciler.allocator.live import NodeState, node_state
from reconciler.ledger import Ledger
from reconciler.reconcile import reconcile
from reconciler.snapshot import Topology

log = logging.getLogger("podres.reader")

T = TypeVar("T")
LIST: SourceKey = ("podresources", "List")
METRICS: SourceKey = ("kubelet", "metrics")
PODS: SourceKey = ("kubelet", "pods")


@dataclass(frozen=True)
class SourceOptions:
    socket: str
    timeout: float = 5.0
    max_receive_bytes: int = 16 << 20
    kubelet_url: str | None = None
    token_file: str | None = None
    ca_file: str | None = None
    insecure_skip_verify: bool = False
    sysfs: str | None = "/sys"
    topology_file: str | None = None
    kubelet_root: str | None = None
    node_name: str = ""
    metrics_interval: float = 300.0
    # How often /pods is read while PodResources answers the same (a changed answer reads
    # it at once): docs/design.md#sources.
    pods_interval: float = 60.0
    # How long an RPC answered UNIMPLEMENTED is not asked again (a kubelet restart, seen
    # as a new socket file, asks again at once).
    reprobe_interval: float = DEFAULT_REPROBE


@dataclass(frozen=True)
class Reading:
    """A poll that produced a ledger: the ledger, the raw inputs (for ``record``) and every
    source operation failing now."""

    ledger: Ledger
    raw: RawNode
    errors: Mapping[SourceKey, str] = field(default_factory=dict)
    changed: bool = True
    # What plan --fleet models the node from, as the history records it (None: the CPU
    # topology is unknown); reconciler.allocator.fleet.
    placement: NodeState | None = None


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


def _digest(*parts: bytes | None) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for part in parts:
        if part is None:
            h.update(b"\x00none")
        else:
            h.update(len(part).to_bytes(8, "little"))
            h.update(part)
    return h.digest()


# The size of the answers to decode (List, and /pods when read) up to which a changed node
# is reconciled on the event loop rather than in a worker thread: a List of some 3,000 pods
# (1,000 pods take 5 ms on the benchmark's machine, so a scrape waits at most ~15 ms, once
# per change), or with the kubelet's /pods a node of a couple of hundred pods.
INLINE_BYTES = 256 * 1024


class NodeReader:
    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.podresources = PodResourcesClient(options.socket, timeout=options.timeout,
                                               max_receive_bytes=options.max_receive_bytes,
                                               reprobe_interval=options.reprobe_interval)
        self.kubelet = (KubeletClient(options.kubelet_url, token_file=options.token_file,
                                      ca_file=options.ca_file,
                                      insecure_skip_verify=options.insecure_skip_verify,
                                      timeout=options.timeout)
                        if options.kubelet_url else None)
        self.topology = (TopologySource(file=options.topology_file, sysfs=options.sysfs)
                         if options.topology_file or options.sysfs else None)
        self.checkpoints = (CheckpointFiles(options.kubelet_root)
                            if options.kubelet_root else None)
        # The kubelet's /metrics is read every metrics_interval; between reads its last
        # body and outcome stand.
        self._metrics_at = -1e18
        self._metrics: bytes | None = None
        self._metrics_key = b""
        self._metrics_error: SourceError | None = None
        # /pods as last read (reduced to the fields the exporter reads), the outcome of
        # that read, and the List answer it was read beside.
        self._pods_at = -1e18
        self._polled_at = -1e18  # the time of the last poll
        self._pods: bytes | None = None
        self._pods_error: SourceError | None = None
        self._pods_list: bytes | None = None
        self._pods_digest: tuple[bytes | None, bytes | None] = (None, None)
        self._key = b""
        # The last ledger and the problems found in its inputs (not the snapshot: the
        # ledger is all that is served, and a node's snapshot is megabytes).
        self._last: tuple[Ledger, Mapping[SourceKey, SourceError]] | None = None
        self._placement: NodeState | None = None  # of the last ledger

    @property
    def sources(self) -> frozenset[str]:
        """The names of the configured sources, as errors and health report them."""
        names = {"podresources"}
        if self.kubelet is not None:
            names.add("kubelet")
        if self.topology is not None:
            names.add(self.topology.name)
        if self.checkpoints is not None:
            names.add("checkpoint")
        return frozenset(names)

    async def close(self) -> None:
        await self.podresources.close()
        if self.kubelet is not None:
            await self.kubelet.close()

    # -- sources ------------------------------------------------------------------------

    @staticmethod
    async def _part(read: Awaitable[T], errors: dict[SourceKey, SourceError]) -> T | None:
        try:
            return await read
        except SourceError as exc:
            errors[(exc.source, exc.operation)] = exc
            return None

    async def _kubelet_body(self, path: str, errors: dict[SourceKey, SourceError]
                            ) -> bytes | None:
        if self.kubelet is None:
            return None
        return await self._part(self.kubelet.fetch(path), errors)

    async def _metrics_body(self, now: float, errors: dict[SourceKey, SourceError]) -> bool:
        """Read /metrics when due; whether it was read in this poll."""
        if self.kubelet is None or now - self._metrics_at < self.options.metrics_interval:
            return False
        self._metrics_at = now
        fresh: dict[SourceKey, SourceError] = {}
        body = await self._part(self.kubelet.fetch("/metrics"), fresh)
        self._metrics_error = fresh.get(METRICS)
        if body is not None:
            self._metrics = body
            # Only the feature gates reach the snapshot: the rest of the body (counters)
            # changes on every read and must not make an unchanged node look changed.
            gates = parse_feature_metrics(body.decode("utf-8", "replace"))
            self._metrics_key = repr(sorted(gates.items())).encode()
        errors.update(fresh)
        return True

    async def _files(self) -> tuple[Topology | None, tuple[tuple[str, bytes], ...],
                                    dict[SourceKey, SourceError]]:
        errors: dict[SourceKey, SourceError] = {}
        topology = None
        if self.topology is not None:
            try:
                topology = self.topology.read()
            except SourceError as exc:
                errors[(exc.source, exc.operation)] = exc
        checkpoints: tuple[tuple[str, bytes], ...] = ()
        if self.checkpoints is not None:
            try:
                checkpoints = await self.checkpoints.read()
            except SourceError as exc:
                errors[(exc.source, exc.operation)] = exc
        return topology, checkpoints, errors

    async def _pods_body(self, errors: dict[SourceKey, SourceError]) -> None:
        """Read /pods and keep it reduced (a kubelet's body is ~10 KB a pod, of which the
        exporter reads a few fields): the full body is never held past this call."""
        assert self.kubelet is not None
        fresh: dict[SourceKey, SourceError] = {}
        body = await self._part(self.kubelet.fetch("/pods"), fresh)
        pods = None if body is None else await asyncio.to_thread(reduce_pod_list, body)
        # The same pods again (a periodic refresh, mostly): keep the bytes already held, so
        # that whoever kept the last ones (a parsed-body cache, the last reading) does not
        # hold a second copy of a body of ~1.5 KB a pod.
        if pods is None or pods != self._pods:
            self._pods = pods
        if body is not None:
            del body
            # The body and its chunks were tens of MiB that glibc would keep in its arenas.
            release_free_memory()
        self._pods_error = fresh.get(PODS)
        errors.update(fresh)

    async def _pods_if_due(self, now: float, errors: dict[SourceKey, SourceError]) -> bool:
        """Read /pods when its refresh is due; whether it was read."""
        if self.kubelet is None or now - self._pods_at < self.options.pods_interval:
            return False
        self._pods_at = now
        await self._pods_body(errors)
        return True

    async def refresh_pods(self) -> bytes | None:
        """Read /pods now, out of its schedule (the kernel observer, when a container's
        cgroup is gone: a restart gives it a new id); the reduced body, None when it could
        not be read. The next poll sees the new body as it would a scheduled read's."""
        if self.kubelet is None:
            return None
        self._pods_at = self._polled_at  # it counts as this poll's read of /pods
        errors: dict[SourceKey, SourceError] = {}
        await self._pods_body(errors)
        return None if errors else self._pods

    async def _fetch(self, now: float
                     ) -> tuple[RawNode, dict[SourceKey, SourceError], frozenset[SourceKey]]:
        """Every source once, at the same time; the raw node, what failed, and which of the
        periodic reads (/metrics, /pods) were made. /pods is read only when its refresh is
        due or the List answer changed: pods come and go, and containers are allocated,
        through List first."""
        await self.podresources.follow_restart()
        self._polled_at = now
        errors: dict[SourceKey, SourceError] = {}
        list_raw, alloc_raw, pods_read, configz, metrics_read, files = await asyncio.gather(
            self._part(self.podresources.list_raw(), errors),
            self._part(self.podresources.allocatable_raw(), errors),
            self._pods_if_due(now, errors),
            self._kubelet_body("/configz", errors),
            self._metrics_body(now, errors),
            self._files(),
        )
        if list_raw is not None:
            # The List bytes are kept by the poll's raw node anyway: comparing them is cheaper
            # than hashing them a second time.
            if list_raw != self._pods_list and not pods_read and self.kubelet is not None:
                self._pods_at = now
                await self._pods_body(errors)
                pods_read = True
            self._pods_list = list_raw
        topology, checkpoints, file_errors = files
        errors.update(file_errors)
        if LIST in errors:
            # A restarted kubelet is a new socket inode: dial afresh next time.
            await self.podresources.reset()
        raw = RawNode(list_raw, alloc_raw, self._pods, configz, self._metrics, topology,
                      checkpoints, frozenset(self.podresources.unimplemented))
        periodic = {key for key, read in ((METRICS, metrics_read), (PODS, pods_read)) if read}
        return raw, errors, frozenset(periodic)

    def _raw_key(self, raw: RawNode) -> bytes:
        checkpoints = [part for name, data in raw.checkpoints for part in (name.encode(), data)]
        topology = self.topology.generation if self.topology is not None and raw.topology \
            else 0
        return _digest(raw.list_response, raw.allocatable, self._digest_of_pods(raw.pods),
                       raw.configz, self._metrics_key, topology.to_bytes(8, "little"),
                       ",".join(sorted(raw.unimplemented)).encode(),
                       self.options.node_name.encode(), *checkpoints)

    def _digest_of_pods(self, pods: bytes | None) -> bytes | None:
        """The digest of a /pods body, computed once per body held: it is ~1.5 KB a pod and
        the same object from one read to the next (about 1 ms a poll on a 1000-pod node)."""
        if pods is None:
            return None
        if pods is not self._pods_digest[0]:
            self._pods_digest = (pods, _digest(pods))
        return self._pods_digest[1]

    async def poll(self, now: float | None = None) -> Poll:
        """Read every source once. Never raises for a source: a failing one is reported
        in the result, and without ``List`` there is no reading."""
        now = time.monotonic() if now is None else now
        raw, errors, periodic = await self._fetch(now)
        ledger: tuple[Ledger, bool] | None = None
        failure = errors.get(LIST)
        if failure is None:
            try:
                ledger = await self._ledger(raw, errors)
            except SourceError as exc:  # an undecodable List
                failure = errors[LIST] = exc
        if failure is not None:
            # No ledger, but the other sources were read: their health is still known.
            parts = parse_optional(raw, checkpoints=self.checkpoints is not None)
            for key, problem in parts.errors.items():
                errors.setdefault(key, problem)
        observed = set(errors)
        # A periodic read that was not due keeps its last outcome, without being seen again.
        for key, last in ((METRICS, self._metrics_error), (PODS, self._pods_error)):
            if key not in periodic and last is not None:
                errors.setdefault(key, last)
        messages = {key: str(exc) for key, exc in errors.items()}
        reading = None if ledger is None else Reading(ledger[0], raw, messages, ledger[1],
                                                      self._placement)
        return Poll(raw, messages, frozenset(observed), reading, failure)

    async def _ledger(self, raw: RawNode, errors: dict[SourceKey, SourceError]
                      ) -> tuple[Ledger, bool]:
        """The ledger of ``raw`` and whether it was computed afresh; the problems found in
        its optional parts are added to ``errors``, on every poll that reads the same bad
        bytes again."""
        key = self._raw_key(raw)
        changed = key != self._key or self._last is None
        if changed:
            # A changed node is decoded and reconciled in a worker thread: 65k pods took
            # 1.4 s, and scrapes are answered on the loop meanwhile. A small one is done
            # on the loop: a few milliseconds, less than the hand-off to a thread and back
            # costs. An unchanged node (the common case) costs one hash, on the loop.
            if len(raw.list_response or b"") + len(raw.pods or b"") <= INLINE_BYTES:
                self._last = self._compute(raw)
            else:
                self._last = await asyncio.to_thread(self._compute, raw)
            self._key = key
        assert self._last is not None
        ledger, problems = self._last
        for source_key, exc in problems.items():
            errors.setdefault(source_key, exc)
        return ledger, changed

    def _compute(self, raw: RawNode) -> tuple[Ledger, Mapping[SourceKey, SourceError]]:
        assembled = snapshot_from_raw(raw, self.options.node_name,
                                      checkpoints=self.checkpoints is not None)
        ledger = reconcile(assembled.snapshot)
        # A few small objects, computed while the snapshot is at hand (it is not kept).
        self._placement = node_state(assembled.snapshot, ledger)
        return ledger, assembled.errors

    async def read(self, now: float | None = None) -> Reading:
        """Poll once for a one-shot command: the reading, or the ``List`` failure raised."""
        result = await self.poll(now)
        if result.reading is None:
            assert result.failure is not None
            raise result.failure
        return result.reading

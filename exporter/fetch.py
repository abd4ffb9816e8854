"""Reading a live node's sources once per poll, concurrently, into a ``RawNode``
(docs/design.md#data-path).

``SourceFetcher`` owns the sources: the PodResources channel (dialled afresh after a
failure or a kubelet restart), the kubelet's HTTPS endpoint, the topology and the
checkpoint files. Independent sources are read at the same time, each under its own
deadline, so a hung endpoint costs one timeout per poll. The kubelet's ``/metrics`` and
``/pods`` are read on schedules of their own; between reads their last body and outcome
stand.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from exporter.errors import SourceError
from exporter.rawnode import PackedBody, RawNode
from exporter.runtime import release_free_memory
from exporter.sources.checkpoint import CheckpointFiles
from exporter.sources.kubelet import KubeletClient
from exporter.sources.kubelet_bodies import feature_gates
from exporter.sources.pod_list import reduce_pod_list
from exporter.sources.podresources import DEFAULT_REPROBE, PodResourcesClient
from exporter.sources.topology import TopologySource
from reconciler.snapshot import Topology

T = TypeVar("T")
SourceKey = tuple[str, str]
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


class SourceFetcher:
    """Every configured source once per poll; see the module's docstring."""

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
        # body and outcome stand. Only its feature gates reach the snapshot (metrics_key).
        self._metrics_at = -1e18
        self._metrics: bytes | None = None
        self.metrics_key = b""
        self._metrics_error: SourceError | None = None
        # /pods as last read (reduced to the fields the exporter reads), the outcome of
        # that read, and the List answer it was read beside.
        self._pods_at = -1e18
        self._polled_at = -1e18  # the time of the last poll
        self._pods: PackedBody | None = None
        self._pods_error: SourceError | None = None
        self._pods_list: bytes | None = None

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

    @property
    def topology_generation(self) -> int:
        return self.topology.generation if self.topology is not None else 0

    async def close(self) -> None:
        await self.podresources.close()
        if self.kubelet is not None:
            await self.kubelet.close()

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
            gates = feature_gates(body)
            self.metrics_key = repr(sorted(gates.items())).encode()
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
        body = await self._part(self.kubelet.fetch_buffer("/pods"), fresh)
        pods = None if body is None else await asyncio.to_thread(_packed_pods, body)
        # The same pods again (a periodic refresh, mostly): keep the body already held, so
        # that whoever kept the last one (a parsed-body cache, the last reading) goes on
        # seeing the same object.
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

    async def refresh_pods(self) -> PackedBody | None:
        """Read /pods now, out of its schedule (the kernel observer, when a container's
        cgroup is gone: a restart gives it a new id); the reduced body, None when it could
        not be read. The next poll sees the new body as it would a scheduled read's."""
        if self.kubelet is None:
            return None
        self._pods_at = self._polled_at  # it counts as this poll's read of /pods
        errors: dict[SourceKey, SourceError] = {}
        await self._pods_body(errors)
        return None if errors else self._pods

    async def fetch(self, now: float
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

    def standing_errors(self, periodic: frozenset[SourceKey]
                        ) -> Mapping[SourceKey, SourceError]:
        """The last outcome of each periodic read that was not due in this poll: it stands
        until the next read, without being seen again."""
        return {key: last for key, last in ((METRICS, self._metrics_error),
                                            (PODS, self._pods_error))
                if key not in periodic and last is not None}


def _packed_pods(body: bytearray) -> PackedBody:
    """/pods reduced to what the exporter reads, and held deflated: between polls nothing
    reads it (a poll compares its digest), and a recompute reads it back once."""
    return PackedBody(reduce_pod_list(body))

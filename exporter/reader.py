"""Reads a live node: every source once, then one full snapshot and its ledger.

A node that has not changed costs almost nothing: each source's raw bytes are hashed and
the previous parse (and the previous ledger, when every input is unchanged) is reused.
Nothing is ever computed by deltas; a changed input means a full recompute.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from exporter.assemble import assemble
from exporter.errors import SourceError
from exporter.pb import api_pb2
from exporter.sources.fixture import FixtureDir, KubeletState
from exporter.sources.kubelet import KubeletClient, parse_feature_metrics
from exporter.sources.podresources import (
    PodResourcesClient,
    decode_allocatable,
    decode_list,
)
from exporter.sources.topology import load_topology_file, read_sysfs_topology
from reconciler.kube import (
    KubeletConfig,
    PodSpec,
    SpecError,
    kubelet_config_from_json,
    pod_list_from_json,
)
from reconciler.ledger import Ledger
from reconciler.reconcile import reconcile
from reconciler.snapshot import Topology

log = logging.getLogger("podres.reader")


@dataclass
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


@dataclass
class Reading:
    """One poll's outcome: the ledger, the raw inputs (for ``record``) and what failed."""

    ledger: Ledger
    raw: FixtureDir
    errors: dict[tuple[str, str], str] = field(default_factory=dict)
    changed: bool = True
    feature_gates: dict[str, bool] | None = None


@dataclass
class _Parsed:
    digest: bytes = b""
    value: Any = None


def _digest(*parts: bytes | None) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for part in parts:
        if part is None:
            h.update(b"\x00none")
        else:
            h.update(len(part).to_bytes(8, "little"))
            h.update(part)
    return h.digest()


class NodeReader:
    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.podresources = PodResourcesClient(options.socket, timeout=options.timeout,
                                               max_receive_bytes=options.max_receive_bytes)
        self.kubelet = (KubeletClient(options.kubelet_url, token_file=options.token_file,
                                      ca_file=options.ca_file,
                                      insecure_skip_verify=options.insecure_skip_verify,
                                      timeout=options.timeout)
                        if options.kubelet_url else None)
        self._pods = _Parsed()
        self._configz = _Parsed()
        self._list = _Parsed()
        self._alloc = _Parsed()
        self._ledger_key = b""
        self._ledger: Ledger | None = None
        self._topology: Topology | None = None
        self._topology_key = b""
        self._metrics_at = -1e18
        self.feature_gates: dict[str, bool] | None = None
        self.metrics_text: str | None = None

    async def close(self) -> None:
        await self.podresources.close()
        if self.kubelet is not None:
            await self.kubelet.close()

    # -- sources ------------------------------------------------------------------------

    def _read_topology(self, errors: dict[tuple[str, str], str]) -> Topology | None:
        opts = self.options
        try:
            if opts.topology_file:
                if self._topology is None:
                    self._topology = load_topology_file(opts.topology_file)
                    self._topology_key = _digest(repr(self._topology).encode())
                return self._topology
            if opts.sysfs:
                # One small file decides whether the full (1000-file) read is needed.
                online = Path(opts.sysfs, "devices/system/cpu/online")
                try:
                    key = _digest(online.read_bytes())
                except OSError:
                    key = b"unreadable"
                if self._topology is None or key != self._topology_key:
                    self._topology = read_sysfs_topology(opts.sysfs)
                    self._topology_key = key
                return self._topology
        except SourceError as exc:
            errors[(exc.source, exc.operation)] = str(exc)
            self._topology = None
        return None

    async def _kubelet_part(self, path: str, errors: dict[tuple[str, str], str]
                            ) -> bytes | None:
        if self.kubelet is None:
            return None
        try:
            return await self.kubelet.fetch(path)
        except SourceError as exc:
            errors[(exc.source, exc.operation)] = str(exc)
            return None

    @staticmethod
    def _parse_json(raw: bytes | None, cache: _Parsed, what: str,
                    errors: dict[tuple[str, str], str]) -> Any:
        if raw is None:
            return None
        digest = _digest(raw)
        if digest == cache.digest:
            return cache.value
        try:
            obj = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            errors[("kubelet", what)] = f"kubelet {what}: invalid JSON: {exc}"
            return None
        cache.digest, cache.value = digest, obj
        return obj

    async def read(self, now: float | None = None) -> Reading:
        """Poll every source once. Raises ``SourceError`` only when PodResources ``List``
        fails: without it there is nothing to reconcile."""
        errors: dict[tuple[str, str], str] = {}
        list_raw = await self.podresources.list_raw()
        try:
            alloc_raw = await self.podresources.allocatable_raw()
        except SourceError as exc:
            errors[(exc.source, exc.operation)] = str(exc)
            alloc_raw = None
        pods_raw = await self._kubelet_part("/pods", errors)
        configz_raw = await self._kubelet_part("/configz", errors)
        now = time.monotonic() if now is None else now
        if self.kubelet is not None and now - self._metrics_at >= self.options.metrics_interval:
            self._metrics_at = now
            metrics_raw = await self._kubelet_part("/metrics", errors)
            if metrics_raw is not None:
                self.metrics_text = metrics_raw.decode("utf-8", "replace")
                self.feature_gates = parse_feature_metrics(self.metrics_text)
        topology = self._read_topology(errors)

        key = _digest(list_raw, alloc_raw, pods_raw, configz_raw, self._topology_key,
                      self.options.node_name.encode(),
                      repr(sorted((self.feature_gates or {}).items())).encode())
        pod_list = self._parse_json(pods_raw, self._pods, "pods", errors)
        configz = self._parse_json(configz_raw, self._configz, "configz", errors)
        listing = self._decoded_list(list_raw)
        allocatable = self._decoded_alloc(alloc_raw)
        raw = FixtureDir(KubeletState(listing, allocatable, pod_list, configz,
                                      self.metrics_text), topology)
        if key == self._ledger_key and self._ledger is not None:
            return Reading(self._ledger, raw, errors, changed=False,
                           feature_gates=self.feature_gates)

        specs = self._specs(pod_list, errors)
        config = self._config(configz, errors)
        info: dict[str, str] = {}
        if self.podresources.unimplemented:
            info["rpcs_unimplemented"] = ",".join(sorted(self.podresources.unimplemented))
        if self.feature_gates is not None and "PodLevelResourceManagers" in self.feature_gates:
            info["feature_gate_metric"] = str(self.feature_gates["PodLevelResourceManagers"])
        snapshot = assemble(listing, allocatable=allocatable, pod_specs=specs, config=config,
                            topology=topology, node_name=self.options.node_name,
                            kubelet_info=info)
        ledger = reconcile(snapshot)
        self._ledger_key, self._ledger = key, ledger
        return Reading(ledger, raw, errors, changed=True, feature_gates=self.feature_gates)

    def _decoded_list(self, raw: bytes) -> api_pb2.ListPodResourcesResponse:
        digest = _digest(raw)
        if digest != self._list.digest:
            self._list.digest, self._list.value = digest, decode_list(raw)
        value: api_pb2.ListPodResourcesResponse = self._list.value
        return value

    def _decoded_alloc(self, raw: bytes | None) -> api_pb2.AllocatableResourcesResponse | None:
        if raw is None:
            return None
        digest = _digest(raw)
        if digest != self._alloc.digest:
            self._alloc.digest, self._alloc.value = digest, decode_allocatable(raw)
        value: api_pb2.AllocatableResourcesResponse = self._alloc.value
        return value

    @staticmethod
    def _specs(pod_list: Any, errors: dict[tuple[str, str], str]) -> tuple[PodSpec, ...] | None:
        if pod_list is None:
            return None
        try:
            return pod_list_from_json(pod_list)
        except SpecError as exc:
            errors[("kubelet", "pods")] = f"kubelet pods: {exc}"
            return None

    @staticmethod
    def _config(configz: Any, errors: dict[tuple[str, str], str]) -> KubeletConfig | None:
        if configz is None:
            return None
        try:
            return kubelet_config_from_json(configz)
        except SpecError as exc:
            errors[("kubelet", "configz")] = f"kubelet configz: {exc}"
            return None

"""Sources → snapshot: turns what the sources returned into one ``NodeSnapshot``.

Each optional part that is missing or unreadable becomes ``None`` in the snapshot (the
reconciler then leaves the spec-based fields null); the caller decides whether an
unreadable part is an error (fixtures) or a counted source failure (serve).
"""

from __future__ import annotations

from typing import Any

from exporter.pb import api_pb2
from exporter.sources.convert import allocatable_from_proto, pods_from_proto
from reconciler.kube import (
    KubeletConfig,
    PodSpec,
    SpecError,
    kubelet_config_from_json,
    pod_list_from_json,
)
from reconciler.snapshot import NodeSnapshot, Topology


def parse_pod_list(obj: dict[str, Any] | None) -> tuple[PodSpec, ...] | None:
    return None if obj is None else pod_list_from_json(obj)


def parse_configz(obj: dict[str, Any] | None) -> KubeletConfig | None:
    return None if obj is None else kubelet_config_from_json(obj)


def assemble(
    listing: api_pb2.ListPodResourcesResponse,
    *,
    allocatable: api_pb2.AllocatableResourcesResponse | None = None,
    pod_specs: tuple[PodSpec, ...] | None = None,
    config: KubeletConfig | None = None,
    topology: Topology | None = None,
    node_name: str = "",
    kubelet_info: dict[str, str] | None = None,
) -> NodeSnapshot:
    return NodeSnapshot(
        pods=pods_from_proto(listing),
        node_name=node_name,
        allocatable=allocatable_from_proto(allocatable) if allocatable is not None else None,
        topology=topology,
        pod_specs=pod_specs,
        kubelet_config=config,
        kubelet_info=tuple(sorted((kubelet_info or {}).items())),
    )


__all__ = ["SpecError", "assemble", "parse_configz", "parse_pod_list"]

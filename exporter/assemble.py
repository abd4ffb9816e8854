"""Raw inputs → snapshot: the one way from what the sources returned (a ``RawNode``) to the
``NodeSnapshot`` the reconciler is given (docs/design.md#data-path).

PodResources ``List`` is required. Every other part is optional: one that is missing
becomes ``None`` in the snapshot (the reconciler then leaves the spec-based fields null),
and one that is malformed is reported as that source's error and treated as missing, so
that bad optional input degrades its own source and never the whole snapshot. The caller
decides what an error is: a counted source failure (``serve``) or a message naming the
file (fixtures).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from exporter.errors import SourceError
from exporter.pb import api_pb2
from exporter.rawnode import RawNode
from exporter.sources.checkpoint import checkpoint_facts
from exporter.sources.convert import allocatable_from_proto, pods_from_proto
from exporter.sources.kubelet import parse_feature_metrics
from exporter.sources.pod_list import each_pod_item
from exporter.sources.podresources import decode_allocatable, decode_pods
from reconciler.cpuset import MAX_CPU_ID
from reconciler.kube import (
    KubeletConfig,
    PodSpec,
    SpecError,
    kubelet_config_from_json,
    pod_list_from_json,
    pod_specs_from_items,
)
from reconciler.snapshot import CheckpointFacts, NodeSnapshot, PodAlloc, Topology

# What malformed input raises on its way through a parser: json's errors (numbers past
# int's digit limit included), deep nesting, and values of the wrong type in an otherwise
# valid document. Caught only around optional parts.
MALFORMED = (ValueError, TypeError, AttributeError, KeyError, IndexError, RecursionError)

SourceKey = tuple[str, str]
T = TypeVar("T")


@dataclass(frozen=True)
class Assembled:
    """A snapshot and the problems found in the optional parts it was built from."""

    snapshot: NodeSnapshot
    errors: dict[SourceKey, SourceError] = field(default_factory=dict)


def parse_pod_list(obj: dict[str, Any] | None) -> tuple[PodSpec, ...] | None:
    return None if obj is None else pod_list_from_json(obj)


def parse_configz(obj: dict[str, Any] | None) -> KubeletConfig | None:
    return None if obj is None else kubelet_config_from_json(obj)


def parse_json_object(body: bytes) -> dict[str, Any]:
    obj = json.loads(body)
    if not isinstance(obj, dict):
        raise SpecError("expected a JSON object")
    return obj


def _reason(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    if isinstance(exc, json.JSONDecodeError | UnicodeDecodeError):
        return f"invalid JSON: {exc}"
    if isinstance(exc, ValueError):  # SpecError, numbers past int's digit limit
        return str(exc)[:300]
    # A value of the wrong type where the document's schema wants another.
    return f"malformed document: {type(exc).__name__}: {str(exc)[:300]}"


def _optional(data: bytes | None, parse: Callable[[bytes], T], key: SourceKey,
              errors: dict[SourceKey, SourceError]) -> T | None:
    if data is None:
        return None
    try:
        return parse(data)
    except SourceError as exc:
        errors[key] = exc
    except MALFORMED as exc:
        errors[key] = SourceError(key[0], key[1], _reason(exc))
    return None


def _pod_specs(body: bytes) -> tuple[PodSpec, ...]:
    items = each_pod_item(body)
    if items is not None:
        # Pod by pod (see each_pod_item); on any error the whole body is parsed again, so
        # that what is reported is exactly what the parse of the whole says.
        with contextlib.suppress(*MALFORMED):
            return pod_specs_from_items(items)
    return pod_list_from_json(parse_json_object(body))


def _config(body: bytes, max_cpu: int = MAX_CPU_ID) -> KubeletConfig:
    return kubelet_config_from_json(parse_json_object(body), max_cpu=max_cpu)


def kubelet_facts(raw: RawNode) -> dict[str, str]:
    """What the snapshot records about the kubelet beyond its configuration: the RPCs it
    does not serve, and the feature gate as its own metrics state it."""
    info: dict[str, str] = {}
    if raw.unimplemented:
        info["rpcs_unimplemented"] = ",".join(sorted(raw.unimplemented))
    if raw.metrics is not None:
        gates = parse_feature_metrics(raw.metrics.decode("utf-8", "replace"))
        if "PodLevelResourceManagers" in gates:
            info["feature_gate_metric"] = str(gates["PodLevelResourceManagers"])
    return info


@dataclass(frozen=True)
class OptionalParts:
    """The optional parts of a raw node, parsed; a malformed one is ``None`` here and an
    entry in ``errors``."""

    allocatable: api_pb2.AllocatableResourcesResponse | None
    pod_specs: tuple[PodSpec, ...] | None
    config: KubeletConfig | None
    checkpoints: CheckpointFacts | None
    errors: dict[SourceKey, SourceError]


def parse_optional(raw: RawNode, *, checkpoints: bool = False) -> OptionalParts:
    """``checkpoints`` says whether the checkpoint source was configured (its facts are
    ``None`` otherwise)."""
    errors: dict[SourceKey, SourceError] = {}
    # CPU ids past the node's last CPU are refused where the topology says which that is
    # (docs/design.md#cpu-lists).
    last = max(raw.topology.online, default=MAX_CPU_ID) if raw.topology else MAX_CPU_ID
    allocatable = _optional(raw.allocatable, decode_allocatable,
                            ("podresources", "GetAllocatableResources"), errors)
    specs = _optional(raw.pods, _pod_specs, ("kubelet", "pods"), errors)
    config = _optional(raw.configz, partial(_config, max_cpu=last), ("kubelet", "configz"),
                       errors)
    facts = None
    if checkpoints:
        facts, problems = checkpoint_facts(raw.checkpoints, last)
        for problem in problems:
            errors[(problem.source, problem.operation)] = problem
    return OptionalParts(allocatable, specs, config, facts, errors)


def snapshot_from_raw(raw: RawNode, node_name: str = "", *,
                      checkpoints: bool = False) -> Assembled:
    """The snapshot of ``raw``. Raises ``SourceError`` only when ``List`` is missing or
    undecodable; see ``parse_optional`` for ``checkpoints``."""
    if raw.list_response is None:
        raise SourceError("podresources", "List", "no response")
    pods = decode_pods(raw.list_response)  # raises on bytes protobuf cannot parse
    parts = parse_optional(raw, checkpoints=checkpoints)
    snapshot = assemble(pods, allocatable=parts.allocatable, pod_specs=parts.pod_specs,
                        config=parts.config, topology=raw.topology, node_name=node_name,
                        kubelet_info=kubelet_facts(raw), checkpoints=parts.checkpoints)
    return Assembled(snapshot, parts.errors)


def assemble(
    listing: api_pb2.ListPodResourcesResponse | tuple[PodAlloc, ...],
    *,
    allocatable: api_pb2.AllocatableResourcesResponse | None = None,
    pod_specs: tuple[PodSpec, ...] | None = None,
    config: KubeletConfig | None = None,
    topology: Topology | None = None,
    node_name: str = "",
    kubelet_info: dict[str, str] | None = None,
    checkpoints: CheckpointFacts | None = None,
) -> NodeSnapshot:
    """The snapshot of already-typed parts (``snapshot_from_raw`` after parsing; tests
    and the model use it directly); ``listing`` is the ``List`` response or its pods."""
    return NodeSnapshot(
        pods=listing if isinstance(listing, tuple) else pods_from_proto(listing),
        node_name=node_name,
        allocatable=allocatable_from_proto(allocatable) if allocatable is not None else None,
        topology=topology,
        pod_specs=pod_specs,
        kubelet_config=config,
        kubelet_info=tuple(sorted((kubelet_info or {}).items())),
        checkpoints=checkpoints,
    )


__all__ = ["SpecError", "assemble", "parse_configz", "parse_pod_list", "snapshot_from_raw"]

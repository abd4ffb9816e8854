"""Raw inputs → snapshot: the one way from what the sources returned (a ``RawNode``) to the
``NodeSnapshot`` the reconciler is given (docs/design.md#data-path).

One pass: each raw part is decoded once, by its source's decoder (``List`` and
``GetAllocatableResources`` by ``sources.podresources``, the kubelet's bodies by
``sources.kubelet_bodies``, the checkpoint files by ``sources.checkpoint``), and this
module only puts the decoded parts together; it decodes nothing itself.

PodResources ``List`` is required. Every other part is optional: one that is missing
becomes ``None`` in the snapshot (the reconciler then leaves the spec-based fields null),
and one that is malformed is reported as that source's error and treated as missing, so
that bad optional input degrades its own source and never the whole snapshot. The caller
decides what an error is: a counted source failure (``serve``) or a message naming the
file (fixtures).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TypeVar

from exporter.errors import SourceError
from exporter.rawnode import RawNode, body_bytes
from exporter.sources.checkpoint import checkpoint_facts
from exporter.sources.kubelet_bodies import (
    GATE,
    MALFORMED,
    config_from_body,
    feature_gates,
    pod_specs_from_body,
    reason,
)
from exporter.sources.podresources import decode_allocatable, decode_pods
from reconciler.cpuset import MAX_CPU_ID
from reconciler.kube import KubeletConfig, PodSpec
from reconciler.snapshot import (
    Allocatable,
    CheckpointFacts,
    NodeSnapshot,
    PodAlloc,
    Topology,
)

SourceKey = tuple[str, str]
T = TypeVar("T")


@dataclass(frozen=True)
class Assembled:
    """A snapshot and the problems found in the optional parts it was built from."""

    snapshot: NodeSnapshot
    errors: dict[SourceKey, SourceError] = field(default_factory=dict)


def _optional(data: bytes | None, decode: Callable[[bytes], T], key: SourceKey,
              errors: dict[SourceKey, SourceError]) -> T | None:
    if data is None:
        return None
    try:
        return decode(data)
    except SourceError as exc:
        errors[key] = exc
    except MALFORMED as exc:
        errors[key] = SourceError(key[0], key[1], reason(exc))
    return None


def kubelet_facts(raw: RawNode) -> dict[str, str]:
    """What the snapshot records about the kubelet beyond its configuration: the RPCs it
    does not serve, and the feature gate as its own metrics state it."""
    info: dict[str, str] = {}
    if raw.unimplemented:
        info["rpcs_unimplemented"] = ",".join(sorted(raw.unimplemented))
    if raw.metrics is not None:
        gates = feature_gates(raw.metrics)
        if GATE in gates:
            info["feature_gate_metric"] = str(gates[GATE])
    return info


@dataclass(frozen=True)
class OptionalParts:
    """The optional parts of a raw node, decoded; a malformed one is ``None`` here and an
    entry in ``errors``."""

    allocatable: Allocatable | None
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
    # Read back whole (a live read holds it deflated) only here, where it is decoded.
    specs = _optional(body_bytes(raw.pods), pod_specs_from_body, ("kubelet", "pods"),
                      errors)
    config = _optional(raw.configz, partial(config_from_body, max_cpu=last),
                       ("kubelet", "configz"), errors)
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
    pods: tuple[PodAlloc, ...],
    *,
    allocatable: Allocatable | None = None,
    pod_specs: tuple[PodSpec, ...] | None = None,
    config: KubeletConfig | None = None,
    topology: Topology | None = None,
    node_name: str = "",
    kubelet_info: dict[str, str] | None = None,
    checkpoints: CheckpointFacts | None = None,
) -> NodeSnapshot:
    """The snapshot of already-decoded parts (``snapshot_from_raw`` after decoding; tests
    and the model use it directly)."""
    return NodeSnapshot(
        pods=pods,
        node_name=node_name,
        allocatable=allocatable,
        topology=topology,
        pod_specs=pod_specs,
        kubelet_config=config,
        kubelet_info=tuple(sorted((kubelet_info or {}).items())),
        checkpoints=checkpoints,
    )
